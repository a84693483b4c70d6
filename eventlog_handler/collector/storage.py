"""SQLite storage of the collector: organizations, projects, tokens and events.

One connection, shared by the request threads under a lock (the collector is a development
tool: simplicity over write throughput). A file database runs in WAL mode, so another process
can read it while the collector writes. ``path=None`` keeps everything in memory.

The schema is created on first use. Events are stored as their JSON document (``body``) plus the
columns queries filter and sort on.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import weakref
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from eventlog_handler.collector.filters import EventQuery
from eventlog_handler.collector.formats import format_utc, new_object_id, new_token_key, utc_now
from eventlog_handler.collector.ingest import NormalizedEvent

__all__ = ["Identity", "Storage", "StorageClosed", "TokenRecord"]

SCHEMA_VERSION = 1
DEDUPLICATION_WINDOW = timedelta(hours=24)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS organizations (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    created_utc TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS projects (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    organization_id TEXT NOT NULL REFERENCES organizations(id),
    name TEXT NOT NULL,
    created_utc TEXT NOT NULL,
    config_version INTEGER NOT NULL DEFAULT 0,
    settings TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE IF NOT EXISTS tokens (
    id TEXT PRIMARY KEY,
    organization_id TEXT NOT NULL REFERENCES organizations(id),
    project_id TEXT,
    scopes TEXT NOT NULL,
    notes TEXT,
    expires_utc TEXT,
    expires_ts REAL,
    is_disabled INTEGER NOT NULL DEFAULT 0,
    created_utc TEXT NOT NULL,
    updated_utc TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    organization_id TEXT NOT NULL,
    project_id TEXT NOT NULL,
    type TEXT NOT NULL,
    level TEXT,
    source TEXT,
    date_ts REAL NOT NULL,
    reference_id TEXT,
    tags TEXT NOT NULL,
    stack_key TEXT NOT NULL,
    search_text TEXT NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_by_date ON events (date_ts, seq);
CREATE INDEX IF NOT EXISTS events_by_project ON events (project_id, date_ts);
CREATE INDEX IF NOT EXISTS events_by_stack ON events (project_id, stack_key);
CREATE INDEX IF NOT EXISTS events_by_reference ON events (project_id, reference_id);
CREATE TABLE IF NOT EXISTS reference_ids (
    project_id TEXT NOT NULL,
    reference_id TEXT NOT NULL,
    seen_ts REAL NOT NULL,
    PRIMARY KEY (project_id, reference_id)
);
"""


class StorageClosed(RuntimeError):
    """The store was used after :meth:`Storage.close`."""


@dataclass(frozen=True)
class Identity:
    """The organization, project and tokens created on first start."""

    organization_id: str
    project_id: str
    user_token: str
    project_token: str


@dataclass(frozen=True)
class TokenRecord:
    """A stored token, as authentication needs it."""

    id: str
    organization_id: str
    project_id: str | None
    scopes: tuple[str, ...]
    is_disabled: bool
    expires_ts: float | None

    def is_usable(self, now: float) -> bool:
        """Not disabled and not expired."""
        return not self.is_disabled and (self.expires_ts is None or self.expires_ts > now)

    def has_scope(self, scope: str) -> bool:
        """``global`` implies ``user``, which implies ``client``."""
        implied = {"global": {"global", "user", "client"}, "user": {"user", "client"}}
        return any(scope in implied.get(own, {own}) for own in self.scopes)


def _clean(text: str | None) -> str | None:
    """Text SQLite can store: lone surrogates (valid in JSON strings) become ``?``."""
    if text is None:
        return None
    return text.encode("utf-8", "replace").decode("utf-8")


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=True, separators=(",", ":"), default=str)


class Storage:
    """Thread-safe access to the collector's SQLite database."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = None if path is None else Path(path)
        target = ":memory:" if self.path is None else str(self.path)
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(target, check_same_thread=False, timeout=10.0)
        self._conn: sqlite3.Connection | None = conn
        self._finalizer = weakref.finalize(self, conn.close)
        self._lock = threading.RLock()
        with self._locked() as db:
            if self.path is not None:
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=NORMAL")
            db.executescript(_SCHEMA)
            db.execute(
                "INSERT OR IGNORE INTO meta (key, value) VALUES ('schema_version', ?)",
                (str(SCHEMA_VERSION),),
            )
            db.commit()

    # -- plumbing ----------------------------------------------------------------------------

    @contextmanager
    def _locked(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            if self._conn is None:
                raise StorageClosed("the collector's store is closed")
            yield self._conn

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._locked() as db, db:
            yield db

    def close(self) -> None:
        """Close the database; later calls raise :class:`StorageClosed`. Idempotent."""
        with self._lock:
            if self._conn is not None:
                self._conn = None
                self._finalizer()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._conn is None

    # -- identity ----------------------------------------------------------------------------

    def ensure_identity(self) -> Identity:
        """The default organization, project and tokens; created and saved on first call."""
        with self._transaction() as db:
            rows = dict(db.execute("SELECT key, value FROM meta").fetchall())
            keys = ("organization_id", "project_id", "user_token", "project_token")
            if all(key in rows for key in keys):
                return Identity(*(rows[key] for key in keys))
            organization = self._insert_organization(db, "Local Organization")
            project = self._insert_project(db, organization, "Local Project")
            user_token = self._insert_token(
                db, organization, None, ["user", "client"], "Collector user token", None
            )
            project_token = self._insert_token(
                db, organization, project, ["client"], "Collector project token", None
            )
            identity = Identity(organization, project, user_token["id"], project_token["id"])
            db.executemany(
                "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                [(key, getattr(identity, key)) for key in keys],
            )
            return identity

    # -- organizations and projects ----------------------------------------------------------

    @staticmethod
    def _insert_organization(db: sqlite3.Connection, name: str) -> str:
        organization_id = new_object_id()
        db.execute(
            "INSERT INTO organizations (id, name, created_utc) VALUES (?, ?, ?)",
            (organization_id, name, format_utc(utc_now())),
        )
        return organization_id

    @staticmethod
    def _insert_project(db: sqlite3.Connection, organization_id: str, name: str) -> str:
        project_id = new_object_id()
        db.execute(
            "INSERT INTO projects (id, organization_id, name, created_utc) VALUES (?, ?, ?, ?)",
            (project_id, organization_id, name, format_utc(utc_now())),
        )
        return project_id

    def create_organization(self, name: str) -> str:
        """A new organization's id."""
        with self._transaction() as db:
            return self._insert_organization(db, _clean(name) or "Organization")

    def create_project(self, organization_id: str, name: str) -> dict[str, Any]:
        """Create a project in an existing organization; returns its API representation."""
        with self._transaction() as db:
            if (
                db.execute(
                    "SELECT 1 FROM organizations WHERE id = ?", (organization_id,)
                ).fetchone()
                is None
            ):
                raise KeyError(f"no organization {organization_id!r}")
            project_id = self._insert_project(db, organization_id, _clean(name) or "Project")
        project = self.get_project(project_id)
        assert project is not None
        return project

    _PROJECT_SELECT = """
        SELECT p.id, p.created_utc, p.organization_id, o.name, p.name,
               (SELECT COUNT(DISTINCT stack_key) FROM events e WHERE e.project_id = p.id),
               (SELECT COUNT(*) FROM events e WHERE e.project_id = p.id)
        FROM projects p JOIN organizations o ON o.id = p.organization_id
    """

    @staticmethod
    def _project_resource(row: tuple[Any, ...]) -> dict[str, Any]:
        project_id, created, organization_id, organization_name, name, stacks, events = row
        return {
            "id": project_id,
            "created_utc": created,
            "organization_id": organization_id,
            "organization_name": organization_name,
            "name": name,
            "delete_bot_data_enabled": False,
            "data": {},
            "promoted_tabs": [],
            "is_configured": events > 0,
            "stack_count": stacks,
            "event_count": events,
            "has_premium_features": False,
            "has_slack_integration": False,
            "usage_hours": [],
            "usage": [],
        }

    def get_project(self, project_id: str) -> dict[str, Any] | None:
        """A project's API representation, or None."""
        with self._locked() as db:
            row = db.execute(self._PROJECT_SELECT + " WHERE p.id = ?", (project_id,)).fetchone()
        return None if row is None else self._project_resource(row)

    def list_projects(
        self, organization_id: str | None, offset: int = 0, limit: int = 1000
    ) -> tuple[list[dict[str, Any]], int]:
        """One page of an organization's projects (all organizations when None), and the total."""
        where, params = (
            ("", ())
            if organization_id is None
            else (" WHERE p.organization_id = ?", (organization_id,))
        )
        with self._locked() as db:
            total = db.execute("SELECT COUNT(*) FROM projects p" + where, params).fetchone()[0]
            rows = db.execute(
                self._PROJECT_SELECT + where + " ORDER BY p.name COLLATE NOCASE, p.seq"
                " LIMIT ? OFFSET ?",
                (*params, limit, offset),
            ).fetchall()
        return [self._project_resource(row) for row in rows], int(total)

    def project_config(self, project_id: str) -> tuple[int, dict[str, str]]:
        """A project's client configuration: ``(version, settings)``."""
        with self._locked() as db:
            row = db.execute(
                "SELECT config_version, settings FROM projects WHERE id = ?", (project_id,)
            ).fetchone()
        if row is None:
            raise KeyError(f"no project {project_id!r}")
        return int(row[0]), dict(json.loads(row[1]))

    def set_project_setting(self, project_id: str, key: str, value: str | None) -> int:
        """Set (or with None remove) a configuration setting; returns the new version."""
        with self._transaction() as db:
            row = db.execute(
                "SELECT config_version, settings FROM projects WHERE id = ?", (project_id,)
            ).fetchone()
            if row is None:
                raise KeyError(f"no project {project_id!r}")
            settings = dict(json.loads(row[1]))
            if value is None:
                settings.pop(key, None)
            else:
                settings[key] = value
            version = int(row[0]) + 1
            db.execute(
                "UPDATE projects SET config_version = ?, settings = ? WHERE id = ?",
                (version, _dumps(settings), project_id),
            )
            return version

    # -- tokens ------------------------------------------------------------------------------

    @staticmethod
    def _insert_token(
        db: sqlite3.Connection,
        organization_id: str,
        project_id: str | None,
        scopes: list[str],
        notes: str | None,
        expires: datetime | None,
    ) -> dict[str, Any]:
        key = new_token_key()
        now = format_utc(utc_now())
        expires_utc = None if expires is None else format_utc(expires)
        db.execute(
            "INSERT INTO tokens (id, organization_id, project_id, scopes, notes, expires_utc,"
            " expires_ts, is_disabled, created_utc, updated_utc)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, 0, ?, ?)",
            (
                key,
                organization_id,
                project_id,
                _dumps(scopes),
                _clean(notes),
                expires_utc,
                None if expires is None else expires.timestamp(),
                now,
                now,
            ),
        )
        return Storage._token_resource(
            (
                key,
                organization_id,
                project_id,
                _dumps(scopes),
                _clean(notes),
                expires_utc,
                0,
                now,
                now,
            )
        )

    @staticmethod
    def _token_resource(row: tuple[Any, ...]) -> dict[str, Any]:
        key, organization_id, project_id, scopes, notes, expires_utc, disabled, created, updated = (
            row
        )
        return {
            "id": key,
            "organization_id": organization_id,
            "project_id": project_id,
            "user_id": None,
            "default_project_id": None,
            "scopes": json.loads(scopes),
            "expires_utc": expires_utc,
            "notes": notes,
            "is_disabled": bool(disabled),
            "is_suspended": False,
            "created_utc": created,
            "updated_utc": updated,
        }

    def create_token(
        self,
        organization_id: str,
        project_id: str | None,
        scopes: list[str],
        notes: str | None = None,
        expires: datetime | None = None,
    ) -> dict[str, Any]:
        """Create a token; returns its API representation (``id`` is the key)."""
        with self._transaction() as db:
            return self._insert_token(db, organization_id, project_id, scopes, notes, expires)

    def get_token_resource(self, key: str) -> dict[str, Any] | None:
        """A token's API representation, or None."""
        with self._locked() as db:
            row = db.execute(
                "SELECT id, organization_id, project_id, scopes, notes, expires_utc, is_disabled,"
                " created_utc, updated_utc FROM tokens WHERE id = ?",
                (key,),
            ).fetchone()
        return None if row is None else self._token_resource(row)

    def get_token(self, key: str) -> TokenRecord | None:
        """A token for authentication, or None if unknown."""
        with self._locked() as db:
            row = db.execute(
                "SELECT id, organization_id, project_id, scopes, is_disabled, expires_ts"
                " FROM tokens WHERE id = ?",
                (key,),
            ).fetchone()
        if row is None:
            return None
        return TokenRecord(
            id=row[0],
            organization_id=row[1],
            project_id=row[2],
            scopes=tuple(json.loads(row[3])),
            is_disabled=bool(row[4]),
            expires_ts=row[5],
        )

    def set_token_disabled(self, key: str, disabled: bool = True) -> None:
        """Disable (or enable again) a token."""
        with self._transaction() as db:
            cursor = db.execute(
                "UPDATE tokens SET is_disabled = ?, updated_utc = ? WHERE id = ?",
                (int(disabled), format_utc(utc_now()), key),
            )
            if cursor.rowcount == 0:
                raise KeyError("no such token")

    # -- events ------------------------------------------------------------------------------

    def insert_events(
        self,
        organization_id: str,
        project_id: str,
        events: Iterable[NormalizedEvent],
        received: datetime | None = None,
    ) -> tuple[list[str], int]:
        """Store events; returns the new event ids and how many were discarded as duplicates.

        An event whose ``reference_id`` was already seen in the project within 24 hours is
        discarded (``invalid-reference-id`` is never treated as a duplicate).
        """
        received = received or utc_now()
        now_ts = received.timestamp()
        window_start = now_ts - DEDUPLICATION_WINDOW.total_seconds()
        created = format_utc(received)
        ids: list[str] = []
        duplicates = 0
        with self._transaction() as db:
            for event in events:
                reference = event.reference_id
                if reference is not None and reference != "invalid-reference-id":
                    seen = db.execute(
                        "SELECT seen_ts FROM reference_ids WHERE project_id = ? AND"
                        " reference_id = ?",
                        (project_id, reference),
                    ).fetchone()
                    if seen is not None and seen[0] > window_start:
                        duplicates += 1
                        continue
                    db.execute(
                        "INSERT OR REPLACE INTO reference_ids (project_id, reference_id,"
                        " seen_ts) VALUES (?, ?, ?)",
                        (project_id, reference, now_ts),
                    )
                stack_key = event.stack_key
                first = (
                    db.execute(
                        "SELECT 1 FROM events WHERE project_id = ? AND stack_key = ? LIMIT 1",
                        (project_id, stack_key),
                    ).fetchone()
                    is None
                )
                event_id = new_object_id()
                stack_id = hashlib.sha1(f"{project_id}:{stack_key}".encode()).hexdigest()[:24]
                document = {
                    "id": event_id,
                    "organization_id": organization_id,
                    "project_id": project_id,
                    "stack_id": stack_id,
                    "is_first_occurrence": first,
                    "created_utc": created,
                    **event.wire_fields(),
                }
                db.execute(
                    "INSERT INTO events (id, organization_id, project_id, type, level, source,"
                    " date_ts, reference_id, tags, stack_key, search_text, body)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        event_id,
                        organization_id,
                        project_id,
                        _clean(event.type),
                        _clean(event.level),
                        _clean(event.source),
                        event.timestamp,
                        _clean(reference),
                        _dumps(event.tags),
                        stack_key,
                        _clean(event.search_text),
                        _dumps(document),
                    ),
                )
                ids.append(event_id)
        return ids, duplicates

    @staticmethod
    def _where(query: EventQuery) -> tuple[str, list[Any]]:
        clauses: list[str] = []
        params: list[Any] = []

        def any_of(column: str, values: list[str]) -> None:
            clauses.append("(" + " OR ".join(f"{column} = ?" for _ in values) + ")")
            params.extend(values)

        if query.organization_id is not None:
            any_of("organization_id", [query.organization_id])
        if query.scope_project_id is not None:
            any_of("project_id", [query.scope_project_id])
        if query.project_ids:
            any_of("project_id", query.project_ids)
        if query.types:
            any_of("type", query.types)
        if query.levels:
            any_of("level", [level.lower() for level in query.levels])
        if query.sources:
            any_of("source", query.sources)
        if query.reference_ids:
            any_of("reference_id", query.reference_ids)
        if query.tags:
            clauses.append("(" + " OR ".join("instr(tags, ?) > 0" for _ in query.tags) + ")")
            params.extend(_dumps(tag) for tag in query.tags)
        for term in query.text:
            clauses.append("instr(search_text, ?) > 0")
            params.append(_clean(term.lower()))
        return (" WHERE " + " AND ".join(clauses)) if clauses else "", params

    def query_events(self, query: EventQuery) -> tuple[list[dict[str, Any]], int]:
        """A page of events matching ``query``, and how many match in all."""
        where, params = self._where(query)
        order = "ASC" if query.ascending else "DESC"
        with self._locked() as db:
            total = db.execute("SELECT COUNT(*) FROM events" + where, params).fetchone()[0]
            rows = db.execute(
                f"SELECT body FROM events{where} ORDER BY date_ts {order}, seq {order}"
                " LIMIT ? OFFSET ?",
                (*params, query.limit, query.offset),
            ).fetchall()
        return [json.loads(row[0]) for row in rows], int(total)

    def count_events(self, query: EventQuery) -> int:
        """How many events match ``query``."""
        where, params = self._where(query)
        with self._locked() as db:
            return int(db.execute("SELECT COUNT(*) FROM events" + where, params).fetchone()[0])

    def get_event(self, event_id: str) -> dict[str, Any] | None:
        """One stored event, or None."""
        with self._locked() as db:
            row = db.execute("SELECT body FROM events WHERE id = ?", (event_id,)).fetchone()
        return None if row is None else dict(json.loads(row[0]))

    def distinct_types(self, limit: int = 50) -> list[str]:
        """The event types seen, most frequent first."""
        with self._locked() as db:
            rows = db.execute(
                "SELECT type FROM events GROUP BY type ORDER BY COUNT(*) DESC, type LIMIT ?",
                (limit,),
            ).fetchall()
        return [str(row[0]) for row in rows]

    def add_user_description(
        self, project_id: str, reference_id: str, description: dict[str, Any]
    ) -> bool:
        """Attach ``@user_description`` to the project's event with that reference id."""
        with self._transaction() as db:
            row = db.execute(
                "SELECT id, body FROM events WHERE project_id = ? AND reference_id = ?"
                " ORDER BY seq DESC LIMIT 1",
                (project_id, reference_id),
            ).fetchone()
            if row is None:
                return False
            document = json.loads(row[1])
            data = document.get("data")
            if not isinstance(data, dict):
                data = document["data"] = {}
            data["@user_description"] = description
            db.execute("UPDATE events SET body = ? WHERE id = ?", (_dumps(document), row[0]))
            return True

    def clear_events(self) -> None:
        """Delete every event and forget every reference id."""
        with self._transaction() as db:
            db.execute("DELETE FROM events")
            db.execute("DELETE FROM reference_ids")
