"""What the official clients offer and every Exceptionless user finds first: the last error's
reference id (for an error page), feature-usage events and not-found events, with the
service's types and sources, at a loopback server."""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest

import eventlog_handler
from eventlog_handler.wsgi import EventLogMiddleware
from tests.support.constants import API_KEY, FAST
from tests.support.faultserver import FaultServer
from tests.support.fixtures import fault_server as fault_server  # ``server``: a FaultServer here
from tests.support.waits import wait_until


@pytest.fixture
def handle(server: FaultServer) -> Iterator[Any]:
    setup = eventlog_handler.setup(API_KEY, server.url, capture_exceptions=False, **FAST)
    yield setup
    setup.close(5)


def test_last_reference_id_is_the_id_that_arrived(server: FaultServer, handle: Any) -> None:
    contextvars.Context().run(_last_reference_id_is_the_id_that_arrived, server)


def _last_reference_id_is_the_id_that_arrived(server: FaultServer) -> None:
    assert eventlog_handler.last_reference_id() is None  # a fresh context: none yet
    try:
        raise KeyError("order 7")
    except KeyError:
        logging.getLogger("shop").exception("checkout failed")
    reference = eventlog_handler.last_reference_id()
    assert reference is not None
    assert wait_until(lambda: len(server.accepted) == 1, 10)
    assert server.accepted[0]["reference_id"] == reference
    logging.getLogger("shop").warning("not an error: the last id stays")
    assert eventlog_handler.last_reference_id() == reference


def test_an_error_after_the_exception_in_its_except_block_is_the_last(
    server: FaultServer, handle: Any
) -> None:
    contextvars.Context().run(_an_error_after_the_exception_is_the_last, server)


def _an_error_after_the_exception_is_the_last(server: FaultServer) -> None:
    log = logging.getLogger("shop")
    try:
        raise KeyError("order 7")
    except KeyError:
        log.exception("checkout failed")
        first = eventlog_handler.last_reference_id()
        log.error("giving up on order 7")
        last = eventlog_handler.last_reference_id()  # still in the except block
    assert first is not None and last is not None and last != first
    assert wait_until(lambda: len(server.accepted) == 2, 10)
    by_message = {event["message"]: event["reference_id"] for event in server.accepted}
    assert (by_message["checkout failed"], by_message["giving up on order 7"]) == (first, last)


def test_each_thread_has_its_own_last_reference_id(server: FaultServer, handle: Any) -> None:
    seen: list[Any] = []

    def other() -> None:
        seen.append(eventlog_handler.last_reference_id())

    logging.getLogger("shop").error("in the main thread")
    assert eventlog_handler.last_reference_id() is not None
    thread = threading.Thread(target=other)
    thread.start()
    thread.join()
    assert seen == [None]


def test_feature_usage_and_not_found_have_the_services_types(
    server: FaultServer, handle: Any
) -> None:
    with eventlog_handler.user_context("u-1"):
        assert eventlog_handler.submit_feature_usage("export-csv")
    assert eventlog_handler.submit_not_found("/missing/page")
    assert wait_until(lambda: len(server.accepted) == 2, 10)
    by_type = {event["type"]: event for event in server.accepted}
    assert by_type["usage"]["source"] == "export-csv"
    assert by_type["usage"]["@user"]["identity"] == "u-1"
    assert "message" not in by_type["usage"]
    assert by_type["404"]["source"] == "/missing/page"


def test_an_empty_feature_or_path_is_said_and_not_sent(
    server: FaultServer, handle: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    assert eventlog_handler.submit_feature_usage("") is False
    assert eventlog_handler.submit_feature_usage("   ") is False
    assert eventlog_handler.submit_not_found("") is False
    assert eventlog_handler.submit_feature_usage("export")
    assert handle.flush(5)
    assert [(event["type"], event["source"]) for event in server.accepted] == [("usage", "export")]
    said = capfd.readouterr().err
    assert said.count("submit_feature_usage: the feature name is empty; nothing was sent") == 1
    assert said.count("submit_not_found: the path is empty; nothing was sent") == 1


def test_in_a_request_a_404_carries_the_request_and_the_id_is_the_requests(
    server: FaultServer, handle: Any
) -> None:
    answers: dict[str, Any] = {}

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        answers["before"] = eventlog_handler.last_reference_id()
        logging.getLogger("shop").error("payment failed")
        answers["id"] = eventlog_handler.last_reference_id()
        eventlog_handler.submit_not_found(environ["PATH_INFO"])
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not here"]

    wrapped = EventLogMiddleware(app)
    environ = {
        "REQUEST_METHOD": "GET", "PATH_INFO": "/nowhere", "SERVER_NAME": "shop.test",
        "SERVER_PORT": "80", "wsgi.url_scheme": "http", "HTTP_USER_AGENT": "tester/1.0",
    }  # fmt: skip
    outside = eventlog_handler.last_reference_id()  # this thread's, from earlier tests
    list(wrapped(environ, lambda status, headers: None))
    assert answers["before"] is None
    assert answers["id"] is not None
    assert eventlog_handler.last_reference_id() == outside  # the request's id stays in it
    assert outside != answers["id"]
    assert wait_until(lambda: len(server.accepted) == 2, 10)
    by_type = {event["type"]: event for event in server.accepted}
    assert by_type["404"]["data"]["@request"]["path"] == "/nowhere"
    assert by_type["log"]["reference_id"] == answers["id"]


def test_value_critical_and_references_from_extra(server: FaultServer, handle: Any) -> None:
    logging.getLogger("shop").warning(
        "big order",
        extra={"@value": 1250.5, "@critical": True, "@ref:order": "order-000123", "n": 1},
    )
    logging.getLogger("shop").warning("not a number", extra={"@value": "a lot"})
    assert handle.flush(10)
    first, second = server.accepted
    assert first["value"] == 1250.5
    assert "Critical" in first["tags"]
    assert first["data"]["@ref:order"] == "order-000123"  # a reference, never masked
    assert "@value" not in first["data"] and "@critical" not in first["data"]
    assert "value" not in second and second["data"]["@value"] == "a lot"


def test_the_services_type_settings_turn_usage_and_404_off(server: FaultServer) -> None:
    server.config = {"version": 2, "settings": {"@@usage:internal-*": "false", "@@404:*": "off"}}
    setup = eventlog_handler.setup(API_KEY, server.url, capture_exceptions=False, **FAST)
    try:
        logging.getLogger("shop").warning("starts the worker, which fetches the settings")
        assert wait_until(lambda: setup.stats()["server_settings_version"] == 2, 10)
        assert not eventlog_handler.submit_feature_usage("internal-report")
        assert eventlog_handler.submit_feature_usage("export-csv")
        assert not eventlog_handler.submit_not_found("/missing")
        assert setup.flush(10)
        assert setup.stats()["dropped"]["filtered"] == 2
    finally:
        setup.close(5)
    assert [e.get("source") for e in server.accepted if e["type"] != "log"] == ["export-csv"]
