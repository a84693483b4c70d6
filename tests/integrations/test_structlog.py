"""The structlog processor: alone, through the stdlib bridge, inside ProcessorFormatter."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import sys
import time
from typing import Any

import pytest

from eventlog_handler import EventLogHandler, setup, user_context
from eventlog_handler.structlog import EventLogProcessor
from tests.support.capture import CaptureServer
from tests.support.constants import API_KEY, FAST

structlog = pytest.importorskip("structlog")


def processor(server: CaptureServer, **options: Any) -> EventLogProcessor:
    return EventLogProcessor(API_KEY, server.url, **{**FAST, **options})


def delivered(proc: EventLogProcessor, server: CaptureServer, count: int) -> list[dict[str, Any]]:
    """The events, in the order they were logged (errors travel first, so by date)."""
    assert proc.engine.flush(5)
    events = server.wait_for(count, timeout=5)
    assert len(events) == count, events
    return sorted(events, key=lambda event: event["date"])


def test_returns_the_event_dict_unchanged(server: CaptureServer) -> None:
    proc = processor(server)
    event_dict = {"event": "hello", "level": "info", "k": [1, 2], "timestamp": "now"}
    copy = json.loads(json.dumps(event_dict))
    assert proc(None, "info", event_dict) is event_dict
    assert event_dict == copy
    (event,) = delivered(proc, server, 1)
    assert event["message"] == "hello"
    assert event["data"] == {"k": [1, 2]}  # the timestamp is not data


def test_plain_structlog(server: CaptureServer) -> None:
    proc = processor(server, level="debug", tags=["worker"])
    output = io.StringIO()
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso"),
            proc,
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
        logger_factory=structlog.PrintLoggerFactory(file=output),
        cache_logger_on_first_use=False,
    )
    log = structlog.get_logger().bind(logger="svc.jobs")
    log.debug("debugging", step=1)
    with user_context("u-5"):
        log.info("job done", job_id="j-1", tags=["nightly"])
    log.warning("slow", seconds=2.5, password="hunter2")
    try:
        1 / 0  # noqa: B018
    except ZeroDivisionError:
        log.exception("job failed", job_id="j-2")
        # The same exception again: already reported, so not sent twice.
        log.error("as a tuple", exc_info=sys.exc_info())
    log.error("as an exception", exc_info=KeyError("gone"))
    events = delivered(proc, server, 5)
    errors = [event for event in events if event["type"] == "error"]
    logs = [event for event in events if event["type"] == "log"]
    assert [event["message"] for event in logs] == ["debugging", "job done", "slow"]
    assert [event["@level"] for event in logs] == ["Debug", "Info", "Warn"]
    assert all(event["source"] == "svc.jobs" for event in events)
    assert logs[0]["data"] == {"step": 1}
    assert logs[1]["@user"] == {"identity": "u-5"}
    assert logs[1]["tags"] == ["worker", "nightly"]
    assert logs[1]["data"] == {"job_id": "j-1"}
    assert logs[2]["data"] == {"seconds": 2.5, "password": "[excluded]"}
    assert [event["message"] for event in errors] == ["job failed", "as an exception"]
    assert [e["@simple_error"]["type"] for e in errors] == ["ZeroDivisionError", "KeyError"]
    assert errors[0]["@level"] == "Error"
    assert errors[0]["data"]["job_id"] == "j-2"
    assert "@environment" in errors[0]["data"]
    assert "exception" not in errors[0]["data"]
    # the renderer still got everything, the traceback included
    lines = [json.loads(line) for line in output.getvalue().splitlines()]
    assert len(lines) == 6
    assert "ZeroDivisionError" in lines[3]["exception"]


def test_level_threshold_and_method_names(server: CaptureServer) -> None:
    proc = processor(server, level="warning")
    proc(None, "info", {"event": "below"})
    proc(None, "debug", {"event": "below too", "level": "debug"})
    proc(None, "warning", {"event": "warn by method"})
    proc(None, "msg", {"event": "critical by key", "level": "critical"})
    proc(None, "info", {"event": "numeric", "level": 45})
    events = delivered(proc, server, 3)
    assert [(e["message"], e["@level"]) for e in events] == [
        ("warn by method", "Warn"),
        ("critical by key", "Fatal"),
        ("numeric", "Error"),
    ]


def test_processor_never_raises(server: CaptureServer) -> None:
    proc = processor(server)

    class Hostile:
        def __str__(self) -> str:
            raise RuntimeError("no")

        __repr__ = __str__

    event_dict: dict[Any, Any] = {"event": Hostile(), 3: "int key", "value": Hostile()}
    assert proc(None, "info", event_dict) is event_dict
    proc(None, "info", {"event": "ignored logger", "logger": "urllib3.connectionpool"})
    (event,) = delivered(proc, server, 1)
    assert event["data"]["3"] == "int key"
    assert proc.errors == 0


def stdlib_bridge(*chain: Any) -> None:
    structlog.configure(
        processors=[
            structlog.stdlib.add_logger_name,
            structlog.stdlib.add_log_level,
            *chain,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )


def console_handler(*processors: Any) -> tuple[logging.Handler, io.StringIO]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[
                *processors,
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.JSONRenderer(),
            ],
            foreign_pre_chain=[structlog.stdlib.add_log_level],
        )
    )
    return handler, stream


def test_stdlib_bridge_with_processor_formatter_sends_once(server: CaptureServer) -> None:
    handle = setup(API_KEY, server.url, level="INFO", capture_exceptions=False, **FAST)
    console, stream = console_handler()
    logging.getLogger().addHandler(console)
    proc = processor(server)
    stdlib_bridge(
        proc,
        structlog.processors.format_exc_info,
        structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
    )
    log = structlog.get_logger("svc")
    log.info("hello", k=1)
    try:
        raise ValueError("bad")
    except ValueError:
        log.exception("failed")
    logging.getLogger("plain").warning("plain %s", "record")
    assert handle.flush(5)
    events = server.wait_for(3)
    assert len(events) == 3
    by_message = {event["message"]: event for event in events}
    assert set(by_message) == {"hello", "failed", "plain record"}
    assert by_message["hello"]["source"] == "svc"
    assert by_message["hello"]["data"] == {"k": 1}
    assert by_message["failed"]["@simple_error"]["type"] == "ValueError"
    assert by_message["plain record"]["source"] == "plain"
    rendered = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [line["event"] for line in rendered] == ["hello", "failed", "plain record"]
    assert all(not key.startswith("_") for line in rendered for key in line)
    assert proc.engine is handle.engine


def test_handler_alone_reads_structlog_records(server: CaptureServer) -> None:
    handle = setup(API_KEY, server.url, level="INFO", capture_exceptions=False, **FAST)
    stdlib_bridge(structlog.stdlib.ProcessorFormatter.wrap_for_formatter)
    log = structlog.get_logger("svc")
    log.info("via the handler", k=2, tags=["t"])
    try:
        raise KeyError("x")
    except KeyError:
        log.exception("error via the handler")
    assert handle.flush(5)
    error, event = server.wait_for(2)
    assert event["message"] == "via the handler"
    assert event["@level"] == "Info"
    assert event["data"] == {"k": 2}
    assert event["tags"] == ["t"]
    assert error["@simple_error"]["type"] == "KeyError"


def test_render_to_log_kwargs_sends_once(server: CaptureServer) -> None:
    handle = setup(API_KEY, server.url, level="INFO", capture_exceptions=False, **FAST)
    proc = processor(server)
    stdlib_bridge(proc, structlog.stdlib.render_to_log_kwargs)
    structlog.get_logger("svc").warning("kwargs style", n=3)
    logging.getLogger("svc").warning("kwargs style")  # a plain record, same text: sent
    assert handle.flush(5)
    events = server.wait_for(2)
    assert len(events) == 2
    assert events[0]["data"] == {"n": 3}
    assert "data" not in events[1]


@pytest.mark.parametrize("handler_first", [True, False])
def test_processor_inside_processor_formatter_sends_once(
    server: CaptureServer, handler_first: bool
) -> None:
    proc = processor(server)
    console, stream = console_handler(proc)
    eventlog = EventLogHandler(API_KEY, server.url, **FAST)
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    for handler in (eventlog, console) if handler_first else (console, eventlog):
        root.addHandler(handler)
    stdlib_bridge(structlog.stdlib.ProcessorFormatter.wrap_for_formatter)
    structlog.get_logger("svc").info("structlog event", k=1)
    logging.getLogger("plain").info("foreign record")
    try:
        raise OSError("disk")
    except OSError:
        logging.getLogger("plain").exception("foreign error")
    assert eventlog.engine.flush(5)
    events = server.wait_for(3)
    assert len(events) == 3
    assert sorted(event["message"] for event in events) == [
        "foreign error",
        "foreign record",
        "structlog event",
    ]
    assert len(stream.getvalue().splitlines()) >= 3


@pytest.mark.parametrize("console_first", [True, False])
def test_one_processor_in_the_chain_and_in_the_formatter_sends_once(
    server: CaptureServer, console_first: bool
) -> None:
    """One processor object in structlog's chain and in a ``ProcessorFormatter`` on the root
    logger, beside ``setup()``'s handler: the processor's note was used up by the first of
    its two readers (the handler, or the processor again in the formatter), and the second
    sent every structlog event again."""
    proc = EventLogProcessor()
    console, stream = console_handler(proc)
    if console_first:
        logging.getLogger().addHandler(console)
    handle = setup(API_KEY, server.url, level="INFO", capture_exceptions=False, **FAST)
    if not console_first:
        logging.getLogger().addHandler(console)
    stdlib_bridge(proc, structlog.stdlib.ProcessorFormatter.wrap_for_formatter)
    log = structlog.get_logger("twice")
    for i in range(3):
        log.warning("warn", i=i)
    log.error("an error without an exception")
    logging.getLogger("plain").warning("plain record")
    assert handle.flush(5)
    server.wait_for(5)
    assert handle.flush(5)
    events = server.wait_for(6, timeout=1)
    assert sorted(str(e["message"]) for e in events) == [
        "an error without an exception",
        "plain record",
        "warn",
        "warn",
        "warn",
    ], events
    assert all(e.get("count", 1) == 1 for e in events)
    assert len(stream.getvalue().splitlines()) == 5  # the console printed each once


def test_a_plain_record_with_the_same_text_right_after_is_sent(server: CaptureServer) -> None:
    handle = setup(API_KEY, server.url, level="INFO", capture_exceptions=False, **FAST)
    proc = processor(server)
    stdlib_bridge(proc, structlog.stdlib.ProcessorFormatter.wrap_for_formatter)
    structlog.get_logger("svc").info("same text")
    logging.getLogger("svc").info("same text")
    assert handle.flush(5)
    events = server.wait_for(2)
    assert len(events) == 2
    assert proc.engine.stats()["captured"] == 2


def test_rendering_in_structlog_then_a_stdlib_logger_sends_once(server: CaptureServer) -> None:
    # structlog's "render within structlog" set-up: the record's msg is the rendered JSON line,
    # a new string. The handler sent it again, one stack per distinct rendered text.
    handle = setup(API_KEY, server.url, level="INFO", capture_exceptions=False, **FAST)
    proc = processor(server)
    stdlib_bridge(proc, structlog.processors.format_exc_info, structlog.processors.JSONRenderer())
    log = structlog.get_logger("svc")
    log.info("low stock", sku="A-1")
    try:
        raise ValueError("declined")
    except ValueError:
        log.exception("payment failed", order=7)
    assert handle.flush(5) and proc.engine.flush(5)
    events = server.wait_for(3, timeout=2)
    assert sorted(event["message"] for event in events) == ["low stock", "payment failed"]
    assert len(events) == 2 and proc.engine.stats()["captured"] == 2


def test_a_record_the_bridge_never_made_does_not_hide_another(server: CaptureServer) -> None:
    # The stdlib logger "chatty" drops INFO: the processor's note was never used, and a record
    # of another logger with the same (interned) text was taken for it and not sent.
    handle = setup(API_KEY, server.url, level="INFO", capture_exceptions=False, **FAST)
    proc = processor(server)
    stdlib_bridge(proc, structlog.stdlib.ProcessorFormatter.wrap_for_formatter)
    logging.getLogger("chatty").setLevel(logging.WARNING)
    try:
        structlog.get_logger("chatty").info("done")
        logging.getLogger("billing").error("done")
        assert handle.flush(5) and proc.engine.flush(5)
        events = server.wait_for(2)
        assert sorted(event["source"] for event in events) == ["billing", "chatty"]
    finally:
        logging.getLogger("chatty").setLevel(logging.NOTSET)


def test_async_methods_name_their_caller_and_its_call_site(server: CaptureServer) -> None:
    # ainfo/aerror run the processors on an executor's thread: the source and the call site
    # were concurrent.futures.thread's, and every aerror of one message was one stack.
    if not hasattr(structlog.contextvars, "_ASYNC_CALLING_STACK"):
        pytest.skip("structlog before 23.3 does not keep an async method's caller")
    proc = processor(server)
    structlog.configure(
        processors=[structlog.processors.add_log_level, proc, structlog.processors.JSONRenderer()],
        logger_factory=structlog.PrintLoggerFactory(io.StringIO()),
        cache_logger_on_first_use=False,
    )

    async def checkout() -> None:
        log = structlog.get_logger()
        await log.ainfo("async info")
        await log.aerror("payment failed")
        log.error("payment failed")

    asyncio.run(checkout())
    events = delivered(proc, server, 3)
    assert {event["source"] for event in events} == {__name__}
    stacks = [event["data"]["@stack"] for event in events if "@stack" in event.get("data", {})]
    assert len(stacks) == 2
    assert stacks[0] == stacks[1]  # one bug, whether logged by aerror or error
    assert stacks[0]["signature_data"]["site"] == f"at {__name__}.checkout"


def test_a_processor_without_settings_follows_setup(server: CaptureServer) -> None:
    handle = setup(API_KEY, server.url, tags=["from-setup"], version="9.9.9", **FAST)
    try:
        proc = EventLogProcessor()  # no key, URL or options: setup()'s apply
        output = io.StringIO()
        structlog.configure(
            processors=[
                structlog.processors.add_log_level,
                proc,
                structlog.processors.KeyValueRenderer(),
            ],
            logger_factory=structlog.PrintLoggerFactory(file=output),
            cache_logger_on_first_use=False,
        )
        structlog.get_logger().warning("queue is long", depth=7)  # a logger without a name
        (event,) = delivered(proc, server, 1)
    finally:
        structlog.reset_defaults()
        handle.close()
    assert event["tags"] == ["from-setup"]
    assert event["data"]["@version"] == "9.9.9"
    assert event["source"] == __name__  # no logger name: the calling module


def test_a_servers_routine_lines_are_events_through_neither_path(server: CaptureServer) -> None:
    # The processor inside a ProcessorFormatter sees every record the console prints, the
    # servers' routine lines too (uvicorn's access line for each request): the same rule as the
    # handler's, so they stay console lines, and a server's warning is an event.
    proc = processor(server)
    console, stream = console_handler(proc)
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    root.addHandler(console)
    logging.getLogger("uvicorn.error").info("Started server process [1]")
    logging.getLogger("uvicorn.access").info('127.0.0.1:5000 - "GET / HTTP/1.1" 200')
    logging.getLogger("celery.worker.strategy").info("Task app.add[1] received")
    logging.getLogger("uvicorn.error").warning("Invalid HTTP request received.")
    logging.getLogger("app").info("an application line")
    structlog.configure(
        processors=[structlog.processors.add_log_level, proc, structlog.processors.JSONRenderer()],
        logger_factory=structlog.PrintLoggerFactory(file=io.StringIO()),
        cache_logger_on_first_use=False,
    )
    structlog.get_logger().bind(logger="gunicorn.error").info("Booting worker with pid: 7")
    events = delivered(proc, server, 2)
    assert [event["message"] for event in events] == [
        "Invalid HTTP request received.",
        "an application line",
    ]
    assert len(stream.getvalue().splitlines()) == 5
    assert proc.engine.stats()["captured"] == 2


def test_a_manual_stack_before_the_console_renderer_is_sent_and_renders(
    server: CaptureServer, tmp_path: Any
) -> None:
    """``log.error(..., **stack(...))`` before the documented ``ConsoleRenderer`` raised a
    TypeError into the program (the renderer reads "stack" as StackInfoRenderer's text): the
    processor takes its own stack out of the event dict."""
    from tests.support.processes import marks, run_program

    program = """
        import logging
        import structlog
        import eventlog_handler
        from eventlog_handler import stack
        from eventlog_handler.structlog import EventLogProcessor

        eventlog_handler.setup()
        structlog.configure(
            processors=[
                structlog.processors.add_log_level,
                EventLogProcessor(),
                structlog.processors.format_exc_info,
                structlog.dev.ConsoleRenderer(colors=False),
            ],
            wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
        )
        log = structlog.get_logger(logger_name="pay")
        log.error("payment failed", **stack("Payment gateway timeout", gateway="adyen"))
        print("MARK done {}")
    """
    code, stderr, lines = run_program(program, server.url, tmp_path)
    assert code == 0, stderr
    assert marks(lines) == {"done": {}}, (lines, stderr)
    [payment] = server.wait_for(1, timeout=10)
    assert payment["message"] == "payment failed"
    assert payment["data"]["@stack"] == {
        "title": "Payment gateway timeout",
        "signature_data": {"gateway": "adyen"},
    }, payment


BEFORE_SETUP = """
import os, sys
import structlog
import eventlog_handler
from eventlog_handler.structlog import EventLogProcessor

key, url = os.environ.pop("EVENTLOG_API_KEY"), os.environ.pop("EVENTLOG_SERVER_URL")
structlog.configure(
    processors=[EventLogProcessor({options}), structlog.processors.KeyValueRenderer()]
)
print("configured", file=sys.stderr, flush=True)
handle = eventlog_handler.setup(api_key=key, server_url=url) if sys.argv[1] == "setup" else None
structlog.get_logger("app").warning("after setup")
print("logged", file=sys.stderr, flush=True)
if handle is not None:
    assert handle.flush(5)
"""


@pytest.mark.parametrize("options", ["", 'tags=["web"]'])
@pytest.mark.parametrize("then", ["setup", "none"])
def test_a_processor_made_before_setup_says_nothing_is_sent_only_when_nothing_is(
    tmp_path: Any, then: str, options: str
) -> None:
    """``EventLogProcessor()`` in a settings module, ``setup(api_key=...)`` after: the processor
    said "nothing will be sent: no API key is set", then sent everything. With an option of its
    own (``tags=``), it did not follow ``setup()`` at all: every event was dropped."""
    from tests.support.faultserver import FaultServer
    from tests.support.processes import run_script

    with FaultServer() as sink:
        program = BEFORE_SETUP.replace("{options}", options)
        result = run_script(program, sink.url, tmp_path, then, timeout=60)
        assert result.returncode == 0, result.stderr
        lines = result.stderr.splitlines()
        said = [index for index, line in enumerate(lines) if "nothing will be sent" in line]
        if then == "setup":
            assert said == [], result.stderr
            assert sink.wait_for(1) and sink.accepted[0]["message"] == "after setup"
            assert sink.accepted[0].get("tags", []) == (["web"] if options else [])
        else:  # said at its first event, once
            assert len(said) == 1, result.stderr
            assert lines.index("configured") < said[0] < lines.index("logged"), result.stderr


BRIDGE_DECISIONS = """
import logging, sys
import structlog
import eventlog_handler
from eventlog_handler.structlog import EventLogProcessor

handle = eventlog_handler.setup(ignore_exceptions=["PaymentDeclined"])
console = logging.StreamHandler(sys.stdout)
console.setFormatter(
    structlog.stdlib.ProcessorFormatter(processor=structlog.dev.ConsoleRenderer(colors=False))
)
logging.getLogger().addHandler(console)
structlog.configure(  # the README's bridge: the processor, then wrap_for_formatter
    processors=[
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        EventLogProcessor(level="warning"),
        structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
    ],
    logger_factory=structlog.stdlib.LoggerFactory(),
    wrapper_class=structlog.stdlib.BoundLogger,
)
log = structlog.get_logger("app.pay")


class PaymentDeclined(Exception):
    pass


try:
    raise PaymentDeclined("declined")
except PaymentDeclined as exc:
    log.warning("declined", exc_info=exc)
    log.error("declined again", exc_info=True)
try:
    raise ValueError("twice")
except ValueError as exc:
    log.exception("first time")
    log.error("second time", exc_info=exc)
log.info("below the processor's level")
log.warning("a warning")
handle.flush(5)
print("MARK dropped", __import__("json").dumps(handle.stats()["dropped"]), flush=True)
"""


def test_the_bridge_keeps_the_processors_decisions(server: CaptureServer, tmp_path: Any) -> None:
    """The processor in the README's stdlib bridge held back an event (an exception of
    ``ignore_exceptions``, one sent already, a level below its own), and the stdlib handler then
    sent the record structlog made of it: the ignored exception arrived (counted as filtered
    all the same), the same exception twice, the info event."""
    from tests.support.processes import marks, run_program

    code, stderr, lines = run_program(BRIDGE_DECISIONS, server.url, tmp_path)
    assert code == 0, stderr
    assert marks(lines)["dropped"]["filtered"] == 2, (lines, stderr)
    events = server.wait_for(2, timeout=10)
    time.sleep(0.5)  # nothing more comes
    assert sorted(e["message"] for e in server.events) == ["a warning", "first time"]
    [error] = [e for e in server.events if e["message"] == "first time"]
    assert error["@simple_error"]["type"] == "ValueError", events
    printed = [line for line in lines if line.startswith("[")]  # ConsoleRenderer's lines
    assert len(printed) == 6, lines  # the console printed every call, as before


FORMATTED_FIRST = """
import logging, sys
import structlog
import eventlog_handler

handle = eventlog_handler.setup()
structlog.configure(  # structlog's own recipe: tracebacks made text before the stdlib logger
    processors=[
        structlog.stdlib.add_log_level,
        structlog.processors.format_exc_info,
        structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
    ],
    logger_factory=structlog.stdlib.LoggerFactory(),
    wrapper_class=structlog.stdlib.BoundLogger,
)
log = structlog.get_logger("app.shop")


def checkout():
    raise KeyError("cart")


try:
    checkout()
except KeyError:
    log.error("checkout failed", exc_info=True, order=7)
handle.flush(5)
"""


def test_an_exception_made_text_before_the_handler_is_still_an_error(
    server: CaptureServer, tmp_path: Any
) -> None:
    """``format_exc_info`` before ``wrap_for_formatter`` (structlog's recipe): the record had no
    ``exc_info``, only the traceback as text, and the error went out as a log with that text as
    data: no ``@simple_error``, no stack. The exception being handled is the one the text is
    the traceback of."""
    from tests.support.processes import run_program

    code, stderr, _ = run_program(FORMATTED_FIRST, server.url, tmp_path)
    assert code == 0, stderr
    [event] = server.wait_for(1, timeout=10)
    assert event["type"] == "error" and event["message"] == "checkout failed", event
    assert event["@simple_error"]["type"] == "KeyError"
    assert event["data"]["@stack"]["title"] == "KeyError in __main__.checkout"
    assert "exception" not in event["data"] and event["data"]["order"] == 7


BAD_OPTIONS = """
import structlog
import eventlog_handler
from eventlog_handler.structlog import EventLogProcessor

eventlog_handler.setup()
processor = EventLogProcessor(level="chatty", flush_intervall=1, rollup_window=-1)
structlog.configure(processors=[processor, structlog.dev.ConsoleRenderer(colors=False)])
structlog.get_logger("app").warning("still sent")
print("MARK made {}", flush=True)
"""


def test_bad_processor_options_are_said_and_their_defaults_used(
    server: CaptureServer, tmp_path: Any
) -> None:
    """A mistyped level or option name, or a malformed value, raised ``ValueError`` or
    ``TypeError`` from ``EventLogProcessor(...)`` inside ``structlog.configure``: the program
    died at its start. It is said on stderr, as by ``setup()``, and the default used."""
    from tests.support.processes import marks, run_program

    code, stderr, lines = run_program(BAD_OPTIONS, server.url, tmp_path)
    assert code == 0, stderr
    assert marks(lines) == {"made": {}}, (lines, stderr)
    assert "got 'chatty'; INFO is used" in stderr, stderr
    assert "flush_intervall (did you mean flush_interval?): ignored" in stderr, stderr
    assert "'rollup_window' must be a finite number >= 0, got -1; the default" in stderr, stderr
    [event] = server.wait_for(1, timeout=10)
    assert event["message"] == "still sent"


OWN_EXCLUSIONS = """
import structlog
import eventlog_handler
from eventlog_handler.structlog import EventLogProcessor

eventlog_handler.setup()
structlog.configure(
    processors=[EventLogProcessor(data_exclusions=["card"]), structlog.dev.ConsoleRenderer()],
    logger_factory=structlog.PrintLoggerFactory(),
)
structlog.get_logger(logger_name="shop").warning("paid", card="4111", password="hunter2")
"""


def test_a_processors_own_data_exclusions_replace_the_default_list(
    server: CaptureServer, tmp_path: Any
) -> None:
    """README: ``data_exclusions=["card"]`` masks ``card`` alone. The worker scrubbed every
    event with the engine's list (``setup()``'s defaults), whatever the processor's own."""
    from tests.support.processes import run_program

    code, stderr, _ = run_program(OWN_EXCLUSIONS, server.url, tmp_path)
    assert code == 0, stderr
    [event] = server.wait_for(1, timeout=10)
    assert event["data"]["card"] == "[excluded]"
    assert event["data"]["password"] == "hunter2", event["data"]


def test_a_processor_after_the_renderer_says_where_it_belongs(
    server: CaptureServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """After the renderer the processor gets a string: it said "a log call could not be made
    an event (AttributeError: 'str' object has no attribute 'get')", and nothing more."""
    proc = processor(server)
    assert proc(None, "info", "rendered text") == "rendered text"
    assert proc.errors == 1
    assert "it comes after the renderer" in capsys.readouterr().err


def test_an_event_not_sent_is_still_a_line_of_the_trace_log(server: CaptureServer) -> None:
    """An exception turned off (``ignore_exceptions``) is not sent, and what the program logged
    with it is a line of the next error's trace log, as the handler does for such records."""
    from eventlog_handler.capture import _tracelog as tracelog

    proc = processor(server, ignore_exceptions=[KeyError])
    tracelog.clear()
    try:
        raise KeyError("basket")
    except KeyError:
        proc(None, "error", {"event": "lookup missed", "exc_info": True})
    proc(None, "error", {"event": "checkout failed"})
    (event,) = delivered(proc, server, 1)
    assert event["message"] == "checkout failed"
    assert any("lookup missed" in line for line in event["data"]["@trace"]), event["data"]
