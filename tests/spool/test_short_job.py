"""A short job that logs nothing still sends what the last run left in the spool: its exit
waits for that replay, as ``flush()`` does (README: "its flush() waits for that too, so a
short job that logs nothing still sends what the last run kept")."""

from __future__ import annotations

import re
from pathlib import Path

from eventlog_handler.delivery._spool import SUFFIX
from tests.support.faultserver import FaultServer
from tests.support.processes import run_to_end
from tests.support.waits import dead_port

FIRST = """
import logging, sys
import eventlog_handler
eventlog_handler.setup(spool_path=sys.argv[1], shutdown_timeout=5)
for i in range(300):
    logging.getLogger("first").warning("kept %d", i)
"""

# Nothing logged, no flush(): the exit flush alone.
JOB = """
import sys
import eventlog_handler
eventlog_handler.setup(spool_path=sys.argv[1])
"""


def test_a_job_that_logs_nothing_sends_what_the_last_run_kept(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    first = run_to_end(FIRST, f"http://127.0.0.1:{dead_port()}", spool)
    assert "300 event(s) kept in the spool" in first.stderr, first.stderr
    with FaultServer() as server:
        job = run_to_end(JOB, server.url, spool)
        messages = sorted(event["message"] for event in server.accepted)
    assert messages == sorted(f"kept {i}" for i in range(300)), (len(messages), job.stderr)
    assert server.duplicates == []
    assert list(spool.glob(f"*{SUFFIX}*")) == []
    assert not re.search(r"could not be sent|kept in the spool", job.stderr), job.stderr
