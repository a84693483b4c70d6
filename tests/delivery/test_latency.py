"""Events are on the wire within ``flush_interval`` (logs) or ``error_delay`` (errors) of the
log call, whatever the worker was doing: never started, idle for seconds, just flushed, or in a
forked child. Observed from outside: a program logs through ``setup()`` with default settings
and prints when it logged; the loopback server notes when each event arrived. Nothing is
flushed to make an event go (the program ends each phase by sleeping, and the forked child
leaves with ``os._exit``, which runs no exit flush)."""

from __future__ import annotations

from pathlib import Path

from tests.support.faultserver import FaultServer
from tests.support.processes import marks, run_program

#: The defaults: logs wait up to 3 s to fill a batch, errors 0.25 s.
FLUSH_INTERVAL = 3.0
ERROR_DELAY = 0.25
#: Slack for a loaded machine: generous, yet far below the 60 s stall this guards against.
SLACK = 1.0

PROGRAM = """
import json, logging, os, time, warnings
import eventlog_handler

warnings.simplefilter("ignore", DeprecationWarning)  # fork() with a worker thread (3.12+)
handle = eventlog_handler.setup()
log = logging.getLogger("app.latency")

def mark(name):
    print("MARK", name, json.dumps({"at": time.time(), "pid": os.getpid()}), flush=True)

mark("never_started"); log.info("never started")
time.sleep(5.0)  # everything was sent: the worker has been idle for seconds
mark("after_idle"); log.info("after idle")
time.sleep(4.3)
mark("error_without_exception"); log.error("an error without an exception")
time.sleep(1.5)
handle.flush(5.0)  # what a user may do; the next event must not depend on it
time.sleep(1.0)
mark("after_flush"); log.warning("after a flush")
time.sleep(4.3)
pid = os.fork()
if pid == 0:
    time.sleep(1.0)
    mark("in_forked_child"); log.info("in a forked child")
    mark("child_error"); log.critical("a critical line in the child")
    time.sleep(4.3)
    os._exit(0)  # no exit flush: what arrived, arrived on its own
os.waitpid(pid, 0)
"""

EXPECTED = {
    "never_started": ("never started", FLUSH_INTERVAL),
    "after_idle": ("after idle", FLUSH_INTERVAL),
    "error_without_exception": ("an error without an exception", ERROR_DELAY),
    "after_flush": ("after a flush", FLUSH_INTERVAL),
    "in_forked_child": ("in a forked child", FLUSH_INTERVAL),
    "child_error": ("a critical line in the child", ERROR_DELAY),
}


def test_events_arrive_within_their_delay_whatever_the_worker_did(
    server: FaultServer, tmp_path: Path
) -> None:
    code, stderr, lines = run_program(PROGRAM, server.url, tmp_path, timeout=90)
    assert code == 0, stderr
    logged = marks(lines)
    arrived = server.arrivals()
    late = {}
    for name, (message, delay) in EXPECTED.items():
        assert message in arrived, (message, sorted(arrived), stderr)
        waited = arrived[message] - logged[name]["at"]
        if waited > delay + SLACK:
            late[name] = round(waited, 2)
    assert late == {}, f"arrived late (seconds after the log call): {late}"
    assert logged["in_forked_child"]["pid"] != logged["after_flush"]["pid"]
    assert server.duplicates == []
