"""The durable spool: unsent events kept on disk across an outage, a crash or a restart.

A spool is a directory (created ``0700``). Each process writes only its own SQLite file (WAL
journal, its index in memory: SQLite's exclusive locking mode, no ``-shm`` file to map), so
processes never contend for one lock, and holds an exclusive ``flock`` on a sidecar ``.lock``
file for as long as it lives. A file whose lock can be taken belongs to a process that
has ended: :meth:`Spool.claim_orphans` takes such files over (the lock makes the claim
exclusive, so two processes never replay the same file) and the engine sends their events,
oldest first, deleting rows only after the service answered 2xx. Events keep their
``reference_id``, so a replay that repeats a batch creates no duplicates.

Faults of the disk are part of the contract:

- **Permissions.** Databases, their ``-wal`` journals (and the ``-shm`` of a file of an
  earlier version) and the ``.lock`` files are readable by their owner only (``0600``),
  whatever the umask: events hold user data.
- **Full disk** (``SQLITE_FULL``, ``ENOSPC``, ``EDQUOT``, or ``EFBIG``, a file-size limit).
  :meth:`SpoolFile.append` writes in small transactions and stops at the first that does not
  fit, never raising: what was committed stays, and :attr:`SpoolFile.full` / ``full_error`` say
  why the rest was not (the engine counts those as ``spool_full`` and says so once). A delete
  needs free space too (SQLite's journal must grow), so one that does not fit is done
  *logically*: the rows are hidden from every read, count and eviction at once and deleted for
  real as soon as space allows (a file with no live row left is removed). Rows hidden and not
  yet deleted when the process ends are sent again by the next one; the service discards the
  repeated ``reference_id``. The flag clears at the next write that succeeds.
- **A file removed while open** (a cleanup of the directory): it is made again at its path,
  with its rows and their ids (:meth:`SpoolFile.keep_in_place`).
- **Corrupt files** (``file is not a database``, ``database disk image is malformed``, a
  truncated file). A file that can't be opened or read is moved into the ``quarantine/``
  subdirectory (its lock released), reported by :meth:`Spool.take_quarantined` (the engine says
  it once on stderr), and no longer counted by :meth:`Spool.disk_bytes`. A corrupt page met while
  reading rows (:meth:`SpoolFile.oldest`) quarantines the file too and raises
  :class:`SpoolCorrupt` (a :class:`sqlite3.DatabaseError`), which tells how many rows were lost;
  the other methods quarantine without raising. Either way :meth:`SpoolFile.take_lost` gives the
  rows lost, once, for the engine to settle as dropped.

Only the engine's worker (or, at exit, the exiting thread) touches the spool: the caller's
thread never waits for the disk.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from eventlog_handler.delivery._disk import (
    GONE_TABLE,
    INSERT,
    JOURNALS,
    NOT_GONE,
    SCHEMA,
    Row,
    chunks,
    configure,
    copy_rows,
    free_pages,
    is_corrupt,
    is_full,
    move_aside,
    owner_only,
    same_file,
    try_lock,
)

#: Seconds between attempts to delete logically deleted rows for real while the disk is full.
RETRY_DELETE_SECONDS = 1.0

#: Files a forked child inherited: kept referenced so they are never closed in the child.
_INHERITED: list[SpoolFile] = []


class SpoolCorrupt(sqlite3.DatabaseError):
    """A spool file turned out to be unreadable and was moved into the quarantine.

    ``path``: where it was; ``moved_to``: where it is now; ``rows``: how many rows it was
    counted to hold (they are lost to this process: settle them as dropped).
    """

    def __init__(self, path: Path, moved_to: Path, rows: int, reason: str) -> None:
        super().__init__(
            f"spool file {path.name} is unreadable ({reason}); moved to {moved_to} "
            f"with {rows} event(s)"
        )
        self.path = path
        self.moved_to = moved_to
        self.rows = rows


class SpoolFile:
    """One process's SQLite file of unsent events, with its ``flock`` held.

    ``on_quarantine`` is called with the new path when the file is moved into the quarantine.
    A new file that can't be created for lack of space is not an error: the object starts
    :attr:`full`, without a database, and :meth:`append` tries again.
    """

    def __init__(
        self,
        path: Path,
        lock_fd: int | None,
        max_bytes: int = 100_000_000,
        *,
        on_quarantine: Callable[[Path], None] | None = None,
    ) -> None:
        self.path = path
        self._lock_fd = lock_fd
        self._max_bytes = max_bytes
        self._on_quarantine = on_quarantine
        self._guard = threading.Lock()
        self._db: sqlite3.Connection | None = None
        #: Rows being sent right now: eviction leaves them alone (their outcome is pending).
        self.reserved: set[int] = set()
        #: Captured events the live rows stand for (a roll-up's row: its ``count``), and bytes of
        #: JSON (rows deleted logically are not counted).
        self.count = 0
        self.bytes = 0
        self._weight = "weight"  # the column (``"1"`` in a file of an earlier version)
        #: Whether the last write (or delete) found the disk full, and the error it met.
        self.full = False
        self.full_error = ""
        #: Where the file went if it was found corrupt, and the rows it held then.
        self.quarantined: Path | None = None
        self.lost = 0
        self._lost_untaken = 0
        self.closed = False
        self._gone = 0  # rows deleted logically, waiting to be deleted for real
        self._retry_at = 0.0
        self._inode: int | None = None  # when opened: another (or none) there, it was removed
        new = not path.exists()
        with self._guard:
            try:
                self._open()
            except (sqlite3.Error, OSError) as exc:
                if not (new and is_full(exc)):
                    raise
                self._remove_files()  # nothing was written: leave no partial file behind
                self._note_full(exc)

    def __repr__(self) -> str:
        return f"<SpoolFile {self.path.name} events={self.count}{' full' if self.full else ''}>"

    # -- opening ------------------------------------------------------------------------------

    def _open(self) -> None:
        """Open (creating it ``0600`` if needed) the database and read its counts."""
        if not self.path.exists():
            os.close(os.open(str(self.path), os.O_RDWR | os.O_CREAT, 0o600))
        new = os.stat(self.path).st_size == 0
        db = sqlite3.connect(str(self.path), 5.0, isolation_level=None, check_same_thread=False)
        try:
            configure(db, new, self._max_bytes)
            db.execute(SCHEMA)
            columns = {column[1] for column in db.execute("PRAGMA table_info(events)")}
            # A file of an earlier version has no weights: each row is one event.
            self._weight = "weight" if "weight" in columns else "1"
            row = db.execute(
                f"SELECT COALESCE(SUM({self._weight}), 0), COALESCE(SUM(LENGTH(body)), 0) "
                "FROM events"
            )
            count, size = row.fetchone()
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                db.close()
            raise
        for name in self._files():
            owner_only(name)
        self._db = db
        self.count, self.bytes = int(count), int(size)
        self._gone = 0
        with contextlib.suppress(OSError):
            self._inode = os.stat(self.path).st_ino

    def _reopen(self) -> bool:
        """Open the database again after it was removed (or could not be created)."""
        if self.closed or self.quarantined is not None:
            return False
        new = not self.path.exists()
        try:
            self._open()
        except (sqlite3.Error, OSError) as exc:
            if new:
                self._remove_files()
            if is_full(exc):
                self._note_full(exc)
                return False
            raise
        return True

    def keep_in_place(self) -> None:
        """The file (or its directory) removed while open: its rows, with their ids, go to a
        new file at its path, under a new lock (else they would be lost with this process,
        though the exit says they are kept). Where that can't be done, the open file serves."""
        with self._guard:
            old = self._db
            if old is None or self._inode is None:
                return
            try:
                if os.stat(self.path).st_ino == self._inode:
                    return
            except FileNotFoundError:
                pass
            except OSError:
                return
            lock_fd: int | None = None
            kept = (self.count, self.bytes, self._gone, self._inode)
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                lock = Path(f"{self.path}.lock")
                if self._lock_fd is not None and not same_file(self._lock_fd, lock):
                    lock_fd = try_lock(lock)  # the lock file went too: a new one, locked
                    if lock_fd is None:  # pragma: no cover - a new lock file nobody else knows
                        return
                self._remove_files()  # a file put in its place is not ours
                self._open()
                new = self._db
                assert new is not None
                self.count, self.bytes = copy_rows(old, new, NOT_GONE if kept[2] else "")
            except (sqlite3.Error, OSError):
                if self._db is not old:
                    with contextlib.suppress(sqlite3.Error):
                        self._db.close()  # type: ignore[union-attr]
                    self._remove_files()
                self._db = old
                self.count, self.bytes, self._gone, self._inode = kept
                if lock_fd is not None and lock_fd != -1:
                    os.close(lock_fd)
                return
            with contextlib.suppress(sqlite3.Error):
                old.close()
            if lock_fd is not None:
                self._release_lock()
                self._lock_fd = None if lock_fd == -1 else lock_fd

    # -- writing ------------------------------------------------------------------------------

    def append(
        self, rows: Iterable[tuple[float, bool, bytes] | tuple[float, bool, bytes, int]]
    ) -> int:
        """Write events (``created``, ``is_error``, JSON and, if not 1, the events each stands
        for), oldest first, in transactions of at most ``CHUNK_ROWS`` rows / ``CHUNK_BYTES``
        bytes (:mod:`._disk`); return how many were written.

        Stops at the first transaction that does not fit on the disk: the rows before it stay
        written, :attr:`full` is set with the error, and nothing is raised. Other errors are
        raised when no row was written (and end the writing quietly otherwise: the next call
        meets them again).
        """
        items = [
            (float(row[0]), int(bool(row[1])), row[2], row[3] if len(row) > 3 else 1)
            for row in rows
        ]
        if not items:
            return 0
        written = size = weighed = 0
        self.keep_in_place()
        with self._guard:
            if self._db is None and not self._reopen():
                return 0
            self._retry_gone()
            for chunk in chunks(items):
                db = self._db
                if db is None:
                    break
                try:
                    db.execute("BEGIN IMMEDIATE")
                    db.executemany(INSERT, chunk)
                    db.execute("COMMIT")
                except (sqlite3.Error, OSError) as exc:
                    self._rollback()
                    if is_full(exc):
                        self._note_full(exc)
                        break
                    if is_corrupt(exc):
                        self.count -= weighed  # this call's rows count as not written
                        self.bytes -= size
                        self._quarantine(exc)
                        return 0
                    if written:
                        break
                    raise
                chunk_size = sum(len(item[2]) for item in chunk)
                chunk_weight = sum(item[3] for item in chunk)
                written += len(chunk)
                size += chunk_size
                weighed += chunk_weight
                self.count += chunk_weight
                self.bytes += chunk_size
                self.full = False
                self.full_error = ""
        return written

    # -- reading ------------------------------------------------------------------------------

    def oldest(self, limit: int, max_bytes: int) -> list[Row]:
        """Up to ``limit`` oldest rows whose JSON adds up to at most ``max_bytes`` (at least 1).

        Raises :class:`SpoolCorrupt` (after moving the file into the quarantine) when a page
        can't be read.
        """
        with self._guard:
            db = self._db
            if db is None:
                return []
            where = f" WHERE 1{NOT_GONE}" if self._gone else ""
            rows: list[Row] = []
            size = 0
            try:
                cursor = db.execute(
                    f"SELECT id, created, is_error, body, {self._weight} FROM events{where} "
                    "ORDER BY id LIMIT ?",
                    (limit,),
                )
                try:
                    for rowid, created, error, body, weight in cursor:
                        if rows and size + len(body) > max_bytes:
                            break
                        rows.append(Row(int(rowid), created, bool(error), bytes(body), weight))
                        size += len(body)
                finally:
                    cursor.close()
            except sqlite3.Error as exc:
                if is_corrupt(exc):
                    raise self._quarantine(exc) from exc
                raise
            return rows

    def _select_ids(self, sql: str, parameters: tuple[object, ...]) -> list[tuple[int, int]]:
        """``(id, size)`` rows of a query (``sql`` ends where the gone-rows filter goes);
        empty, and the file quarantined, when a page can't be read."""
        with self._guard:
            db = self._db
            if db is None:
                return []
            filtered = sql.replace("{gone}", NOT_GONE if self._gone else "")
            try:
                return [(int(a), int(b)) for a, b in db.execute(filtered, parameters).fetchall()]
            except sqlite3.Error as exc:
                if is_corrupt(exc):
                    self._quarantine(exc)
                    return []
                raise

    # -- deleting -----------------------------------------------------------------------------

    def delete(self, ids: Iterable[int], events: int | None = None) -> int:
        """Delete rows (after the service took them, or when they are dropped); return how many
        events the live ones among them stood for (``events``: how many they stand for, where
        the caller knows it). On a full disk the rows are deleted logically (see the module)."""
        keys = list(dict.fromkeys(ids))
        if not keys:
            return 0
        with self._guard:
            db = self._db
            if db is None:
                return 0
            self._retry_gone()
            deleted = size = 0
            try:
                db.execute("BEGIN IMMEDIATE")
                for start in range(0, len(keys), 500):
                    chunk = keys[start : start + 500]
                    marks = ",".join("?" * len(chunk))
                    found = db.execute(
                        f"SELECT COALESCE(SUM({self._weight}), 0), COALESCE(SUM(LENGTH(body)), 0) "
                        f"FROM events WHERE id IN ({marks}){NOT_GONE if self._gone else ''}",
                        chunk,
                    ).fetchone()
                    db.execute(f"DELETE FROM events WHERE id IN ({marks})", chunk)
                    deleted += int(found[0])
                    size += int(found[1])
                db.execute("COMMIT")
            except (sqlite3.Error, OSError) as exc:
                self._rollback()
                if is_corrupt(exc):
                    settled = min(len(keys) if events is None else events, self.count)
                    self._quarantine(exc, settled)
                    return settled
                if not is_full(exc):
                    raise
                self._note_full(exc)
                try:
                    deleted, size = self._hide(keys)
                except sqlite3.Error as hidden:
                    if not is_corrupt(hidden):
                        raise
                    settled = min(len(keys) if events is None else events, self.count)
                    self._quarantine(hidden, settled)
                    return settled
            self.count -= deleted
            self.bytes -= size
            if self.count <= 0:
                self.count = self.bytes = 0
                if self._gone:
                    self._recycle()  # only hidden rows are left: give the space back
                else:
                    self._vacuum()
            return deleted

    def _hide(self, keys: list[int]) -> tuple[int, int]:
        """Delete rows logically (no disk needed); return how many live rows, and bytes."""
        assert self._db is not None
        self._db.execute(GONE_TABLE)
        hidden = size = 0
        for start in range(0, len(keys), 500):
            chunk = keys[start : start + 500]
            marks = ",".join("?" * len(chunk))
            found = self._db.execute(
                f"SELECT COALESCE(SUM({self._weight}), 0), COALESCE(SUM(LENGTH(body)), 0) "
                f"FROM events WHERE id IN ({marks}){NOT_GONE}",
                chunk,
            ).fetchone()
            self._db.execute(
                f"INSERT OR IGNORE INTO temp.gone SELECT id FROM events WHERE id IN ({marks})",
                chunk,
            )
            hidden += int(found[0])
            size += int(found[1])
        self._gone += hidden
        self._retry_at = time.monotonic() + RETRY_DELETE_SECONDS
        return hidden, size

    def _retry_gone(self) -> None:
        """Delete the logically deleted rows for real, if there are any and it is time."""
        db = self._db
        if not self._gone or db is None or time.monotonic() < self._retry_at:
            return
        try:
            db.execute("BEGIN IMMEDIATE")
            db.execute("DELETE FROM events WHERE id IN (SELECT id FROM temp.gone)")
            db.execute("COMMIT")
        except (sqlite3.Error, OSError) as exc:
            self._rollback()
            self._retry_at = time.monotonic() + RETRY_DELETE_SECONDS
            if is_corrupt(exc):
                self._quarantine(exc)
            return
        db.execute("DELETE FROM temp.gone")
        self._gone = 0
        self._vacuum()

    def _recycle(self) -> None:
        """Remove the database, which holds no live row (the next write creates a new one)."""
        if self._db is not None:
            with contextlib.suppress(sqlite3.Error):
                self._db.close()
        self._db = None
        self._gone = 0
        self._remove_files()

    def evict_oldest(
        self, target_bytes: int, *, errors: bool = True, counts: list[int] | None = None
    ) -> tuple[int, int]:
        """Delete the oldest logs (then, if ``errors``, the oldest errors) until at most
        ``target_bytes`` of JSON remain. Returns ``(logs, errors)`` evicted: added to
        ``counts`` when given, as each chunk is deleted, so that a caller knows what went
        before an error."""
        evicted = [0, 0] if counts is None else counts
        for is_error in (0, 1) if errors else (0,):
            while self.bytes > target_bytes:
                rows = self._select_ids(
                    "SELECT id, LENGTH(body) FROM events WHERE is_error = ?{gone} "
                    "ORDER BY id LIMIT 500",
                    (is_error,),
                )
                excess, chosen = self.bytes - target_bytes, []
                for rowid, size in rows:
                    if excess <= 0:
                        break
                    if rowid in self.reserved:
                        continue
                    chosen.append(rowid)
                    excess -= size
                if not chosen:
                    break
                deleted = self.delete(chosen)
                evicted[is_error] += deleted
                if not deleted:
                    break
        return evicted[0], evicted[1]

    def expire(self, before: float) -> int:
        """Delete rows created before ``before`` (POSIX time); return how many."""
        rows = self._select_ids("SELECT id, 0 FROM events WHERE created < ?{gone}", (before,))
        return self.delete(rowid for rowid, _ in rows)

    def compact(self) -> None:
        """Give freed pages back to the file system and empty the journal (when the disk has
        room for it: never raises for a full disk)."""
        with self._guard:
            db = self._db
            if db is None:
                return
            self._retry_gone()
            try:
                free_pages(db)
                db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            except (sqlite3.Error, OSError) as exc:
                if is_full(exc):
                    self._note_full(exc)
                elif is_corrupt(exc):
                    self._quarantine(exc)
                else:
                    raise

    def _vacuum(self) -> None:
        if self._db is not None:
            with contextlib.suppress(sqlite3.Error, OSError):
                free_pages(self._db)

    # -- state --------------------------------------------------------------------------------

    def take_lost(self) -> int:
        """Rows lost with the file when it was quarantined, not yet taken by this method: the
        one place to account them from (settle them as dropped), whichever call found the
        damage (``SpoolCorrupt.rows`` tells the same rows)."""
        with self._guard:
            lost, self._lost_untaken = self._lost_untaken, 0
            return lost

    def disk_bytes(self) -> int:
        """Bytes this file takes on disk (database and journal)."""
        total = 0
        for name in (self.path, Path(f"{self.path}-wal")):
            with contextlib.suppress(OSError):
                total += name.stat().st_size
        return total

    def close(self, remove_if_empty: bool = True) -> None:
        """Close the database; delete the files when no row is left; release the lock."""
        with self._guard:
            if self._db is not None:
                with contextlib.suppress(sqlite3.Error):
                    self._db.close()
                self._db = None
            if remove_if_empty and self.count == 0 and self.quarantined is None:
                self._remove_files()
                with contextlib.suppress(OSError):
                    Path(f"{self.path}.lock").unlink()
            self._release_lock()
            self.closed = True

    def abandon(self) -> None:
        """Forget the file without closing it: a forked child inherited it from its parent,
        and closing the parent's database (or its lock) from the child is not safe."""
        _INHERITED.append(self)
        self._lock_fd = None
        self.closed = True

    # -- faults -------------------------------------------------------------------------------

    def _note_full(self, exc: BaseException) -> None:
        self.full = True
        self.full_error = f"{type(exc).__name__}: {exc}"

    def _rollback(self) -> None:
        if self._db is not None and self._db.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                self._db.execute("ROLLBACK")

    def _quarantine(self, exc: BaseException, settled: int = 0) -> SpoolCorrupt:
        """Move the file into the quarantine; its rows (but ``settled``) are lost."""
        if self._db is not None:
            with contextlib.suppress(sqlite3.Error):
                self._db.close()
            self._db = None
        moved = move_aside(self.path)
        with contextlib.suppress(OSError):
            Path(f"{self.path}.lock").unlink()
        self._release_lock()
        self.lost = max(0, self.count - settled)
        self._lost_untaken += self.lost
        self.count = self.bytes = self._gone = 0
        self.quarantined = moved if moved is not None else self.path
        if self._on_quarantine is not None:
            self._on_quarantine(self.quarantined)
        return SpoolCorrupt(self.path, self.quarantined, self.lost, str(exc))

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._lock_fd)
            self._lock_fd = None

    def _files(self) -> tuple[Path, ...]:
        return (self.path, *(Path(f"{self.path}{journal}") for journal in JOURNALS))

    def _remove_files(self) -> None:
        for name in self._files():
            with contextlib.suppress(OSError):
                name.unlink()
