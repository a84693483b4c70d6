"""``before_send``, ``ignore_loggers``, ``ignore_exceptions``, reserved keys and ``@version``,
observed in what a loopback server receives."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from eventlog_handler import EventLogHandler
from tests.support.accounting import accounted
from tests.support.constants import API_KEY
from tests.support.faultserver import FaultServer
from tests.support.fixtures import fresh_engines as fresh_engines  # autouse
from tests.support.processes import run_program
from tests.support.waits import wait_until

FAST = {"flush_interval": 0.05, "error_delay": 0.0, "server_settings": False}


class PaymentError(Exception):
    pass


class CardDeclined(PaymentError):
    pass


def logger_for(server: FaultServer, name: str = "dlv", **options: Any) -> logging.Logger:
    handler = EventLogHandler(API_KEY, server.url, **{**FAST, **options})
    logger = logging.getLogger(name)
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    return logger


def handler_of(logger: logging.Logger) -> EventLogHandler:
    handler = logger.handlers[0]
    assert isinstance(handler, EventLogHandler)
    return handler


def by_message(server: FaultServer) -> dict[str, dict[str, Any]]:
    return {str(event.get("message")): event for event in server.accepted}


def test_before_send_can_drop_edit_and_fail_without_losing_the_event(
    server: FaultServer, capsys: pytest.CaptureFixture[str]
) -> None:
    hints: list[dict[str, Any]] = []

    def before_send(event: dict[str, Any], hint: dict[str, Any]) -> Any:
        hints.append(hint)
        message = event.get("message")
        if message == "drop me":
            return None
        if message == "edit me":
            event["tags"] = [*event.get("tags", []), "edited"]
            event.setdefault("data", {})["note"] = object()  # not JSON: made safe after the hook
            return event
        if message == "break me":
            raise RuntimeError("the hook has a bug")
        return event

    log = logger_for(server, before_send=before_send)
    for message in ("drop me", "edit me", "break me", "plain"):
        log.warning(message)
    try:
        raise KeyError("k")
    except KeyError:
        log.exception("an error")
    handler = handler_of(log)
    assert wait_until(lambda: len(server.accepted) == 4, 10), server.accepted
    events = by_message(server)
    assert "drop me" not in events
    assert events["edit me"]["tags"] == ["edited"]
    assert isinstance(events["edit me"]["data"]["note"], str)
    assert "break me" in events  # sent unchanged
    stats = handler.stats()
    assert stats["dropped"]["filtered"] == 1
    assert stats["hook_errors"] == 1
    assert stats["captured"] == accounted(stats) == 5
    err = capsys.readouterr().err
    assert err.count("before_send raised RuntimeError") == 1, err
    [error_hint] = [hint for hint in hints if hint["exception"] is not None]
    assert isinstance(error_hint["exception"], KeyError)
    assert {hint["source"] for hint in hints} == {"dlv"}


def test_before_send_from_an_import_path(server: FaultServer) -> None:
    log = logger_for(server, before_send="tests.delivery.test_filters.tag_everything")
    log.info("tagged")
    assert wait_until(lambda: len(server.accepted) == 1, 10)
    assert server.accepted[0]["tags"] == ["from-a-path"]


def tag_everything(event: dict[str, Any], hint: dict[str, Any]) -> dict[str, Any]:
    event["tags"] = ["from-a-path"]
    return event


def test_a_before_send_that_is_not_callable_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="before_send"):
        EventLogHandler(API_KEY, before_send=42)
    with pytest.raises(ValueError, match="cannot import"):
        EventLogHandler(API_KEY, before_send="no.such.module.fn")


def test_ignore_loggers_and_their_children(server: FaultServer) -> None:
    handler = EventLogHandler(API_KEY, server.url, ignore_loggers=["dlv.chatty"], **FAST)
    for name in ("dlv.chatty", "dlv.chatty.sub", "dlv.chattybox", "dlv.other"):
        logger = logging.getLogger(name)
        logger.handlers[:] = [handler]
        logger.propagate = False
        logger.warning("from %s", name)
    assert wait_until(lambda: len(server.accepted) == 2, 10)
    assert set(by_message(server)) == {"from dlv.chattybox", "from dlv.other"}


def test_ignore_exceptions_by_class_or_name_including_subclasses(server: FaultServer) -> None:
    log = logger_for(server, ignore_exceptions=[PaymentError, "TimeoutError", "ssl.SSLError"])
    for exc in (CardDeclined("no"), TimeoutError("slow"), ValueError("bad")):
        try:
            raise exc
        except Exception:
            log.exception("failed with %s", type(exc).__name__)
    assert wait_until(lambda: len(server.accepted) == 1, 10)
    assert list(by_message(server)) == ["failed with ValueError"]
    stats = handler_of(log).stats()
    assert stats["dropped"]["filtered"] == 2
    assert stats["captured"] == accounted(stats) == 3


def test_extras_do_not_override_the_packages_own_keys(server: FaultServer) -> None:
    log = logger_for(server, version="2.4.1")
    log.warning(
        "impostor",
        extra={"@level": "Fatal", "@version": "0.0.0", "@simple_error": {"type": "Fake"}},
    )
    assert wait_until(lambda: len(server.accepted) == 1, 10)
    [event] = server.accepted
    assert event["@level"] == "Warn" and event["type"] == "log"
    assert event["data"]["@version"] == "2.4.1"
    assert event["data"]["_@level"] == "Fatal"
    assert event["data"]["_@version"] == "0.0.0"
    assert event["data"]["_@simple_error"] == {"type": "Fake"}
    assert "@simple_error" not in event and "@simple_error" not in event["data"]


def test_version_from_the_environment(server: FaultServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVENTLOG_VERSION", "9.9.9-rc1")
    log = logger_for(server)
    log.info("versioned")
    try:
        raise OSError("disk")
    except OSError:
        log.exception("an error")
    assert wait_until(lambda: len(server.accepted) == 2, 10)
    assert {event["data"]["@version"] for event in server.accepted} == {"9.9.9-rc1"}


def test_manual_stacking_through_extra(server: FaultServer) -> None:
    from eventlog_handler.wire._stacking import stack

    log = logger_for(server)
    log.error("gateway down", extra=stack("Payment gateway timeout", gateway="adyen"))
    assert wait_until(lambda: len(server.accepted) == 1, 10)
    assert server.accepted[0]["data"]["@stack"] == {
        "title": "Payment gateway timeout",
        "signature_data": {"gateway": "adyen"},
    }


def test_before_send_sees_uncaught_exceptions_and_their_level(tmp_path: Path) -> None:
    """The user's view: a program whose ``before_send`` drops one kind of error. Uncaught
    exceptions (a thread's, then the main thread's) come with the exception and their level
    in the hint, as logged errors do; a feature-usage event has no level (not ``Trace``)."""
    program = """
        import json, threading
        import eventlog_handler

        def hook(event, hint):
            exc = hint["exception"]
            print("HINT", json.dumps([type(exc).__name__ if exc else None, hint["level"]]),
                  flush=True)
            return None if isinstance(exc, LookupError) else event

        eventlog_handler.setup(before_send=hook, flush_interval=0.05, error_delay=0)
        eventlog_handler.submit_feature_usage("export")

        def work():
            raise KeyError("in a thread")

        thread = threading.Thread(target=work)
        thread.start()
        thread.join()
        raise ValueError("in main")
    """
    with FaultServer() as server:
        status, stderr, lines = run_program(program, server.url, tmp_path)
        hints = [tuple(json.loads(line[5:])) for line in lines if line.startswith("HINT ")]
        sent = list(server.accepted)
    assert status == 1, stderr  # the uncaught exception ends the program as before
    assert "ValueError: in main" in stderr
    assert len(hints) == 3, lines
    assert set(hints) == {("KeyError", "Error"), (None, None), ("ValueError", "Fatal")}, lines
    errors = [event for event in sent if event.get("type") == "error"]
    assert [event["@level"] for event in errors] == ["Fatal"], sent  # the KeyError was dropped
