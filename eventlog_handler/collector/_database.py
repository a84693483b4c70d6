"""The collector's SQLite database: the connection, its lock, the schema and file permissions.

One connection, shared by the request threads under a lock. A file database runs in WAL mode
(another process can read it while the collector writes) and is created readable by its owner
only (``0600``: it holds tokens, a password and whatever the events carry); SQLite gives its
``-wal`` and ``-shm`` files the database file's permissions, and an existing database is
tightened to ``0600`` when opened. ``path=None`` keeps everything in memory.

Transactions are explicit (``BEGIN IMMEDIATE`` ... ``COMMIT``), so a write takes the database's
write lock before it reads what it is about to change. The events' optional columns hold ``''``
(or 0) rather than NULL: binding ``None`` costs Python's sqlite3 module far more than a string
or an integer, and events are written by the hundred thousand.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["SCHEMA", "SCHEMA_VERSION", "Database", "StorageClosed", "secure_file"]

SCHEMA_VERSION = 3

SCHEMA = """
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
    updated_utc TEXT NOT NULL,
    user_id TEXT
);
CREATE TABLE IF NOT EXISTS users (
    id TEXT PRIMARY KEY,
    organization_id TEXT NOT NULL REFERENCES organizations(id),
    email TEXT NOT NULL UNIQUE COLLATE NOCASE,
    full_name TEXT NOT NULL,
    password_hash TEXT NOT NULL,
    created_utc TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS stacks (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    organization_id TEXT NOT NULL,
    project_id TEXT NOT NULL,
    signature_hash TEXT NOT NULL,
    signature_info TEXT NOT NULL,
    type TEXT NOT NULL,
    title TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'open',
    date_fixed_ts REAL,
    first_ts REAL NOT NULL,
    last_ts REAL NOT NULL,
    total INTEGER NOT NULL DEFAULT 0,
    events INTEGER NOT NULL DEFAULT 0,
    users INTEGER NOT NULL DEFAULT 0,
    created_utc TEXT NOT NULL,
    updated_utc TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS stacks_by_last ON stacks (last_ts, seq);
CREATE INDEX IF NOT EXISTS stacks_by_project ON stacks (project_id, last_ts);
CREATE TABLE IF NOT EXISTS stack_users (
    stack_seq INTEGER NOT NULL,
    identity TEXT NOT NULL,
    PRIMARY KEY (stack_seq, identity)
) WITHOUT ROWID;
-- A request body as sent; user_agent (schema 3) is the request's User-Agent ('' when it had
-- none, NULL when the events did not come by HTTP or were received by an earlier version).
CREATE TABLE IF NOT EXISTS batches (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    project_id TEXT NOT NULL,
    received_ts REAL NOT NULL,
    encoding TEXT NOT NULL,
    body BLOB NOT NULL,
    note TEXT,
    user_agent TEXT
);
-- Request bodies acknowledged (202) whose events are not stored yet: stored right after the
-- answer, or, after a crash, when the collector starts again.
CREATE TABLE IF NOT EXISTS unstored (
    batch INTEGER PRIMARY KEY,
    organization_id TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    batch INTEGER NOT NULL,
    idx INTEGER NOT NULL,
    project_seq INTEGER NOT NULL,
    stack_seq INTEGER NOT NULL,
    date_ts REAL NOT NULL,
    type TEXT NOT NULL,
    level TEXT NOT NULL DEFAULT '',
    source TEXT NOT NULL DEFAULT '',
    reference_id TEXT NOT NULL DEFAULT '',
    user_identity TEXT NOT NULL DEFAULT '',
    occurrences INTEGER NOT NULL DEFAULT 1,
    first INTEGER NOT NULL DEFAULT 0,
    tags TEXT NOT NULL DEFAULT '',
    search_text TEXT NOT NULL,
    body TEXT
);
CREATE INDEX IF NOT EXISTS events_by_date ON events (date_ts, seq);
CREATE INDEX IF NOT EXISTS events_by_stack ON events (stack_seq, date_ts, seq);
CREATE INDEX IF NOT EXISTS events_by_reference ON events (reference_id)
    WHERE reference_id <> '';
-- Manual sessions (schema 3): the session start event's sequence number, the last activity
-- (a heartbeat or an event of the session), the heartbeats received and the end (NULL while
-- the session is open). See the collector's sessions module.
CREATE TABLE IF NOT EXISTS sessions (
    project_seq INTEGER NOT NULL,
    session_id TEXT NOT NULL,
    identity TEXT NOT NULL DEFAULT '',
    start_seq INTEGER NOT NULL,
    start_ts REAL NOT NULL,
    last_ts REAL NOT NULL,
    heartbeats INTEGER NOT NULL DEFAULT 0,
    last_heartbeat_ts REAL,
    end_ts REAL,
    PRIMARY KEY (project_seq, session_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS sessions_by_start ON sessions (start_seq);
CREATE INDEX IF NOT EXISTS sessions_by_identity ON sessions (project_seq, identity)
    WHERE identity <> '';
-- Heartbeats that came before their session's start event (kept 2 hours, as the service keeps
-- a heartbeat): the session takes them when it starts.
CREATE TABLE IF NOT EXISTS early_heartbeats (
    project_seq INTEGER NOT NULL,
    identifier TEXT NOT NULL,
    ts REAL NOT NULL,
    close INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS early_heartbeats_by_id ON early_heartbeats (project_seq, identifier);
CREATE INDEX IF NOT EXISTS early_heartbeats_by_ts ON early_heartbeats (ts);
"""


class StorageClosed(RuntimeError):
    """The store was used after it was closed."""


def secure_file(path: Path) -> None:
    """Create ``path`` with mode ``0600`` if it is missing; tighten it to ``0600`` if it exists
    with more permissions and belongs to this user. Never follows a symbolic link it creates."""
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        descriptor = os.open(str(path), flags, 0o600)
    except OSError:
        return  # sqlite3 reports what is wrong with the path when it opens it
    try:
        info = os.fstat(descriptor)
        if (
            stat.S_ISREG(info.st_mode)
            and stat.S_IMODE(info.st_mode) & 0o077
            and info.st_uid == getattr(os, "getuid", lambda: info.st_uid)()
        ):
            with contextlib.suppress(OSError):
                os.fchmod(descriptor, 0o600)
    finally:
        os.close(descriptor)


class Database:
    """The connection and the transaction helpers; :class:`~._storage.Storage` builds on it."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = None if path is None else Path(path)
        if self.path is not None:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            secure_file(self.path)
            for suffix in ("-wal", "-shm"):
                sidecar = self.path.with_name(self.path.name + suffix)
                if sidecar.exists():
                    secure_file(sidecar)
        target = ":memory:" if self.path is None else str(self.path)
        conn = sqlite3.connect(target, check_same_thread=False, timeout=10.0, isolation_level=None)
        self._conn: sqlite3.Connection | None = conn
        self._finalizer = weakref.finalize(self, conn.close)
        self._lock = threading.RLock()
        if self.path is not None:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA wal_autocheckpoint=4000")
        conn.execute("PRAGMA cache_size=-32000")

    @contextmanager
    def _locked(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            if self._conn is None:
                raise StorageClosed("the collector's store is closed")
            yield self._conn

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """``BEGIN IMMEDIATE`` ... ``COMMIT`` (``ROLLBACK`` on an exception), under the lock."""
        with self._locked() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    def schema_version(self) -> int | None:
        """The schema version recorded in ``meta``; None for a new database."""
        with self._locked() as db:
            exists = db.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'"
            ).fetchone()
            if exists is None:
                return None
            row = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        return None if row is None else int(row[0])

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
