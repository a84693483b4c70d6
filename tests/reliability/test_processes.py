"""Fork and multiprocessing: every process's events arrive once, and none twice.

The children run real programs against a loopback server; each message names its process, so
what arrived can be checked per process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from tests.support.constants import REPO
from tests.support.faultserver import FaultServer
from tests.support.processes import child_env

needs_fork = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

PRELOAD = textwrap.dedent(
    """
    # The gunicorn --preload pattern: the parent sets up, then forks its workers.
    import logging
    import os
    import sys

    import eventlog_handler

    eventlog_handler.setup(flush_interval=5.0, shutdown_timeout=10, retry_initial=0.01)
    log = logging.getLogger("app.preload")
    for index in range(20):
        log.info("parent before %d", index)  # still queued when the workers fork
    workers = []
    for worker in range(3):
        pid = os.fork()
        if pid == 0:
            for index in range(25):
                log.info("worker %d event %d", worker, index)
            try:
                raise ValueError(f"worker {worker} failed")
            except ValueError:
                log.exception("worker %d error", worker)
            sys.exit(0)  # a normal exit: the worker's exit flush runs
        workers.append(pid)
    for pid in workers:
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, status
    for index in range(5):
        log.info("parent after %d", index)
    """
)

MULTIPROCESSING = textwrap.dedent(
    """
    import logging
    import multiprocessing
    import sys

    import eventlog_handler

    # At module level: spawned children import this module and set up for themselves, forked
    # children inherit the parent's setup.
    eventlog_handler.setup(flush_interval=5.0, shutdown_timeout=10, retry_initial=0.01)
    log = logging.getLogger("app.mp")


    def child(number: int) -> None:
        for index in range(25):
            log.info("child %d event %d", number, index)
        # no flush: the end of the child must send what is pending


    if __name__ == "__main__":
        for index in range(10):
            log.info("parent %d", index)
        context = multiprocessing.get_context(sys.argv[1])
        processes = [context.Process(target=child, args=(number,)) for number in range(3)]
        for process in processes:
            process.start()
        for process in processes:
            process.join(60)
        assert [process.exitcode for process in processes] == [0, 0, 0]
    """
)


def run_program(tmp_path: Path, source: str, url: str, *args: str) -> None:
    script = tmp_path / "app.py"
    script.write_text(source)
    completed = subprocess.run(
        # Python 3.12+ warns about any fork() of a process that has threads (the worker is
        # one); that warning is CPython's, not ours, and gunicorn users see it as well.
        [sys.executable, "-W", "ignore:This process:DeprecationWarning", str(script), *args],
        env=child_env(url),
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    # The program's own warnings and errors are on its console as without the package (Python's
    # last resort prints them); the package itself has nothing to say.
    assert "eventlog_handler" not in completed.stderr, completed.stderr


def arrived(server: FaultServer) -> Counter[str]:
    assert server.duplicates == []
    return Counter(str(event.get("message")) for event in server.accepted)


@needs_fork
def test_preload_fork_workers_each_send_their_own_events_once(tmp_path: Path) -> None:
    with FaultServer() as server:
        run_program(tmp_path, PRELOAD, server.url)
        messages = arrived(server)
    expected = Counter(
        [f"parent before {i}" for i in range(20)]
        + [f"parent after {i}" for i in range(5)]
        + [f"worker {w} event {i}" for w in range(3) for i in range(25)]
        + [f"worker {w} error" for w in range(3)]
    )
    assert messages == expected
    # Each worker's error names its own process, not the parent's.
    pids = {
        event["message"]: event["data"]["@environment"]["process_id"]
        for event in server.accepted
        if event.get("type") == "error"
    }
    assert len(set(pids.values())) == 3


@pytest.mark.parametrize(
    "method",
    [
        pytest.param("fork", marks=needs_fork),
        "spawn",
    ],
)
def test_multiprocessing_children_send_their_own_events_once(tmp_path: Path, method: str) -> None:
    with FaultServer() as server:
        run_program(tmp_path, MULTIPROCESSING, server.url, method)
        messages = arrived(server)
    expected = Counter(
        [f"parent {i}" for i in range(10)]
        + [f"child {n} event {i}" for n in range(3) for i in range(25)]
    )
    assert messages == expected
