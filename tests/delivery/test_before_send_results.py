"""What a ``before_send`` hook does to an event, seen where it lands: in the local collector,
which reads a batch as the service does (a batch with a field of the wrong type becomes one log
message holding the whole body), and on the program's stderr."""

from __future__ import annotations

import datetime as dt
import decimal
import logging
import sys
from typing import Any

import pytest

from eventlog_handler import EventLogHandler
from eventlog_handler.collector import Collector
from tests.support.accounting import accounted
from tests.support.constants import API_KEY
from tests.support.faultserver import FaultServer
from tests.support.fixtures import collector as collector  # a fixture
from tests.support.fixtures import fresh_engines as fresh_engines  # autouse
from tests.support.waits import wait_until

FAST = {"flush_interval": 0.05, "error_delay": 0.0, "server_settings": False, "rollup_window": 0}


def logger_with(url: str, key: str, before_send: Any, name: str) -> logging.Logger:
    handler = EventLogHandler(key, url, before_send=before_send, **FAST)
    logger = logging.getLogger(name)
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    return logger


def enrich(event: dict[str, Any], hint: dict[str, Any]) -> dict[str, Any]:
    """What a program's hook does: the order's amount as the event's value, the server's
    clock as its date, a shard number as a tag, more context in the message; and a few
    mistakes: data as a list, a type that is no text, a reference id of its own making."""
    data = event.get("data", {})
    message = event["message"]
    if "amount" in data:
        event["value"] = decimal.Decimal(data["amount"])
    event["date"] = dt.datetime.now(dt.timezone.utc)
    event.setdefault("tags", []).append(data.get("shard", 0))
    event["message"] = message + " | context: " + "c" * 5000
    if message == "mistakes":
        event["data"] = ["not", "an", "object"]
        event["type"] = 7
        event["reference_id"] = "my id!"
        event["value"] = "12"
        event["@user"] = "bob"
    return event


def test_what_the_hook_returns_is_stored_as_events_the_service_reads(
    collector: Collector, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Decimal value, a datetime date and an int tag made the batch one the service can't
    read: it stored the whole body as one log message, and stats() said delivered. They are
    converted now; what can't be (data as a list, a type that is a number) is given back its
    value from before the hook and named on stderr."""
    log = logger_with(collector.url, collector.project_token, enrich, "shop.hooked")
    log.info("order placed", extra={"amount": "19.90", "shard": 3})
    log.info("another event in the same batch")
    log.warning("mistakes", extra={"order": 7})
    handler = log.handlers[0]
    assert isinstance(handler, EventLogHandler)
    assert handler.engine.flush(10.0)
    stats = handler.stats()
    assert stats["delivered"] == 3 == accounted(stats), stats
    stored = {event["message"].split(" | ")[0]: event for event in collector.events()}
    assert set(stored) == {"order placed", "another event in the same batch", "mistakes"}, stored
    placed = stored["order placed"]
    assert placed["value"] == 19.9
    assert placed["tags"] == ["3"]
    assert placed["date"].startswith(str(dt.datetime.now(dt.timezone.utc).year))
    assert len(placed["message"]) <= 2000
    assert stored["another event in the same batch"]["tags"] == ["0"]
    mistakes = stored["mistakes"]
    assert mistakes["type"] == "log" and mistakes["data"]["order"] == 7
    assert mistakes["value"] is None
    assert mistakes["reference_id"] != "my id!" and len(mistakes["reference_id"]) >= 8
    assert "@user" not in mistakes["data"]
    err = capsys.readouterr().err
    assert err.count("before_send set") == 1, err
    for field in ("'type'", "'value'", "'data'", "'reference_id'", "'@user'"):
        assert field in err, err
    assert stats["hook_errors"] == 1, stats


def test_a_hook_that_raises_with_a_secret_in_its_message_is_said_without_it(
    server: FaultServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """The hook's own call failed, and its exception quotes the program's key, a URL with a
    password and a password in a text: the stderr line showed all three."""

    def forward(event: dict[str, Any], hint: dict[str, Any]) -> dict[str, Any]:
        raise ConnectionError(
            f"audit forward failed: https://audit:Adm1nPassw0rd@audit.internal/in?api_key={API_KEY}"
            " (password=hunter22)"
        )

    log = logger_with(server.url, API_KEY, forward, "shop.audited")
    log.warning("order placed")
    assert wait_until(lambda: len(server.accepted) == 1, 10), server.accepted
    err = capsys.readouterr().err
    assert "before_send raised ConnectionError: audit forward failed" in err, err
    for secret in (API_KEY, API_KEY[4:], "Adm1nPassw0rd", "hunter22"):
        assert secret not in err, err


def test_a_hook_that_exits_does_not_stop_delivery(server: FaultServer) -> None:
    """``sys.exit()`` in a helper the hook calls raised SystemExit on the worker, which ended
    it: the events after it were never sent."""

    def picky(event: dict[str, Any], hint: dict[str, Any]) -> dict[str, Any]:
        if event.get("message") == "bad":
            sys.exit("cannot enrich")
        return event

    log = logger_with(server.url, API_KEY, picky, "shop.picky")
    for message in ("first", "bad", "third"):
        log.warning(message)
    handler = log.handlers[0]
    assert isinstance(handler, EventLogHandler)
    assert handler.engine.flush(10.0)
    log.warning("after")
    assert handler.engine.flush(10.0)
    assert sorted(event["message"] for event in server.accepted) == [
        "after",
        "bad",
        "first",
        "third",
    ]
    stats = handler.stats()
    assert stats["worker_alive"] and stats["hook_errors"] == 1, stats


class LookupError_(Exception):
    """An exception whose ``__getattr__`` looks names up in its fields: ``KeyError`` for
    a name it lacks (``__notes__``), where ``getattr``'s default expects AttributeError."""

    def __init__(self, fields: dict[str, Any]) -> None:
        super().__init__(fields.get("detail", "api error"))
        self.fields = fields

    def __getattr__(self, name: str) -> Any:
        return self.__dict__["fields"][name]


def test_an_exception_whose_getattr_raises_keyerror_is_still_sent(server: FaultServer) -> None:
    log = logger_with(server.url, API_KEY, None, "shop.api")
    try:
        raise LookupError_({"detail": "card declined", "code": 402})
    except LookupError_:
        log.exception("payment failed")
    assert wait_until(lambda: len(server.accepted) == 1, 10), server.accepted
    [event] = server.accepted
    assert event["@simple_error"]["message"] == "card declined"
    handler = log.handlers[0]
    assert isinstance(handler, EventLogHandler)
    assert handler.stats()["emit_errors"] == 0


def test_a_log_call_that_fails_to_become_an_event_is_said_once(
    server: FaultServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A capture that fails (a bug, or an object nothing can read) loses the event: counted in
    ``emit_errors`` and, the first time, said on stderr; before, only the count knew."""
    from eventlog_handler import handler as handler_module
    from eventlog_handler.delivery import _stderr

    monkeypatch.setattr(_stderr, "_SAID", set())  # said once per process: this one is new

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"cannot read it (key {API_KEY})")

    monkeypatch.setattr(handler_module, "capture_record", broken)
    log = logger_with(server.url, API_KEY, None, "shop.broken")
    log.warning("one")
    log.warning("two")
    handler = log.handlers[0]
    assert isinstance(handler, EventLogHandler)
    assert handler.stats()["emit_errors"] == 2
    err = capsys.readouterr().err
    assert err.count("a log call could not be made an event (RuntimeError: cannot read it") == 1
    assert API_KEY not in err and "emit_errors" in err, err


def test_a_hook_that_edits_one_events_user_leaves_the_next_events_user_alone(
    collector: Collector,
) -> None:
    """The builder gives events of the same user in a row one ``@user`` object; a hook that
    took the e-mail out of one event's user (in place) took it out of every event after it."""
    from eventlog_handler import user_context

    def hide_email_of_errors(event: dict[str, Any], hint: dict[str, Any]) -> dict[str, Any]:
        if event.get("message") == "payment failed":
            event["@user"]["data"].pop("email", None)
        return event

    log = logger_with(collector.url, collector.project_token, hide_email_of_errors, "shop.users")
    handler = log.handlers[0]
    assert isinstance(handler, EventLogHandler)
    with user_context("u-1", data={"email": "ann@example.org"}):
        log.warning("payment failed")
        assert handler.engine.flush(10.0)
        log.warning("retried")
        assert handler.engine.flush(10.0)
    stored = {event["message"]: event for event in collector.events()}
    assert stored["payment failed"]["data"]["@user"] == {"identity": "u-1", "data": {}}, stored
    assert stored["retried"]["data"]["@user"] == {
        "identity": "u-1",
        "data": {"email": "ann@example.org"},
    }, stored
