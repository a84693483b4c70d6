"""The durable spool on a failing disk, as a program sees it: with the server down and the
spool on a full 1 MB file system, memory stays bounded by the queue, what fit on disk is kept
(and sent by the next start), what did not waits in memory (the oldest logs evicted as
``queue_full`` past the queue's bound) and the full disk is said once; a spool file that can't be
read is moved aside and said once."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.accounting import accounted
from tests.support.faultserver import FaultServer
from tests.support.fixtures import small_disk_or_fsize as small_disk_or_fsize  # ``small_disk``
from tests.support.fixtures import tmpfs
from tests.support.processes import marks
from tests.support.waits import dead_port, wait_until

PREAMBLE = """
import atexit, json, logging, os, resource, signal, sys, time

if os.environ.get("EVENTLOG_TEST_FSIZE"):
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    limit = int(os.environ["EVENTLOG_TEST_FSIZE"])
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

def report():  # registered before the package: runs after its exit flush
    import eventlog_handler.delivery._engine as transport
    [engine] = transport.engines()
    print("MARK stats", json.dumps(engine.stats()), flush=True)

atexit.register(report)

def rss_mb():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0

import eventlog_handler
"""

OUTAGE = (
    PREAMBLE
    + """
handle = eventlog_handler.setup(spool_path=sys.argv[1], retry_initial=0.2, max_backoff=1.0)
log = logging.getLogger("app.disk")
for index in range(10_000):  # warm up: the queue fills, the spool fills
    log.warning("event %d of an outage", index, extra={"payload": "x" * 300})
baseline = peak = rss_mb()
for index in range(10_000, 300_000):
    log.warning("event %d of an outage", index, extra={"payload": "x" * 300})
    if index % 10_000 == 0:
        peak = max(peak, rss_mb())
        stats = handle.stats()
        assert stats["captured"] == (stats["delivered"] + stats["dropped_total"]
            + stats["queued"] + stats["in_flight"] + stats["spooled"]), stats
print("MARK memory", json.dumps({"baseline": baseline, "peak": max(peak, rss_mb())}), flush=True)
"""
)

REPLAY = """
import json, logging, sys, time
import eventlog_handler

handle = eventlog_handler.setup(spool_path=sys.argv[1], spool_scan_interval=0.1)
deadline = time.monotonic() + 30
while time.monotonic() < deadline and handle.stats()["replayed"]["delivered"] < int(sys.argv[2]):
    time.sleep(0.1)
print("MARK replayed", json.dumps(handle.stats()["replayed"]), flush=True)
"""


def run_with_args(source: str, url: str, tmp_path: Path, args: list[str], **env: str) -> Any:
    program = tmp_path / f"program-{len(list(tmp_path.glob('program-*')))}.py"
    program.write_text(source)
    from tests.support.constants import REPO
    from tests.support.processes import child_env

    done = subprocess.run(
        [sys.executable, str(program), *args],
        capture_output=True,
        text=True,
        env=child_env(url, **env),
        cwd=str(REPO),
        timeout=180,
    )
    lines = done.stdout.splitlines()
    return done.returncode, done.stderr, marks(lines)


def test_full_disk_during_an_outage_keeps_memory_bounded_and_what_was_stored(
    small_disk: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    disk, env = small_disk
    spool = disk / "spool"
    down = f"http://127.0.0.1:{dead_port()}"
    code, stderr, found = run_with_args(OUTAGE, down, tmp_path, [str(spool)], **env)
    assert code == 0, stderr
    memory, stats = found["memory"], found["stats"]
    # 290,000 warnings of ~0.5 KB after the warm-up; the queue holds 10,000 at most.
    assert memory["peak"] - memory["baseline"] < 60, memory
    assert stats["captured"] == 300_000 == accounted(stats)
    # What the disk had no room for waited in memory; past the queue's bound the oldest logs
    # went, as queue_full (nothing was dropped for the disk itself).
    assert stats["dropped"]["queue_full"] > 0
    assert stats["dropped"]["spool_full"] == 0
    assert stats["dropped"]["shutdown"] > 0, stats  # waiting in memory at exit, service down
    assert stats["spooled"] > 0  # what fit on the disk is kept
    assert stderr.count("out of disk space") == 1, stderr
    # The line says how much was on disk when it filled up, not "what was written" of nothing.
    on_disk = re.search(r"the (\d+) event\(s\) written before are kept", stderr)
    assert on_disk is not None and 0 < int(on_disk.group(1)) <= stats["spooled"], stderr
    assert f"{stats['spooled']} event(s) kept in the spool" in stderr, stderr
    # The next start, with the service up, sends what was kept.
    with FaultServer(keep_events=False) as server:
        code, stderr, found = run_with_args(
            REPLAY, server.url, tmp_path, [str(spool), str(stats["spooled"])], **env
        )
        assert code == 0, stderr
        assert found["replayed"]["delivered"] == stats["spooled"], (found, stderr)
        assert server.accepted_count() == stats["spooled"]
        assert server.duplicates == []


CORRUPT = """
import logging, sys
import eventlog_handler

eventlog_handler.setup(spool_path=sys.argv[1])
logging.getLogger("app").warning("hello")
"""


def test_a_corrupt_spool_file_is_moved_aside_and_said_once(
    server: FaultServer, tmp_path: Path
) -> None:
    spool = tmp_path / "spool"
    spool.mkdir()
    junk = spool / "host-99999-deadbeef.spool.sqlite3"
    junk.write_bytes(b"this is not a database" * 500)
    code, stderr, _ = run_with_args(CORRUPT, server.url, tmp_path, [str(spool)])
    assert code == 0, stderr
    assert stderr.count("could not be read and was moved") == 1, stderr
    assert not junk.exists()
    assert list((spool / "quarantine").iterdir())
    assert wait_until(lambda: "hello" in server.arrivals(), 5)
    code, stderr, _ = run_with_args(CORRUPT, server.url, tmp_path, [str(spool)])
    assert code == 0 and "could not be read" not in stderr, stderr  # said once, not forever


KEEP = """
import logging, sys
import eventlog_handler

eventlog_handler.setup(spool_path=sys.argv[1], shutdown_timeout=1)
log = logging.getLogger("app.page")
for index in range(2_000):
    log.warning("kept %d", index, extra={"payload": "x" * 100})
"""

SEND_KEPT = """
import json, sys, time
import eventlog_handler

handle = eventlog_handler.setup(spool_path=sys.argv[1], spool_scan_interval=0.1)
deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    replayed = handle.stats()["replayed"]
    if replayed["delivered"] + replayed["dropped"] >= 2_000:
        break
    time.sleep(0.1)
print("MARK replayed", json.dumps(handle.stats()["replayed"]), flush=True)
"""


def test_a_bad_page_in_a_spool_file_loses_only_its_rows_and_says_how_many(
    server: FaultServer, tmp_path: Path
) -> None:
    spool = tmp_path / "spool"
    down = f"http://127.0.0.1:{dead_port()}"
    code, stderr, _ = run_with_args(KEEP, down, tmp_path, [str(spool)])
    assert code == 0, stderr
    [kept] = spool.glob("*.spool.sqlite3")
    with kept.open("rb") as disk:
        size = int.from_bytes(disk.read(18)[16:18], "big")  # the file's page size
    pages = kept.stat().st_size // size
    assert pages > 10, pages
    with kept.open("r+b") as disk:  # a bad page in the middle of the file
        disk.seek(size * (pages // 2))
        disk.write(bytes(range(256)) * (size // 256))
    code, stderr, found = run_with_args(SEND_KEPT, server.url, tmp_path, [str(spool)])
    assert code == 0, stderr
    replayed = found["replayed"]
    arrived = [message for message in server.arrivals() if message.startswith("kept ")]
    # The rows on the bad page are lost; every other row is sent, and the loss is counted.
    assert 1_800 <= len(arrived) == replayed["delivered"] < 2_000, (len(arrived), stderr)
    assert replayed["delivered"] + replayed["dropped"] == 2_000, replayed
    said = re.findall(r"could not be read whole.*?(\d+) readable event.*?about (\d+)", stderr)
    assert said == [(str(replayed["delivered"]), str(replayed["dropped"]))], stderr
    assert "an estimate" in stderr
    assert list((spool / "quarantine").glob("*.spool.sqlite3"))


def test_rows_that_hold_no_event_are_dropped_and_said_not_sent_with_their_batch(
    server: FaultServer, tmp_path: Path
) -> None:
    """A spool file left by an ended process, three of its rows damaged (bytes that are not
    an event's JSON): each made its whole batch an invalid JSON array, which the service took
    as one text log line (202), and the batch's 500 events were counted as delivered."""
    import sqlite3

    spool = tmp_path / "spool"
    down = f"http://127.0.0.1:{dead_port()}"
    code, stderr, _ = run_with_args(KEEP, down, tmp_path, [str(spool)])
    assert code == 0, stderr
    [kept] = spool.glob("*.spool.sqlite3")
    with contextlib.closing(sqlite3.connect(kept)) as db, db:
        ids = [row[0] for row in db.execute("SELECT id FROM events ORDER BY id LIMIT 3 OFFSET 7")]
        for row, junk in zip(ids, (b"\xff\xfe not json", b"[1,2,3]", b"null"), strict=True):
            db.execute("UPDATE events SET body = ? WHERE id = ?", (junk, row))
    code, stderr, found = run_with_args(SEND_KEPT, server.url, tmp_path, [str(spool)])
    assert code == 0, stderr
    assert found["replayed"] == {"delivered": 1_997, "dropped": 3}, (found, stderr)
    arrived = server.arrivals()
    assert len(arrived) == 1_997 and all(m.startswith("kept ") for m in arrived), arrived[:3]
    assert stderr.count("3 row(s) of the spool file") == 1, stderr
    assert "hold no event" in stderr, stderr


LOG_A_FEW = """
import logging, sys, time
import eventlog_handler

eventlog_handler.setup(spool_path=sys.argv[1], spool_scan_interval=0.1, shutdown_timeout=1)
for index in range(int(sys.argv[2])):
    logging.getLogger("app.few").warning("run %s event %d", sys.argv[3], index)
time.sleep(1)  # the events a run before kept are claimed, and tried
"""


def test_the_exit_says_how_many_events_of_earlier_runs_still_wait_in_the_spool(
    tmp_path: Path,
) -> None:
    spool = tmp_path / "spool"
    down = f"http://127.0.0.1:{dead_port()}"
    code, stderr, _ = run_with_args(LOG_A_FEW, down, tmp_path, [str(spool), "30", "1"])
    assert code == 0 and "30 event(s) kept in the spool" in stderr, stderr
    # A run that logs nothing, the server still down: the 30 are still waiting, and it says so.
    code, stderr, _ = run_with_args(LOG_A_FEW, down, tmp_path, [str(spool), "0", "2"])
    assert code == 0, stderr
    assert re.search(r"30 event\(s\) of earlier runs are still in the spool .*refused", stderr), (
        stderr
    )
    # A run that logs 5: its own 5 are kept, and the 30 of earlier runs are named too.
    code, stderr, _ = run_with_args(LOG_A_FEW, down, tmp_path, [str(spool), "5", "3"])
    assert code == 0, stderr
    assert re.search(
        r"5 event\(s\) kept in the spool \S+ to send at the next start, and 30 event\(s\) of "
        r"earlier runs are still in the spool",
        stderr,
    ), stderr


def test_events_of_earlier_runs_on_a_read_only_disk_are_said(tmp_path: Path) -> None:
    """The spool's file system went read-only (ext4's ``errors=remount-ro``, a read-only
    volume): the line said only that the directory can't be used, not that events of earlier
    runs wait in it."""
    mount = tmp_path / "disk"
    mount.mkdir()
    with tmpfs(mount, "size=4m,mode=0700") as failure:
        if failure is not None:
            pytest.skip("this machine does not let the tests mount a file system")
        spool = mount / "spool"
        down = f"http://127.0.0.1:{dead_port()}"
        code, stderr, _ = run_with_args(LOG_A_FEW, down, tmp_path, [str(spool), "25", "1"])
        assert code == 0 and "25 event(s) kept in the spool" in stderr, stderr
        os.mkfifo(spool / "stray.spool.sqlite3")  # opened to be counted, it blocked for ever
        remount = ["mount", "-o", "remount,ro", str(mount)]
        assert subprocess.run(remount, capture_output=True, check=False).returncode == 0
        with FaultServer() as server:
            code, stderr, _ = run_with_args(LOG_A_FEW, server.url, tmp_path, [str(spool), "2", "2"])
        assert code == 0, stderr
        assert f"the spool directory {spool} can't be used (Read-only file system" in stderr
        assert "25 event(s) of earlier runs wait in it, unsent until then" in stderr, stderr


@pytest.fixture
def full_ext4(tmp_path: Path) -> Iterator[Path]:
    """A real 8 MB ext4 file system with 1 KiB blocks (what ``mkfs.ext4`` makes of a small
    disk), loop-mounted; skipped, saying so, where this machine can't make or mount one."""
    image, mount = tmp_path / "disk.img", tmp_path / "ext4"
    mount.mkdir()
    if not (sys.platform.startswith("linux") and shutil.which("mkfs.ext4")):
        pytest.skip("needs Linux and mkfs.ext4 (Debian: e2fsprogs)")
    with open(image, "wb") as disk:
        disk.truncate(8 << 20)
    made = subprocess.run(
        ["mkfs.ext4", "-q", "-F", "-b", "1024", str(image)], capture_output=True, check=False
    )
    done = subprocess.run(
        ["mount", "-o", "loop", str(image), str(mount)], capture_output=True, check=False
    )
    if made.returncode != 0 or done.returncode != 0:
        pytest.skip(f"this machine does not let the tests mount an ext4 image: {done.stderr!r}")
    try:
        yield mount
    finally:
        if subprocess.run(["umount", str(mount)], check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(mount: Path, name: str) -> None:
    """Write zeros to ``mount`` until it has not a byte left."""
    with contextlib.suppress(OSError), open(mount / name, "wb") as filler:
        while True:
            filler.write(bytes(1024))
            filler.flush()


KEPT = """
import logging, sys
import eventlog_handler

eventlog_handler.setup(spool_path=sys.argv[1], shutdown_timeout=0.5)
log = logging.getLogger("app.kept")
for index in range(int(sys.argv[2])):
    log.warning("event %d of an outage", index, extra={"payload": "x" * 300})
"""


def test_the_next_start_sends_what_was_kept_on_a_disk_left_without_a_byte(
    full_ext4: Path, tmp_path: Path
) -> None:
    """The spool's file left by a run during an outage, and the disk then filled to its last
    byte: the next start, which opens that file to send it, was killed by ``SIGBUS`` (SQLite's
    WAL index is a shared memory map of a ``-shm`` file, which a full ext4 can't give blocks
    to), at every start for as long as the disk stayed full."""
    spool = full_ext4 / "spool"
    down = f"http://127.0.0.1:{dead_port()}"
    code, stderr, _ = run_with_args(KEPT, down, tmp_path, [str(spool), "800"])
    assert code == 0, stderr
    kept = re.search(r"(\d+) event\(s\) kept in the spool", stderr)
    assert kept is not None, stderr
    fill(full_ext4, "filler")
    with FaultServer(keep_events=False) as server:
        code, stderr, found = run_with_args(
            REPLAY, server.url, tmp_path, [str(spool), kept.group(1)]
        )
        assert code == 0, (code, stderr)
        assert found["replayed"]["delivered"] == int(kept.group(1)), (found, stderr)
        assert server.accepted_count() == int(kept.group(1))
