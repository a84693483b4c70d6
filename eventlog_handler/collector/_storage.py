"""The collector's store: :class:`Storage` is the database with its accounts, events and stacks.

See :mod:`~eventlog_handler.collector._database` (connection, schema, file permissions),
:mod:`~eventlog_handler.collector._accounts` (organizations, projects, settings, tokens, users)
and :mod:`~eventlog_handler.collector._eventstore` (events and stacks).

A database written by an earlier version of the collector (schema 1: events without stacks) is
migrated when opened: organizations, projects, tokens and settings stay as they are, and the
events are stored again, into stacks (with new ids). Schema 2 gains the ``User-Agent`` of each
kept body (unknown, NULL, for the bodies it holds) and the sessions table, filled from its
session start and end events (the heartbeats it received are not known).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from eventlog_handler.collector._accounts import Accounts, Identity, TokenRecord, UserRecord
from eventlog_handler.collector._database import SCHEMA, SCHEMA_VERSION, StorageClosed
from eventlog_handler.collector._eventstore import EventPage, EventStore, StackQuery, StoreOutcome
from eventlog_handler.collector._formats import DateFormatError, parse_date
from eventlog_handler.collector._normalize import NormalizedEvent
from eventlog_handler.collector._sessions import SESSION_END, SESSION_START, apply_session_events
from eventlog_handler.collector._stacking import stack_basis
from eventlog_handler.collector._storebase import _FROM, _ROW, _ROW_COLUMNS

__all__ = [
    "EventPage",
    "Identity",
    "StackQuery",
    "Storage",
    "StorageClosed",
    "StoreOutcome",
    "TokenRecord",
    "UserRecord",
]

_V1_INDEXES = ("events_by_date", "events_by_project", "events_by_stack", "events_by_reference")


class Storage(Accounts, EventStore):
    """Thread-safe access to the collector's SQLite database."""

    def __init__(self, path: str | Path | None = None) -> None:
        super().__init__(path)
        self._init_event_store()
        version = self.schema_version()
        if version is not None and version < 2:
            self._migrate_from_v1()
        with self._locked() as db:
            db.executescript(SCHEMA)
            columns = {row[1] for row in db.execute("PRAGMA table_info(batches)")}
            if "user_agent" not in columns:  # schema 2
                db.execute("ALTER TABLE batches ADD COLUMN user_agent TEXT")
        if version == 2:
            self._add_sessions()
        with self._locked() as db:
            db.execute(
                "INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', ?)",
                (str(SCHEMA_VERSION),),
            )

    def _add_sessions(self) -> None:
        """The sessions of a schema-2 database, from its session start and end events."""
        with self._transaction() as db:
            rows = db.execute(
                f"SELECT {_ROW}, e.date_ts{_FROM} WHERE e.type IN (?, ?) ORDER BY e.date_ts, e.seq",
                (SESSION_START, SESSION_END),
            ).fetchall()
            for row in rows:
                event = _from_document(self._document(db, row), float(row[_ROW_COLUMNS]))
                apply_session_events(db, int(row[1]), [event], [event], int(row[0]))

    def _migrate_from_v1(self) -> None:
        with self._locked() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                tables = {
                    row[0]
                    for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
                }
                if "events_v1" in tables:  # an earlier migration was interrupted
                    db.execute("DROP TABLE IF EXISTS events")
                else:
                    for index in _V1_INDEXES:
                        db.execute(f"DROP INDEX IF EXISTS {index}")
                    db.execute("ALTER TABLE events RENAME TO events_v1")
                for table in ("reference_ids", "stacks", "stack_users"):
                    db.execute(f"DROP TABLE IF EXISTS {table}")
                columns = {row[1] for row in db.execute("PRAGMA table_info(tokens)")}
                if "user_id" not in columns:
                    db.execute("ALTER TABLE tokens ADD COLUMN user_id TEXT")
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.executescript(SCHEMA)
            rows = db.execute(
                "SELECT organization_id, project_id, date_ts, body FROM events_v1 ORDER BY seq"
            ).fetchall()
        for start in range(0, len(rows), 500):
            groups: dict[tuple[str, str, str], list[NormalizedEvent]] = {}
            for organization_id, project_id, date_ts, body in rows[start : start + 500]:
                document = json.loads(body)
                received = str(document.get("created_utc") or "")
                groups.setdefault((organization_id, project_id, received), []).append(
                    _from_document(document, float(date_ts))
                )
            for (organization_id, project_id, received), events in groups.items():
                try:
                    moment = parse_date(received)
                except DateFormatError:
                    moment = None
                self.insert_events(organization_id, project_id, events, moment, deduplicate=False)
        with self._locked() as db:
            db.execute("DROP TABLE events_v1")


def _from_document(document: dict[str, Any], timestamp: float) -> NormalizedEvent:
    data = document.get("data")
    data = data if isinstance(data, dict) else {}
    kind = str(document.get("type") or "log")
    source = document.get("source")
    return NormalizedEvent(
        type=kind,
        date=str(document.get("date")),
        timestamp=timestamp,
        source=source,
        message=document.get("message"),
        tags=list(document.get("tags") or []),
        geo=document.get("geo"),
        value=document.get("value"),
        count=document.get("count"),
        data=data,
        reference_id=document.get("reference_id"),
        basis=stack_basis(kind, source, data),
    )
