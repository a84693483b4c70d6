"""A full spool keeps every error and the newest logs: the oldest logs go first, counted and said
at exit. The program runs in its own process against a server that is down; what survived is
read back from the spool by the next start, at a loopback server."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.faultserver import FaultServer
from tests.support.processes import run_to_end
from tests.support.waits import dead_port

# trace_size=0: each error stays small (with the trace log on, an error carries the 25 lines
# before it, and 100 of them alone would not fit in 1 MB).
# The exit's deadline is generous and the console quiet (1,000 warnings of 1.5 KB printed to a
# pipe): on a loaded machine (two test suites at once) a 3 s exit had not written the newest
# events to the spool yet when it ended, which is the deadline's doing, not the spool's order.
PROGRAM = """
import logging, sys
import eventlog_handler
logging.getLogger().addHandler(logging.NullHandler())  # no console: the spool is the subject
eventlog_handler.setup(spool_path=sys.argv[1], spool_max_bytes=1_000_000, shutdown_timeout=30,
                       trace_size=0)
log = logging.getLogger("mix")
for i in range(1000):
    log.warning("log %d %s", i, "x" * 1500)
    if i % 10 == 0:
        log.error("error %d", i // 10)
"""

REPLAY = """
import json, sys, time
import eventlog_handler
handle = eventlog_handler.setup(spool_path=sys.argv[1])
expected = int(sys.argv[2])
deadline = time.monotonic() + 180  # generous: a loaded machine replays slowly
while time.monotonic() < deadline:  # the ended process's file is replayed from the start
    replayed = handle.stats()["replayed"]
    if replayed["delivered"] + replayed["dropped"] >= expected:
        break
    time.sleep(0.2)
print(json.dumps(handle.stats()["replayed"]))
"""


def test_a_full_spool_keeps_the_errors_and_the_newest_logs(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    url = f"http://127.0.0.1:{dead_port()}"
    first = run_to_end(PROGRAM, url, spool)
    assert "did not fit in the spool" in first.stderr, first.stderr
    kept = re.search(r"(\d+) event\(s\) kept in the spool", first.stderr)
    assert kept, first.stderr
    with FaultServer() as server:
        run_to_end(REPLAY, server.url, spool, kept.group(1))
        messages = [event["message"] for event in server.accepted]
    errors = sorted(int(m.split()[1]) for m in messages if m.startswith("error"))
    logs = sorted(int(m.split()[1]) for m in messages if m.startswith("log"))
    assert errors == list(range(100))
    assert logs, messages[:5]
    assert logs == list(range(logs[0], 1000))  # the newest logs, none missing after the first
    assert len(logs) < 1000  # the spool's bound really evicted the oldest


STEADY = """
import logging, sys, time
import eventlog_handler
logging.getLogger().addHandler(logging.NullHandler())
eventlog_handler.setup(spool_path=sys.argv[1], spool_max_bytes=1_000_000, trace_size=0,
                       shutdown_timeout=5)
log = logging.getLogger("steady")
for i in range(3500):
    log.warning("log %d %s", i, "x" * 1000)
    if i % 100 == 0:
        log.error("error %d", i // 100)
    time.sleep(1 / 700)
open(sys.argv[1] + ".logged", "w").close()  # the exit's own write comes next
"""


def test_the_files_of_a_full_spool_stay_within_its_bound_on_disk(tmp_path: Path) -> None:
    """A steady flow into a 1 MB spool while the server is down, the directory's size read
    from outside every 10 ms while the program logs: the estimate of what the rows take on
    disk (1.4 times their JSON) was short of what the pages and the journal take, and the
    directory went up to 17 % past its bound before each write's check brought it back. (The
    exit's write of what is left in memory, in one go, may still pass it for a moment.)"""
    import contextlib
    import threading
    import time

    spool = tmp_path / "spool"
    url = f"http://127.0.0.1:{dead_port()}"
    peak = [0]
    done = threading.Event()

    logged = Path(f"{spool}.logged")

    def watch() -> None:
        while not done.is_set() and not logged.exists():
            total = 0
            for path in spool.glob("*"):
                with contextlib.suppress(OSError):  # removed meanwhile
                    total += path.stat().st_size if path.is_file() else 0
            peak[0] = max(peak[0], total)
            time.sleep(0.01)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        finished = run_to_end(STEADY, url, spool)
    finally:
        done.set()
        watcher.join(5)
    assert "did not fit in the spool" in finished.stderr, finished.stderr
    assert 500_000 < peak[0] <= 1_000_000, peak[0]
