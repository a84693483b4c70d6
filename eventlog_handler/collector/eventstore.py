"""Events and stacks in the collector's database.

Storing a request's events is one transaction: the request body is kept once, as it was sent
(a ``batches`` row); events whose reference id was received in the project within 24 hours are
discarded; each event is assigned to its stack (created on first sight) and gets a small row of
the columns queries filter and sort on, pointing at its place in the body (written with a few
multi-row ``INSERT`` statements); each stack's counters (events, occurrences, users, first and
last seen) are updated once per request. A ``fixed`` stack that receives an event dated after it
was fixed becomes ``regressed``.

Reading an event applies the service's rules again to its part of the body, with its time of
receipt (:class:`~eventlog_handler.collector.normalize.Normalizer`), which gives the event as
it was stored. Listings are newest first by event date; :meth:`EventStore.page_events` pages
with a cursor (an event id), so any number of events can be walked without an offset.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from eventlog_handler.collector.accounts import clean_text, dumps
from eventlog_handler.collector.database import Database
from eventlog_handler.collector.filters import EventQuery
from eventlog_handler.collector.formats import format_utc, format_utc_ts, utc_now
from eventlog_handler.collector.ingest import Received, body_items
from eventlog_handler.collector.normalize import (
    INVALID_REFERENCE_ID,
    KNOWN_FIELDS,
    FieldTypeError,
    NormalizedEvent,
    Normalizer,
)
from eventlog_handler.collector.stacking import (
    StackBasis,
    signature_of,
    stack_id_for,
    stack_title,
)

__all__ = [
    "DEDUPLICATION_WINDOW_SECONDS",
    "STACK_STATUSES",
    "EventPage",
    "EventStore",
    "StackQuery",
    "StoreOutcome",
    "event_id",
    "parse_event_id",
]

DEDUPLICATION_WINDOW_SECONDS = 24 * 3600.0
STACK_STATUSES = ("open", "fixed", "regressed", "ignored")
_CHUNK = 400
_CACHE_SIZE = 4096
_BATCH_CACHE = 8
_ENCODE = json.JSONEncoder(
    ensure_ascii=True, separators=(",", ":"), default=str, check_circular=False
).encode
_EVENT_COLUMNS = (
    "batch, idx, project_seq, stack_seq, date_ts, type, level, source, reference_id,"
    " user_identity, occurrences, first, tags, search_text"
)
_COLUMNS = _EVENT_COLUMNS.count(",") + 1
_ONE_ROW = "(" + ", ".join("?" * _COLUMNS) + ")"
#: Rows per INSERT statement: 32,766 parameters since SQLite 3.32, 999 before.
_ROWS_PER_INSERT = (32_766 if sqlite3.sqlite_version_info >= (3, 32, 0) else 999) // _COLUMNS
#: The columns of an event row as read (the batch gives the time of receipt).
_ROW = "e.seq, e.project_seq, e.stack_seq, b.received_ts, e.first, e.batch, e.idx, e.body"
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


@dataclass
class StoreOutcome:
    """What happened to a request's events: how many were stored (with consecutive sequence
    numbers from ``first_seq``, received at ``received_ts``) and how many were duplicates."""

    stored: int = 0
    duplicates: int = 0
    new_stacks: int = 0
    first_seq: int = 0
    received_ts: float = 0.0

    @property
    def ids(self) -> list[str]:
        """The stored events' ids, in the order they were given."""
        return [event_id(self.received_ts, self.first_seq + i) for i in range(self.stored)]


@dataclass
class EventPage:
    """One page of a cursor listing: the events (newest first), the cursors of the pages
    before and after it (None at either end), the rows matching and the rank of the first."""

    events: list[dict[str, Any]]
    newer: str | None
    older: str | None
    total: int
    first_rank: int


@dataclass
class StackQuery:
    """What to select from the stacks. ``statuses`` empty means any; ``event_query`` keeps
    only the stacks with at least one matching event."""

    project_ids: list[str] = field(default_factory=list)
    types: list[str] = field(default_factory=list)
    statuses: list[str] = field(default_factory=list)
    event_query: EventQuery | None = None
    sort: str = "recent"
    limit: int = 50


@dataclass
class _StackDelta:
    first: NormalizedEvent
    signature_hash: str
    info: dict[str, str]
    events: int = 0
    total: int = 0
    first_ts: float = 0.0
    last_ts: float = 0.0
    users: set[str] = field(default_factory=set)
    seq: int = 0


_STACK_SORTS = {
    "recent": "last_ts",
    "frequent": "total",
    "new": "first_ts",
    "users": "users",
}


def _insert_rows(db: sqlite3.Connection, values: list[Any], rows: int) -> None:
    """Insert ``rows`` event rows whose column values are laid end to end in ``values``, with
    as few statements as SQLite allows (far fewer steps than one statement per row)."""
    step = _ROWS_PER_INSERT * _COLUMNS
    full = rows // _ROWS_PER_INSERT * step
    if full:
        many = f"INSERT INTO events ({_EVENT_COLUMNS}) VALUES " + ", ".join(
            [_ONE_ROW] * _ROWS_PER_INSERT
        )
        for start in range(0, full, step):
            db.execute(many, values[start : start + step])
    if full < len(values):
        rest = (len(values) - full) // _COLUMNS
        db.execute(
            f"INSERT INTO events ({_EVENT_COLUMNS}) VALUES " + ", ".join([_ONE_ROW] * rest),
            values[full:],
        )


def _clean(text: str | None) -> str | None:
    if text is None or text.isascii():
        return text
    return clean_text(text)


def _wire(event: NormalizedEvent) -> dict[str, Any]:
    """The event's own fields (those without a value left out)."""
    wire: dict[str, Any] = {"type": event.type, "date": event.date}
    for name in ("source", "message", "geo", "value", "count", "reference_id"):
        value = getattr(event, name)
        if value is not None:
            wire[name] = value
    if event.tags:
        wire["tags"] = event.tags
    if event.data:
        wire["data"] = event.data
    return wire


class EventStore(Database):
    """Events and stacks; mixed into :class:`~eventlog_handler.collector.storage.Storage`."""

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

    # -- writing -----------------------------------------------------------------------------

    def _stack_for(self, project_id: str, basis: StackBasis) -> tuple[str, str, dict[str, str]]:
        key = (project_id, basis)
        found = self._stack_cache.get(key)
        if found is None:
            signature_hash, info = signature_of(basis)
            found = (stack_id_for(project_id, signature_hash), signature_hash, info)
            if len(self._stack_cache) >= _CACHE_SIZE:
                self._stack_cache.clear()
            self._stack_cache[key] = found
        return found

    def insert_events(
        self,
        organization_id: str,
        project_id: str,
        events: Sequence[NormalizedEvent],
        received: datetime | None = None,
        *,
        body: Received | None = None,
        deduplicate: bool = True,
    ) -> StoreOutcome:
        """Store events received at ``received``; returns how many were stored and how many
        were discarded as duplicates: an event whose ``reference_id`` was already received in
        the project within 24 hours (``invalid-reference-id`` never is a duplicate).

        ``body`` is the request body the events were read from (each event's ``index`` is its
        position in it); without one, the events' own fields are kept as the body.
        """
        received_ts = (received or utc_now()).timestamp()
        outcome = StoreOutcome(received_ts=received_ts)
        if not events:
            return outcome
        if body is None:
            wires = []
            for index, event in enumerate(events):
                event.index = index
                wires.append(_wire(event))
            body = Received(_ENCODE(wires).encode("ascii"))
        created = format_utc_ts(received_ts)
        with self._transaction() as db:
            project_seq = self._project_seq(db, project_id)
            kept: Sequence[NormalizedEvent] = events
            if deduplicate:
                kept, outcome.duplicates = self._without_duplicates(
                    db, project_seq, events, received_ts
                )
            deltas = self._stack_deltas(project_id, kept)
            outcome.new_stacks = self._ensure_stacks(
                db, organization_id, project_id, deltas, created
            )
            batch = db.execute(
                "INSERT INTO batches (project_id, received_ts, encoding, body, note)"
                " VALUES (?, ?, ?, ?, ?)",
                (project_id, received_ts, body.encoding, body.body, body.note),
            ).lastrowid
            assert batch is not None
            outcome.first_seq = self._write_events(db, project_seq, kept, deltas, batch)
            outcome.stored = len(kept)
            self._update_stacks(db, deltas, created)
        return outcome

    @staticmethod
    def _without_duplicates(
        db: sqlite3.Connection,
        project_seq: int,
        events: Sequence[NormalizedEvent],
        received_ts: float,
    ) -> tuple[list[NormalizedEvent], int]:
        references = list(
            {
                event.reference_id: None
                for event in events
                if event.reference_id and event.reference_id != INVALID_REFERENCE_ID
            }
        )
        if not references:
            return list(events), 0
        since = received_ts - DEDUPLICATION_WINDOW_SECONDS
        seen: set[str] = set()
        for start in range(0, len(references), _CHUNK):
            chunk = references[start : start + _CHUNK]
            rows = db.execute(
                "SELECT e.reference_id" + _FROM + " WHERE e.reference_id IN"
                f" ({','.join('?' * len(chunk))}) AND e.reference_id <> ''"
                " AND e.project_seq = ? AND b.received_ts > ?",
                (*chunk, project_seq, since),
            )
            seen.update(row[0] for row in rows)
        kept: list[NormalizedEvent] = []
        duplicates = 0
        for event in events:
            reference = event.reference_id
            if reference and reference != INVALID_REFERENCE_ID:
                if reference in seen:
                    duplicates += 1
                    continue
                seen.add(reference)
            kept.append(event)
        return kept, duplicates

    def _stack_deltas(
        self, project_id: str, events: Iterable[NormalizedEvent]
    ) -> dict[str, _StackDelta]:
        deltas: dict[str, _StackDelta] = {}
        stack_for = self._stack_for
        for event in events:
            stack_id, signature_hash, info = stack_for(project_id, event.basis)
            event.stack_id = stack_id
            delta = deltas.get(stack_id)
            timestamp = event.timestamp
            if delta is None:
                delta = deltas[stack_id] = _StackDelta(
                    event, signature_hash, info, first_ts=timestamp, last_ts=timestamp
                )
            delta.events += 1
            delta.total += event.count if event.count is not None else 1
            if timestamp < delta.first_ts:
                delta.first_ts = timestamp
            elif timestamp > delta.last_ts:
                delta.last_ts = timestamp
            if "@user" in event.data:
                identity = event.user_identity
                if identity:
                    delta.users.add(identity)
        return deltas

    def _ensure_stacks(
        self,
        db: sqlite3.Connection,
        organization_id: str,
        project_id: str,
        deltas: dict[str, _StackDelta],
        created: str,
    ) -> int:
        """Create the stacks not seen yet; set each delta's stack sequence number and mark the
        first event of a new stack. Returns how many stacks are new."""
        new = 0
        for stack_id, delta in deltas.items():
            seq = self._stack_seqs.get(stack_id)
            if seq is None:
                first = delta.first
                title = stack_title(first.type, first.source, first.message, first.data)
                cursor = db.execute(
                    "INSERT OR IGNORE INTO stacks (id, organization_id, project_id,"
                    " signature_hash, signature_info, type, title, status, first_ts, last_ts,"
                    " created_utc, updated_utc) VALUES (?, ?, ?, ?, ?, ?, ?, 'open', ?, ?, ?, ?)",
                    (
                        stack_id,
                        organization_id,
                        project_id,
                        delta.signature_hash,
                        dumps(delta.info),
                        clean_text(first.type),
                        clean_text(title),
                        delta.first_ts,
                        delta.last_ts,
                        created,
                        created,
                    ),
                )
                if cursor.rowcount:
                    new += 1
                    first.first = True
                row = db.execute("SELECT seq FROM stacks WHERE id = ?", (stack_id,)).fetchone()
                seq = int(row[0])
                self._stack_seqs[stack_id] = seq
                self._stack_ids[seq] = stack_id
            delta.seq = seq
        return new

    @staticmethod
    def _write_events(
        db: sqlite3.Connection,
        project_seq: int,
        events: Sequence[NormalizedEvent],
        deltas: dict[str, _StackDelta],
        batch: int,
    ) -> int:
        """Insert the events' rows; returns the sequence number of the first."""
        row = db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'events'").fetchone()
        first_seq = (int(row[0]) if row else 0) + 1
        values: list[Any] = []
        extend = values.extend
        for event in events:
            data = event.data
            level = data.get("@level") if data else None
            tags = event.tags
            count = event.count
            identity = event.user_identity if data and "@user" in data else None
            extend(
                (
                    batch,
                    event.index,
                    project_seq,
                    deltas[event.stack_id].seq,
                    event.timestamp,
                    event.type,
                    level.lower() if type(level) is str else "",
                    event.source or "",
                    event.reference_id or "",
                    identity or "",
                    1 if count is None else count,
                    1 if event.first else 0,
                    _ENCODE(tags) if tags else "",
                    event.search_text,
                )
            )
        db.execute("SAVEPOINT event_rows")
        try:
            _insert_rows(db, values, len(events))
        except UnicodeEncodeError:  # lone surrogates (valid in JSON strings) in a text column
            db.execute("ROLLBACK TO event_rows")
            _insert_rows(db, [_clean(v) if type(v) is str else v for v in values], len(events))
        db.execute("RELEASE event_rows")
        return first_seq

    @staticmethod
    def _update_stacks(
        db: sqlite3.Connection, deltas: dict[str, _StackDelta], updated: str
    ) -> None:
        for delta in deltas.values():
            added_users = 0
            for identity in delta.users:
                cursor = db.execute(
                    "INSERT OR IGNORE INTO stack_users (stack_seq, identity) VALUES (?, ?)",
                    (delta.seq, clean_text(identity)),
                )
                added_users += cursor.rowcount
            db.execute(
                "UPDATE stacks SET events = events + ?, total = total + ?, users = users + ?,"
                " first_ts = MIN(first_ts, ?), last_ts = MAX(last_ts, ?),"
                " status = CASE WHEN status = 'fixed' AND ? > COALESCE(date_fixed_ts, 0)"
                " THEN 'regressed' ELSE status END, updated_utc = ? WHERE seq = ?",
                (
                    delta.events,
                    delta.total,
                    added_users,
                    delta.first_ts,
                    delta.last_ts,
                    delta.last_ts,
                    updated,
                    delta.seq,
                ),
            )

    def add_user_description(
        self, project_id: str, reference_id: str, description: dict[str, Any]
    ) -> bool:
        """Attach ``@user_description`` to the project's event with that reference id."""
        with self._transaction() as db:
            row = db.execute(
                f"SELECT {_ROW}{_FROM} WHERE e.reference_id = ? AND e.reference_id <> ''"
                " AND e.project_seq = ? ORDER BY e.seq DESC LIMIT 1",
                (reference_id, self._project_seq(db, project_id)),
            ).fetchone()
            if row is None:
                return False
            document = self._document(db, row)
            wire = {key: document[key] for key in KNOWN_FIELDS if document[key] is not None}
            wire["data"] = {**document["data"], "@user_description": description}
            db.execute("UPDATE events SET body = ? WHERE seq = ?", (dumps(wire), row[0]))
            return True

    def clear_events(self) -> None:
        """Delete every event and stack, and forget every reference id."""
        with self._transaction() as db:
            for table in ("events", "batches", "stacks", "stack_users"):
                db.execute(f"DELETE FROM {table}")
        self._stack_cache.clear()
        self._stack_seqs.clear()
        self._stack_ids.clear()
        self._batches.clear()

    # -- reading events ----------------------------------------------------------------------

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
        rules applied again at its time of receipt, and the collector's ids."""
        seq, project_seq, stack_seq, received_ts, first, batch, index, body = row[:8]
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
        project_id, organization_id = self._project_of(db, project_seq)
        return {
            "id": event_id(received_ts, seq),
            "organization_id": organization_id,
            "project_id": project_id,
            "stack_id": self._stack_id_of(db, stack_seq),
            "is_first_occurrence": bool(first),
            "created_utc": format_utc_ts(received_ts),
            **event.wire_fields(),
        }

    @staticmethod
    def _where(query: EventQuery) -> tuple[list[str], list[Any]]:
        """The conditions of ``query`` on events aliased ``e``."""
        clauses: list[str] = []
        params: list[Any] = []

        def any_of(column: str, values: Sequence[Any], lookup: str = "") -> None:
            marks = "= ?" if len(values) == 1 else f"IN ({','.join('?' * len(values))})"
            if lookup:
                clauses.append(f"e.{column} IN (SELECT seq FROM {lookup} WHERE id {marks})")
            else:
                clauses.append(f"e.{column} {marks}")
            params.extend(values)

        if query.organization_id is not None:
            clauses.append("e.project_seq IN (SELECT seq FROM projects WHERE organization_id = ?)")
            params.append(query.organization_id)
        if query.scope_project_id is not None:
            any_of("project_seq", [query.scope_project_id], "projects")
        if query.project_ids:
            any_of("project_seq", query.project_ids, "projects")
        if query.stack_ids:
            any_of("stack_seq", query.stack_ids, "stacks")
        if query.types:
            any_of("type", query.types)
        if query.levels:
            any_of("level", [level.lower() for level in query.levels])
        if query.sources:
            any_of("source", query.sources)
        if query.reference_ids:
            any_of("reference_id", query.reference_ids)
            clauses.append("e.reference_id <> ''")  # the index holds only these
        if query.identities:
            any_of("user_identity", query.identities)
        if query.tags:
            clauses.append("(" + " OR ".join("instr(e.tags, ?) > 0" for _ in query.tags) + ")")
            params.extend(dumps(tag) for tag in query.tags)
        for term in query.text:
            clauses.append("instr(e.search_text, ?) > 0")
            params.append(clean_text(term.lower()))
        return clauses, params

    @staticmethod
    def _sql_where(clauses: list[str]) -> str:
        return (" WHERE " + " AND ".join(clauses)) if clauses else ""

    def _count(self, db: sqlite3.Connection, clauses: list[str], params: Sequence[Any]) -> int:
        return int(
            db.execute(
                "SELECT COUNT(*) FROM events e" + self._sql_where(clauses), params
            ).fetchone()[0]
        )

    def query_events(self, query: EventQuery) -> tuple[list[dict[str, Any]], int]:
        """A page of events matching ``query`` (offset and limit), and how many match in all."""
        clauses, params = self._where(query)
        order = "ASC" if query.ascending else "DESC"
        with self._locked() as db:
            total = self._count(db, clauses, params)
            rows = db.execute(
                f"SELECT {_ROW}{_FROM}{self._sql_where(clauses)}"
                f" ORDER BY e.date_ts {order}, e.seq {order} LIMIT ? OFFSET ?",
                (*params, query.limit, query.offset),
            ).fetchall()
            return [self._document(db, row) for row in rows], total

    @staticmethod
    def _position(db: sqlite3.Connection, text: str | None) -> tuple[float, int] | None:
        parsed = parse_event_id(text or "")
        if parsed is None:
            return None
        row = db.execute(
            "SELECT e.date_ts, e.seq, b.received_ts" + _FROM + " WHERE e.seq = ?", (parsed[1],)
        ).fetchone()
        if row is None or int(row[2]) & 0xFFFFFFFF != parsed[0]:
            return None
        return float(row[0]), int(row[1])

    def events_after(
        self, query: EventQuery, after: str
    ) -> tuple[list[dict[str, Any]], bool] | None:
        """The events that follow the event ``after`` in the query's order (the API's ``after``
        cursor); None when that event does not exist. Also whether more follow."""
        with self._locked() as db:
            position = self._position(db, after)
            if position is None:
                return None
            clauses, params = self._where(query)
            direction = ">" if query.ascending else "<"
            order = "ASC" if query.ascending else "DESC"
            clauses.append(f"(e.date_ts, e.seq) {direction} (?, ?)")
            rows = db.execute(
                f"SELECT {_ROW}{_FROM}{self._sql_where(clauses)}"
                f" ORDER BY e.date_ts {order}, e.seq {order} LIMIT ?",
                (*params, *position, query.limit + 1),
            ).fetchall()
            events = [self._document(db, row) for row in rows[: query.limit]]
        return events, len(rows) > query.limit

    def page_events(
        self, query: EventQuery, *, older_than: str | None = None, newer_than: str | None = None
    ) -> EventPage:
        """One page (``query.limit`` rows) of the matching events, newest first: the newest
        ones, those just older than the event ``older_than``, or just newer than ``newer_than``.
        An unknown cursor event starts from the newest."""
        limit = query.limit
        with self._locked() as db:
            clauses, params = self._where(query)
            total = self._count(db, clauses, params)
            cursor_id = older_than or newer_than
            position = self._position(db, cursor_id) if cursor_id else None
            going_newer = position is not None and newer_than is not None and not older_than
            rows = self._page_rows(db, clauses, params, position, going_newer, limit)
            if going_newer and len(rows) < limit:
                rows = self._page_rows(db, clauses, params, None, False, limit)
            first_rank = 1
            if rows:
                first_rank += self._count(
                    db, [*clauses, "(e.date_ts, e.seq) > (?, ?)"], (*params, rows[0][8], rows[0][0])
                )
            events = [self._document(db, row) for row in rows]
        newer = older = None
        if events:
            newer = events[0]["id"] if first_rank > 1 else None
            older = events[-1]["id"] if first_rank + len(events) - 1 < total else None
        return EventPage(events, newer, older, total, first_rank)

    def _page_rows(
        self,
        db: sqlite3.Connection,
        clauses: list[str],
        params: list[Any],
        position: tuple[float, int] | None,
        going_newer: bool,
        limit: int,
    ) -> list[Any]:
        """Rows (:data:`_ROW` and ``date_ts``) of one page, newest first."""
        page_clauses, page_params = list(clauses), list(params)
        if position is not None:
            page_clauses.append(f"(e.date_ts, e.seq) {'>' if going_newer else '<'} (?, ?)")
            page_params.extend(position)
        order = "ASC" if going_newer else "DESC"
        rows = db.execute(
            f"SELECT {_ROW}, e.date_ts{_FROM}{self._sql_where(page_clauses)}"
            f" ORDER BY e.date_ts {order}, e.seq {order} LIMIT ?",
            (*page_params, limit),
        ).fetchall()
        if going_newer:
            rows.reverse()
        return rows

    def count_events(self, query: EventQuery) -> int:
        """How many events match ``query``."""
        clauses, params = self._where(query)
        with self._locked() as db:
            return self._count(db, clauses, params)

    def _row_by_id(self, db: sqlite3.Connection, text: str, columns: str) -> Any:
        parsed = parse_event_id(text)
        if parsed is None:
            return None
        row = db.execute(
            f"SELECT b.received_ts, {columns}{_FROM} WHERE e.seq = ?", (parsed[1],)
        ).fetchone()
        if row is None or int(row[0]) & 0xFFFFFFFF != parsed[0]:
            return None
        return row[1:]

    def get_event(self, event_id: str) -> dict[str, Any] | None:
        """One stored event, or None."""
        with self._locked() as db:
            row = self._row_by_id(db, event_id, _ROW)
            return None if row is None else self._document(db, row)

    def event_note(self, event_id: str) -> str | None:
        """The collector's own note on an event (why it was stored as text), or None."""
        with self._locked() as db:
            row = self._row_by_id(db, event_id, "b.note")
        return None if row is None or row[0] is None else str(row[0])

    def neighbours(self, event_id_text: str) -> tuple[str | None, str | None]:
        """The ids of the next newer and next older event of the same stack."""
        with self._locked() as db:
            row = self._row_by_id(db, event_id_text, "e.stack_seq, e.date_ts, e.seq")
            if row is None:
                return None, None
            newer = db.execute(
                "SELECT b.received_ts, e.seq" + _FROM + " WHERE e.stack_seq = ?"
                " AND (e.date_ts, e.seq) > (?, ?) ORDER BY e.date_ts, e.seq LIMIT 1",
                tuple(row),
            ).fetchone()
            older = db.execute(
                "SELECT b.received_ts, e.seq" + _FROM + " WHERE e.stack_seq = ?"
                " AND (e.date_ts, e.seq) < (?, ?) ORDER BY e.date_ts DESC, e.seq DESC LIMIT 1",
                tuple(row),
            ).fetchone()
        return (
            event_id(newer[0], newer[1]) if newer else None,
            event_id(older[0], older[1]) if older else None,
        )

    def distinct_types(self, limit: int = 50) -> list[str]:
        """The event types seen (from the stacks), most frequent first."""
        with self._locked() as db:
            rows = db.execute(
                "SELECT type FROM stacks GROUP BY type ORDER BY SUM(events) DESC, type LIMIT ?",
                (limit,),
            ).fetchall()
        return [str(row[0]) for row in rows]

    # -- stacks ------------------------------------------------------------------------------

    _STACK_FIELDS = (
        "id, organization_id, project_id, signature_hash, signature_info, type, title, status,"
        " date_fixed_ts, first_ts, last_ts, total, events, users, created_utc, updated_utc, seq"
    )

    @staticmethod
    def _stack_resource(row: Sequence[Any]) -> dict[str, Any]:
        (
            stack_id,
            organization_id,
            project_id,
            signature_hash,
            signature_info,
            kind,
            title,
            status,
            fixed_ts,
            first_ts,
            last_ts,
            total,
            events,
            users,
            created,
            updated,
            _,
        ) = row
        return {
            "id": stack_id,
            "organization_id": organization_id,
            "project_id": project_id,
            "type": kind,
            "status": status,
            "title": title,
            "signature_hash": signature_hash,
            "signature_info": json.loads(signature_info),
            "first_occurrence": format_utc(datetime.fromtimestamp(first_ts, timezone.utc)),
            "last_occurrence": format_utc(datetime.fromtimestamp(last_ts, timezone.utc)),
            "date_fixed": (
                None
                if fixed_ts is None
                else format_utc(datetime.fromtimestamp(fixed_ts, timezone.utc))
            ),
            "total_occurrences": int(total),
            "event_count": int(events),
            "users": int(users),
            "created_utc": created,
            "updated_utc": updated,
            "first_ts": float(first_ts),
            "last_ts": float(last_ts),
        }

    def get_stack(self, stack_id: str) -> dict[str, Any] | None:
        """A stack, or None."""
        with self._locked() as db:
            row = db.execute(
                f"SELECT {self._STACK_FIELDS} FROM stacks WHERE id = ?", (stack_id,)
            ).fetchone()
        return None if row is None else self._stack_resource(row)

    def _stack_where(self, query: StackQuery) -> tuple[list[str], list[Any]]:
        clauses: list[str] = []
        params: list[Any] = []
        for column, values in (
            ("project_id", query.project_ids),
            ("type", query.types),
            ("status", query.statuses),
        ):
            if values:
                clauses.append(f"s.{column} IN ({','.join('?' * len(values))})")
                params.extend(values)
        if query.event_query is not None:
            inner, inner_params = self._where(query.event_query)
            if inner:
                clauses.append(
                    "EXISTS (SELECT 1 FROM events e WHERE e.stack_seq = s.seq AND "
                    + " AND ".join(inner)
                    + ")"
                )
                params.extend(inner_params)
        return clauses, params

    def page_stacks(
        self, query: StackQuery, *, after: str | None = None
    ) -> tuple[list[dict[str, Any]], str | None, int]:
        """One page of stacks in the query's order (descending), starting after the stack
        ``after``; the stacks, the cursor of the next page (None at the end) and the total."""
        column = _STACK_SORTS.get(query.sort, "last_ts")
        with self._locked() as db:
            clauses, params = self._stack_where(query)
            total = int(
                db.execute(
                    "SELECT COUNT(*) FROM stacks s" + self._sql_where(clauses), params
                ).fetchone()[0]
            )
            if after:
                row = db.execute(
                    f"SELECT {column}, seq FROM stacks WHERE id = ?", (after,)
                ).fetchone()
                if row is not None:
                    clauses.append(f"(s.{column}, s.seq) < (?, ?)")
                    params.extend(row)
            rows = db.execute(
                f"SELECT {', '.join('s.' + name.strip() for name in self._STACK_FIELDS.split(','))}"
                f" FROM stacks s{self._sql_where(clauses)}"
                f" ORDER BY s.{column} DESC, s.seq DESC LIMIT ?",
                (*params, query.limit + 1),
            ).fetchall()
        stacks = [self._stack_resource(row) for row in rows[: query.limit]]
        following = stacks[-1]["id"] if len(rows) > query.limit and stacks else None
        return stacks, following, total

    def set_stack_status(self, stack_id: str, status: str) -> dict[str, Any]:
        """Set a stack's status (``open``, ``fixed``, ``regressed``, ``ignored``); marking it
        fixed remembers when, so a later event regresses it. ``KeyError`` for an unknown stack,
        ``ValueError`` for an unknown status."""
        if status not in STACK_STATUSES:
            raise ValueError(f"unknown status {status!r}; use one of {', '.join(STACK_STATUSES)}")
        now = utc_now()
        with self._transaction() as db:
            cursor = db.execute(
                "UPDATE stacks SET status = ?, date_fixed_ts = ?, updated_utc = ? WHERE id = ?",
                (
                    status,
                    now.timestamp() if status == "fixed" else None,
                    format_utc(now),
                    stack_id,
                ),
            )
            if cursor.rowcount == 0:
                raise KeyError(f"no stack {stack_id!r}")
        stack = self.get_stack(stack_id)
        assert stack is not None
        return stack

    def stack_counts(self, project_ids: Sequence[str] = ()) -> dict[str, int]:
        """How many stacks have each status."""
        where, params = "", list(project_ids)
        if project_ids:
            where = f" WHERE project_id IN ({','.join('?' * len(project_ids))})"
        with self._locked() as db:
            rows = db.execute(
                f"SELECT status, COUNT(*) FROM stacks{where} GROUP BY status", params
            ).fetchall()
        return {str(row[0]): int(row[1]) for row in rows}

    def occurrences(
        self, stack_ids: Sequence[str], start: float, bucket: float, buckets: int
    ) -> dict[str, list[int]]:
        """Occurrences (summed ``count``, 1 when absent) per stack in ``buckets`` buckets of
        ``bucket`` seconds from ``start``, by event date."""
        result = {stack_id: [0] * buckets for stack_id in stack_ids}
        if not stack_ids:
            return result
        end = start + bucket * buckets
        with self._locked() as db:
            seqs: dict[int, str] = {}
            for offset in range(0, len(stack_ids), _CHUNK):
                chunk = list(stack_ids[offset : offset + _CHUNK])
                found = db.execute(
                    f"SELECT seq, id FROM stacks WHERE id IN ({','.join('?' * len(chunk))})",
                    chunk,
                ).fetchall()
                seqs.update((int(seq), str(stack_id)) for seq, stack_id in found)
            ordered = list(seqs)
            for offset in range(0, len(ordered), _CHUNK):
                chunk_seqs = ordered[offset : offset + _CHUNK]
                rows = db.execute(
                    "SELECT stack_seq, CAST((date_ts - ?) / ? AS INTEGER),"
                    " SUM(occurrences) FROM events"
                    f" WHERE stack_seq IN ({','.join('?' * len(chunk_seqs))})"
                    " AND date_ts >= ? AND date_ts < ? GROUP BY 1, 2",
                    (start, bucket, *chunk_seqs, start, end),
                ).fetchall()
                for stack_seq, index, count in rows:
                    if 0 <= index < buckets:
                        result[seqs[stack_seq]][index] = int(count)
        return result
