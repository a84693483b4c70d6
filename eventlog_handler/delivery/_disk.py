"""A spool file's table, and what the disk says, for the spool: which errors mean "full" and
which "corrupt", moving a corrupt file into the quarantine, keeping files readable by their
owner only, the ``flock`` that makes a file one process's, writes in chunks that a full disk
cuts short, copying a file's rows into a new one, and giving its free pages back.

Each row is one event's JSON, and the captured events it stands for (``weight``: a roll-up's
``count``); a file of an earlier version has no ``weight`` column, and each of its rows is one
event."""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import sqlite3
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

if sys.platform != "win32":  # Windows: no flock, so no claims of other processes' files
    import fcntl

SUFFIX = ".spool.sqlite3"
#: The subdirectory corrupt files are moved into.
QUARANTINE = "quarantine"
#: Quarantined databases kept at most; the oldest are deleted past it.
QUARANTINE_KEEP = 20
JOURNALS = ("-wal", "-shm")
#: Rows and bytes of JSON per write transaction at most: a full disk loses at most this much
#: of one write, and keeps everything committed before.
CHUNK_ROWS = 64
CHUNK_BYTES = 64 * 1024
#: Free pages one compaction gives back at most (128 MiB: about a third of a second), and per
#: transaction.
VACUUM_PAGES = 32_768
VACUUM_CHUNK = 256

# -- a spool file's table -------------------------------------------------------------------

SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    created REAL NOT NULL,
    is_error INTEGER NOT NULL,
    body BLOB NOT NULL,
    weight INTEGER NOT NULL DEFAULT 1
)
"""
INSERT = "INSERT INTO events (created, is_error, body, weight) VALUES (?, ?, ?, ?)"
#: Rows deleted logically (the disk was full): a table in memory, which needs no disk.
GONE_TABLE = "CREATE TEMP TABLE IF NOT EXISTS gone (id INTEGER PRIMARY KEY)"
NOT_GONE = " AND id NOT IN (SELECT id FROM temp.gone)"


class Row(NamedTuple):
    """One spooled event: its row id, POSIX time, kind, JSON and the captured events it stands
    for (a roll-up's: more than 1)."""

    id: int
    created: float
    is_error: bool
    body: bytes
    weight: int = 1


# SQLite's primary result codes (the low byte of an extended code).
_SQLITE_IOERR = 10
_SQLITE_CORRUPT = 11
_SQLITE_FULL = 13
_SQLITE_NOTADB = 26
_FULL_ERRNOS = frozenset(
    code for code in (errno.ENOSPC, getattr(errno, "EDQUOT", None), errno.EFBIG) if code
)


def move_aside(path: Path) -> Path | None:
    """Move a spool database (and its journals) into the spool's ``quarantine/`` directory, or
    rename it ``<name>.corrupt`` where that fails; ``None`` when neither is possible."""
    folder = path.parent / QUARANTINE
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        target = folder / path.name
        if target.exists():
            target = folder / f"{path.name[: -len(SUFFIX)]}-{secrets.token_hex(4)}{SUFFIX}"
        os.replace(path, target)
    except OSError:
        target = path.with_name(f"{path.name}.corrupt")
        try:
            os.replace(path, target)
        except OSError:
            return None
    owner_only(target)
    for journal in JOURNALS:
        with contextlib.suppress(OSError):
            os.replace(f"{path}{journal}", f"{target}{journal}")
            owner_only(Path(f"{target}{journal}"))
    if target.parent == folder:
        _trim_quarantine(folder)
    return target


def _trim_quarantine(folder: Path) -> None:
    """Keep the newest :data:`QUARANTINE_KEEP` databases of the quarantine."""
    try:
        kept = sorted(folder.glob(f"*{SUFFIX}"), key=mtime, reverse=True)
    except OSError:
        return
    for old in kept[QUARANTINE_KEEP:]:
        for name in (old, *(Path(f"{old}{journal}") for journal in JOURNALS)):
            with contextlib.suppress(OSError):
                name.unlink()


def _code(exc: BaseException) -> int | None:
    """SQLite's primary result code of an error (Python 3.11+), else ``None``."""
    code = getattr(exc, "sqlite_errorcode", None)
    return code & 0xFF if isinstance(code, int) else None


def is_full(exc: BaseException) -> bool:
    """Whether an error means the disk can't take the write: full, over quota, past the file
    size limit (SQLite reports ``EFBIG`` as an I/O error on write)."""
    if isinstance(exc, OSError):
        return exc.errno in _FULL_ERRNOS
    code = _code(exc)
    if code is not None:
        return code in (_SQLITE_FULL, _SQLITE_IOERR)
    text = str(exc).lower()
    return "disk is full" in text or "disk i/o error" in text


def is_corrupt(exc: BaseException) -> bool:
    """Whether an error means the file is not a readable SQLite database."""
    if not isinstance(exc, sqlite3.DatabaseError):
        return False
    code = _code(exc)
    if code is not None:
        return code in (_SQLITE_CORRUPT, _SQLITE_NOTADB)
    text = str(exc).lower()
    return "malformed" in text or "not a database" in text


def owner_only(path: Path) -> None:
    """Make a file of ours readable by its owner only (``0600``)."""
    if sys.platform == "win32":  # pragma: no cover
        return
    with contextlib.suppress(OSError):
        status = path.stat()
        if status.st_mode & 0o077 and status.st_uid == os.getuid():
            os.chmod(path, 0o600)


def mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return time.time()


def try_lock(path: Path) -> int | None:
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


def copy_rows(old: sqlite3.Connection, new: sqlite3.Connection, not_gone: str) -> tuple[int, int]:
    """Copy the spool rows of this process's ``old`` file (but those ``not_gone`` filters out)
    into ``new``, with their ids; return the events ``new``'s rows stand for, and bytes."""
    rows = old.execute(f"SELECT id, created, is_error, body, weight FROM events WHERE 1{not_gone}")
    while batch := rows.fetchmany(CHUNK_ROWS):
        new.execute("BEGIN IMMEDIATE")
        new.executemany(
            "INSERT INTO events (id, created, is_error, body, weight) VALUES (?, ?, ?, ?, ?)",
            batch,
        )
        new.execute("COMMIT")
    count, size = new.execute(
        "SELECT COALESCE(SUM(weight), 0), COALESCE(SUM(LENGTH(body)), 0) FROM events"
    ).fetchone()
    return int(count), int(size)


#: The page size of a new spool file, in bytes.
PAGE_SIZE = 8_192


def configure(db: sqlite3.Connection, new: bool, max_bytes: int) -> None:
    """Set up a spool file's connection (``new``: an empty file, made now) for a directory
    bound of ``max_bytes``."""
    # Before WAL is first used: its index is then kept in this process's memory, not in a
    # memory map of a ``-shm`` file, which a full disk can't give blocks to (SIGBUS, or an I/O
    # error, at every start that opens a file to send it). The file is this process's alone
    # already (its ``flock``).
    db.execute("PRAGMA locking_mode=EXCLUSIVE")
    # A deleted row's pages are not overwritten with zeros (where SQLite is built to): each
    # eviction wrote every page it freed into the journal, which took the directory past its
    # bound for a moment. The freed pages are given back to the file system (incremental
    # vacuum) soon after.
    db.execute("PRAGMA secure_delete=OFF")
    if new:  # only then: it writes, and a file must open (to be sent) on a full disk
        # Pages of 8 KiB: a row that fits in a page stays in it whole, and rows of 2-4 KB took
        # a 4 KiB page each (the bound held a third of its size in events); with pages of
        # 16 KiB rows of 8-16 KB did the same. Larger rows spill into full overflow pages.
        db.execute(f"PRAGMA page_size={PAGE_SIZE}")
        db.execute("PRAGMA auto_vacuum=INCREMENTAL")
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("PRAGMA temp_store=MEMORY")
    # Keep the journal a small part of the directory's bound.
    page_size = int(db.execute("PRAGMA page_size").fetchone()[0])
    pages = max(8, min(4_000_000 // page_size, max_bytes // page_size // 10))
    db.execute(f"PRAGMA wal_autocheckpoint={pages}")
    db.execute(f"PRAGMA journal_size_limit={pages * page_size}")


def chunks(
    items: list[tuple[float, int, bytes, int]],
) -> Iterator[list[tuple[float, int, bytes, int]]]:
    """``items`` in runs of at most :data:`CHUNK_ROWS` rows and :data:`CHUNK_BYTES` bytes."""
    chunk: list[tuple[float, int, bytes, int]] = []
    size = 0
    for item in items:
        if chunk and (len(chunk) >= CHUNK_ROWS or size + len(item[2]) > CHUNK_BYTES):
            yield chunk
            chunk, size = [], 0
        chunk.append(item)
        size += len(item[2])
    if chunk:
        yield chunk


def free_pages(db: sqlite3.Connection) -> None:
    """Give a file's free pages back to the file system, up to :data:`VACUUM_PAGES`. Python's
    sqlite3 runs one step of ``PRAGMA incremental_vacuum`` per ``execute``, which frees one
    page whatever the pragma's argument: so it is repeated while the free pages decrease, in
    transactions of :data:`VACUUM_CHUNK` pages (the journal stays small)."""
    free, left, chunk = db.execute("PRAGMA freelist_count").fetchone()[0], VACUUM_PAGES, 1
    # Pages a transaction moves: at most VACUUM_CHUNK, and no more than the journal's limit
    # holds (it is the bound's tenth: 256 pages of 16 KiB grew it to 4 MB past a small bound).
    limit = db.execute("PRAGMA journal_size_limit").fetchone()[0]
    page_size = db.execute("PRAGMA page_size").fetchone()[0]
    most = VACUUM_CHUNK if limit <= 0 else max(8, min(VACUUM_CHUNK, limit // page_size))
    while free and left > 0:
        steps = min(free, left, chunk)
        db.execute("BEGIN IMMEDIATE")
        try:
            for _ in range(steps):
                db.execute("PRAGMA incremental_vacuum")
            db.execute("COMMIT")
        except BaseException:  # a full disk, say: the pages freed before stay freed
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
            raise
        left -= steps
        before, free = free, db.execute("PRAGMA freelist_count").fetchone()[0]
        if free >= before:  # a file without incremental vacuum (an earlier version's)
            return
        chunk = most


def same_file(fd: int, path: Path) -> bool:
    """Whether the open ``fd`` is the file at ``path``."""
    try:
        held, there = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (held.st_dev, held.st_ino) == (there.st_dev, there.st_ino)


def salvage(
    db: sqlite3.Connection, write: Callable[[list[tuple[float, bool, bytes, int]]], bool]
) -> tuple[int | None, bool]:
    """Read the rows of a damaged spool file that can still be read, oldest first, and hand
    them to ``write`` in chunks (it returns ``False`` to stop: no room for them). A range of
    ids that can't be read whole is halved until each row that can be read is, and each id
    that can't is known (up to the file's highest id). Returns an estimate of the rows lost
    (the ids that can't be read past the oldest row read: rows sent and deleted before it
    don't count; ``None`` when no row could be read), and whether every readable row was
    written."""
    columns = {column[1] for column in db.execute("PRAGMA table_info(events)")}
    weight = "weight" if "weight" in columns else "1"
    query = (
        f"SELECT id, created, is_error, body, {weight} FROM events "
        "WHERE id >= ? AND id <= ? ORDER BY id"
    )
    upper: int | None = None
    for highest in ("SELECT seq FROM sqlite_sequence WHERE name = 'events'", _MAX_ID):
        with contextlib.suppress(sqlite3.DatabaseError):
            found = db.execute(highest).fetchone()
            if found and found[0] is not None:
                upper = int(found[0])
                break
    if upper is None:
        return None, True
    chunk: list[tuple[float, bool, bytes, int]] = []
    unreadable: list[int] = []
    oldest: int | None = None
    waiting = [(0, upper)]  # id ranges still to read; the lowest last (taken first)
    while waiting:
        low, high = waiting.pop()
        try:
            rows = db.execute(query, (low, high))
            for rowid, created, error, body, count in rows:
                chunk.append((float(created), bool(error), bytes(body), int(count)))
                low = int(rowid) + 1
                oldest = int(rowid) if oldest is None else oldest
                if len(chunk) >= CHUNK_ROWS:
                    if not write(chunk):
                        return _lost(unreadable, oldest), False
                    chunk = []
            # A page overwritten with bytes that read as a page can end the range early
            # without an error: rows left in it are looked for by halves, as after an error.
            if low > high or _none_from(db, low, high):
                continue
        except sqlite3.DatabaseError as exc:
            if is_full(exc) and not is_corrupt(exc):
                raise
        # From ``low`` on, a row can't be read (sqlite3 reads a row ahead: the one before a
        # bad one fails too, so the range starts again from the last row not taken).
        if low >= high:
            found = _one_row(db, query, low, chunk) if low == high else None
            if found is False:
                unreadable.append(low)
            elif found and oldest is None:
                oldest = low
            continue
        middle = (low + high) // 2
        waiting += [(middle + 1, high), (low, middle)]
    return _lost(unreadable, oldest), not chunk or write(chunk)


def _none_from(db: sqlite3.Connection, low: int, high: int) -> bool:
    """Whether no row has an id from ``low`` to ``high`` (``False`` when that can't be read)."""
    try:
        found = db.execute(
            "SELECT MAX(id) FROM events WHERE id >= ? AND id <= ?", (low, high)
        ).fetchone()
    except sqlite3.DatabaseError as exc:
        if is_full(exc) and not is_corrupt(exc):
            raise
        return False
    return found is None or found[0] is None


def _one_row(
    db: sqlite3.Connection, query: str, rowid: int, chunk: list[tuple[float, bool, bytes, int]]
) -> bool | None:
    """Read the row ``rowid`` into ``chunk`` (``True``); ``None``: there is none (sent and
    deleted); ``False``: it can't be read. By its id alone: a range, even of one id, steps on
    to the next row, which may be the bad one."""
    try:
        found = db.execute(query.replace("id >= ? AND id <= ?", "id = ?"), (rowid,)).fetchone()
    except sqlite3.DatabaseError as exc:
        if is_full(exc) and not is_corrupt(exc):
            raise
        return False
    if found is None:
        return None
    _, created, error, body, count = found
    chunk.append((float(created), bool(error), bytes(body), int(count)))
    return True


def _lost(unreadable: list[int], oldest: int | None) -> int | None:
    """The ids that could not be read, or ``None`` when that says nothing: no row was read,
    or some came before the oldest row read, among rows sent and deleted long ago."""
    if oldest is None or any(rowid < oldest for rowid in unreadable):
        return None
    return len(unreadable)


_MAX_ID = "SELECT MAX(id) FROM events"


def rows_waiting(directory: Path) -> tuple[int, bool]:
    """How many events the spool files in ``directory`` hold, read without writing anything
    (a read-only file system): 0 when none can be read; and whether there may be more (a
    process that was killed left some in a journal, which a read-only file can't take in)."""
    total, more = 0, False
    for path in directory.glob(f"*{SUFFIX}"):
        with contextlib.suppress(sqlite3.Error, OSError, ValueError):
            if not path.is_file():  # a FIFO would block the open for ever
                continue
            journal = Path(f"{path}-wal")
            more = more or (journal.is_file() and journal.stat().st_size > 0)
            uri = f"{path.as_uri()}?mode=ro&immutable=1"
            db = sqlite3.connect(uri, 5.0, uri=True, check_same_thread=False)
            try:
                total += int(db.execute("SELECT COUNT(*) FROM events").fetchone()[0])
            finally:
                db.close()
    return total, more
