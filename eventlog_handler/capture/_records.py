"""From a :class:`logging.LogRecord` to an event of the service.

What a record becomes:

- ``@level``: ``Trace`` below ``DEBUG``, ``Debug``, ``Info``, ``Warn``, ``Error``, and ``Fatal``
  for ``CRITICAL``; a custom level maps to the nearest standard level at or below it (25 is
  ``Info``).
- ``source``: the logger's name. ``date``: ``record.created``.
- ``message``: the formatted message (through the handler's formatter when one is set, without
  the traceback, which travels in ``@simple_error``). A record whose arguments don't fit its
  template (``logger.info("%d", "x")``) still becomes an event: the template is the message and
  ``data`` gets ``@message_args`` and ``@format_error``.
- ``data``: the ``extra=`` fields, that is every attribute a fresh ``LogRecord`` doesn't have
  (:data:`RESERVED_ATTRS`), made JSON-safe with the data exclusions applied; ``stack_info``
  (``stack_info=True``) under ``data["@stack_info"]``. An ``extra=`` key that is one of the
  service's own data keys (:data:`KNOWN_DATA_KEYS`, such as ``@level`` or ``@version``) is
  sent as ``_@level``: the service would let it override the package's own value.
- With ``exc_info`` (``logger.exception``, ``exc_info=True`` or an exception object): the error
  form, with ``@simple_error``, ``data["@environment"]`` (machine, process and thread), the
  request of the current request scope (``@request``) and the trace log (``@trace``). A record
  at ``ERROR`` or above without an exception is a log event that is sent as promptly as an
  error and carries ``@request`` and ``@trace`` too.
- Three ``extra=`` keys are not data: ``tags`` (a list of strings, or one string) is added to
  the handler's and the context's tags; ``@user`` replaces the context's user for this record:
  ``extra={"@user": {"identity": "u-7", "name": "Bob", "data": {...}}}``, or
  ``extra={"@user": "u-7"}`` for an identity alone; and ``stack`` puts the event in a stack of
  its own (:mod:`eventlog_handler.wire._stacking`).

Capture (:func:`capture_record`) runs on the thread that logs and copies only what could change
after the call returns. For a log record whose arguments and ``extra=`` values are immutable
scalars (strings, numbers, booleans, ``None``), that is nothing: the message is formatted and
the data made JSON-safe on the delivery worker (:mod:`eventlog_handler.delivery._finish`). Errors are
built at once, while their traceback exists.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping
from itertools import islice
from typing import Any

from pythonjsonlogger.core import RESERVED_ATTRS as _JSON_LOGGER_RESERVED

from eventlog_handler.capture import _tracelog as tracelog
from eventlog_handler.capture._context import get_request, get_tags, get_user
from eventlog_handler.delivery._buffer import JSON_READY, RAW, SORTED, Entry
from eventlog_handler.settings import MASK, Settings
from eventlog_handler.wire._events import (
    environment_info,
    error_event,
    log_event,
    thread_info,
    user_info,
)
from eventlog_handler.wire._jsonsafe import safe_str, to_jsonable
from eventlog_handler.wire._levels import level_name
from eventlog_handler.wire._simple_error import type_name
from eventlog_handler.wire._stacking import EXTRA_KEY as STACK_KEY
from eventlog_handler.wire._stacking import manual_stack

__all__ = [
    "IGNORED_LOGGERS",
    "KNOWN_DATA_KEYS",
    "RESERVED_ATTRS",
    "build_event",
    "capture_record",
    "exception_of",
    "is_ignored_logger",
    "level_name",
    "record_to_event",
]

#: Loggers whose records never become events (nor do their children's): the HTTP stack the
#: sender uses and this package itself, so sending can never feed back into the queue; and
#: libraries that log every request or part they handle (the HTTP clients httpx and httpcore,
#: HTTP/2 header frames, multipart form parts, the Flask development server's access lines and
#: its debugger PIN).
IGNORED_LOGGERS = frozenset(
    {
        "urllib3",
        "requests",
        "charset_normalizer",
        "eventlog_handler",
        "httpx",
        "httpcore",
        "hpack",
        "werkzeug",
        "multipart",
        "python_multipart",
    }
)

#: Record attributes that are not ``extra=`` fields: python-json-logger's list, every attribute
#: of a fresh ``LogRecord`` of this Python (``taskName`` on 3.12+, and whatever comes later),
#: what formatters add, and what structlog's stdlib bridge adds.
#: How many attributes ``LogRecord.__init__`` sets (in this Python version), and the last.
_RECORD_ATTRIBUTES = list(vars(logging.LogRecord("", logging.INFO, "", 0, "", None, None)))
_RECORD_ATTRIBUTE_COUNT = len(_RECORD_ATTRIBUTES)
_LAST_RECORD_ATTRIBUTE = _RECORD_ATTRIBUTES[-1]

RESERVED_ATTRS: frozenset[str] = frozenset(
    {
        *_JSON_LOGGER_RESERVED,
        *vars(logging.LogRecord("", logging.INFO, "", 0, "", None, None)),
        "message",
        "asctime",
        "taskName",
        "_logger",
        "_name",
        "_record",
        "_from_structlog",
    }
)

#: ``extra=`` keys with a meaning of their own (see the module docstring).
TAGS_KEY = "tags"
USER_KEY = "@user"

#: The service's own data keys (PROTOCOL: "Known data keys") and the package's: a user's
#: ``extra=`` value under one of these names travels as ``_<name>`` instead.
KNOWN_DATA_KEYS = frozenset(
    {
        "@level",
        "@user",
        "@simple_error",
        "@error",
        "@version",
        "@stack",
        "@environment",
        "@request",
        "@trace",
        "@submission_method",
        "@submission_client",
        "@user_description",
        "@location",
        "@stack_info",
        "@message_args",
        "@format_error",
        "@trimmed",
    }
)

#: Types whose values can't change after the call: formatting them can wait for the worker.
_SCALARS = frozenset({str, int, float, bool, type(None)})

#: ``extra=`` keys that are not plain data (sorted out by :func:`sort_extras`).
_SPECIAL_EXTRAS = frozenset({"tags", "@user", STACK_KEY}) | KNOWN_DATA_KEYS


def sort_extras(
    data: dict[str, Any],
) -> tuple[dict[str, Any], dict[str, Any] | None, tuple[Any, ...], dict[str, Any] | None]:
    """Extras copied from a record on the worker: ``(data, user, tags, stack)`` as
    :func:`_extras` gives them (attributes formatters add, and special keys, sorted out)."""
    if not RESERVED_ATTRS.isdisjoint(data):
        data = {key: value for key, value in data.items() if key not in RESERVED_ATTRS}
    if _SPECIAL_EXTRAS.isdisjoint(data):
        return data, None, (), None
    user: dict[str, Any] | None = None
    tags: tuple[Any, ...] = ()
    stack: dict[str, Any] | None = None
    if TAGS_KEY in data:
        tags = tags_from(data.pop(TAGS_KEY))
    if USER_KEY in data:
        user = user_from(data.pop(USER_KEY))
    if STACK_KEY in data:
        stack = manual_stack(data.pop(STACK_KEY))
    if not KNOWN_DATA_KEYS.isdisjoint(data):
        reserve_known_keys(data)
    return data, user, tags, stack


#: Whether a logger's records are ignored, by name (names of a program repeat).
_IGNORED_CACHE: dict[str, bool] = {}


def is_ignored_logger(name: str | None) -> bool:
    """Whether records of the logger ``name`` must never become events."""
    if not name:
        return False
    ignored = _IGNORED_CACHE.get(name)
    if ignored is None:
        ignored = name.partition(".")[0] in IGNORED_LOGGERS
        if len(_IGNORED_CACHE) < 10_000:
            _IGNORED_CACHE[name] = ignored
    return ignored


def reserve_known_keys(data: dict[str, Any]) -> None:
    """Rename, in place, the keys of user data that are known data keys: ``@level`` →
    ``_@level`` (the service would otherwise let the user's value win)."""
    for key in KNOWN_DATA_KEYS.intersection(data):
        data["_" + key] = data.pop(key)


def user_from(value: Any) -> dict[str, Any] | None:
    """The ``@user`` object of a per-record override: a mapping or an identity."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        data = value.get("data")
        return user_info(
            value.get("identity"),
            value.get("name"),
            data if isinstance(data, Mapping) else None,
        )
    return user_info(value)


def tags_from(value: Any) -> tuple[Any, ...]:
    """Tags of a per-record ``tags`` field: a string is one tag, an iterable several."""
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, Iterable) and not isinstance(value, Mapping):
        try:
            return tuple(value)
        except Exception:
            return ()
    return (value,)


# -- exceptions already reported --------------------------------------------------------------

_REPORTED_ATTR = "_eventlog_handler_reported"
# Exceptions that refuse attributes (``__slots__``) are remembered here instead.
_REPORTED_FALLBACK: deque[BaseException] = deque(maxlen=32)


def mark_reported(exc: BaseException) -> None:
    """Remember that ``exc`` was sent, so the exception hooks don't send it again."""
    try:
        setattr(exc, _REPORTED_ATTR, True)
    except Exception:
        _REPORTED_FALLBACK.append(exc)


def was_reported(exc: BaseException) -> bool:
    """Whether ``exc`` was already sent as an error event by this package."""
    try:
        if getattr(exc, _REPORTED_ATTR, False) is True:
            return True
    except Exception:
        pass
    return any(item is exc for item in _REPORTED_FALLBACK)


# -- records already sent by the structlog processor (or by a handler) -----------------------
#
# With structlog's stdlib bridge one log call passes both the processor and the handler, on
# the same thread, one right after the other. Each notes here what it sent, keyed by an object
# both see (the event dict, which becomes ``record.msg``; or the record's ``msg`` and
# ``created``), so the other skips it when it goes to the same server with the same key.

HANDLER = "handler"
PROCESSOR = "processor"

#: Set once a structlog processor exists; until then a handler has nothing to note or check.
_processors_exist = False
#: How far apart (seconds) a note without a record time and the record it matches may be.
_MATCH_WINDOW = 1.0

_Note = tuple[tuple[Any, ...], "float | None", float, tuple[str, str]]


class _Recent(threading.local):
    def __init__(self) -> None:
        self.notes: dict[str, deque[_Note]] = {
            HANDLER: deque(maxlen=8),
            PROCESSOR: deque(maxlen=8),
        }


_RECENT = _Recent()


def processors_exist() -> None:
    """Called when a structlog processor is created: from now on, sends are noted."""
    global _processors_exist
    _processors_exist = True


def note_sent(
    by: str, objs: tuple[Any, ...], created: float | None, engine_key: tuple[str, str]
) -> None:
    """Remember (on this thread) that ``by`` (:data:`HANDLER` or :data:`PROCESSOR`) sent the
    record whose ``msg`` is one of ``objs``, created at ``created`` (``None``: not known yet)."""
    if _processors_exist:
        _RECENT.notes[by].append((objs, created, time.time(), engine_key))


def was_sent(by: str, obj: Any, created: float, engine_key: tuple[str, str]) -> bool:
    """Whether ``by`` sent the record whose ``msg`` is ``obj``, created at ``created``, to the
    engine of ``engine_key``, on this thread, just now. A note matches one record only."""
    if not _processors_exist:
        return False
    notes = _RECENT.notes[by]
    for index in range(len(notes) - 1, -1, -1):
        objs, item_created, noted, key = notes[index]
        if key != engine_key or not any(item is obj for item in objs):
            continue
        if item_created is None:
            if abs(created - noted) > _MATCH_WINDOW:
                continue
        elif item_created != created:
            continue
        del notes[index]
        return True
    return False


# -- building events -----------------------------------------------------------------------


def build_event(
    settings: Settings,
    *,
    message: Any,
    levelno: int,
    source: str | None,
    created: float,
    data: dict[str, Any] | None = None,
    exc: BaseException | None = None,
    user: dict[str, Any] | None = None,
    tags: Iterable[Any] = (),
    level: str | None = None,
    submission_method: str | None = None,
    stack: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One complete event from its parts, built now; the hooks, the structlog processor and
    errors use it.

    Adds the context's user (unless ``user`` is given), the settings' tags and the context's
    tags, applies the settings' data exclusions, and for an exception builds the error form
    with ``@environment``. An exception, or a level at ``ERROR`` or above, adds the request
    scope's ``@request`` and the trace log (``@trace``). Marks ``exc`` as reported.
    """
    if user is None:
        user = get_user()
    all_tags: Iterable[Any] = settings.tags
    context_tags = get_tags()
    if context_tags or tags:
        all_tags = (*settings.tags, *context_tags, *tags)
    if level is None:
        level = level_name(levelno)
    serious = exc is not None or levelno >= logging.ERROR
    if submission_method is not None or serious:
        data = dict(data) if data else {}
        if submission_method is not None:
            data["@submission_method"] = submission_method
        if serious:
            request = get_request()
            if request is not None and "@request" not in data:
                data["@request"] = request
            if settings.trace_size and "@trace" not in data:
                lines = tracelog.lines(settings.trace_size)
                if lines:
                    data["@trace"] = lines
    common: dict[str, Any] = {
        "date": created,
        "user": user,
        "level": level,
        "source": source,
        "tags": all_tags,
        "exclusions": settings.data_exclusions,
    }
    if exc is None:
        return _with_stack(log_event(message, data=data, **common), stack)
    assert data is not None
    if settings.include_environment and "@environment" not in data:
        environment = {**environment_info(), **thread_info()}
        key = settings.api_key
        if key and key in environment["command_line"]:  # a key given as a plain argument
            environment["command_line"] = environment["command_line"].replace(key, MASK)
        data["@environment"] = environment
    event = error_event(exc, message=message, data=data, **common)
    mark_reported(exc)
    return _with_stack(event, stack)


def _with_stack(event: dict[str, Any], stack: dict[str, Any] | None) -> dict[str, Any]:
    """``event`` with its manual stack (added after the data exclusions, which would take
    ``signature_data`` for a secret)."""
    if stack is not None:
        data = event.get("data")
        if not isinstance(data, dict):
            data = event["data"] = {}
        data["@stack"] = stack
    return event


def exception_of(exc_info: Any) -> BaseException | None:
    """The exception of an ``exc_info`` value: a 3-tuple, an exception, or ``True``."""
    if exc_info is None or exc_info is False:
        return None
    if isinstance(exc_info, BaseException):
        return exc_info
    if isinstance(exc_info, tuple):
        value = exc_info[1] if len(exc_info) >= 2 else None
        return value if isinstance(value, BaseException) else None
    if exc_info is True:
        return sys.exc_info()[1]
    return None


def record_message(
    record: logging.LogRecord, formatter: logging.Formatter | None = None
) -> tuple[str, dict[str, Any] | None]:
    """The message of ``record`` and, when it could not be formatted, what to add to data.

    With a ``formatter``, the record is formatted through it, without its exception and stack
    (those travel in ``@simple_error`` and ``data``). Never raises.
    """
    try:
        if formatter is None:
            return record.getMessage(), None
        return formatter.format(_without_traceback(record)), None
    except Exception as exc:
        return safe_str(record.msg), {
            "@message_args": record.args,
            "@format_error": f"{type(exc).__name__}: {safe_str(exc)}",
        }


def _without_traceback(record: logging.LogRecord) -> logging.LogRecord:
    clone: logging.LogRecord = object.__new__(type(record))
    clone.__dict__.update(record.__dict__)
    clone.exc_info = None
    clone.exc_text = None
    clone.stack_info = None
    return clone


def _extras(
    record: logging.LogRecord,
) -> tuple[dict[str, Any] | None, dict[str, Any] | None, tuple[Any, ...], dict[str, Any] | None]:
    """``(data, user, tags, stack)`` of the record's ``extra=`` fields."""
    attributes = record.__dict__
    if len(attributes) <= _RECORD_ATTRIBUTE_COUNT:
        return None, None, (), None  # a record without extras (the common case)
    # A record's own attributes come first (its constructor sets them) and `extra=` fields
    # after, so only the keys past the constructor's are looked at.
    keys = list(islice(attributes, _RECORD_ATTRIBUTE_COUNT - 1, None))
    if keys[0] == _LAST_RECORD_ATTRIBUTE:
        del keys[0]
    else:
        keys = list(attributes)  # an unusual record: look at every key
    data = {key: attributes[key] for key in keys if key not in RESERVED_ATTRS}
    if not data:
        return None, None, (), None
    user: dict[str, Any] | None = None
    tags: tuple[Any, ...] = ()
    stack: dict[str, Any] | None = None
    if TAGS_KEY in data:
        tags = tags_from(data.pop(TAGS_KEY))
    if USER_KEY in data:
        user = user_from(data.pop(USER_KEY))
    if STACK_KEY in data:
        stack = manual_stack(data.pop(STACK_KEY))
    if not KNOWN_DATA_KEYS.isdisjoint(data):
        reserve_known_keys(data)
    return data or None, user, tags, stack


_MISSING = object()


def capture_record(
    record: logging.LogRecord,
    settings: Settings,
    formatter: logging.Formatter | None = None,
) -> Entry:
    """Snapshot ``record`` for the worker (see the module docstring). May raise only on a
    broken record; the handler catches that.

    The common case, a log record whose template is a string and whose arguments and
    ``extra=`` values are immutable scalars, costs a shallow copy of the extras: the message
    is formatted and the extras sorted out on the worker (:func:`~eventlog_handler.delivery._finish.finish`).
    Everything else is snapshotted here (:func:`capture_full`).
    """
    msg = record.msg
    levelno = record.levelno
    if (
        formatter is not None
        or type(msg) is not str
        or levelno >= logging.ERROR
        or record.exc_info
        or record.stack_info
    ):
        return capture_full(record, settings, formatter)
    args: Any = record.args
    if args:
        if type(args) is not tuple:
            return capture_full(record, settings, formatter)
        for arg in args:
            if type(arg) not in _SCALARS:
                return capture_full(record, settings, formatter)
    else:
        args = None
    attributes = record.__dict__
    data: dict[str, Any] | None = None
    if len(attributes) > _RECORD_ATTRIBUTE_COUNT:
        data = dict(islice(attributes.items(), _RECORD_ATTRIBUTE_COUNT - 1, None))
        if data.pop(_LAST_RECORD_ATTRIBUTE, _MISSING) is _MISSING:
            return capture_full(record, settings, formatter)  # an unusual record
        for value in data.values():
            if type(value) not in _SCALARS:
                return capture_full(record, settings, formatter)
    return Entry(
        settings,
        None,
        levelno,
        record.name,
        msg,
        args,
        record.created,
        time.monotonic(),
        data,
        RAW,
        get_user(),
        get_tags(),
    )


def capture_full(
    record: logging.LogRecord,
    settings: Settings,
    formatter: logging.Formatter | None = None,
) -> Entry:
    """Snapshot everything of ``record`` that could change after the call, now."""
    data, user, tags, stack = _extras(record)
    msg = record.msg
    levelno = record.levelno
    if type(msg) is dict and "_logger" in record.__dict__:
        return _capture_structlog_record(record, settings, msg, data, user, tags, stack)
    exc = exception_of(record.exc_info) if record.exc_info else None
    if exc is not None or levelno >= logging.ERROR:
        text, failure = record_message(record, formatter)
        if failure or record.stack_info:
            data = dict(data) if data else {}
            if failure:
                data.update(failure)
            if record.stack_info:
                data["@stack_info"] = record.stack_info
        event = build_event(
            settings,
            message=text,
            levelno=levelno,
            source=record.name,
            created=record.created,
            data=data,
            exc=exc,
            user=user,
            tags=tags,
            stack=stack,
        )
        return Entry(
            settings,
            event,
            levelno,
            record.name,
            None,
            None,
            record.created,
            time.monotonic(),
            is_error=True,
            exc=exc if settings.before_send is not None else None,
        )
    args: Any = record.args
    message: Any = msg
    if formatter is None and type(msg) is str and args:
        deferrable = type(args) is tuple  # a mapping of arguments could change: format now
        if deferrable:
            for arg in args:
                if type(arg) not in _SCALARS:
                    deferrable = False
                    break
        if not deferrable:
            message, failure = record_message(record)
            args = None
            if failure:
                data = {**(data or {}), **failure}
    elif formatter is None and type(msg) is str:
        args = None
    else:
        message, failure = record_message(record, formatter)
        args = None
        if failure:
            data = {**(data or {}), **failure}
    if record.stack_info:
        data = dict(data) if data else {}
        data["@stack_info"] = record.stack_info
    ready = SORTED  # extras sorted out here: finish() need not look again
    if data:
        for value in data.values():
            if type(value) not in _SCALARS:
                data = to_jsonable(data, settings.data_exclusions)
                ready = JSON_READY
                break
    if stack is not None:  # after the exclusions: "signature_data" is not a secret
        data = to_jsonable(data, settings.data_exclusions) if data and not ready else data
        data = dict(data) if data else {}
        data["@stack"] = stack
        ready = JSON_READY
    context_tags = get_tags()
    if context_tags:
        tags = (*context_tags, *tags)
    return Entry(
        settings,
        None,
        levelno,
        record.name,
        message,
        args,
        record.created,
        time.monotonic(),
        data,
        ready,
        user if user is not None else get_user(),
        tags,
    )


def _capture_structlog_record(
    record: logging.LogRecord,
    settings: Settings,
    msg: dict[str, Any],
    data: dict[str, Any] | None,
    user: dict[str, Any] | None,
    tags: tuple[Any, ...],
    stack: dict[str, Any] | None,
) -> Entry:
    """A structlog event dict carried by ``ProcessorFormatter.wrap_for_formatter``."""
    data = dict(data) if data else {}
    data.update(
        (key, value)
        for key, value in msg.items()
        if key not in _STRUCTLOG_KEYS and not key.startswith("_")
    )
    if TAGS_KEY in data:
        tags = (*tags, *tags_from(data.pop(TAGS_KEY)))
    if USER_KEY in data:
        user = user_from(data.pop(USER_KEY))
    if STACK_KEY in data:
        stack = manual_stack(data.pop(STACK_KEY))
    if not KNOWN_DATA_KEYS.isdisjoint(data):
        reserve_known_keys(data)
    exc = exception_of(record.exc_info) or exception_of(msg.get("exc_info"))
    event = build_event(
        settings,
        message=msg.get("event", ""),
        levelno=record.levelno,
        source=record.name,
        created=record.created,
        data=data,
        exc=exc,
        user=user,
        tags=tags,
        stack=stack,
    )
    return Entry(
        settings,
        event,
        record.levelno,
        record.name,
        None,
        None,
        record.created,
        time.monotonic(),
        is_error=exc is not None or record.levelno >= logging.ERROR,
        exc=exc if settings.before_send is not None else None,
    )


def record_to_event(
    record: logging.LogRecord,
    settings: Settings,
    formatter: logging.Formatter | None = None,
) -> dict[str, Any]:
    """The event of ``record`` as the worker will send it (capture and finish at once)."""
    from eventlog_handler.delivery._finish import finish

    return finish(capture_record(record, settings, formatter))


#: Keys of a structlog event dict that are not data.
_STRUCTLOG_KEYS = frozenset(
    {"event", "level", "logger", "logger_name", "timestamp", "exc_info", "positional_args"}
)


# -- exceptions the settings turn off ---------------------------------------------------------

_IGNORED_TYPES: dict[tuple[type[BaseException], tuple[Any, ...]], bool] = {}


def _chain(exc: BaseException) -> list[BaseException]:
    found: list[BaseException] = []
    item: BaseException | None = exc
    while item is not None and len(found) < 10 and all(item is not seen for seen in found):
        found.append(item)
        item = item.__cause__ or (None if item.__suppress_context__ else item.__context__)
    return found


def ignores_exception(exc: BaseException, ignored: tuple[Any, ...]) -> bool:
    """Whether ``exc``'s type is one of ``ignored`` (classes, or names of the type or of a base
    class, qualified like ``myapp.PaymentError`` or not)."""
    if not ignored:
        return False
    kind = type(exc)
    key = (kind, ignored)
    found = _IGNORED_TYPES.get(key)
    if found is None:
        found = False
        for base in kind.__mro__:
            names = {base.__name__, type_name(base)}
            for item in ignored:
                if base is item or (isinstance(item, str) and item in names):
                    found = True
        if len(_IGNORED_TYPES) < 10_000:
            _IGNORED_TYPES[key] = found
    return found


def exception_filtered(exc: BaseException, settings: Settings, server: Any) -> bool:
    """Whether the settings (``ignore_exceptions``) or the service (``@@error:*``) turn the
    error ``exc`` off."""
    if settings.ignore_exceptions and ignores_exception(exc, settings.ignore_exceptions):
        return True
    if server.has_error_rules:
        names = tuple(type_name(type(item)) for item in _chain(exc))
        return bool(server.drops_error(names))
    return False
