"""Events logged in process pools arrive with the default settings, whatever the start method:
``with multiprocessing.Pool() as pool: pool.map(...)`` ends its workers with SIGTERM as it
leaves the block, and their events must not die with them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.delivery.conftest import run_program, wait_until
from tests.transport.faultserver import FaultServer

PROGRAM = """
import logging, multiprocessing, sys, warnings
import eventlog_handler

warnings.simplefilter("ignore", DeprecationWarning)  # fork() with a worker thread (3.12+)
eventlog_handler.setup()  # at import: spawned workers run it too
log = logging.getLogger("app.pool")


def work(item):
    log.info("item %d", item)
    return item


if __name__ == "__main__":
    context = multiprocessing.get_context(sys.argv[1] if len(sys.argv) > 1 else METHOD)
    with context.Pool(4) as pool:
        assert sum(pool.map(work, range(400))) == sum(range(400))
    log.info("pool done")
"""

METHODS = ["fork", "spawn"] if sys.platform != "win32" else ["spawn"]


@pytest.mark.parametrize("method", METHODS)
def test_pool_workers_events_arrive(server: FaultServer, tmp_path: Path, method: str) -> None:
    program = PROGRAM.replace("METHOD", repr(method))
    code, stderr, _ = run_program(program, server.url, tmp_path, timeout=90)
    assert code == 0, stderr
    expected = {f"item {index}" for index in range(400)} | {"pool done"}
    assert wait_until(lambda: expected <= set(server.arrivals()), 10)
    missing = expected - set(server.arrivals())
    assert missing == set(), sorted(missing)[:10]
    assert "could not be sent" not in stderr, stderr
    assert server.duplicates == []
