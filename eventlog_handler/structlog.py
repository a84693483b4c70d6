"""A structlog processor that sends each event dict to the service.

:class:`EventLogProcessor` sends the event and returns the event dict unchanged, so it goes
anywhere in the chain **before the renderer**. Put it after the processors whose keys you want
sent (``add_log_level``, ``add_logger_name``, ``merge_contextvars``, ...) and **before**
``format_exc_info`` / ``dict_tracebacks`` / ``ExceptionRenderer``: those replace ``exc_info``
by text, and the processor needs the exception object itself to build ``@simple_error``.

Plain structlog::

    import structlog
    from eventlog_handler.structlog import EventLogProcessor

    structlog.configure(processors=[
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        EventLogProcessor(level="info", tags=["worker"]),
        structlog.processors.format_exc_info,
        structlog.processors.TimeStamper(fmt="iso"),
        structlog.dev.ConsoleRenderer(),
    ])

With structlog's stdlib integration, place it before ``ProcessorFormatter.wrap_for_formatter``::

    structlog.configure(
        processors=[
            structlog.stdlib.add_log_level,
            structlog.stdlib.add_logger_name,
            EventLogProcessor(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
    )

An :class:`~eventlog_handler.EventLogHandler` on the same server and key (for instance from
:func:`~eventlog_handler.setup`) then skips the records the processor already sent, so each
event arrives once, while records of plain :mod:`logging` loggers still go through the handler.
The processor also works inside ``ProcessorFormatter(processors=[...])``, where it reads the
record's logger name, time and exception.

Mapping: ``event`` → message; the ``level`` key (from ``add_log_level``), else the method name
→ ``@level``; the ``logger`` key (or the logger's own name) → ``source``; ``exc_info`` (``True``,
an ``exc_info`` tuple or an exception) → the error form with ``@simple_error``; ``tags`` (a list)
→ tags; ``@user`` (a mapping or an identity) → the event's user instead of the context's;
``timestamp`` is not sent (the event's ``date`` is the time of the call); every other key →
``data``, with the data exclusions applied.

structlog itself is not imported here: the processor only receives plain values, so
``eventlog_handler`` never requires structlog.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import sys
import time
from collections.abc import MutableMapping
from types import FrameType
from typing import Any

from eventlog_handler._values import checked
from eventlog_handler.capture import _admit as admit
from eventlog_handler.capture import _tracelog as tracelog
from eventlog_handler.capture._admit import (
    note_sent,
)
from eventlog_handler.capture._exceptions import current_settings
from eventlog_handler.capture._records import build_event, event_exception, record_exception
from eventlog_handler.delivery._engine import Engine, get_engine, is_sender_thread
from eventlog_handler.delivery._stderr import say, say_capture_failed, say_once, say_unconfigured
from eventlog_handler.handler import check_level
from eventlog_handler.settings import Settings
from eventlog_handler.wire import _extras as extras
from eventlog_handler.wire._jsonsafe import safe_str
from eventlog_handler.wire._simple_error import main_named
from eventlog_handler.wire._stacking import is_stack

_FIELDS = frozenset(field.name for field in dataclasses.fields(Settings))

__all__ = ["EventLogProcessor"]

#: Level numbers of structlog's method names and ``level`` values.
METHOD_LEVELS: dict[str, int] = {
    "trace": 5,
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "msg": logging.INFO,
    "log": logging.INFO,
    "notset": logging.NOTSET,
    "warning": logging.WARNING,
    "warn": logging.WARNING,
    "error": logging.ERROR,
    "err": logging.ERROR,
    "exception": logging.ERROR,
    "failure": logging.ERROR,
    "critical": logging.CRITICAL,
    "fatal": logging.CRITICAL,
}

#: Keys of an event dict that are not data.
RESERVED_KEYS = frozenset(
    {
        "event",
        "level",
        "logger",
        "logger_name",
        "timestamp",
        "exc_info",
        "positional_args",
        "_record",
        "_from_structlog",
    }
)


def level_number(level: Any, method_name: str | None) -> int:
    """The :mod:`logging` level of an event: its ``level`` value, else its method name."""
    if isinstance(level, int) and not isinstance(level, bool):
        return level
    if isinstance(level, str):
        number = METHOD_LEVELS.get(level.lower())
        if number is not None:
            return number
    if isinstance(method_name, str):
        return METHOD_LEVELS.get(method_name.lower(), logging.INFO)
    return logging.INFO


class EventLogProcessor:
    """Send structlog events to the service; return the event dict unchanged.

    Without ``api_key`` and ``server_url``, it follows the current ``setup()`` (its options
    over those of ``setup()``), else ``EVENTLOG_API_KEY`` / ``EVENTLOG_SERVER_URL``;
    ``level`` (a number or a name, default ``INFO``) is the lowest level sent; every other
    keyword is an option of :class:`~eventlog_handler.EventLogHandler` (``tags``,
    ``data_exclusions``, ``include_environment``, delivery options). The processor shares the
    delivery engine of any handler with the same server and key. It never raises and never
    blocks on the network; events that can't be converted are counted in :attr:`errors`.
    See the module docstring for the mapping and where it goes in the chain.
    """

    def __init__(
        self,
        api_key: str | None = None,
        server_url: str | None = None,
        level: int | str = logging.INFO,
        **options: Any,
    ) -> None:
        # As setup(): a malformed option (or level) is said on stderr, and its default used.
        try:
            self.level = checked(lambda _, value: check_level(value), "level", level)
        except ValueError as exc:
            self.level = logging.INFO
            say(f"{exc}; INFO is used")
        options, malformed = Settings.usable_options(options)
        for line in malformed:
            say(line)
        #: Made without a key or URL: the settings of the current ``setup()`` (its server and
        #: key, tags, version) apply when there is one, with this processor's options over
        #: them (``tags=[...]`` on its events only).
        self._follows_setup = api_key is None and server_url is None
        self._own = Settings.from_options(
            {"api_key": api_key, "server_url": server_url, **options}, lenient=True
        )
        self._options = tuple(name for name in options if name in _FIELDS)
        self._over: tuple[Settings, Settings] | None = None  # (setup()'s, with the options)
        if not self._follows_setup:  # one that follows setup() says it at its first event
            say_unconfigured(self._own)
        #: Events that could not be converted (skipped, never raised).
        self.errors = 0
        if self.settings.trace_size:
            tracelog.want(self.settings.trace_size)
        admit.processors_exist()

    def __repr__(self) -> str:
        level = logging.getLevelName(self.level)
        return f"<EventLogProcessor {self.settings.shown_target} ({level})>"

    @property
    def settings(self) -> Settings:
        """The settings events are sent with: the current ``setup()``'s when this processor was
        made without settings of its own, else its own."""
        if self._follows_setup:
            active = current_settings()
            if active is not None:
                if not self._options:
                    return active
                over = self._over
                if over is None or over[0] is not active:
                    own = {name: getattr(self._own, name) for name in self._options}
                    over = self._over = (active, dataclasses.replace(active, **own))
                return over[1]
        return self._own

    @property
    def engine(self) -> Engine:
        """The delivery engine of this processor's server and key (shared)."""
        return get_engine(self.settings)

    def __call__(self, logger: Any, method_name: str, event_dict: Any) -> Any:
        if not isinstance(event_dict, MutableMapping):  # placed after the renderer
            self.errors += 1
            say_once(
                "processor after the renderer",
                "eventlog_handler: EventLogProcessor got a "
                f"{type(event_dict).__name__}, not an event dict: it comes after the renderer "
                "in structlog's processors, and sends nothing. Put it before the renderer (and "
                "before format_exc_info).",
            )
            return event_dict
        try:
            self._send(logger, method_name, event_dict)
        except Exception as exc:
            self.errors += 1
            with contextlib.suppress(Exception):
                text = f"{type(exc).__name__}: {safe_str(exc)}"[:500]
                say_capture_failed("EventLogProcessor.errors", text, self.settings)
        if "stack" in event_dict and is_stack(event_dict["stack"]):
            # The event's manual stack (``**stack(...)``) is this processor's: the renderers
            # after it read "stack" as StackInfoRenderer's text (ConsoleRenderer raised).
            del event_dict["stack"]
        return event_dict

    def _send(self, logger: Any, method_name: str, event_dict: MutableMapping[str, Any]) -> None:
        if is_sender_thread():
            return
        levelno = level_number(event_dict.get("level"), method_name)
        record = event_dict.get("_record")
        if not isinstance(record, logging.LogRecord):
            record = None
        source = event_dict.get("logger")
        if source is None:
            source = event_dict.get("logger_name")
        if source is None:
            source = record.name if record is not None else getattr(logger, "name", None)
        if source is None:
            source = event_dict.get("module") or _calling_module(_async_caller())
        if source is not None and not isinstance(source, str):
            source = safe_str(source)
        settings = self.settings
        minimum = admit.source_minimum(source, settings.ignore_loggers)
        if minimum == math.inf:
            return
        created = record.created if record is not None else time.time()
        message = event_dict.get("event")
        trace = settings.trace_size > 0 and record is None  # a record is noted by the handler
        key = settings.engine_key
        # Where the call goes on to a stdlib logger (the bridge), what this processor decides
        # of the event holds for the record too: the handler sends neither what it sent nor
        # what it held back (an ignored or already reported exception, a level below its own).
        bridged = record is None and isinstance(logger, logging.Logger)
        if levelno < self.level or levelno < minimum:
            if trace:
                tracelog.note_event(created, levelno, source, message)
            if bridged:
                _note_bridged(logger, method_name, levelno, event_dict, message, key)
            return
        if settings is self._own and self._follows_setup:  # made before a setup() that never came
            say_unconfigured(settings)
        engine = get_engine(settings)
        exc = event_exception(event_dict)
        if exc is None and record is not None and record.exc_info:
            exc = record_exception(record)
        if exc is None and event_dict.get("exception") is not None:
            say_once(
                "exception rendered before the processor",
                "eventlog_handler: an event's exception came to EventLogProcessor already made "
                "text or a list (its 'exception' key, by format_exc_info or dict_tracebacks "
                "before it), out of its except block: it is sent as a log with that key as "
                "data. Put EventLogProcessor before them in the processors, to send it as an "
                "error with its frames.",
            )
        verdict = admit.admit(source, levelno, exc, settings, engine)
        if verdict != admit.SEND:
            if trace:  # a line of the program, sent or not, as the handler notes its records
                tracelog.note_event(created, levelno, source, message)
            if bridged:
                _note_bridged(logger, method_name, levelno, event_dict, message, key)
            return
        if record is not None and not admit.claim(admit.PROCESSOR, record, key):
            return  # sent by the handler, or by this processor earlier in the chain

        data: dict[str, Any] = {}
        for name, value in event_dict.items():
            if name not in RESERVED_KEYS:
                data[name if isinstance(name, str) else safe_str(name)] = value
        if exc is not None and "exc_info" not in event_dict:
            data.pop("exception", None)  # its text, made before: in @simple_error
        user, tags, stack = extras.take_special(data)
        event = build_event(
            settings,
            message=message if message is not None else "",
            levelno=levelno,
            source=source,
            created=created,
            data=data,
            exc=exc,
            user=user,
            tags=tags,
            stack=stack,
            caller=_async_caller(),
        )
        engine.enqueue(
            event,
            created=created,
            exc=exc if settings.before_send is not None else None,
            settings=settings,
        )
        if trace:
            tracelog.note_event(created, levelno, source, message)
        if bridged:
            _note_bridged(logger, method_name, levelno, event_dict, message, key)


def _note_bridged(
    logger: logging.Logger,
    method_name: str,
    levelno: int,
    event_dict: Any,
    message: Any,
    key: tuple[str, str],
) -> None:
    """The call goes on to the stdlib ``logger``: its record's ``msg`` will be this dict
    (``wrap_for_formatter``), its ``"event"`` value (``render_to_log_kwargs``) or the text a
    renderer made of it. Noted with the logger and the record's level (those of the method
    structlog calls), unless the logger makes no record at that level."""
    level = _METHOD_LEVELS.get(method_name, levelno)
    if logger.isEnabledFor(level):
        note_sent(admit.PROCESSOR, (event_dict, message), None, key, (logger.name, level))


#: The level of the record each stdlib logger method makes.
_METHOD_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "warn": logging.WARNING,
    "error": logging.ERROR,
    "exception": logging.ERROR,
    "critical": logging.CRITICAL,
    "fatal": logging.CRITICAL,
}


def _async_caller() -> FrameType | None:
    """The frame that called one of structlog's async methods (``ainfo``, ``aerror``): they
    run the processors on an executor's thread, where the caller is not on the stack, and keep
    it for structlog's own ``CallsiteParameterAdder`` (structlog 23.3 and later)."""
    if _ASYNC_CALLING_STACK is None:
        return None
    try:
        frame = _ASYNC_CALLING_STACK.get(None)
    except Exception:  # pragma: no cover - another structlog's variable
        return None
    return frame if isinstance(frame, FrameType) else None


_ASYNC_CALLING_STACK: Any = None
with contextlib.suppress(ImportError):  # structlog 23.3 and later: see _async_caller
    from structlog.contextvars import _ASYNC_CALLING_STACK


def _calling_module(frame: FrameType | None = None) -> str | None:
    """The module that called the structlog logger (for loggers without a name): the first
    frame outside structlog, this package and the standard library's logging, from ``frame``
    (an async method's caller) or this thread's."""
    if frame is None:
        frame = sys._getframe(3)
    for _ in range(15):
        if frame is None:
            return None
        module = frame.f_globals.get("__name__")
        if isinstance(module, str) and not module.startswith(_OWN_MODULES):
            return str(main_named(module))
        frame = frame.f_back
    return None


_OWN_MODULES = ("structlog", "eventlog_handler", "logging")
