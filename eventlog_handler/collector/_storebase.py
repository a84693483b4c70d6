"""The collector's store of events and stacks, the parts every side of it shares: event ids,
the caches of project and stack ids, and reading a kept request body back.

:class:`~eventlog_handler.collector._eventstore.EventStore` writes; :mod:`._eventreads` lists and
reads events; :mod:`._stackreads` lists and changes stacks.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections import OrderedDict
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from eventlog_handler.collector._database import Database
from eventlog_handler.collector._formats import format_utc_ts
from eventlog_handler.collector._ingest import Received, body_items
from eventlog_handler.collector._normalize import (
    FieldTypeError,
    Normalizer,
    submission_client,
)
from eventlog_handler.collector._sessions import SESSION_START, session_fields
from eventlog_handler.collector._stacking import (
    StackBasis,
)

_CHUNK = 400
_CACHE_SIZE = 4096
_BATCH_CACHE = 8
_ENCODE = json.JSONEncoder(
    ensure_ascii=True, separators=(",", ":"), default=str, check_circular=False
).encode
#: The columns of an event row as read (the batch gives the time of receipt).
_ROW = (
    "e.seq, e.project_seq, e.stack_seq, b.received_ts, e.first, e.batch, e.idx, e.body,"
    " b.user_agent"
)
#: How many columns :data:`_ROW` has.
_ROW_COLUMNS = _ROW.count(",") + 1
_FROM = " FROM events e JOIN batches b ON b.seq = e.batch"
_ID_RE = re.compile(r"[0-9a-f]{24}")


def event_id(received_ts: float, seq: int) -> str:
    """An event's id: 24 hex digits, the time it was received (4 bytes) and its sequence
    number in the store (8 bytes)."""
    return f"{int(received_ts) & 0xFFFFFFFF:08x}{seq:016x}"


def parse_event_id(text: str) -> tuple[int, int] | None:
    """``(received seconds, sequence number)`` of an id made by :func:`event_id`, or None."""
    if not isinstance(text, str) or not _ID_RE.fullmatch(text):
        return None
    seq = int(text[8:], 16)
    if seq >= 1 << 63:  # not an SQLite integer
        return None
    return int(text[:8], 16), seq


class StoreBase(Database):
    """Caches and helpers of the event store's parts."""

    _stack_cache: dict[tuple[str, StackBasis], tuple[str, str, dict[str, str]]]
    _stack_seqs: dict[str, int]
    _stack_ids: dict[int, str]
    _projects: dict[int, tuple[str, str]]
    _project_seqs: dict[str, int]
    _batches: OrderedDict[int, list[Any]]

    def _init_event_store(self) -> None:
        self._stack_cache = {}
        self._stack_seqs = {}
        self._stack_ids = {}
        self._projects = {}
        self._project_seqs = {}
        self._batches = OrderedDict()

    # -- ids of projects and stacks ----------------------------------------------------------

    def _project_seq(self, db: sqlite3.Connection, project_id: str) -> int:
        seq = self._project_seqs.get(project_id)
        if seq is None:
            row = db.execute("SELECT seq FROM projects WHERE id = ?", (project_id,)).fetchone()
            if row is None:
                raise KeyError(f"no project {project_id!r}")
            seq = self._project_seqs[project_id] = int(row[0])
        return seq

    def _project_of(self, db: sqlite3.Connection, seq: int) -> tuple[str, str]:
        """``(project id, organization id)`` of a project's sequence number."""
        found = self._projects.get(seq)
        if found is None:
            row = db.execute(
                "SELECT id, organization_id FROM projects WHERE seq = ?", (seq,)
            ).fetchone()
            found = ("", "") if row is None else (str(row[0]), str(row[1]))
            if row is not None:
                self._projects[seq] = found
        return found

    def _stack_id_of(self, db: sqlite3.Connection, seq: int) -> str:
        found = self._stack_ids.get(seq)
        if found is None:
            row = db.execute("SELECT id FROM stacks WHERE seq = ?", (seq,)).fetchone()
            if row is None:
                return ""
            found = self._stack_ids[seq] = str(row[0])
        return found

    # -- reading a kept body -----------------------------------------------------------------

    def _batch_items(self, db: sqlite3.Connection, batch: int) -> list[Any]:
        """The JSON values of a kept request body (the last few are cached)."""
        items = self._batches.get(batch)
        if items is not None:
            self._batches.move_to_end(batch)
            return items
        row = db.execute(
            "SELECT body, encoding, note FROM batches WHERE seq = ?", (batch,)
        ).fetchone()
        items = [] if row is None else body_items(Received(bytes(row[0]), row[1], row[2]))
        self._batches[batch] = items
        while len(self._batches) > _BATCH_CACHE:
            self._batches.popitem(last=False)
        return items

    def _document(self, db: sqlite3.Connection, row: Sequence[Any]) -> dict[str, Any]:
        """The API document of a stored event: its fields as received, with the service's
        rules applied again at its time of receipt, and the collector's ids. A session start
        event shows its session as it stands (duration, end, heartbeats). Events posted over
        HTTP carry ``@submission_client`` from the post's ``User-Agent``, whatever the client
        sent under that key, as on the service."""
        seq, project_seq, stack_seq, received_ts, first, batch, index, body, user_agent = row[
            :_ROW_COLUMNS
        ]
        item: Any = None
        if body is not None:
            item = json.loads(body)
        else:
            items = self._batch_items(db, batch)
            if 0 <= index < len(items):
                item = items[index]
        normalizer = Normalizer(datetime.fromtimestamp(received_ts, timezone.utc))
        try:
            event = normalizer.event(item)
        except (FieldTypeError, ValueError, RecursionError):
            event = None
        if event is None:  # a body not kept by this version: show what there is
            event = normalizer.text_events(json.dumps(item, default=str)[:2000] or "?")[0]
        if user_agent is not None:
            client = submission_client(user_agent)
            if client is not None:
                event.data = {**event.data, "@submission_client": client}
            elif "@submission_client" in event.data:
                event.data = {k: v for k, v in event.data.items() if k != "@submission_client"}
        fields = event.wire_fields()
        if event.type == SESSION_START:
            fields["data"], fields["value"] = session_fields(db, seq, event.data, event.value)
        project_id, organization_id = self._project_of(db, project_seq)
        return {
            "id": event_id(received_ts, seq),
            "organization_id": organization_id,
            "project_id": project_id,
            "stack_id": self._stack_id_of(db, stack_seq),
            "is_first_occurrence": bool(first),
            "created_utc": format_utc_ts(received_ts),
            **fields,
        }
