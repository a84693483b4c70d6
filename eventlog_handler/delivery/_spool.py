"""A spool directory: this process's file and the files of processes that ended.

The files themselves (:class:`~._spool_file.SpoolFile`: writing, reading, deleting, the faults of
the disk) are in :mod:`._spool_file`; here is the directory: whose file is whose (an exclusive
``flock`` per file), claiming the files of ended processes, the quarantine, and the bytes the
directory takes.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
import socket
import sqlite3
import sys
import threading
from pathlib import Path

from eventlog_handler.delivery._disk import (
    JOURNALS,
    QUARANTINE,
    QUARANTINE_KEEP,
    SUFFIX,
    Row,
    is_corrupt,
    is_full,
    move_aside,
    mtime,
    rows_waiting,
    salvage,
    try_lock,
)
from eventlog_handler.delivery._spool_file import SpoolCorrupt, SpoolFile

__all__ = [
    "QUARANTINE",
    "QUARANTINE_KEEP",
    "SUFFIX",
    "Row",
    "Spool",
    "SpoolCorrupt",
    "SpoolFile",
    "move_aside",
]


def target_tag(api_key: str) -> str:
    """A short tag of a project's key for spool file names (a hash: the key is a secret). The
    key, not the server: a program whose server moved sends its spooled events to the new one."""
    return hashlib.sha256(api_key.encode()).hexdigest()[:16]


#: The target tag in a spool file's name.
_TAG = re.compile(r"-t([0-9a-f]{16})" + re.escape(SUFFIX) + "$")


class Spool:
    """A spool directory: this process's file, and the files of processes that ended."""

    def __init__(
        self, directory: str | os.PathLike[str], max_bytes: int = 100_000_000, target: str = ""
    ) -> None:
        self.directory = Path(directory)
        self.max_bytes = max_bytes
        #: Which project (key) this process's events are for (:func:`target_tag`), in its
        #: file's name: a process takes over only the files of its own project (and files
        #: named before tags were), so that two programs sharing a directory never send each
        #: other's events to their own project.
        self.target = target
        self._own: SpoolFile | None = None
        self._pid = os.getpid()
        self._quarantined: list[Path] = []
        self._damage: dict[Path, tuple[int, int | None]] = {}
        self._unmovable: set[Path] = set()
        #: Files of ended processes that could not be opened (not corrupt: a full disk, say),
        #: with why; :meth:`take_unopened` hands each out once.
        self._unopened: dict[Path, str] = {}
        self._unopened_new: list[tuple[Path, str]] = []
        #: Files let go after their sent rows could not be deleted: not claimed again here
        #: (they would be sent again at every scan).
        self._let_go: set[Path] = set()
        self._notes = threading.Lock()

    def __repr__(self) -> str:
        return f"<Spool {self.directory}>"

    def check(self) -> str | None:
        """Make sure the directory can hold the spool: created ``0700`` if missing, tightened to
        ``0700`` if it is readable by others, and writable. Returns why it can't be used, or
        ``None`` when it can."""
        directory = self.directory
        try:
            if directory.exists() and not directory.is_dir():
                return "a file is in its place, not a directory"
            directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            if not directory.is_dir():
                return "it is not a directory"
            mode = directory.stat().st_mode & 0o777
            if mode & 0o077:  # the group's and others' rights taken away, the owner's kept
                os.chmod(directory, mode & 0o700)
            probe = directory / f".probe-{os.getpid()}-{secrets.token_hex(4)}"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            why = exc.strerror or type(exc).__name__
            waiting, more = rows_waiting(directory) if directory.is_dir() else (0, False)
            if waiting or more:  # kept by earlier runs: they wait until it can be written
                count = f"{waiting} or more" if waiting and more else str(waiting or "some")
                why += f"; {count} event(s) of earlier runs wait in it, unsent until then"
            return why
        except ValueError as exc:  # a path the system can't take (a NUL in it)
            return str(exc)
        return None

    def own(self) -> SpoolFile:
        """This process's file, created (and locked) on first use, and again after it was
        quarantined. On a full disk it is returned :attr:`~SpoolFile.full`, without a
        database (its :meth:`~SpoolFile.append` tries again); raises :class:`OSError` when the
        directory or the lock can't be made, and :class:`sqlite3.Error` for a database that
        can't be created for another reason than space."""
        if self._pid != os.getpid():
            self.after_fork()
        own = self._own
        if own is None or own.quarantined is not None or own.closed:
            self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            host = "".join(ch for ch in socket.gethostname() if ch.isalnum())[:32] or "host"
            tag = f"-t{self.target}" if self.target else ""
            name = f"{host}-{os.getpid()}-{secrets.token_hex(4)}{tag}{SUFFIX}"
            path = self.directory / name
            lock = Path(f"{path}.lock")
            fd = try_lock(lock)
            try:
                own = SpoolFile(
                    path, None if fd == -1 else fd, self.max_bytes, on_quarantine=self._note
                )
            except BaseException:
                if fd is not None and fd != -1:
                    os.close(fd)
                with contextlib.suppress(OSError):
                    lock.unlink()
                raise
            self._own = own
        return own

    @property
    def has_own(self) -> bool:
        return self._own is not None and self._pid == os.getpid()

    @property
    def own_file(self) -> SpoolFile | None:
        """This process's file, if it was created."""
        return self._own if self._pid == os.getpid() else None

    def claim_orphans(self) -> list[SpoolFile]:
        """Take over the files of processes that ended (their lock is free); oldest first.

        A file that can't be opened because it is not (or no longer) a readable database is
        moved into the quarantine (see :meth:`take_quarantined`) instead, its readable rows
        copied out to a new file first, which is claimed (:meth:`_salvage`).
        """
        if sys.platform == "win32" or not self.directory.is_dir():
            return []
        own = self._own.path if self.has_own and self._own is not None else None
        claimed: list[SpoolFile] = []
        try:
            candidates = sorted(self.directory.glob(f"*{SUFFIX}"), key=mtime)
        except OSError:
            return []
        for path in candidates:
            if path == own or path in self._unmovable or path in self._let_go:
                continue
            found = _TAG.search(path.name)
            if found is not None and found.group(1) != self.target:
                continue  # another project's events: left for its own program
            try:
                fd = try_lock(Path(f"{path}.lock"))
            except OSError as exc:  # a lock we may not open: another user's file, say
                self.unopenable(path, f"its lock can't be opened: {exc.strerror or exc}")
                continue
            if fd is None:
                continue  # its process is alive (or another process claimed it)
            if not path.exists():  # claimed and emptied by another process meanwhile
                os.close(fd)
                continue
            if not (os.access(path, os.W_OK) and os.access(self.directory, os.W_OK)):
                # Its rows could not be deleted once sent: sent again at every start.
                self.unopenable(path, "read-only: its events could not be deleted once sent")
                os.close(fd)
                continue
            try:
                claimed.append(SpoolFile(path, fd, self.max_bytes, on_quarantine=self._note))
            except (sqlite3.Error, OSError) as exc:
                if is_corrupt(exc):
                    copy = self._salvage(path)
                    if copy is not None:
                        claimed.append(copy)
                else:  # tried again at the next scan
                    self.unopenable(path, f"{type(exc).__name__}: {exc}")
                os.close(fd)
        return claimed

    def _salvage(self, path: Path) -> SpoolFile | None:
        """A file of an ended process that can't be opened whole (a bad page): the rows that
        can still be read go to a new file, claimed and returned (``None`` if none could), and
        the file into the quarantine, noted with what was kept and lost (:meth:`take_damage`).
        Where the disk has no room for the copy, the file stays as it is, tried again at the
        next scan."""
        found = _TAG.search(path.name)
        stem = path.name[: found.start()] if found else path.name[: -len(SUFFIX)]
        name = f"{stem}-s{secrets.token_hex(4)}{found.group(0) if found else SUFFIX}"
        target = self.directory / name
        fd: int | None = None
        try:
            fd = try_lock(Path(f"{target}.lock"))
            held = None if fd == -1 else fd
            copy = SpoolFile(target, held, self.max_bytes, on_quarantine=self._note)
        except (OSError, sqlite3.Error) as exc:
            if fd is not None and fd != -1:
                os.close(fd)
            self.unopenable(path, f"damaged, and a copy of it can't be made: {exc}")
            return None
        lost: int | None = None
        complete = True
        try:
            db = sqlite3.connect(str(path), 5.0, isolation_level=None, check_same_thread=False)
            try:
                lost, complete = salvage(db, lambda rows: copy.append(rows) == len(rows))
            finally:
                db.close()
        except sqlite3.Error as exc:  # not even its table can be read
            complete = not is_full(exc) or is_corrupt(exc)
        if not complete:  # no room for the copy: all of it waits in the damaged file
            copy.close(remove_if_empty=False)
            for leftover in (target, *(Path(f"{target}{j}") for j in (*JOURNALS, ".lock"))):
                with contextlib.suppress(OSError):
                    leftover.unlink()
            self.unopenable(path, "damaged, and the disk has no room to copy out its events")
            return None
        moved = move_aside(path)
        with contextlib.suppress(OSError):
            Path(f"{path}.lock").unlink()
        if moved is None:
            self._unmovable.add(path)
        else:
            with self._notes:
                self._damage[moved] = (copy.count, lost)
            self._note(moved)
        if copy.count:
            return copy
        copy.close()
        return None

    def take_damage(self, moved: Path) -> tuple[int, int | None] | None:
        """For a file moved into the quarantine when it was claimed: the events of its copy
        (sent from it) and about how many rows were lost (``None``: can't be told); once."""
        with self._notes:
            return self._damage.pop(moved, None)

    def let_go(self, path: Path, why: str) -> None:
        """``path``'s sent rows could not be deleted: it is not claimed again by this process."""
        self._let_go.add(path)
        self.unopenable(path, why)

    def is_let_go(self, path: Path) -> bool:
        return path in self._let_go

    def unopenable(self, path: Path, why: str) -> None:
        """``path`` of an ended process can't be sent from now (said once: :meth:`take_unopened`)."""
        if path not in self._unopened:
            self._unopened[path] = why
            self._unopened_new.append((path, why))

    def take_unopened(self) -> list[tuple[Path, str]]:
        """Files of ended processes found unopenable since the last call, and why."""
        taken, self._unopened_new = self._unopened_new, []
        return taken

    def take_quarantined(self) -> list[Path]:
        """Files moved into the quarantine since the last call (where they are now)."""
        with self._notes:
            taken, self._quarantined = self._quarantined, []
        return taken

    def _note(self, moved: Path) -> None:
        with self._notes:
            self._quarantined.append(moved)

    def disk_bytes(self) -> int:
        """Bytes the spool files in the directory take on disk (databases, journals, locks;
        not the quarantine)."""
        total = 0
        with contextlib.suppress(OSError):
            for path in self.directory.iterdir():
                if path.name.endswith(_COUNTED):
                    with contextlib.suppress(OSError):
                        total += path.stat().st_size
        return total

    def after_fork(self) -> None:
        """In a forked child: leave the parent's file alone and start a file of our own."""
        if self._own is not None:
            self._own.abandon()
        self._own = None
        self._pid = os.getpid()
        self._quarantined = []
        self._notes = threading.Lock()

    def close(self) -> None:
        if self._own is not None and self._pid == os.getpid():
            self._own.close()
        self._own = None


#: Names :meth:`Spool.disk_bytes` counts.
_COUNTED = (SUFFIX, *(SUFFIX + journal for journal in JOURNALS), SUFFIX + ".lock")
