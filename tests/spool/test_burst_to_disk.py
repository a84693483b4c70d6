"""With a spool, an outage burst goes to disk instead of being evicted from memory, and the next
start delivers it: observed from outside, with the program in its own process and the events
counted where they arrive."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from tests.support.constants import API_KEY, REPO
from tests.support.faultserver import FaultServer
from tests.support.processes import child_env
from tests.support.waits import dead_port

#: The books after the exit flush: an ``atexit`` function registered before the package is
#: imported runs after the package's own (``atexit`` runs last-in, first-out).
AFTER_EXIT = """
import atexit, json
def books():
    stats = handle.stats()
    print(json.dumps({"dropped": stats["dropped"], "spooled": stats["spooled"],
                      "delivered": stats["delivered"]}))
atexit.register(books)
"""

PROGRAM = (
    AFTER_EXIT
    + """
import logging, sys
import eventlog_handler
handle = eventlog_handler.setup(spool_path=sys.argv[1], shutdown_timeout=5)
log = logging.getLogger("burst")
for i in range(int(sys.argv[2])):
    log.warning("burst %d", i)
"""
)

#: The same burst on a slow disk: every write to the spool takes 0.3 s, so the exit begins
#: while the delivery worker is in the middle of one.
SLOW_DISK = (
    AFTER_EXIT
    + """
import logging, sys, time
import eventlog_handler
from eventlog_handler.delivery._spool_file import SpoolFile
write = SpoolFile.append
def slow_write(self, rows):
    time.sleep(0.3)
    return write(self, rows)
SpoolFile.append = slow_write
logging.getLogger().addHandler(logging.NullHandler())  # no console copy of each line
handle = eventlog_handler.setup(spool_path=sys.argv[1], shutdown_timeout=5)
log = logging.getLogger("burst")
for i in range(int(sys.argv[2])):
    log.warning("burst %d", i)
"""
)

REPLAY = """
import json, sys, time
import eventlog_handler
handle = eventlog_handler.setup(spool_path=sys.argv[1])
deadline = time.monotonic() + 180  # generous: a loaded machine replays slowly
while time.monotonic() < deadline:  # the files of the ended process are replayed from the start
    replayed = handle.stats()["replayed"]
    if replayed["delivered"] + replayed["dropped"] >= int(sys.argv[2]):
        break
    time.sleep(0.2)
print(json.dumps(handle.stats()["replayed"]))
"""


def run(source: str, url: str, *args: str) -> tuple[str, str]:
    done = subprocess.run(
        [sys.executable, "-c", source, *args],
        env=child_env(url),
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout, done.stderr


def burst_at_a_dead_service(program: str, spool: Path, count: int) -> tuple[dict, str]:
    """Run ``program`` logging ``count`` lines at a service that is down; its books after
    the exit flush, and the lines it said on stderr (not the console copies of the logs)."""
    url = f"http://127.0.0.1:{dead_port()}"  # every connection is refused
    stdout, stderr = run(program, url, str(spool), str(count))
    books = json.loads(stdout.strip().splitlines()[-1])
    said = "\n".join(line for line in stderr.splitlines() if line.startswith("eventlog_handler"))
    # Every event has one outcome: on disk, or dropped with a reason (nothing delivered).
    assert books["delivered"] == 0, books
    assert books["spooled"] + sum(books["dropped"].values()) == count, (books, said)
    return books, said


def test_an_outage_burst_goes_to_disk_and_arrives_at_the_next_start(tmp_path: Path) -> None:
    count = 100_000
    spool = tmp_path / "spool"
    books, said = burst_at_a_dead_service(PROGRAM, spool, count)
    dropped = sum(books["dropped"].values())
    assert dropped <= count // 100, (books, said)  # at most 1 % lost, counted
    assert "kept in the spool" in said
    with FaultServer(keep_events=False) as server:
        stdout, replay_said = run(REPLAY, server.url, str(spool), str(books["spooled"]))
        replayed = json.loads(stdout)
        assert server.accepted_count() >= count * 99 // 100, (
            server.accepted_count(),
            replayed,
            books,
            said,
            replay_said,
        )
        assert server.duplicates == []


def test_the_exit_waits_for_a_write_to_a_slow_disk_instead_of_dropping_it(
    tmp_path: Path,
) -> None:
    """The service is down, so the exit sends everything to disk at once. The worker is then
    in the middle of writing what it took from memory: the exit lets it finish rather than
    count those events as dropped at exit while they are still being written."""
    # Fewer than the queue's high water (7,500), so no logging thread waits for the slow disk,
    # and nothing is evicted however loaded the machine: the events are all on disk, or
    # the exit got them wrong.
    count = 5_000
    books, said = burst_at_a_dead_service(SLOW_DISK, tmp_path / "spool", count)
    assert books["dropped"]["shutdown"] == 0, (books, said)
    assert books["spooled"] == count, (books, said)
    assert f"{count} event(s) kept in the spool" in said


#: A program that logs a few lines and ends at once, before its first request has failed.
QUICK_EXIT = (
    AFTER_EXIT
    + """
import logging, sys
import eventlog_handler
logging.getLogger().addHandler(logging.NullHandler())
handle = eventlog_handler.setup(spool_path=sys.argv[1], shutdown_timeout=30)
log = logging.getLogger("quick")
for i in range(int(sys.argv[2])):
    log.warning("line %d", i)
"""
)


def test_an_exit_that_begins_before_the_service_fails_goes_to_disk_without_waiting(
    tmp_path: Path,
) -> None:
    """The exit began while the service's failure was not known yet. When the first request
    fails, what is left goes to disk and the program ends: it does not retry a service that
    is down until ``shutdown_timeout`` (30 s here; it did, and each retry failed)."""
    count = 300
    started = time.monotonic()
    books, said = burst_at_a_dead_service(QUICK_EXIT, tmp_path / "spool", count)
    took = time.monotonic() - started
    assert books["spooled"] == count, (books, said)
    assert f"{count} event(s) kept in the spool" in said
    assert took < 15, f"the program took {took:.1f} s to end (shutdown_timeout=30)"


OTHER_PROJECT = """
import json, logging, sys, time
import eventlog_handler
handle = eventlog_handler.setup(spool_path=sys.argv[1])
logging.getLogger("other").warning("the other project's own event")
time.sleep(2)  # time enough to replay a file it could take over
handle.flush(10)
print(json.dumps(handle.stats()["replayed"]))
"""


def test_a_spool_shared_by_two_projects_sends_each_projects_events_to_it_only(
    tmp_path: Path,
) -> None:
    """Two programs with different keys (two projects) spool into one directory: the one
    that starts while the other's events wait on disk sends its own events only; the other's
    wait for a program with their key."""
    spool = tmp_path / "spool"
    books, said = burst_at_a_dead_service(PROGRAM, spool, 500)
    assert books["spooled"] == 500, (books, said)
    other_key = "Other" + API_KEY[5:]
    with FaultServer() as server:
        done = subprocess.run(
            [sys.executable, "-c", OTHER_PROJECT, str(spool)],
            env=child_env(server.url, EVENTLOG_API_KEY=other_key),
            cwd=str(REPO),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout.strip().splitlines()[-1])["delivered"] == 0
        assert [e["message"] for e in server.accepted] == ["the other project's own event"]
        stdout, _ = run(REPLAY, server.url, str(spool), "500")
        assert json.loads(stdout)["delivered"] == 500
    assert sorted(e["message"] for e in server.accepted)[:2] == ["burst 0", "burst 1"]
