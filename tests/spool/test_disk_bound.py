"""``spool_max_bytes`` holds for the bytes on disk: the pages that deleted rows leave free are
given back to the file system (Python's sqlite3 frees one page per ``PRAGMA
incremental_vacuum``, so one such call gave back next to nothing, and the directory stayed
past its bound while the eviction dropped events for no byte)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from eventlog_handler.delivery._spool import Spool, SpoolFile
from tests.support.constants import REPO
from tests.support.processes import child_env, marks
from tests.support.waits import dead_port


def free_pages(own: SpoolFile) -> int:
    db = own._db
    assert db is not None
    return int(db.execute("PRAGMA freelist_count").fetchone()[0])


def test_compact_gives_every_free_page_back(tmp_path: Path) -> None:
    own = Spool(tmp_path).own()
    own.append([(float(i), False, b"x" * 3000) for i in range(300)])
    own.compact()
    before = own.disk_bytes()
    assert own.evict_oldest(target_bytes=30 * 3000) == (270, 0)
    assert own._db is not None
    size = own._db.execute("PRAGMA page_size").fetchone()[0]
    assert free_pages(own) * size > 700_000  # 810 KB of rows went; on the code before, their
    own.compact()  # pages were still free after compact() too
    assert free_pages(own) == 0
    assert own.disk_bytes() < before // 5, (before, own.disk_bytes())
    assert len(own.oldest(1000, 10**9)) == 30


def test_a_file_emptied_gives_its_pages_back(tmp_path: Path) -> None:
    """The last rows deleted (a replay sent them all): the file keeps no free page."""
    own = Spool(tmp_path).own()
    own.append([(float(i), False, b"x" * 3000) for i in range(300)])
    rows = own.oldest(1000, 10**9)
    assert own.delete(row.id for row in rows) == 300
    assert free_pages(own) == 0


#: The end of a program: wait until nothing is queued or in flight (all of it on disk).
SETTLE = """
deadline = time.monotonic() + 120
while time.monotonic() < deadline:
    stats = handle.stats()
    if stats["queued"] == 0 and stats["in_flight"] == 0:
        break
    time.sleep(0.1)
time.sleep(0.5)
stats = handle.stats()
"""

# Logs with an error every 100 (errors are kept longest; with the trace log on, each carries
# the lines before it, some 8 KB: rows on overflow pages), to a server that is down, with a 1 MB
# bound: far more than fits. Once everything is on disk, the program prints a mark and waits
# for its standard input to close, so that the directory is measured while it runs (settled:
# no write under way, where the README lets a write pass the bound for a moment) and after.
PROGRAM = (
    """
import json, logging, sys, time
import eventlog_handler
logging.getLogger().addHandler(logging.NullHandler())
handle = eventlog_handler.setup(spool_path=sys.argv[1], spool_max_bytes=BOUND,
                                retry_initial=0.1, shutdown_timeout=10)
log = logging.getLogger("burst")
for i in range(30_000):
    if i % 100 == 0:
        log.error("burst %d error %s", i, "e" * 250)
    else:
        log.info("burst %d %s", i, "z" * 250)
"""
    + SETTLE
    + """print("MARK settled", json.dumps({k: stats[k] for k in ("queued", "in_flight", "spooled")}))
print("MARK spool_full", stats["dropped"]["spool_full"])
sys.stdin.read()
"""
)
BOUND = 1_000_000


def directory_bytes(spool: Path) -> dict[str, int]:
    return {path.name: path.stat().st_size for path in spool.iterdir() if path.is_file()}


def test_a_burst_during_an_outage_keeps_the_spool_within_its_bound(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    process = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(PROGRAM.replace("BOUND", str(BOUND))), str(spool)],
        env=child_env(f"http://127.0.0.1:{dead_port()}"),
        cwd=str(REPO),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None and process.stdin is not None
    try:
        lines = []
        for line in process.stdout:
            lines.append(line.rstrip("\n"))
            if line.startswith("MARK spool_full"):
                break
        found = marks(lines)
        settled = found["settled"]
        assert settled["queued"] == settled["in_flight"] == 0 < settled["spooled"], lines
        assert found["spool_full"] > 0  # the bound evicted
        running = directory_bytes(spool)  # settled: no write under way
        process.stdin.close()
        stderr = process.stderr.read() if process.stderr else ""
        assert process.wait(timeout=60) == 0, stderr
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert sum(running.values()) <= BOUND, running
    ended = directory_bytes(spool)
    assert sum(ended.values()) <= BOUND, ended
    assert "kept in the spool" in stderr, stderr


CAPACITY = (
    """
import json, logging, os, sys, time
import eventlog_handler
logging.getLogger().addHandler(logging.NullHandler())
handle = eventlog_handler.setup(spool_path=sys.argv[1], spool_max_bytes=4_000_000,
                                retry_initial=0.1, shutdown_timeout=5)
log = logging.getLogger("orders")
for i in range(6_000):  # some 2 KB each: an event with a payload of its own
    log.info("order %d", i, extra={"payload": "%06d" % i * 330})
"""
    + SETTLE
    + """on_disk = sum(entry.stat().st_size for entry in os.scandir(sys.argv[1]) if entry.is_file())
print("MARK spool", json.dumps({"bytes": stats["spool_bytes"], "disk": on_disk,
                                "spooled": stats["spooled"]}), flush=True)
"""
)


def test_the_spool_holds_what_its_bound_says_of_events_of_2_kb(tmp_path: Path) -> None:
    """Events of some 2 KB, the service down, a 4 MB bound: one row took a 4 KiB page of its
    own, and what the file took per byte of JSON (2.2) cut the events kept to a third of the
    bound, where the README says rows take up to three quarters of it."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(CAPACITY), str(tmp_path / "spool")],
        env=child_env(f"http://127.0.0.1:{dead_port()}"),
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    spool = marks(done.stdout.splitlines())["spool"]
    assert spool["disk"] <= 4_000_000, spool
    assert spool["bytes"] >= 0.45 * 4_000_000, spool  # of JSON, kept on disk (0.34 before)
