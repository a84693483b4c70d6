"""Manual sessions, as the service keeps them: started, kept alive by heartbeats, ended.

A ``type: "session"`` event with a reference id starts a session (its id is the reference id;
its user is ``data["@user"]["identity"]``). The session then follows:

- heartbeats, ``GET /api/v2/events/session/heartbeat?id=<session id or user identity>``: each
  one counts, and moves the session's last activity to the time it is received;
  ``close=true`` ends the session then. Heartbeats for an ended session change nothing. One
  that comes before its session's start event (the start was retried after an outage, the
  heartbeats were not) is kept for 2 hours, as the service keeps a heartbeat, and counted by
  the session when it starts.
- the session's events (``data["@ref:session"]`` = the session id): each moves the last
  activity to its date; a ``sessionend`` event ends the session at its date. A ``sessionend``
  of no known session is cancelled (not stored), and a ``heartbeat`` event of a known session
  is counted as a heartbeat and not stored, as on the service.

The session start event is what the service shows for a session, updated as the session goes:
``value`` is the duration in seconds (start to last activity) and ``data["sessionend"]`` the
end date once it ended. The collector adds ``data["@heartbeats"]``, how many heartbeats it
received, and ``data["@last_heartbeat"]``, when the last came (UTC). Sessions are not closed
for inactivity here (the service closes them after a while without heartbeats).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from eventlog_handler.collector._formats import format_utc_ts
from eventlog_handler.collector._normalize import NormalizedEvent, is_valid_reference_id

__all__ = [
    "SESSION_END",
    "SESSION_HEARTBEAT",
    "SESSION_START",
    "apply_session_events",
    "record_heartbeat",
    "session_fields",
    "split_session_events",
]

SESSION_START = "session"
SESSION_END = "sessionend"
SESSION_HEARTBEAT = "heartbeat"
_SESSION_TYPES = frozenset((SESSION_START, SESSION_END, SESSION_HEARTBEAT))
_REF_KEY = "@ref:session"


def session_of(event: NormalizedEvent) -> str | None:
    """The session an event belongs to: a session start's reference id; for any other event
    ``data["@ref:session"]`` (for an end or a heartbeat, else its reference id)."""
    if event.type == SESSION_START:
        reference = event.reference_id
        return reference if is_valid_reference_id(reference) else None
    data = event.data
    reference = data.get(_REF_KEY) if data else None
    if is_valid_reference_id(reference):
        return str(reference)
    if event.type in _SESSION_TYPES and is_valid_reference_id(event.reference_id):
        return event.reference_id
    return None


def _known(db: sqlite3.Connection, project_seq: int, session_ids: set[str]) -> set[str]:
    if not session_ids:
        return set()
    ids = sorted(session_ids)
    rows = db.execute(
        "SELECT session_id FROM sessions WHERE project_seq = ?"
        f" AND session_id IN ({','.join('?' * len(ids))})",
        (project_seq, *ids),
    )
    return {str(row[0]) for row in rows}


def split_session_events(
    db: sqlite3.Connection, project_seq: int, events: Sequence[NormalizedEvent]
) -> tuple[list[NormalizedEvent], int]:
    """The events to store, and how many are not stored: the heartbeat events of a known
    session (counted as heartbeats by :func:`apply_session_events`) and the ends of no known
    session (cancelled)."""
    started: set[str] = set()
    asked: set[str] = set()
    ends_or_beats = False
    for event in events:
        if event.type in _SESSION_TYPES:
            ends_or_beats = ends_or_beats or event.type != SESSION_START
            session_id = session_of(event)
            if session_id is not None:
                (started if event.type == SESSION_START else asked).add(session_id)
    if not ends_or_beats:
        return list(events), 0
    known = started | _known(db, project_seq, asked - started)
    kept: list[NormalizedEvent] = []
    for event in events:
        if event.type == SESSION_END or event.type == SESSION_HEARTBEAT:
            in_session = session_of(event) in known
            if in_session != (event.type == SESSION_END):
                continue  # a session's heartbeat, or the end of no known session
        kept.append(event)
    return kept, len(events) - len(kept)


def apply_session_events(
    db: sqlite3.Connection,
    project_seq: int,
    events: Sequence[NormalizedEvent],
    stored: Sequence[NormalizedEvent],
    first_seq: int,
) -> None:
    """Update the sessions for a request's ``events``, in date order: ``stored`` are those
    stored, with consecutive sequence numbers from ``first_seq``; the others are the heartbeat
    events :func:`split_session_events` kept out."""
    seqs = {id(event): first_seq + offset for offset, event in enumerate(stored)}
    concerned = [
        event
        for event in events
        if event.type in _SESSION_TYPES or (event.data and _REF_KEY in event.data)
    ]
    concerned.sort(key=lambda event: event.timestamp)
    for event in concerned:
        session_id = session_of(event)
        if session_id is None:
            continue
        seq = seqs.get(id(event))
        when = event.timestamp
        if event.type == SESSION_START:
            if seq is not None:
                identity = event.user_identity or ""
                started = db.execute(
                    "INSERT OR IGNORE INTO sessions (project_seq, session_id, identity,"
                    " start_seq, start_ts, last_ts) VALUES (?, ?, ?, ?, ?, ?)",
                    (project_seq, session_id, identity, seq, when, when),
                ).rowcount
                if started:
                    _take_early_heartbeats(db, project_seq, session_id, identity)
        elif event.type == SESSION_END:
            db.execute(
                "UPDATE sessions SET last_ts = MAX(last_ts, ?), end_ts = MAX(last_ts, ?)"
                " WHERE project_seq = ? AND session_id = ? AND end_ts IS NULL",
                (when, when, project_seq, session_id),
            )
        elif event.type == SESSION_HEARTBEAT and seq is None:
            _beat(db, "project_seq = ? AND session_id = ?", (project_seq, session_id), when)
        else:
            db.execute(
                "UPDATE sessions SET last_ts = MAX(last_ts, ?)"
                " WHERE project_seq = ? AND session_id = ? AND end_ts IS NULL",
                (when, project_seq, session_id),
            )


def _beat(
    db: sqlite3.Connection, where: str, params: Sequence[Any], when: float, close: bool = False
) -> int:
    ending = ", end_ts = MAX(last_ts, ?)" if close else ""
    cursor = db.execute(
        "UPDATE sessions SET heartbeats = heartbeats + 1, last_ts = MAX(last_ts, ?),"
        f" last_heartbeat_ts = ?{ending} WHERE {where} AND end_ts IS NULL",
        (when, when, *((when,) if close else ()), *params),
    )
    return int(cursor.rowcount)


#: Seconds a heartbeat of no known session is kept for its session's start, as the service
#: keeps one; and how many such heartbeats are kept at most (the oldest go first).
EARLY_HEARTBEAT_SECONDS = 2 * 3600
MAX_EARLY_HEARTBEATS = 10_000


def record_heartbeat(
    db: sqlite3.Connection, project_seq: int, identifier: str, when: float, close: bool
) -> bool:
    """A heartbeat received at ``when`` for the open session whose id is ``identifier``, or
    else the newest open session of the user whose identity it is; ``close`` ends it. Whether
    a session took it; one that none took (yet) is kept for the session's start."""
    if _beat(db, "project_seq = ? AND session_id = ?", (project_seq, identifier), when, close):
        return True
    row = db.execute(
        "SELECT session_id FROM sessions WHERE project_seq = ? AND identity = ?"
        " AND identity <> '' AND end_ts IS NULL ORDER BY start_ts DESC, start_seq DESC LIMIT 1",
        (project_seq, identifier),
    ).fetchone()
    if row is not None:
        where = "project_seq = ? AND session_id = ?"
        if _beat(db, where, (project_seq, row[0]), when, close):
            return True
    known = db.execute(
        "SELECT 1 FROM sessions WHERE project_seq = ? AND (session_id = ? OR identity = ?)",
        (project_seq, identifier, identifier),
    ).fetchone()
    if known is None:  # not a heartbeat of a session (or a user's session) that ended
        db.execute("DELETE FROM early_heartbeats WHERE ts < ?", (when - EARLY_HEARTBEAT_SECONDS,))
        db.execute(
            "DELETE FROM early_heartbeats WHERE rowid <= (SELECT MAX(rowid) FROM early_heartbeats)"
            " - ?",
            (MAX_EARLY_HEARTBEATS - 1,),
        )
        db.execute(
            "INSERT INTO early_heartbeats (project_seq, identifier, ts, close) VALUES (?, ?, ?, ?)",
            (project_seq, identifier, when, int(close)),
        )
    return False


def _take_early_heartbeats(
    db: sqlite3.Connection, project_seq: int, session_id: str, identity: str
) -> None:
    """The heartbeats that came, in the last 2 hours, for a session before its start event."""
    names = (session_id, identity) if identity else (session_id,)
    marks = ",".join("?" * len(names))
    early = db.execute(
        f"SELECT ts, close FROM early_heartbeats WHERE project_seq = ? AND identifier IN ({marks})"
        " ORDER BY ts",
        (project_seq, *names),
    ).fetchall()
    if not early:
        return
    db.execute(
        f"DELETE FROM early_heartbeats WHERE project_seq = ? AND identifier IN ({marks})",
        (project_seq, *names),
    )
    where = "project_seq = ? AND session_id = ?"
    for when, close in early:
        _beat(db, where, (project_seq, session_id), float(when), bool(close))


def session_fields(
    db: sqlite3.Connection, start_seq: int, data: dict[str, Any], value: Any
) -> tuple[dict[str, Any], Any]:
    """The ``data`` and ``value`` of a session start event (sequence number ``start_seq``),
    updated with its session as it stands (see the module's docstring)."""
    row = db.execute(
        "SELECT start_ts, last_ts, heartbeats, last_heartbeat_ts, end_ts FROM sessions"
        " WHERE start_seq = ?",
        (start_seq,),
    ).fetchone()
    if row is None:
        return data, value
    start_ts, last_ts, heartbeats, last_heartbeat_ts, end_ts = row
    data = dict(data)
    data["@heartbeats"] = int(heartbeats)
    if last_heartbeat_ts is not None:
        data["@last_heartbeat"] = format_utc_ts(float(last_heartbeat_ts))
    if end_ts is not None:
        data["sessionend"] = format_utc_ts(float(end_ts))
    else:
        data.pop("sessionend", None)
    if end_ts is not None or last_ts > start_ts:
        seconds = max(0.0, float(end_ts if end_ts is not None else last_ts) - float(start_ts))
        value = int(seconds) if seconds == int(seconds) else round(seconds, 3)
    return data, value
