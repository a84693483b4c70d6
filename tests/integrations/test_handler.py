"""EventLogHandler: configuration, lifecycle, shared engines and the recursion guard."""

from __future__ import annotations

import json
import logging
import logging.config
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from eventlog_handler import EventLogHandler
from eventlog_handler.delivery import _engine as transport
from tests.support.capture import CaptureServer, deliver
from tests.support.constants import API_KEY, FAST

MakeHandler = Callable[..., tuple[logging.Logger, EventLogHandler]]


def dict_config(server_url: str | None, **handler: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {"class": "eventlog_handler.EventLogHandler", "level": "INFO", **FAST}
    if server_url is not None:
        entry.update(server_url=server_url, api_key=API_KEY)
    entry.update(handler)
    config = {
        "version": 1,
        "disable_existing_loggers": False,
        "handlers": {"eventlog": entry},
        "loggers": {"app": {"handlers": ["eventlog"], "level": "DEBUG", "propagate": False}},
    }
    result: dict[str, Any] = json.loads(json.dumps(config))  # only JSON-able values
    return result


def app_handler() -> EventLogHandler:
    (handler,) = logging.getLogger("app").handlers
    assert isinstance(handler, EventLogHandler)
    return handler


def test_constructor_does_no_network_io(server: CaptureServer) -> None:
    handler = EventLogHandler(API_KEY, server.url)
    assert transport.engines() == []
    assert server.requests == []
    # A server that does not exist is fine too: nothing is contacted before the first event.
    EventLogHandler(API_KEY, "http://127.0.0.1:9", level="ERROR")
    assert transport.engines() == []
    assert handler.level == logging.NOTSET
    assert API_KEY not in repr(handler)


def test_dictconfig(server: CaptureServer) -> None:
    logging.config.dictConfig(dict_config(server.url, tags=["web", "eu-1"]))
    handler = app_handler()
    assert handler.level == logging.INFO
    logger = logging.getLogger("app")
    logger.debug("below the handler's level")
    logger.info("configured", extra={"k": "v"})
    (event,) = deliver(handler, server, 1)
    assert event["message"] == "configured"
    assert event["tags"] == ["web", "eu-1"]
    assert event["data"] == {"k": "v"}


def test_dictconfig_key_and_url_from_the_environment(
    server: CaptureServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVENTLOG_SERVER_URL", server.url)
    monkeypatch.setenv("EVENTLOG_API_KEY", API_KEY)
    logging.config.dictConfig(dict_config(None))
    handler = app_handler()
    assert handler.settings.server_url == server.url
    logging.getLogger("app").warning("from env")
    (event,) = deliver(handler, server, 1)
    assert event["message"] == "from env"


def test_dictconfig_reconfiguration_survives_close(server: CaptureServer) -> None:
    logging.config.dictConfig(dict_config(server.url, flush_timeout=30))
    first = app_handler()
    logging.getLogger("app").info("one")
    started = time.monotonic()
    # dictConfig closes the first handler while holding logging's lock, which the sending
    # thread needs to log: close() must not wait for it (no deadlock until the timeout).
    logging.config.dictConfig(dict_config(server.url, flush_timeout=30))
    assert time.monotonic() - started < 10
    second = app_handler()
    assert second is not first
    assert second.engine is first.engine  # shared, and still running
    logging.getLogger("app").info("two")
    first.handle(logging.LogRecord("app", logging.INFO, __file__, 1, "three", None, None))
    events = deliver(second, server, 3)
    assert [event["message"] for event in events] == ["one", "two", "three"]


def test_fileconfig(server: CaptureServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVENTLOG_SERVER_URL", server.url)
    monkeypatch.setenv("EVENTLOG_API_KEY", API_KEY)
    path = tmp_path / "logging.ini"
    path.write_text(
        textwrap.dedent(
            """\
            [loggers]
            keys = root, app

            [handlers]
            keys = eventlog

            [formatters]
            keys = plain

            [logger_root]
            level = WARNING
            handlers =

            [logger_app]
            level = DEBUG
            handlers = eventlog
            qualname = app
            propagate = 0

            [handler_eventlog]
            class = eventlog_handler.EventLogHandler
            level = INFO
            formatter = plain
            args = ()
            kwargs = {"tags": ["ini"], "flush_interval": 0.05, "error_delay": 0.01}

            [formatter_plain]
            format = %(levelname)s: %(message)s
            """
        )
    )
    logging.config.fileConfig(path, disable_existing_loggers=False)
    handler = app_handler()
    logging.getLogger("app").debug("filtered")
    logging.getLogger("app").info("from %s", "ini")
    (event,) = deliver(handler, server, 1)
    assert event["message"] == "INFO: from ini"
    assert event["tags"] == ["ini"]


def test_fileconfig_bad_setting_names_it(tmp_path: Path) -> None:
    path = tmp_path / "logging.ini"
    path.write_text(
        textwrap.dedent(
            """\
            [loggers]
            keys = root

            [handlers]
            keys = eventlog

            [formatters]
            keys =

            [logger_root]
            level = WARNING
            handlers = eventlog

            [handler_eventlog]
            class = eventlog_handler.EventLogHandler
            args = ()
            kwargs = {"queue_size": "many", "api_key": "%s"}
            """
        )
        % API_KEY
    )
    with pytest.raises(ValueError, match="queue_size"):
        logging.config.fileConfig(path, disable_existing_loggers=False)


@pytest.mark.parametrize(
    ("options", "setting"),
    [
        ({"queue_size": "many"}, "queue_size"),
        ({"flush_interval": -1}, "flush_interval"),
        ({"include_environment": "maybe"}, "include_environment"),
        ({"tags": 5}, "tags"),
        ({"level": "LOUD"}, "level"),
        ({"flush_timeout": "soon"}, "flush_timeout"),
    ],
)
def test_bad_settings_are_value_errors_naming_the_setting(
    options: dict[str, Any], setting: str
) -> None:
    arguments: dict[str, Any] = {"api_key": API_KEY, "server_url": "http://127.0.0.1:5000"}
    arguments.update(options)
    with pytest.raises(ValueError, match=setting):
        EventLogHandler(**arguments)
    config = dict_config("http://127.0.0.1:5000")
    config["handlers"]["eventlog"].update(options)
    with pytest.raises(ValueError) as caught:
        logging.config.dictConfig(config)
    assert setting in f"{caught.value} {caught.value.__cause__}"


@pytest.mark.parametrize(
    ("options", "setting"),
    [
        ({"api_key": None}, "EVENTLOG_API_KEY"),
        # Given in code: named as the option, not as the variable nobody set.
        ({"api_key": "short"}, "'api_key'"),
        ({"api_key": "has spaces in the middle"}, "'api_key'"),
        ({"server_url": "not a url"}, "'server_url'"),
        ({"server_url": "http://127.0.0.1:99999"}, "'server_url'"),
    ],
)
def test_a_missing_or_malformed_key_or_url_is_said_not_raised(
    options: dict[str, Any], setting: str, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    # The machine's environment, not the program: the program must run on without it.
    monkeypatch.delenv("EVENTLOG_API_KEY", raising=False)
    arguments: dict[str, Any] = {"api_key": API_KEY, "server_url": "http://127.0.0.1:5000"}
    arguments.update(options)
    handler = EventLogHandler(**arguments)
    assert handler.settings.problem is not None and setting in handler.settings.problem
    logger = logging.getLogger("unconfigured.test")
    logger.addHandler(handler)
    try:
        logger.warning("kept out")
    finally:
        logger.removeHandler(handler)
    stats = handler.stats()
    assert stats["dropped"]["unconfigured"] >= 1
    err = capsys.readouterr().err
    assert API_KEY not in err and "has spaces in the middle" not in err
    EventLogHandler(**arguments)  # said once per process
    assert setting not in capsys.readouterr().err


def test_unknown_option_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="flush_intervall"):
        EventLogHandler(API_KEY, flush_intervall=1)


def test_handlers_to_the_same_server_share_one_engine(server: CaptureServer) -> None:
    first = EventLogHandler(API_KEY, server.url, tags=["a"], **FAST)
    second = EventLogHandler(API_KEY, server.url + "/", tags=["b"], **FAST)
    other_key = EventLogHandler("Zz" * 20, server.url, **FAST)
    assert first.engine is second.engine
    assert other_key.engine is not first.engine
    record = logging.LogRecord("app", logging.INFO, __file__, 1, "both", None, None)
    first.handle(record)
    second.handle(record)
    events = deliver(first, server, 2)
    assert [event["tags"] for event in events] == [["a"], ["b"]]
    assert first.stats()["delivered"] == 2


def test_close_flushes_but_keeps_the_engine(
    make_handler: MakeHandler, server: CaptureServer
) -> None:
    logger, handler = make_handler(flush_interval=60)
    logger.info("pending at close")
    handler.close()  # a bounded flush
    assert [event["message"] for event in server.events] == ["pending at close"]
    logger.info("after close")
    events = deliver(handler, server, 2)
    assert events[1]["message"] == "after close"
    assert handler.stats()["worker_alive"]


def test_flush_is_bounded_when_the_server_is_down() -> None:
    handler = EventLogHandler(API_KEY, "http://127.0.0.1:9", flush_timeout=0.2, **FAST)
    handler.handle(logging.LogRecord("app", logging.INFO, __file__, 1, "lost", None, None))
    handler.close()  # returns after ~0.2 s, raising nothing
    assert handler.stats()["delivered"] == 0


def test_recursion_guard_with_urllib3_debug_logging(server: CaptureServer) -> None:
    root = logging.getLogger()
    root.setLevel(logging.DEBUG)
    logging.getLogger("urllib3").setLevel(logging.DEBUG)
    handler = EventLogHandler(API_KEY, server.url, **FAST)
    root.addHandler(handler)
    app = logging.getLogger("app")
    for index in range(20):
        app.debug("user record %d", index)
        if index % 5 == 0:
            assert handler.engine.flush(5)  # the worker logs through urllib3 meanwhile
    events = deliver(handler, server, 20)
    assert [event["message"] for event in events] == [f"user record {i}" for i in range(20)]
    assert handler.engine.flush(5)
    stats = handler.stats()
    assert stats["captured"] == 20
    assert stats["delivered"] == 20
    assert stats["queued"] == 0
    assert len(server.events) == 20


def test_ignored_loggers(make_handler: MakeHandler, server: CaptureServer) -> None:
    _, handler = make_handler()
    for name in (
        "urllib3",
        "urllib3.connectionpool",
        "requests",
        "requests.sessions",
        "charset_normalizer",
        "eventlog_handler",
        "eventlog_handler.delivery._engine",
    ):
        handler.handle(logging.LogRecord(name, logging.ERROR, __file__, 1, "skip", None, None))
    for name in ("urllib3x", "requests_oauthlib", "app.requests"):
        handler.handle(logging.LogRecord(name, logging.ERROR, __file__, 1, "keep", None, None))
    events = deliver(handler, server, 3)
    assert [event["source"] for event in events] == [
        "urllib3x",
        "requests_oauthlib",
        "app.requests",
    ]
    assert handler.stats()["captured"] == 3


def test_records_on_a_sender_thread_are_ignored(
    make_handler: MakeHandler, server: CaptureServer
) -> None:
    logger, handler = make_handler()

    def as_sender() -> None:
        transport.SENDER_THREADS.add(threading.get_ident())
        try:
            assert transport.is_sender_thread()
            logger.error("from a sending thread")
        finally:
            transport.SENDER_THREADS.discard(threading.get_ident())

    thread = threading.Thread(target=as_sender)
    thread.start()
    thread.join()
    logger.info("from the application")
    (event,) = deliver(handler, server, 1)
    assert event["message"] == "from the application"
    assert handler.stats()["captured"] == 1
