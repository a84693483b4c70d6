"""setup(): the handler on the root logger, the level semantics, the hooks, the handle."""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import eventlog_handler
from eventlog_handler import EventLogHandler, EventLogSetup, setup
from eventlog_handler import _setup as configure
from eventlog_handler.settings import DEFAULT_SERVER_URL
from tests.support.capture import CaptureServer
from tests.support.constants import API_KEY, FAST
from tests.support.processes import marks, run_program


def root_eventlog_handlers() -> list[EventLogHandler]:
    return [h for h in logging.getLogger().handlers if isinstance(h, EventLogHandler)]


def messages(handle: EventLogSetup, server: CaptureServer, count: int) -> list[str]:
    assert handle.flush(5)
    events = server.wait_for(count, timeout=5)
    assert len(events) == count, events
    return [event["message"] for event in events]


def test_setup_attaches_the_handler_and_hooks(server: CaptureServer) -> None:
    handle = setup(API_KEY, server.url, force_hooks=True, **FAST)
    assert root_eventlog_handlers() == [handle.handler]
    assert handle.hooks is not None and handle.hooks.active
    assert getattr(sys.excepthook, "__eventlog_hooks__", None) is handle.hooks
    assert getattr(threading.excepthook, "__eventlog_hooks__", None) is handle.hooks
    assert configure.current() is handle
    logging.getLogger("app").info("hello")
    assert messages(handle, server, 1) == ["hello"]
    stats = handle.stats()
    assert stats["delivered"] == 1
    assert stats["dropped_total"] == 0


def test_info_arrives_although_the_root_logger_defaults_to_warning(
    server: CaptureServer,
) -> None:
    root = logging.getLogger()
    root.setLevel(logging.WARNING)
    handle = setup(API_KEY, server.url, level="INFO", capture_exceptions=False, **FAST)
    assert root.level == logging.INFO
    assert handle.handler.level == logging.INFO
    app = logging.getLogger("app")
    app.debug("debug is below the level")
    app.info("info arrives")
    app.warning("warning arrives")
    assert messages(handle, server, 2) == ["info arrives", "warning arrives"]


def test_root_logger_is_never_raised(server: CaptureServer) -> None:
    root = logging.getLogger()
    root.setLevel(logging.DEBUG)
    handle = setup(API_KEY, server.url, level=logging.WARNING, capture_exceptions=False, **FAST)
    assert root.level == logging.DEBUG  # other handlers still get DEBUG
    logging.getLogger("app").info("below the handler's level")
    logging.getLogger("app").error("sent")
    assert messages(handle, server, 1) == ["sent"]


def test_a_logger_with_its_own_level_still_filters(server: CaptureServer) -> None:
    handle = setup(API_KEY, server.url, level="DEBUG", capture_exceptions=False, **FAST)
    noisy = logging.getLogger("app")
    noisy.setLevel(logging.ERROR)
    noisy.warning("filtered by the logger")
    noisy.error("passes")
    logging.getLogger("other").debug("debug of another logger")
    assert messages(handle, server, 2) == ["passes", "debug of another logger"]


def test_close_restores_the_root_level_and_the_hooks(server: CaptureServer) -> None:
    root = logging.getLogger()
    root.setLevel(logging.WARNING)
    previous_hooks = (sys.excepthook, threading.excepthook)
    handle = setup(API_KEY, server.url, level="INFO", force_hooks=True, **FAST)
    logging.getLogger("app").info("before close")
    assert handle.close(5)
    assert [event["message"] for event in server.events] == ["before close"]
    assert root.level == logging.WARNING
    assert root_eventlog_handlers() == []
    assert (sys.excepthook, threading.excepthook) == previous_hooks
    assert configure.current() is None
    assert not handle.stats()["worker_alive"]


def test_setup_twice_does_not_send_twice(server: CaptureServer) -> None:
    previous_hook = sys.excepthook
    first = setup(API_KEY, server.url, force_hooks=True, **FAST)
    second = setup(API_KEY, server.url, force_hooks=True, tags=["second"], **FAST)
    assert root_eventlog_handlers() == [second.handler]
    assert first.closed and not second.closed
    assert first.hooks is not None and not first.hooks.active
    assert second.hooks is not None
    assert sys.excepthook.__eventlog_hooks__ is second.hooks  # type: ignore[attr-defined]
    logging.getLogger("app").warning("once")
    assert messages(second, server, 1) == ["once"]
    assert server.events[0]["tags"] == ["second"]
    second.close(5)
    assert sys.excepthook is previous_hook


def _mark(letter: str) -> Callable[..., dict[str, Any]]:
    def mark(event: dict[str, Any], hint: Any = None) -> dict[str, Any]:
        event["tags"] = [*event.get("tags", []), letter]
        return event

    return mark


def test_a_new_setup_brings_its_own_before_send(server: CaptureServer) -> None:
    # One engine per server and key, made with the first setup's settings: the hook that may
    # keep secrets off the server is still each setup's own, for every kind of event.
    first = setup(API_KEY, server.url, before_send=_mark("A"), force_hooks=True, **FAST)
    logging.getLogger("app").warning("first")
    assert first.flush(5)
    first.close(5)
    second = setup(API_KEY, server.url, before_send=_mark("B"), force_hooks=True, **FAST)
    logging.getLogger("app").warning("second")
    try:
        raise ValueError("captured")
    except ValueError as exc:
        eventlog_handler.capture_exception(exc)
    eventlog_handler.submit_feature_usage("export")
    assert second.hooks is not None
    second.hooks.report(RuntimeError("uncaught"), level="Fatal", submission_method="test")
    assert second.flush(5)
    events = server.wait_for(5, timeout=5)
    marks = {
        event.get("message") or event.get("source") or event["@simple_error"]["message"]: event[
            "tags"
        ]
        for event in events
    }
    assert marks == {
        "first": ["A"],
        "second": ["B"],
        "captured": ["B"],
        "export": ["B"],
        "uncaught": ["B"],
    }, events
    third = setup(API_KEY, server.url, **FAST)
    logging.getLogger("app").warning("third")
    assert third.flush(5)
    assert "tags" not in server.wait_for(6, timeout=5)[-1]
    third.close(5)


def test_hooks_are_skipped_in_interactive_sessions(
    server: CaptureServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "ps1", ">>> ", raising=False)
    previous = sys.excepthook
    handle = setup(API_KEY, server.url, **FAST)
    assert handle.hooks is None
    assert sys.excepthook is previous
    forced = setup(API_KEY, server.url, force_hooks=True, **FAST)
    assert forced.hooks is not None and sys.excepthook is not previous


def test_setup_reads_the_environment(
    server: CaptureServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVENTLOG_SERVER_URL", server.url)
    monkeypatch.setenv("EVENTLOG_API_KEY", API_KEY)
    handle = eventlog_handler.setup(capture_exceptions=False)
    assert handle.handler.settings.server_url == server.url
    assert API_KEY not in repr(handle)


def test_setup_bad_settings(
    server: CaptureServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("EVENTLOG_API_KEY", raising=False)
    handle = setup(None, server.url)  # no key: said on stderr, not raised; nothing is sent
    assert handle.handler.settings.problem is not None
    assert "EVENTLOG_API_KEY" in handle.handler.settings.problem
    handle.close()
    capsys.readouterr()
    # A malformed URL: the handle's repr says what is wrong, not the default URL in its place.
    handle = setup(API_KEY, "127.0.0.1:5000")
    assert "unconfigured" in repr(handle) and "must be an http:// or https:// URL" in repr(handle)
    assert DEFAULT_SERVER_URL not in repr(handle)
    # So do the handler's and a structlog processor's (they named the default URL instead).
    from eventlog_handler.structlog import EventLogProcessor

    for made in (handle.handler, EventLogProcessor(api_key=API_KEY, server_url="127.0.0.1:5000")):
        assert "unconfigured: nothing is sent" in repr(made), repr(made)
        assert DEFAULT_SERVER_URL not in repr(made)
    handle.close()
    capsys.readouterr()
    # A malformed level is said, naming it, and the default (INFO) applies: setup() never raises.
    handle = setup(API_KEY, server.url, level="chatty", **FAST)
    said = capsys.readouterr().err
    assert "'level'" in said and "chatty" in said and "INFO is used" in said
    assert handle.handler.level == logging.INFO
    assert root_eventlog_handlers() == [handle.handler]
    logging.getLogger("app").info("sent at the default level")
    assert messages(handle, server, 1) == ["sent at the default level"]


def test_a_malformed_server_url_is_named_where_it_came_from(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A URL passed in code is not blamed on the environment variable, and one from the
    environment names its variable (the reader looks where the message points)."""
    monkeypatch.delenv("EVENTLOG_SERVER_URL", raising=False)
    handle = setup(API_KEY, "ftp://in.code")
    problem = handle.handler.settings.problem or ""
    assert "'server_url'" in problem and "ftp://in.code" in problem
    assert "EVENTLOG_SERVER_URL" not in problem
    handle.close()
    monkeypatch.setenv("EVENTLOG_SERVER_URL", "ftp://from.environment")
    handle = setup(API_KEY)
    problem = handle.handler.settings.problem or ""
    assert problem.startswith("EVENTLOG_SERVER_URL: ") and "ftp://from.environment" in problem
    handle.close()
    capsys.readouterr()


def test_setup_names_a_misspelt_option_and_the_handlers_hooks_option(
    server: CaptureServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """A mistyped keyword is named with the option it is closest to; ``hooks=`` (the handler's
    option, which setup() passes itself) is told apart instead of Python's "got multiple
    values for keyword argument"; a malformed value is named with the default used instead.
    Each is said on stderr and the rest of the call takes effect: setup() never raises."""
    handle = setup(
        API_KEY,
        server.url,
        flush_intervall=1,
        hooks=False,
        queue_size="many",
        data_exclusions=5,
        flush_timeout="soon",
        force_hooks=True,
        **FAST,
    )
    said = capsys.readouterr().err
    assert "flush_intervall (did you mean flush_interval?): ignored" in said
    assert "capture_exceptions=True/False" in said and "not hooks=" in said
    assert "'queue_size' must be a number, got 'many'; the default (10000) is used" in said
    # a long default by its first words: the 51 exclusions filled a line of 700 characters
    assert "the default ('password', 'passwords', 'passwd' and 48 more) is used" in said, said
    assert "'flush_timeout'" in said and "'soon'" in said
    assert root_eventlog_handlers() == [handle.handler]
    assert handle.hooks is not None  # hooks= was ignored, not taken as capture_exceptions
    assert handle.handler.settings.queue_size == 10_000
    assert handle.handler.settings.flush_interval == FAST["flush_interval"]
    logging.getLogger("app").warning("the rest of the options apply")
    assert messages(handle, server, 1) == ["the rest of the options apply"]


def test_a_program_with_a_misconfigured_setup_runs_on_and_its_events_arrive(
    server: CaptureServer, tmp_path: Path
) -> None:
    """The user's view: a deploy with a typo and a malformed value in its ``setup()`` call
    starts, runs to its end with status 0, says what is wrong on stderr (naming each option),
    and its warning reaches the server with the defaults in place."""
    program = """
        import logging
        import eventlog_handler

        eventlog_handler.setup(level="chatty", queue_size="many", flush_intervall=1)
        logging.getLogger("shop").warning("order %s placed", 7)
        print("MARK done {}")
    """
    status, stderr, lines = run_program(program, server.url, tmp_path)
    assert status == 0, stderr
    assert marks(lines) == {"done": {}}
    assert "'level'" in stderr and "INFO is used" in stderr
    assert "'queue_size' must be a number, got 'many'" in stderr
    assert "flush_intervall (did you mean flush_interval?)" in stderr
    assert "Traceback" not in stderr
    events = server.wait_for(1, timeout=10)
    assert [event["message"] for event in events] == ["order 7 placed"]


def test_setup_inputs_that_raised_are_said_and_the_program_runs_on(
    server: CaptureServer, tmp_path: Path
) -> None:
    """Inputs that made ``setup()`` raise into the program (status 1, a traceback): a hook's
    module that fails as it is imported, a path with a NUL in it, numbers past a float's range;
    and switches given as words ("false" was true). Each is said, naming it, and the program
    runs on with the default."""
    (tmp_path / "broken_hooks.py").write_text("settings = {}\nLEVEL = settings['level']\n")
    program = """
        import logging
        import eventlog_handler

        handle = eventlog_handler.setup(  # broken_hooks.py is beside this program
            before_send="broken_hooks.before_send",
            spool_path="/tmp/spool\\x00here",
            queue_size=10**400,
            flush_timeout=10**400,
            capture_exceptions="false",
            force_hooks="maybe",
        )
        print("MARK hooks " + str(handle.hooks is None).lower())
        logging.getLogger("shop").warning("order %s placed", 7)
        print("MARK done {}")
    """
    status, stderr, lines = run_program(program, server.url, tmp_path)
    assert status == 0, stderr
    assert "Traceback" not in stderr, stderr
    assert marks(lines) == {"hooks": True, "done": {}}  # capture_exceptions="false": no hooks
    assert "'before_send': cannot import 'broken_hooks.before_send': KeyError" in stderr, stderr
    assert "'spool_path' must be a directory path" in stderr and "NUL" in stderr, stderr
    assert "'queue_size' must be a finite number" in stderr and "(a long value)" in stderr
    assert "'flush_timeout' must be a number of seconds" in stderr, stderr
    assert "'force_hooks' must be true or false, got 'maybe'; False is used" in stderr, stderr
    events = server.wait_for(1, timeout=10)
    assert [event["message"] for event in events] == ["order 7 placed"]


def test_values_that_raise_when_read_and_a_heartbeat_flood_are_said_and_the_program_runs_on(
    server: CaptureServer, tmp_path: Path
) -> None:
    """A value whose ``__float__``, ``__iter__`` or ``__repr__`` raises got out of ``setup()``
    as that exception; ``heartbeat_interval=1e-9`` was taken and sent hundreds of heartbeats a
    second. Each is said, naming the setting, and its default is used."""
    program = """
        import logging
        import eventlog_handler

        class BadFloat:
            def __float__(self):
                raise ZeroDivisionError("no number here")
            def __repr__(self):
                return "BadFloat()"

        class BadIter:
            def __iter__(self):
                raise RuntimeError("no items here")

        class BadRepr:
            def __repr__(self):
                raise RuntimeError("no repr here")

        handle = eventlog_handler.setup(
            level=BadRepr(),
            flush_timeout=BadFloat(),
            timeout=BadFloat(),
            tags=BadIter(),
            queue_size=BadRepr(),
            force_hooks=BadRepr(),
            heartbeat_interval=1e-9,
        )
        logging.getLogger("shop").warning("order %s placed", 7)
        print("MARK done {}")
    """
    status, stderr, lines = run_program(program, server.url, tmp_path)
    assert status == 0, stderr
    assert "Traceback" not in stderr, stderr
    assert marks(lines) == {"done": {}}
    for name in ("level", "flush_timeout", "timeout", "tags", "queue_size", "force_hooks"):
        assert f"'{name}' could not be read: its value raised" in stderr, (name, stderr)
    assert "'heartbeat_interval' must be a finite number >= 1, got 1e-09" in stderr, stderr
    events = server.wait_for(1, timeout=10)
    assert [event["message"] for event in events] == ["order 7 placed"]


def test_malformed_environment_variables_are_said_and_the_program_runs_on(
    server: CaptureServer, tmp_path: Path
) -> None:
    """A container's environment with a blank in ``EVENTLOG_ENVIRONMENT`` ("Production EU"),
    a tab in ``EVENTLOG_VERSION`` and a blank ``EVENTLOG_SPOOL_PATH``: the program starts, runs
    to its end, each variable is named once on stderr with the default used instead, and its
    events arrive."""
    program = """
        import logging
        import eventlog_handler

        eventlog_handler.setup()
        logging.getLogger("shop").warning("order %s placed", 7)
        eventlog_handler.setup()  # again: said once
        print("MARK done {}")
    """
    status, stderr, lines = run_program(
        program,
        server.url,
        tmp_path,
        EVENTLOG_ENVIRONMENT="Production EU",
        EVENTLOG_VERSION="1.2\t3",
        EVENTLOG_SPOOL_PATH=" ",
    )
    assert status == 0, stderr
    assert marks(lines) == {"done": {}}
    assert "Traceback" not in stderr
    for variable in ("EVENTLOG_ENVIRONMENT", "EVENTLOG_VERSION", "EVENTLOG_SPOOL_PATH"):
        assert stderr.count(f"eventlog_handler: {variable}: setting") == 1, stderr
    assert "got 'Production EU'; the default (None) is used" in stderr
    events = server.wait_for(1, timeout=10)
    assert [event["message"] for event in events] == ["order 7 placed"]
    assert "Production EU" not in str(events)


CONFIGURED_WHILE_A_COLLECTION_RUNS = """
import logging, threading, time
from logging.config import dictConfig  # imported before setup(), as gunicorn does
import eventlog_handler

eventlog_handler.setup()
original = threading.Thread._bootstrap_inner


def bootstrap_after_a_collection(self):
    # What the garbage collector can do on a new thread before it reports its start: run a
    # dead handler's weakref callback (logging._removeHandlerRef), which takes logging's lock.
    with logging._lock:
        pass
    original(self)


threading.Thread._bootstrap_inner = bootstrap_after_a_collection
dictConfig({"version": 1, "root": {"level": "INFO"}})  # closes the setup's handler
threading.Thread._bootstrap_inner = original
print("configured", flush=True)
for _ in range(500):  # the setup is put back on a thread of its own, once the lock is free
    if any(isinstance(h, eventlog_handler.EventLogHandler) for h in logging.getLogger().handlers):
        break
    time.sleep(0.01)
logging.getLogger("app").warning("after the configuration")
"""


def test_a_configuration_after_setup_never_hangs(server: CaptureServer, tmp_path: Path) -> None:
    # The setup is put back by a thread started while the configuration holds logging's lock.
    code, stderr, stdout = run_program(
        CONFIGURED_WHILE_A_COLLECTION_RUNS, server.url, tmp_path, timeout=30
    )
    assert code == 0, stderr
    assert "configured" in stdout
    events = server.wait_for(1, timeout=10)
    assert [event["message"] for event in events] == ["after the configuration"]


def test_durations_too_long_to_wait_are_refused_at_setup(
    server: CaptureServer, tmp_path: Path
) -> None:
    """ "Wait forever" as a huge number passed the checks, then broke delivery quietly: a
    timeout past what a socket takes counted every delivered batch as rejected, a huge
    flush_interval stopped the worker, flush_timeout made flush() return at once."""
    program = """
        import logging, sys, eventlog_handler
        handle = eventlog_handler.setup(
            timeout=sys.maxsize, flush_interval=1e10, flush_timeout=1e12, level="INFO"
        )
        logging.getLogger("shop").warning("order %s placed", 7)
        print("MARK flushed " + str(handle.flush()).lower())
        print("MARK stats {\\"delivered\\": %d}" % handle.stats()["delivered"])
    """
    status, stderr, lines = run_program(program, server.url, tmp_path)
    assert status == 0, stderr
    assert "Traceback" not in stderr and "OverflowError" not in stderr, stderr
    for name in ("timeout", "flush_interval", "flush_timeout"):
        assert f"'{name}' must be" in stderr and "1000000" in stderr, (name, stderr)
    assert marks(lines) == {"flushed": True, "stats": {"delivered": 1}}, (lines, stderr)


def test_setup_again_names_the_options_the_running_engine_keeps(
    server: CaptureServer, capsys: pytest.CaptureFixture[str]
) -> None:
    setup(API_KEY, server.url, capture_exceptions=False, **{**FAST, "queue_size": 5})
    second = setup(API_KEY, server.url, capture_exceptions=False, **{**FAST, "queue_size": 10_000})
    try:
        err = capsys.readouterr().err
        assert "keeps them: queue_size=5 (asked 10000)" in err, err
        assert API_KEY not in err
    finally:
        second.close(1)


def test_a_filter_that_raises_never_reaches_the_log_call(server: CaptureServer) -> None:
    class Broken(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            raise RuntimeError("filter bug")

    handler = EventLogHandler(API_KEY, server.url, **FAST)
    handler.addFilter(Broken())
    logger = logging.getLogger("tests.filters")
    logger.addHandler(handler)
    try:
        logger.warning("still fine")  # raised RuntimeError into the program
        assert handler.emit_errors == 1
        assert handler.last_emit_error == "a filter raised RuntimeError: filter bug"
    finally:
        logger.removeHandler(handler)
        handler.close()
