"""Answers that are configuration errors on the real service (400 to an event post: a key that
belongs to no project; 401/403/404) are said once on stderr, keep the events (bounded), and are
retried slowly; the batch is never bisected one request per event."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest

from eventlog_handler import EventLogHandler
from eventlog_handler.delivery import _engine as transport
from tests.support.accounting import accounted
from tests.support.constants import API_KEY
from tests.support.faultserver import FaultServer, Reply


@pytest.fixture(autouse=True)
def fresh_engines() -> Iterator[None]:
    transport._forget_engines_for_tests()
    yield
    transport._forget_engines_for_tests()


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
