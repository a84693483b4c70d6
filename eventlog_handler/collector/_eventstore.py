"""Events and stacks in the collector's database.

Storing a request's events is one transaction: the request body is kept once, as it was sent
(a ``batches`` row); events whose reference id was received in the project within 24 hours are
discarded; each event is assigned to its stack (created on first sight) and gets a small row of
the columns queries filter and sort on, pointing at its place in the body (written with a few
multi-row ``INSERT`` statements); each stack's counters (events, occurrences, users, first and
last seen) are updated once per request. A ``fixed`` stack that receives an event dated after it
was fixed becomes ``regressed``.

Reading an event applies the service's rules again to its part of the body, with its time of
receipt (:class:`~eventlog_handler.collector._normalize.Normalizer`), which gives the event as
it was stored. Listings are newest first by event date; :meth:`EventStore.page_events` pages
with a cursor (an event id), so any number of events can be walked without an offset.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from eventlog_handler.collector._accounts import clean_text, dumps
from eventlog_handler.collector._eventreads import EventPage
from eventlog_handler.collector._formats import format_utc_ts, utc_now
from eventlog_handler.collector._ingest import Received, body_items
from eventlog_handler.collector._normalize import (
    INVALID_REFERENCE_ID,
    KNOWN_FIELDS,
    FieldTypeError,
    NormalizedEvent,
    Normalizer,
)
from eventlog_handler.collector._sessions import (
    apply_session_events,
    record_heartbeat,
    split_session_events,
)
from eventlog_handler.collector._stacking import (
    StackBasis,
    signature_of,
    stack_id_for,
    stack_title,
)
from eventlog_handler.collector._stackreads import STACK_STATUSES, StackQuery, StackReads
from eventlog_handler.collector._storebase import (
    _CACHE_SIZE,
    _CHUNK,
    _ENCODE,
    _FROM,
    _ROW,
    event_id,
    parse_event_id,
)

__all__ = [
    "DEDUPLICATION_WINDOW_SECONDS",
    "STACK_STATUSES",
    "EventPage",
    "EventStore",
    "StackQuery",
    "StoreOutcome",
    "event_id",
    "kept_body",
    "parse_event_id",
]

DEDUPLICATION_WINDOW_SECONDS = 24 * 3600.0
_EVENT_COLUMNS = (
    "batch, idx, project_seq, stack_seq, date_ts, type, level, source, reference_id,"
    " user_identity, occurrences, first, tags, search_text"
)
_COLUMNS = _EVENT_COLUMNS.count(",") + 1
_ONE_ROW = "(" + ", ".join("?" * _COLUMNS) + ")"
#: Rows per INSERT statement: 32,766 parameters since SQLite 3.32, 999 before.
_ROWS_PER_INSERT = (32_766 if sqlite3.sqlite_version_info >= (3, 32, 0) else 999) // _COLUMNS


@dataclass
class StoreOutcome:
    """What happened to a request's events: how many were stored (with consecutive sequence
    numbers from ``first_seq``, received at ``received_ts``), how many were duplicates and how
    many were taken by their sessions rather than stored (heartbeats, ends of no session)."""

    stored: int = 0
    duplicates: int = 0
    session_events: int = 0
    new_stacks: int = 0
    first_seq: int = 0
    received_ts: float = 0.0

    @property
    def ids(self) -> list[str]:
        """The stored events' ids, in the order they were given."""
        return [event_id(self.received_ts, self.first_seq + i) for i in range(self.stored)]


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


def kept_body(events: Sequence[NormalizedEvent]) -> Received:
    """A body to keep for events that came without one (by ``GET``, the Python API): their
    own fields, each event's ``index`` set to its place in it."""
    wires = []
    for index, event in enumerate(events):
        event.index = index
        wires.append(_wire(event))
    return Received(_ENCODE(wires).encode("ascii"))


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


class EventStore(StackReads):
    """Events and stacks; mixed into :class:`~eventlog_handler.collector._storage.Storage`.
    Writing is here; reading in :class:`~._eventreads.EventReads` and
    :class:`~._stackreads.StackReads`."""

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
        batch: int | None = None,
    ) -> StoreOutcome:
        """Store events received at ``received``; returns how many were stored and how many
        were discarded as duplicates: an event whose ``reference_id`` was already received in
        the project within 24 hours (``invalid-reference-id`` never is a duplicate). The
        sessions are kept up to date (:mod:`~eventlog_handler.collector._sessions`); a
        session's heartbeat events and the ends of no known session are not stored.

        ``body`` is the request body the events were read from (each event's ``index`` is its
        position in it); without one, the events' own fields are kept as the body. ``batch``
        is a body kept already by :meth:`receive_batch`: the events point into it, and it is
        no longer unstored once they are.
        """
        received_ts = (received or utc_now()).timestamp()
        outcome = StoreOutcome(received_ts=received_ts)
        if not events:
            return outcome
        if body is None and batch is None:
            body = kept_body(events)
        created = format_utc_ts(received_ts)
        with self._transaction() as db:
            project_seq = self._project_seq(db, project_id)
            kept: Sequence[NormalizedEvent] = events
            if deduplicate:
                kept, outcome.duplicates = self._without_duplicates(
                    db, project_seq, events, received_ts
                )
            arrived = kept
            kept, outcome.session_events = split_session_events(db, project_seq, kept)
            deltas = self._stack_deltas(project_id, kept)
            outcome.new_stacks = self._ensure_stacks(
                db, organization_id, project_id, deltas, created
            )
            if batch is None:
                assert body is not None
                batch = self._keep_batch(db, project_id, received_ts, body)
            else:
                db.execute("DELETE FROM unstored WHERE batch = ?", (batch,))
            outcome.first_seq = self._write_events(db, project_seq, kept, deltas, batch)
            outcome.stored = len(kept)
            self._update_stacks(db, deltas, created)
            apply_session_events(db, project_seq, arrived, kept, outcome.first_seq)
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

    @staticmethod
    def _keep_batch(
        db: sqlite3.Connection, project_id: str, received_ts: float, body: Received
    ) -> int:
        batch = db.execute(
            "INSERT INTO batches (project_id, received_ts, encoding, body, note, user_agent)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (project_id, received_ts, body.encoding, body.body, body.note, body.user_agent),
        ).lastrowid
        assert batch is not None
        return batch

    def receive_batch(
        self, organization_id: str, project_id: str, received_ts: float, body: Received
    ) -> int:
        """Keep a request body before its post is answered (committed: it survives a crash of
        the collector), as unstored until :meth:`insert_events` stores its events with
        ``batch=``; returns the batch's number."""
        with self._transaction() as db:
            batch = self._keep_batch(db, project_id, received_ts, body)
            db.execute(
                "INSERT INTO unstored (batch, organization_id) VALUES (?, ?)",
                (batch, organization_id),
            )
        return batch

    def unstored_batches(self) -> list[tuple[int, str, str, float, Received]]:
        """``(batch, organization id, project id, received at, body)`` of every acknowledged
        body whose events were not stored (the collector stopped between the two)."""
        with self._locked() as db:
            rows = db.execute(
                "SELECT b.seq, u.organization_id, b.project_id, b.received_ts, b.body,"
                " b.encoding, b.note, b.user_agent FROM unstored u"
                " JOIN batches b ON b.seq = u.batch"
                " ORDER BY b.seq"
            ).fetchall()
        return [
            (
                int(row[0]),
                str(row[1]),
                str(row[2]),
                float(row[3]),
                Received(bytes(row[4]), row[5], row[6], row[7]),
            )
            for row in rows
        ]

    def store_unstored(self, only: Collection[int] | None = None) -> int:
        """Store the events of the bodies that were acknowledged and not stored (the collector
        was stopped in between, by a crash or ``kill -9``, or storing them failed: ``only``
        those batches), as they would have been stored; returns how many events were stored."""
        stored = 0
        for batch, organization_id, project_id, received_ts, body in self.unstored_batches():
            if only is not None and batch not in only:
                continue
            received = datetime.fromtimestamp(received_ts, timezone.utc)
            try:
                events = Normalizer(received).events(body_items(body))
            except (FieldTypeError, ValueError, KeyError):
                events = []
            if not events:
                with self._transaction() as db:
                    db.execute("DELETE FROM unstored WHERE batch = ?", (batch,))
                continue
            try:
                outcome = self.insert_events(
                    organization_id, project_id, events, received, body=body, batch=batch
                )
            except KeyError:  # its project was deleted since
                with self._transaction() as db:
                    db.execute("DELETE FROM unstored WHERE batch = ?", (batch,))
                continue
            stored += outcome.stored
        return stored

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

    def record_heartbeat(
        self, project_id: str, identifier: str, received_ts: float, close: bool
    ) -> bool:
        """A session heartbeat of the project (a session id or a user's identity), received at
        ``received_ts``; ``close`` ends the session. Whether an open session took it (see
        :mod:`~eventlog_handler.collector._sessions`)."""
        with self._transaction() as db:
            return record_heartbeat(
                db, self._project_seq(db, project_id), identifier, received_ts, close
            )

    def clear_events(self) -> None:
        """Delete every event and stack, and forget every reference id."""
        with self._transaction() as db:
            for table in (
                "events",
                "batches",
                "unstored",
                "stacks",
                "stack_users",
                "sessions",
                "early_heartbeats",
            ):
                db.execute(f"DELETE FROM {table}")
        self._stack_cache.clear()
        self._stack_seqs.clear()
        self._stack_ids.clear()
        self._batches.clear()
