"""End to end against the local collector: the events are accepted and stored as the service
stores them (top-level ``@`` fields moved under ``data``)."""

from __future__ import annotations

import logging
from typing import Any

from eventlog_handler import setup, user_context
from tests.support.constants import FAST
from tests.support.processes import run_python


def test_setup_against_the_collector(collector: Any) -> None:
    handle = setup(
        collector.project_token, collector.url, level="DEBUG", capture_exceptions=False, **FAST
    )
    log = logging.getLogger("app.shop")
    with user_context("u-42", name="Ann"):
        log.debug("cart loaded", extra={"items": 3})
    try:
        raise ValueError("bad coupon")
    except ValueError:
        log.exception("checkout failed", extra={"order": 7})
    assert handle.flush(5)
    stats = handle.stats()
    assert stats["delivered"] == 2 and stats["dropped_total"] == 0
    stored = {event["message"]: event for event in collector.events()}
    cart = stored["cart loaded"]
    assert cart["type"] == "log"
    assert cart["source"] == "app.shop"
    assert cart["data"]["@level"] == "Debug"
    assert cart["data"]["@user"] == {"identity": "u-42", "name": "Ann"}
    assert cart["data"]["items"] == 3
    error = stored["checkout failed"]
    assert error["type"] == "error"
    assert error["data"]["@simple_error"]["type"] == "ValueError"
    assert error["data"]["order"] == 7
    assert collector.events(level="error") == [error]


def test_uncaught_exception_reaches_the_collector(collector: Any) -> None:
    result = run_python(
        collector.url,
        ["-c", "import eventlog_handler; eventlog_handler.setup(); raise SystemError('x')"],
        EVENTLOG_API_KEY=collector.project_token,
    )
    assert result.returncode == 1
    (event,) = collector.events()
    assert event["data"]["@submission_method"] == "unhandled_exception"
    assert event["data"]["@level"] == "Fatal"
