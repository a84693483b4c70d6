"""The spool's files on a disk that fails: full (a real 1 MB file system, or a file-size limit),
corrupt or truncated files, and the permissions of everything it writes.

File-level accounting holds in each: every row offered to a file is written or reported not
written, and every row written is read back, deleted, or reported lost with a quarantined file.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from eventlog_handler.delivery._spool import (
    QUARANTINE,
    QUARANTINE_KEEP,
    SUFFIX,
    Spool,
    SpoolCorrupt,
    SpoolFile,
)
from tests.support.fixtures import small_tmpfs as small_tmpfs  # ``small_disk``

ROOT = Path(__file__).resolve().parents[2]
BODY = b'{"message":"' + b"x" * 680 + b'"}'  # about the size of a log event with some data


def fill(file: SpoolFile, batch: int = 50) -> tuple[int, int]:
    """Append rows until the disk refuses some; return (offered, written)."""
    offered = written = 0
    for index in range(10_000):
        rows = [(time.time(), (index + n) % 7 == 0, BODY) for n in range(batch)]
        offered += len(rows)
        written += file.append(rows)
        if file.full:
            return offered, written
    raise AssertionError("the disk never filled up")


def read_all(file: SpoolFile) -> list[int]:
    """Ids of every live row, oldest first (reading in pages, as the engine does)."""
    ids: list[int] = []
    last = 0
    while True:
        rows = [row for row in file.oldest(10_000, 10**9) if row.id > last]
        if not rows:
            return ids
        ids += [row.id for row in rows]
        last = ids[-1]
        if len(ids) >= file.count:
            return ids


def free_bytes(path: Path) -> int:
    status = os.statvfs(path)
    return status.f_bavail * status.f_frsize


# -- a full disk: a real 1 MB file system -------------------------------------------------------


def test_a_full_disk_keeps_what_fit_and_says_why(small_disk: Path) -> None:
    own = Spool(small_disk / "spool").own()
    offered, written = fill(own)
    assert own.full and "full" in own.full_error.lower(), own.full_error
    assert 0 < written < offered  # some fit, the rest is reported, nothing raised
    assert own.count == written == len(read_all(own))  # what was committed is kept
    bodies = [row.body for row in own.oldest(5, 10**9)]
    assert bodies == [BODY] * 5
    # Still full: refused, not raised (a row or two may still fit where a transaction of
    # several did not).
    extra = own.append([(time.time(), False, BODY)] * 50)
    assert extra < 50 and own.full, extra
    refused = offered - written
    assert offered == own.count - extra + refused


def test_after_a_full_disk_reads_and_deletes_work_and_the_space_comes_back(
    small_disk: Path,
) -> None:
    spool = Spool(small_disk / "spool")
    own = spool.own()
    _, written = fill(own)
    first = own.oldest(100, 10**9)
    assert own.delete(row.id for row in first) == 100  # a delete on a full disk works...
    assert own.count == written - 100
    assert not {row.id for row in first} & set(read_all(own))  # ...and the rows stay gone
    logs, errors = own.evict_oldest(own.bytes // 2, errors=False)
    assert logs > 0 and errors == 0 and own.count == written - 100 - logs
    assert all(row.is_error or row.id > first[-1].id for row in own.oldest(10, 10**9))
    while own.count:  # the service took the rest
        assert own.delete(row.id for row in own.oldest(500, 10**9)) > 0
    assert free_bytes(small_disk) > 900_000  # the files are gone: the space is back
    assert own.append([(time.time(), False, BODY)] * 10) == 10  # and writes work again
    assert not own.full and own.full_error == ""
    assert own.count == 10 and len(read_all(own)) == 10
    assert (spool.directory / own.path.name).exists()


def test_a_full_file_left_by_an_ended_process_is_replayed_and_removed(small_disk: Path) -> None:
    ended = Spool(small_disk / "spool").own()
    _, written = fill(ended)
    ended.close(remove_if_empty=False)  # the process ends: its lock is released
    [orphan] = Spool(small_disk / "spool").claim_orphans()  # claimed on the still full disk
    assert orphan.count == written
    assert send_all(orphan) == written
    assert not list((small_disk / "spool").glob(f"*{SUFFIX}*"))
    assert free_bytes(small_disk) > 900_000


def send_all(orphan: SpoolFile) -> int:
    """Delete every row of ``orphan`` as the service took them, then close it; how many."""
    sent = 0
    while orphan.count:
        sent += orphan.delete(row.id for row in orphan.oldest(500, 10**9))
    orphan.close()
    return sent


def test_a_file_left_on_a_disk_with_no_byte_left_is_still_replayed(small_disk: Path) -> None:
    """The disk has not a byte left when the next process starts (the ended one's journal
    took the last of it): opening the file must not need to write, or its events wait for a
    disk with room, unseen (the claim failed and was tried again, silently, at every scan)."""
    child = textwrap.dedent(
        """
        import os, sys, time
        from pathlib import Path
        sys.path.insert(0, sys.argv[2])
        from eventlog_handler.delivery._spool import Spool
        # A journal of 100 pages: checkpointed into the file a few times before the disk fills.
        own = Spool(Path(sys.argv[1]), max_bytes=4_000_000).own()
        body = b'{"message":"' + b"x" * 680 + b'"}'
        while not own.full:
            own.append([(time.time(), False, body)] * 50)
        print(own.count, flush=True)
        os._exit(0)  # as a killed process: the file's journal is left as it was
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", child, str(small_disk / "spool"), str(ROOT)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    written = int(done.stdout)
    fill_up(small_disk / "filler")
    [orphan] = Spool(small_disk / "spool").claim_orphans()
    assert orphan.count == written
    assert send_all(orphan) == written
    assert not list((small_disk / "spool").glob(f"*{SUFFIX}*"))


def fill_up(filler: Path) -> None:
    """Write ``filler`` until the disk has no room left."""
    with filler.open("wb", buffering=0) as out:
        try:
            while True:
                out.write(b"\0" * 4096)
        except OSError:
            pass


def test_a_new_file_on_a_disk_already_full_is_refused_without_litter(small_disk: Path) -> None:
    filler = small_disk / "filler"
    fill_up(filler)
    spool = Spool(small_disk / "spool")
    own = spool.own()  # no exception: a file that starts full
    assert own.full and own.count == 0
    assert own.append([(time.time(), True, BODY)] * 3) == 0
    assert own.oldest(10, 10**9) == [] and own.delete([1]) == 0
    assert not list(spool.directory.glob(f"*{SUFFIX}")) and spool.disk_bytes() == 0
    filler.unlink()
    assert own.append([(time.time(), True, BODY)] * 3) == 3
    assert not own.full and len(read_all(own)) == 3


# -- a full disk: a file-size limit (where mounting is not allowed, and everywhere) ---------------

FILE_SIZE_LIMIT = textwrap.dedent(
    """
    import json, resource, signal, sys, time
    from pathlib import Path
    sys.path.insert(0, sys.argv[2])
    from eventlog_handler.delivery._spool import Spool

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (300_000, 300_000))
    spool = Spool(Path(sys.argv[1]))
    own = spool.own()
    body = b'{"message":"' + b"x" * 680 + b'"}'
    offered = written = 0
    while not own.full and offered < 100_000:
        offered += 50
        written += own.append([(time.time(), False, body)] * 50)
    result = {"offered": offered, "written": written, "count": own.count,
              "full": own.full, "error": own.full_error}
    ids = [row.id for row in own.oldest(100_000, 10**9)]
    result["read"] = len(ids)
    result["deleted_first"] = own.delete(ids[:100])
    result["after_delete"] = own.append([(time.time(), False, body)])
    result["count_after_delete"] = own.count
    while own.count:
        own.delete(row.id for row in own.oldest(500, 10**9))
    result["again"] = own.append([(time.time(), False, body)] * 10)
    result["full_after"] = own.full
    result["count_after"] = own.count
    print(json.dumps(result))
    """
)


@pytest.mark.skipif(not hasattr(os, "setrlimit") and sys.platform == "win32", reason="POSIX")
def test_a_file_size_limit_is_handled_like_a_full_disk(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", FILE_SIZE_LIMIT, str(tmp_path / "spool"), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["full"], result
    assert "i/o" in result["error"].lower() or "full" in result["error"].lower()
    assert 0 < result["written"] < result["offered"]
    assert result["count"] == result["written"] == result["read"]
    assert result["deleted_first"] == 100
    # Unlike a full disk, a size limit is per file: the journal may have room again.
    assert result["count_after_delete"] == result["written"] - 100 + result["after_delete"]
    assert result["again"] == 10 and not result["full_after"] and result["count_after"] == 10


# -- permissions -------------------------------------------------------------------------------

PERMISSIONS = textwrap.dedent(
    """
    import json, os, stat, sys, time
    from pathlib import Path
    sys.path.insert(0, sys.argv[2])
    from eventlog_handler.delivery._spool import Spool

    os.umask(0)  # the most permissive umask: the spool must not depend on it
    directory = Path(sys.argv[1]) / "new" / "spool"
    own = Spool(directory).own()
    own.append([(time.time(), False, b'{"a":1}')])
    older = directory / "old-1-aaaaaaaa.spool.sqlite3"  # a file written with wider modes
    import sqlite3
    db = sqlite3.connect(older)
    db.execute("CREATE TABLE events (id INTEGER PRIMARY KEY AUTOINCREMENT, created REAL NOT NULL,"
               " is_error INTEGER NOT NULL, body BLOB NOT NULL)")
    db.commit(); db.close()
    os.chmod(older, 0o644)
    (directory / "junk-1-bbbbbbbb.spool.sqlite3").write_bytes(b"not a database at all" * 10)
    claimed = Spool(directory).claim_orphans()
    modes = {path.relative_to(directory).as_posix(): oct(stat.S_IMODE(path.stat().st_mode))
             for path in [directory, *directory.rglob("*")]}
    print(json.dumps({"modes": modes, "claimed": len(claimed)}))
    """
)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX permissions")
def test_every_file_is_owner_only_whatever_the_umask(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PERMISSIONS, str(tmp_path), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    modes = result["modes"]
    assert result["claimed"] == 1
    assert modes.pop(".") == "0o700"
    assert modes.pop(QUARANTINE) == "0o700"
    suffixes = {name.split(SUFFIX)[-1] for name in modes}
    assert {"", "-wal", ".lock"} <= suffixes  # databases, journals and locks
    assert "-shm" not in suffixes  # the WAL index is kept in memory (a full disk can't map it)
    assert f"{QUARANTINE}/junk-1-bbbbbbbb{SUFFIX}" in modes
    assert set(modes.values()) == {"0o600"}, modes


# -- corrupt files -----------------------------------------------------------------------------


def make_orphan(directory: Path, bodies: list[bytes]) -> Path:
    """A spool file left by a process that ended, its rows checkpointed into the database."""
    own = Spool(directory).own()
    assert own.append([(time.time(), False, body) for body in bodies]) == len(bodies)
    own.compact()
    own.close(remove_if_empty=False)
    return own.path


def test_a_file_that_is_not_a_database_is_moved_aside_once(tmp_path: Path) -> None:
    junk = tmp_path / f"host-1-deadbeef{SUFFIX}"
    junk.write_bytes(b"\x00garbage, not SQLite\xff" * 200)
    Path(f"{junk}.lock").touch()
    spool = Spool(tmp_path)
    assert spool.disk_bytes() > 4000
    assert spool.claim_orphans() == []
    moved = tmp_path / QUARANTINE / junk.name
    assert spool.take_quarantined() == [moved]
    assert spool.take_quarantined() == []  # said once
    assert moved.read_bytes().startswith(b"\x00garbage")  # kept for a person to look at
    assert not junk.exists() and not Path(f"{junk}.lock").exists()  # its lock is released
    assert spool.disk_bytes() == 0  # no longer counted against the bound
    assert spool.claim_orphans() == [] and spool.take_quarantined() == []


def test_a_truncated_file_is_quarantined_and_what_was_readable_sent(tmp_path: Path) -> None:
    bodies = [json.dumps({"n": n, "pad": "p" * 3000}).encode() for n in range(60)]
    path = make_orphan(tmp_path, bodies)
    with path.open("r+b") as out:
        out.truncate(path.stat().st_size // 2)
    spool = Spool(tmp_path)
    sent, lost = 0, 0
    claimed = spool.claim_orphans()
    for orphan in claimed:
        try:
            while orphan.count:
                sent += orphan.delete(row.id for row in orphan.oldest(10, 10**9))
        except SpoolCorrupt as corrupt:
            lost += corrupt.rows
            assert isinstance(corrupt, sqlite3.DatabaseError)  # what the engine catches already
    quarantined = spool.take_quarantined()
    assert quarantined == [tmp_path / QUARANTINE / path.name]
    assert sent + lost == len(bodies) or not claimed  # unreadable at claim: nothing was counted
    assert not path.exists() and spool.disk_bytes() == 0


def _first_overflow_page(path: Path) -> int:
    """A page that starts an overflow chain, from the pointer map (page 2, ``auto_vacuum``):
    entries of 5 bytes for pages 3, 4, ...; type 3 is "first page of an overflow chain"."""
    data = path.read_bytes()
    size = page_size(path)
    pointer_map = data[size : 2 * size]
    for index in range(min(len(data) // size - 2, size // 5)):
        if pointer_map[5 * index] == 3:
            return index + 3
    raise AssertionError("no overflow page")


def page_size(path: Path) -> int:
    """The page size of the SQLite file at ``path``, from its header (1 means 65,536)."""
    with path.open("rb") as file:
        header = file.read(18)
    size = int.from_bytes(header[16:18], "big")
    return 65_536 if size == 1 else size


def test_a_corrupt_page_met_while_reading_rows_quarantines_the_file(tmp_path: Path) -> None:
    bodies = [b'{"n":%d}' % n for n in range(5)] + [b'{"big":"' + b"b" * 60_000 + b'"}']
    bodies += [b'{"n":%d}' % n for n in range(5, 10)]
    path = make_orphan(tmp_path, bodies)
    page = _first_overflow_page(path)
    with path.open("r+b") as out:  # the big row's overflow chain now points past the file
        out.seek((page - 1) * page_size(path))
        out.write(b"\xff\xff\xff\xff")
    spool = Spool(tmp_path)
    [orphan] = spool.claim_orphans()  # its counts read fine: the damage is in a row's body
    assert orphan.count == len(bodies)
    sent = 0
    with pytest.raises(SpoolCorrupt) as raised:
        while orphan.count:
            rows = orphan.oldest(2, 10**9)
            sent += orphan.delete(row.id for row in rows)
    assert sent == 4  # the rows before the damaged one were read and sent
    assert raised.value.rows == orphan.lost == len(bodies) - sent
    assert orphan.take_lost() == len(bodies) - sent and orphan.take_lost() == 0  # once
    assert raised.value.moved_to == tmp_path / QUARANTINE / path.name
    assert spool.take_quarantined() == [raised.value.moved_to]
    # The file is out of the spool, and the object is inert.
    assert orphan.count == 0 and orphan.oldest(10, 10**9) == [] and orphan.delete([1]) == 0
    assert orphan.append([(time.time(), False, b"{}")]) == 0
    assert spool.disk_bytes() == 0 and not path.exists()
    orphan.close()


def test_a_corrupt_own_file_is_replaced_by_a_new_one(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    own = spool.own()
    own.append([(time.time(), False, b'{"big":"' + b"b" * 60_000 + b'"}')] * 3)
    own.compact()
    page = _first_overflow_page(own.path)
    with own.path.open("r+b") as out:
        out.seek((page - 1) * page_size(own.path))
        out.write(b"\xff\xff\xff\xff")
    own._db.execute("PRAGMA shrink_memory")  # type: ignore[union-attr]  # read anew
    with pytest.raises(SpoolCorrupt):
        own.oldest(10, 10**9)
    assert own.take_lost() == 3 and spool.take_quarantined() == [
        tmp_path / QUARANTINE / own.path.name
    ]
    fresh = spool.own()
    assert fresh is not own and fresh.path != own.path
    assert fresh.append([(time.time(), False, b"{}")]) == 1


def test_the_quarantine_keeps_only_the_newest_files(tmp_path: Path) -> None:
    for index in range(QUARANTINE_KEEP + 5):
        junk = tmp_path / f"host-{index}-{index:08x}{SUFFIX}"
        junk.write_bytes(b"not a database" * 10)
        os.utime(junk, (1_000_000 + index, 1_000_000 + index))
    spool = Spool(tmp_path)
    assert spool.claim_orphans() == []
    assert len(spool.take_quarantined()) == QUARANTINE_KEEP + 5
    kept = sorted(path.name for path in (tmp_path / QUARANTINE).glob(f"*{SUFFIX}"))
    assert len(kept) == QUARANTINE_KEEP
    assert f"host-{QUARANTINE_KEEP + 4}-{QUARANTINE_KEEP + 4:08x}{SUFFIX}" in kept


def test_a_file_of_an_ended_process_that_cannot_be_opened_is_named_once(tmp_path: Path) -> None:
    # Not corrupt (it is not moved aside), only unopenable now: its events stay where they are,
    # tried again at each scan, and the reason is handed out once to be said.
    spool = Spool(tmp_path / "spool")
    spool.own()
    blocked = spool.directory / f"vm-1-00000000{SUFFIX}"
    blocked.mkdir()  # a name of a spool file that SQLite can't open
    assert spool.claim_orphans() == []
    [(path, why)] = spool.take_unopened()
    assert path == blocked and "unable to open" in why, why
    assert spool.claim_orphans() == [] and spool.take_unopened() == []
    assert blocked.is_dir()  # left where it is
