"""The durable spool: unsent events kept on disk across an outage, a crash or a restart.

A spool is a directory. Each process writes only its own SQLite file (WAL journal), so
processes never contend for one lock, and holds an exclusive ``flock`` on a sidecar ``.lock``
file for as long as it lives. A file whose lock can be taken belongs to a process that has
ended: :meth:`Spool.claim_orphans` takes such files over (the lock makes the claim exclusive, so
two processes never replay the same file) and the engine sends their events, oldest first,
deleting rows only after the service answered 2xx. Events keep their ``reference_id``, so a
replay that repeats a batch creates no duplicates.

Only the engine's worker (or, at exit, the exiting thread) touches the spool: the caller's
thread never waits for the disk.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import sqlite3
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

if sys.platform != "win32":  # Windows: no flock, so no claims of other processes' files
    import fcntl

SUFFIX = ".spool.sqlite3"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    created REAL NOT NULL,
    is_error INTEGER NOT NULL,
    body BLOB NOT NULL
)
"""


#: Files a forked child inherited: kept referenced so they are never closed in the child.
_INHERITED: list[SpoolFile] = []


class Row(NamedTuple):
    """One spooled event: its row id, POSIX time, kind and JSON."""

    id: int
    created: float
    is_error: bool
    body: bytes


class SpoolFile:
    """One process's SQLite file of unsent events, with its ``flock`` held."""

    def __init__(self, path: Path, lock_fd: int | None, max_bytes: int = 100_000_000) -> None:
        self.path = path
        self._lock_fd = lock_fd
        self._db = sqlite3.connect(
            str(path), timeout=5.0, isolation_level=None, check_same_thread=False
        )
        self._guard = threading.Lock()
        #: Rows being sent right now: eviction leaves them alone (their outcome is pending).
        self.reserved: set[int] = set()
        with self._guard:
            self._db.execute("PRAGMA auto_vacuum=INCREMENTAL")
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            # Keep the journal a small part of the directory's bound.
            pages = max(8, min(1000, max_bytes // 4096 // 10))
            self._db.execute(f"PRAGMA wal_autocheckpoint={pages}")
            self._db.execute(f"PRAGMA journal_size_limit={pages * 4096}")
            self._db.execute(_SCHEMA)
            row = self._db.execute("SELECT COUNT(*), COALESCE(SUM(LENGTH(body)), 0) FROM events")
            self.count, self.bytes = (int(value) for value in row.fetchone())

    def __repr__(self) -> str:
        return f"<SpoolFile {self.path.name} rows={self.count}>"

    def append(self, rows: Iterable[tuple[float, bool, bytes]]) -> int:
        """Write events (``created``, ``is_error``, JSON) in one transaction; return how many."""
        items = [(created, int(is_error), body) for created, is_error, body in rows]
        if not items:
            return 0
        with self._guard:
            with self._db:
                self._db.executemany(
                    "INSERT INTO events (created, is_error, body) VALUES (?, ?, ?)", items
                )
            self.count += len(items)
            self.bytes += sum(len(item[2]) for item in items)
        return len(items)

    def oldest(self, limit: int, max_bytes: int) -> list[Row]:
        """Up to ``limit`` oldest rows whose JSON adds up to at most ``max_bytes`` (at least 1)."""
        with self._guard:
            cursor = self._db.execute(
                "SELECT id, created, is_error, body FROM events ORDER BY id LIMIT ?", (limit,)
            )
            rows: list[Row] = []
            size = 0
            for rowid, created, is_error, body in cursor:
                if rows and size + len(body) > max_bytes:
                    break
                rows.append(Row(int(rowid), float(created), bool(is_error), bytes(body)))
                size += len(body)
            return rows

    def delete(self, ids: Iterable[int]) -> int:
        """Delete rows (after the service took them, or when they are dropped)."""
        keys = list(ids)
        if not keys:
            return 0
        deleted = size = 0
        with self._guard:
            with self._db:
                for start in range(0, len(keys), 500):
                    chunk = keys[start : start + 500]
                    marks = ",".join("?" * len(chunk))
                    found = self._db.execute(
                        f"SELECT COUNT(*), COALESCE(SUM(LENGTH(body)), 0) FROM events "
                        f"WHERE id IN ({marks})",
                        chunk,
                    ).fetchone()
                    self._db.execute(f"DELETE FROM events WHERE id IN ({marks})", chunk)
                    deleted += int(found[0])
                    size += int(found[1])
            self.count -= deleted
            self.bytes -= size
            if self.count <= 0:
                self.count = self.bytes = 0
                self._db.execute("PRAGMA incremental_vacuum")
            return deleted

    def evict_oldest(self, target_bytes: int, *, errors: bool = True) -> tuple[int, int]:
        """Delete the oldest logs (then, if ``errors``, the oldest errors) until at most
        ``target_bytes`` of JSON remain. Returns ``(logs, errors)`` evicted."""
        evicted = [0, 0]
        for is_error in (0, 1) if errors else (0,):
            while self.bytes > target_bytes:
                with self._guard:
                    rows = self._db.execute(
                        "SELECT id, LENGTH(body) FROM events WHERE is_error = ? "
                        "ORDER BY id LIMIT 500",
                        (is_error,),
                    ).fetchall()
                if not rows:
                    break
                excess, chosen = self.bytes - target_bytes, []
                for rowid, size in rows:
                    if excess <= 0:
                        break
                    if rowid in self.reserved:
                        continue
                    chosen.append(rowid)
                    excess -= int(size)
                if not chosen:
                    break
                evicted[is_error] += self.delete(chosen)
        return evicted[0], evicted[1]

    def expire(self, before: float) -> int:
        """Delete rows created before ``before`` (POSIX time); return how many."""
        with self._guard:
            rows = self._db.execute("SELECT id FROM events WHERE created < ?", (before,)).fetchall()
        return self.delete(rowid for (rowid,) in rows)

    def compact(self) -> None:
        """Give freed pages back to the file system and empty the journal."""
        with self._guard:
            self._db.execute("PRAGMA incremental_vacuum")
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def disk_bytes(self) -> int:
        """Bytes this file takes on disk (database and journal)."""
        total = 0
        for name in (self.path, Path(f"{self.path}-wal")):
            with contextlib.suppress(OSError):
                total += name.stat().st_size
        return total

    def close(self, remove_if_empty: bool = True) -> None:
        """Close the database; delete the files when no row is left; release the lock."""
        with self._guard, contextlib.suppress(sqlite3.Error):
            self._db.close()
        if remove_if_empty and self.count == 0:
            for name in (self.path, Path(f"{self.path}-wal"), Path(f"{self.path}-shm")):
                with contextlib.suppress(OSError):
                    name.unlink()
            with contextlib.suppress(OSError):
                Path(f"{self.path}.lock").unlink()
        if self._lock_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._lock_fd)
            self._lock_fd = None

    def abandon(self) -> None:
        """Forget the file without closing it: a forked child inherited it from its parent,
        and closing the parent's database (or its lock) from the child is not safe."""
        _INHERITED.append(self)
        self._lock_fd = None


def _try_lock(path: Path) -> int | None:
    """An fd holding an exclusive ``flock`` on ``path``, or ``None`` when another has it."""
    if sys.platform == "win32":  # pragma: no cover
        return -1
    fd = os.open(str(path), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


class Spool:
    """A spool directory: this process's file, and the files of processes that ended."""

    def __init__(self, directory: str | os.PathLike[str], max_bytes: int = 100_000_000) -> None:
        self.directory = Path(directory)
        self.max_bytes = max_bytes
        self._own: SpoolFile | None = None
        self._pid = os.getpid()

    def __repr__(self) -> str:
        return f"<Spool {self.directory}>"

    def own(self) -> SpoolFile:
        """This process's file, created (and locked) on first use."""
        if self._pid != os.getpid():
            self.after_fork()
        if self._own is None:
            self.directory.mkdir(parents=True, exist_ok=True)
            host = "".join(ch for ch in socket.gethostname() if ch.isalnum())[:32] or "host"
            name = f"{host}-{os.getpid()}-{secrets.token_hex(4)}{SUFFIX}"
            path = self.directory / name
            fd = _try_lock(Path(f"{path}.lock"))
            self._own = SpoolFile(path, None if fd == -1 else fd, self.max_bytes)
        return self._own

    @property
    def has_own(self) -> bool:
        return self._own is not None and self._pid == os.getpid()

    @property
    def own_file(self) -> SpoolFile | None:
        """This process's file, if it was created."""
        return self._own if self._pid == os.getpid() else None

    def claim_orphans(self) -> list[SpoolFile]:
        """Take over the files of processes that ended (their lock is free); oldest first."""
        if sys.platform == "win32" or not self.directory.is_dir():
            return []
        own = self._own.path if self.has_own and self._own is not None else None
        claimed: list[SpoolFile] = []
        try:
            candidates = sorted(self.directory.glob(f"*{SUFFIX}"), key=lambda item: _mtime(item))
        except OSError:
            return []
        for path in candidates:
            if path == own:
                continue
            fd = _try_lock(Path(f"{path}.lock"))
            if fd is None:
                continue  # its process is alive (or another process claimed it)
            if not path.exists():  # claimed and emptied by another process meanwhile
                os.close(fd)
                continue
            try:
                claimed.append(SpoolFile(path, fd, self.max_bytes))
            except sqlite3.Error:
                os.close(fd)
        return claimed

    def disk_bytes(self) -> int:
        """Bytes all spool files in the directory take on disk."""
        total = 0
        with contextlib.suppress(OSError):
            for path in self.directory.iterdir():
                if SUFFIX in path.name:
                    with contextlib.suppress(OSError):
                        total += path.stat().st_size
        return total

    def after_fork(self) -> None:
        """In a forked child: leave the parent's file alone and start a file of our own."""
        if self._own is not None:
            self._own.abandon()
        self._own = None
        self._pid = os.getpid()

    def close(self) -> None:
        if self._own is not None and self._pid == os.getpid():
            self._own.close()
        self._own = None


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return time.time()
