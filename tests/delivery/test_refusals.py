"""Answers that are configuration errors on the real service (400 to an event post: a key that
belongs to no project; 401/403/404) are said once on stderr, keep the events (bounded), and are
retried slowly; the batch is never bisected one request per event."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest

from eventlog_handler import EventLogHandler
from tests.support.accounting import accounted
from tests.support.constants import API_KEY
from tests.support.faultserver import FaultServer, Reply
from tests.support.fixtures import fresh_engines as fresh_engines  # autouse
from tests.support.processes import marks, run_program
from tests.support.waits import wait_until


def test_400_on_every_post_costs_a_few_requests_and_one_line(
    server: FaultServer, capsys: pytest.CaptureFixture[str]
) -> None:
    title = b'{"type":"about:blank","title":"Project not found.","status":400}'
    server.default = Reply(400, title, {"Content-Type": "application/problem+json"})
    # Default retry settings (the slow retry of a refusal is part of what is tested).
    handler = EventLogHandler(API_KEY, server.url, flush_interval=0.05, error_delay=0.0)
    logger = logging.getLogger("dlv.refused")
    logger.handlers[:] = [handler]
    logger.propagate = False
    for index in range(60):
        logger.warning("event %d", index)
    for index in range(4):
        try:
            raise ValueError(f"bad {index}")
        except ValueError:
            logger.exception("error %d", index)
    time.sleep(2.0)
    posts = [seen for seen in server.requests]
    assert 1 <= len(posts) <= 3, [len(seen.events) for seen in posts]
    said = [line for line in capsys.readouterr().err.splitlines() if "eventlog_handler" in line]
    assert len(said) == 1, said
    assert "400" in said[0] and "Project not found." in said[0]
    assert "no project" in said[0]
    assert API_KEY not in said[0]
    stats: dict[str, Any] = handler.stats()
    assert stats["dropped"]["rejected"] == 0
    assert stats["captured"] == 64 == accounted(stats)
    assert stats["queued"] + stats["in_flight"] == 64  # kept, waiting for a slow retry


def test_after_the_key_is_fixed_the_kept_events_arrive(server: FaultServer) -> None:
    server.script.extend([400])
    handler = EventLogHandler(
        API_KEY, server.url, flush_interval=0.05, retry_initial=0.01, max_backoff=0.2
    )
    logger = logging.getLogger("dlv.fixed")
    logger.handlers[:] = [handler]
    logger.propagate = False
    for index in range(64):
        logger.warning("event %d", index)
    assert handler.engine.flush(10), handler.stats()
    assert len(server.accepted) == 64
    assert [len(seen.events) for seen in server.requests][:2] == [64, 64]  # no bisection


#: A program that logs a warning and flushes (or closes) for 30 s, as a job does before it
#: ends.
FLUSH_PROGRAM = """
import json, logging, sys, time
import eventlog_handler

handle = eventlog_handler.setup(capture_exceptions=False)
logging.getLogger("job").warning("job done")
started = time.monotonic()
sent = getattr(handle, sys.argv[1])(30)
stats = handle.stats()
print("MARK flush " + json.dumps({
    "sent": sent,
    "seconds": time.monotonic() - started,
    "waiting": stats["queued"] + stats["in_flight"],
    "dropped": sum(stats["dropped"].values()),
}))
"""


@pytest.mark.parametrize(
    ("status", "call"), [(401, "flush"), (403, "flush"), (400, "flush"), (401, "close")]
)
def test_a_flush_does_not_wait_out_its_timeout_for_a_refused_key(
    server: FaultServer, status: int, call: str, tmp_path: Any
) -> None:
    """A job that flushes (or closes its handle) before it ends, against a service that
    refuses its key: the call returns ``False`` as soon as the refusal is known (not after its
    30 s), the event is kept (not dropped) and, at the exit, counted as not sent, with the
    refusal said once."""
    server.default = status
    program = FLUSH_PROGRAM.replace("sys.argv[1]", repr(call))
    code, stderr, lines = run_program(program, server.url, tmp_path, timeout=60)
    assert code == 0, stderr
    flush = marks(lines)["flush"]
    assert flush["sent"] is False
    assert flush["seconds"] < 10, flush  # generous: a 30 s wait is what this catches
    assert flush["waiting"] == 1 and flush["dropped"] == 0, flush
    assert sum("retried every 60 s or more" in line for line in stderr.splitlines()) == 1, stderr
    assert "1 event(s) could not be sent" in stderr, stderr
    assert API_KEY not in stderr


def test_a_flush_during_a_failure_that_may_end_waits_for_it(server: FaultServer) -> None:
    """A 503 is not a refusal: a flush keeps waiting, so the retry that succeeds is seen."""
    server.script.extend([503, 503])
    handler = EventLogHandler(API_KEY, server.url, flush_interval=0.05, error_delay=0.0)
    logger = logging.getLogger("dlv.flaky")
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.warning("after two failures")
    assert handler.engine.flush(30) is True
    assert [event["message"] for event in server.accepted] == ["after two failures"]


def test_a_flush_during_an_outage_whose_next_try_is_after_its_deadline_returns() -> None:
    """A long outage: the next try is 30 s or more away (the backoff), the flush is for 20 s.
    It returns ``False`` without waiting the 20 s; the event waits for that try."""
    with FaultServer() as down:
        down.default = 503
        handler = EventLogHandler(
            API_KEY, down.url, flush_interval=0.05, retry_initial=60.0, max_backoff=300.0
        )
        logger = logging.getLogger("dlv.outage")
        logger.handlers[:] = [handler]
        logger.propagate = False
        logger.warning("during a long outage")
        assert wait_until(lambda: len(down.requests) >= 1, 10)
        started = time.monotonic()
        assert handler.engine.flush(20) is False
        assert time.monotonic() - started < 10  # generous: the 20 s wait is what it catches
        stats = handler.stats()
        assert stats["queued"] + stats["in_flight"] == 1 and stats["dropped_total"] == 0
