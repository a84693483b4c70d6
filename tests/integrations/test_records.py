"""Record → event: every field of the mapping, end to end through a loopback server."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import pytest

from eventlog_handler import EventLogHandler, add_tags, set_user
from eventlog_handler.capture._records import record_to_event
from eventlog_handler.settings import MASK, Settings
from eventlog_handler.wire._dates import format_date, parse_date
from eventlog_handler.wire._extras import RESERVED_ATTRS
from eventlog_handler.wire._levels import level_name
from eventlog_handler.wire._logs import log_event
from tests.support.capture import CaptureServer, deliver
from tests.support.constants import API_KEY
from tests.support.processes import run_python

MakeHandler = Callable[..., tuple[logging.Logger, EventLogHandler]]


@pytest.mark.parametrize(
    ("levelno", "expected"),
    [
        (1, "Trace"),
        (5, "Trace"),
        (logging.DEBUG, "Debug"),
        (15, "Debug"),
        (logging.INFO, "Info"),
        (25, "Info"),
        (logging.WARNING, "Warn"),
        (logging.ERROR, "Error"),
        (45, "Error"),
        (logging.CRITICAL, "Fatal"),
        (60, "Fatal"),
    ],
)
def test_level_names(levelno: int, expected: str) -> None:
    assert level_name(levelno) == expected


def test_levels_source_message_and_date(make_handler: MakeHandler, server: CaptureServer) -> None:
    logger, handler = make_handler()
    logger.log(5, "trace %s", "it")
    logger.debug("debug")
    logger.info("user %s did %d things", "ann", 3)
    logger.log(25, "custom level")
    logger.warning("warn")
    logger.error("error")
    logger.critical("critical")
    # Errors (and logs at ERROR or above) go first: in the order they were logged, by date.
    events = sorted(deliver(handler, server, 7), key=lambda event: event["date"])
    by_message = {event["message"]: event for event in events}
    assert [event["@level"] for event in events] == [
        "Trace",
        "Debug",
        "Info",
        "Info",
        "Warn",
        "Error",
        "Fatal",
    ]
    event = by_message["user ann did 3 things"]
    assert event["type"] == "log"
    assert event["source"] == "app"
    assert server.requests[0]["authorization"] == f"Bearer {API_KEY}"
    assert server.requests[0]["path"] == "/api/v2/events"
    assert len({e["reference_id"] for e in events}) == 7
    assert "data" not in event  # no extras, nothing else


def test_date_is_record_created() -> None:
    settings = Settings(api_key=API_KEY)
    record = logging.LogRecord("app", logging.INFO, __file__, 1, "m", None, None)
    record.created = 1_900_000_000.25
    event = record_to_event(record, settings)
    assert event["date"] == format_date(1_900_000_000.25)
    assert parse_date(event["date"]).timestamp() == pytest.approx(1_900_000_000.25)


def test_extras_become_data_and_reserved_attributes_do_not(
    make_handler: MakeHandler, server: CaptureServer
) -> None:
    logger, handler = make_handler()

    class Thing:
        def __str__(self) -> str:
            return "a thing"

    logger.info(
        "with extras",
        extra={"order_id": 17, "amount": 9.5, "nested": {"a": [1, 2]}, "thing": Thing()},
    )
    (event,) = deliver(handler, server, 1)
    assert event["data"] == {
        "order_id": 17,
        "amount": 9.5,
        "nested": {"a": [1, 2]},
        "thing": "a thing",
    }


def test_reserved_attributes_cover_a_fresh_record_and_task_name() -> None:
    fresh = vars(logging.LogRecord("x", logging.INFO, "p", 1, "m", None, None))
    assert set(fresh) <= RESERVED_ATTRS
    assert {"taskName", "message", "asctime"} <= RESERVED_ATTRS
    record = logging.LogRecord("x", logging.INFO, "p", 1, "m", None, None)
    record.taskName = "Task-1"  # what Python 3.12+ sets
    record.custom = "kept"
    event = record_to_event(record, Settings(api_key=API_KEY))
    assert event["data"] == {"custom": "kept"}


def test_formatter_is_honoured_without_traceback(
    make_handler: MakeHandler, server: CaptureServer
) -> None:
    logger, handler = make_handler()
    handler.setFormatter(logging.Formatter("[%(name)s] %(levelname)s %(message)s"))
    logger.warning("hello %s", "world")
    try:
        _ = 1 / 0
    except ZeroDivisionError:
        logger.exception("failed %d", 2)
    error, plain = deliver(handler, server, 2)  # errors are sent first
    assert plain["message"] == "[app] WARNING hello world"
    assert error["message"] == "[app] ERROR failed 2"
    assert "Traceback" not in error["message"]
    assert error["@simple_error"]["type"] == "ZeroDivisionError"


def test_arguments_that_do_not_fit_the_template(
    make_handler: MakeHandler, server: CaptureServer
) -> None:
    logger, handler = make_handler()
    logger.info("%d items", "x")
    logger.info("%s and %s", "only one")
    first, second = deliver(handler, server, 2)
    assert first["message"] == "%d items"
    assert first["data"]["@message_args"] == ["x"]
    assert "TypeError" in first["data"]["@format_error"]
    assert second["message"] == "%s and %s"
    assert second["data"]["@message_args"] == ["only one"]
    assert handler.emit_errors == 0


def test_arguments_that_do_not_fit_through_a_formatter(
    make_handler: MakeHandler, server: CaptureServer
) -> None:
    logger, handler = make_handler()
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    logger.info("%d items", "x")
    (event,) = deliver(handler, server, 1)
    assert event["message"] == "%d items"
    assert event["data"]["@message_args"] == ["x"]


def test_exception_becomes_the_error_form(make_handler: MakeHandler, server: CaptureServer) -> None:
    logger, handler = make_handler()

    def fail() -> None:
        table: dict[str, int] = {}
        try:
            table["missing"]
        except KeyError as exc:
            raise RuntimeError("lookup failed") from exc

    try:
        fail()
    except RuntimeError:
        logger.exception("could not %s", "look up", extra={"order_id": 5})
    error = ValueError("given as object")
    logger.error("explicit", exc_info=error)
    first, second = deliver(handler, server, 2)
    assert first["type"] == "error"
    assert first["message"] == "could not look up"
    assert first["@level"] == "Error"
    assert first["source"] == "app"
    simple = first["@simple_error"]
    assert simple["type"] == "RuntimeError"
    assert simple["message"] == "lookup failed"
    assert simple["stack_trace"].startswith("Traceback (most recent call last):")
    assert "in fail" in simple["stack_trace"]
    assert simple["inner"]["type"] == "KeyError"
    assert first["data"]["order_id"] == 5
    environment = first["data"]["@environment"]
    assert environment["process_id"]
    assert environment["thread_name"] == threading.current_thread().name
    assert environment["o_s_name"]
    assert second["@simple_error"]["type"] == "ValueError"
    assert second["@simple_error"]["stack_trace"] == "ValueError"


def test_log_events_carry_no_environment_and_errors_can_drop_it(
    make_handler: MakeHandler, server: CaptureServer
) -> None:
    logger, handler = make_handler(include_environment=False)
    try:
        raise OSError("disk")
    except OSError:
        logger.exception("io")
    (event,) = deliver(handler, server, 1)
    assert "@environment" not in event.get("data", {})


def test_exception_outside_an_except_block_is_a_log(
    make_handler: MakeHandler, server: CaptureServer
) -> None:
    logger, handler = make_handler()
    logger.exception("nothing to see")  # exc_info == (None, None, None)
    (event,) = deliver(handler, server, 1)
    assert event["type"] == "log"
    assert event["message"] == "nothing to see"


def test_stack_info_is_kept_in_data(make_handler: MakeHandler, server: CaptureServer) -> None:
    logger, handler = make_handler()
    logger.info("where am I", stack_info=True)
    (event,) = deliver(handler, server, 1)
    assert event["data"]["@stack_info"].startswith("Stack (most recent call last):")
    assert "test_stack_info_is_kept_in_data" in event["data"]["@stack_info"]


def test_tags_from_handler_context_and_record(
    make_handler: MakeHandler, server: CaptureServer
) -> None:
    logger, handler = make_handler(tags=["svc", "eu"])
    logger.info("default tags")
    with add_tags("checkout"):
        logger.info("record tags", extra={"tags": ["beta", "svc"]})
    logger.info("one tag as a string", extra={"tags": "solo"})
    first, second, third = deliver(handler, server, 3)
    assert first["tags"] == ["svc", "eu"]
    assert second["tags"] == ["svc", "eu", "checkout", "beta"]
    assert "tags" not in second.get("data", {})
    assert third["tags"] == ["svc", "eu", "solo"]


def test_context_user_and_per_record_override(
    make_handler: MakeHandler, server: CaptureServer
) -> None:
    logger, handler = make_handler()
    logger.info("anonymous")
    with set_user("u-42", name="Ann", data={"plan": "pro"}):
        logger.info("as ann")
        logger.info("as bob", extra={"@user": {"identity": "u-7", "name": "Bob"}})
        logger.info("identity only", extra={"@user": "u-9"})
    logger.info("anonymous again")
    events = deliver(handler, server, 5)
    assert "@user" not in events[0]
    assert events[1]["@user"] == {"identity": "u-42", "name": "Ann", "data": {"plan": "pro"}}
    assert events[2]["@user"] == {"identity": "u-7", "name": "Bob"}
    assert "@user" not in events[2].get("data", {})
    assert events[3]["@user"] == {"identity": "u-9"}
    assert "@user" not in events[4]


def test_data_exclusions_are_applied(make_handler: MakeHandler, server: CaptureServer) -> None:
    logger, handler = make_handler(data_exclusions=["password", "card"])
    logger.info(
        "signup",
        extra={"password": "hunter2", "credit_card": "4111", "nested": {"Password": "x"}, "ok": 1},
    )
    try:
        raise ValueError("boom")
    except ValueError:
        logger.exception("failed", extra={"user_password": "p"})
    error, log = deliver(handler, server, 2)  # errors are sent first
    assert log["data"] == {
        "password": MASK,
        "credit_card": MASK,
        "nested": {"Password": MASK},
        "ok": 1,
    }
    assert error["data"]["user_password"] == MASK


def test_default_data_exclusions(make_handler: MakeHandler, server: CaptureServer) -> None:
    logger, handler = make_handler()
    logger.info("login", extra={"api_key": "k", "session_id": "s", "who": "ann"})
    (event,) = deliver(handler, server, 1)
    assert event["data"] == {"api_key": MASK, "session_id": MASK, "who": "ann"}


def test_emit_never_raises(make_handler: MakeHandler, server: CaptureServer) -> None:
    logger, handler = make_handler()

    class Hostile:
        def __str__(self) -> str:
            raise RuntimeError("no str")

        def __repr__(self) -> str:
            raise RuntimeError("no repr")

    logger.info(Hostile())
    logger.info("bad %s", Hostile())
    logger.info("extra", extra={"hostile": Hostile()})
    events = deliver(handler, server, 3)
    assert all(event["type"] == "log" for event in events)
    assert "unprintable" in events[2]["data"]["hostile"]
    assert handler.emit_errors == 0


def test_broken_record_is_counted_not_raised(
    make_handler: MakeHandler, monkeypatch: pytest.MonkeyPatch
) -> None:
    logger, handler = make_handler()
    monkeypatch.setattr(logging, "raiseExceptions", True)

    def explode(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("conversion bug")

    monkeypatch.setattr("eventlog_handler.handler.capture_record", explode)
    logger.info("lost but harmless")
    assert handler.emit_errors == 1
    assert handler.last_emit_error == "RuntimeError: conversion bug"
    handler.handleError(logging.LogRecord("app", 20, "p", 1, "m", None, None))
    assert handler.stats()["emit_errors"] == 2


def test_large_and_odd_values(make_handler: MakeHandler, server: CaptureServer) -> None:
    logger, handler = make_handler()
    logger.info("x" * 5000, extra={"big": 2**70, "nan": float("nan"), "b": b"\x00\x01"})
    (event,) = deliver(handler, server, 1)
    assert len(event["message"]) <= 2000
    assert event["data"]["big"] == str(2**70)
    assert event["data"]["nan"] == "NaN"


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"a": 1, "b": "two", "c": 3.5, "d": None, "e": True, "password": "x"},
        {"nested": {"x": [1]}},  # not flat: the general path
        {"big": 2**80},
    ],
)
def test_fast_path_builds_what_log_event_builds(extra: dict[str, Any]) -> None:
    settings = Settings(api_key=API_KEY, tags=("t",))
    record = logging.LogRecord("app", logging.INFO, __file__, 1, "m %s", ("x",), None)
    record.__dict__.update(extra)
    with set_user("u-1", name="Ann"):
        built = record_to_event(record, settings)
        expected = log_event(
            "m x",
            date=record.created,
            user={"identity": "u-1", "name": "Ann"},
            level="Info",
            source="app",
            tags=["t"],
            data=extra,
            exclusions=settings.data_exclusions,
        )
    built.pop("reference_id")
    expected.pop("reference_id")
    assert built == expected
    assert list(built) == list(expected)


def test_importing_the_package_does_not_need_structlog(server: CaptureServer) -> None:
    code = (
        "import sys; sys.modules['structlog'] = None\n"
        "import eventlog_handler, eventlog_handler.structlog\n"
        "assert eventlog_handler.EventLogHandler and eventlog_handler.structlog.EventLogProcessor\n"
        "print('imported')"
    )
    result = run_python(server.url, ["-c", code])
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "imported"
