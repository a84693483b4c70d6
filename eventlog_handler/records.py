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
  (``stack_info=True``) under ``data["@stack_info"]``.
- With ``exc_info`` (``logger.exception``, ``exc_info=True`` or an exception object): the error
  form, with ``@simple_error`` and ``data["@environment"]`` (machine, process and thread).
- Two ``extra=`` keys are not data: ``tags`` (a list of strings, or one string) is added to the
  handler's and the context's tags, and ``@user`` replaces the context's user for this record:
  ``extra={"@user": {"identity": "u-7", "name": "Bob", "data": {...}}}``, or
  ``extra={"@user": "u-7"}`` for an identity alone.

Everything here runs on the thread that logs: it builds a small dict and does no I/O and no
JSON encoding.
"""

from __future__ import annotations

import logging
import math
import sys
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

from pythonjsonlogger.core import RESERVED_ATTRS as _JSON_LOGGER_RESERVED

from eventlog_handler.context import get_request, get_tags, get_user
from eventlog_handler.events import (
    MAX_MESSAGE,
    MAX_SOURCE,
    environment_info,
    error_event,
    format_date,
    log_event,
    new_reference_id,
    normalize_tags,
    thread_info,
    user_info,
    user_with_exclusions,
)
from eventlog_handler.jsonsafe import MAX_ITEMS, MAX_STRING, is_excluded, safe_str, truncate
from eventlog_handler.settings import MASK, Settings

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

_LEVELS = (
    (logging.CRITICAL, "Fatal"),
    (logging.ERROR, "Error"),
    (logging.WARNING, "Warn"),
    (logging.INFO, "Info"),
    (logging.DEBUG, "Debug"),
)
_LEVEL_CACHE: dict[int, str] = {}


def level_name(levelno: int) -> str:
    """The service's ``@level`` for a :mod:`logging` level number."""
    name = _LEVEL_CACHE.get(levelno)
    if name is None:
        name = "Trace"
        for threshold, candidate in _LEVELS:
            if levelno >= threshold:
                name = candidate
                break
        if len(_LEVEL_CACHE) < 256:
            _LEVEL_CACHE[levelno] = name
    return name


def is_ignored_logger(name: str | None) -> bool:
    """Whether records of the logger ``name`` must never become events."""
    if not name:
        return False
    return name.partition(".")[0] in IGNORED_LOGGERS


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
) -> dict[str, Any]:
    """One event from its parts; the handler, the structlog processor and the hooks use it.

    Adds the context's user (unless ``user`` is given), the settings' tags and the context's
    tags, applies the settings' data exclusions, and for an exception builds the error form
    with ``@environment``. Marks ``exc`` as reported.
    """
    if user is None:
        user = get_user()
    all_tags: Iterable[Any] = settings.tags
    context_tags = get_tags()
    if context_tags or tags:
        all_tags = (*settings.tags, *context_tags, *tags)
    if level is None:
        level = level_name(levelno)
    if submission_method is not None:
        data = dict(data) if data else {}
        data["@submission_method"] = submission_method
    common: dict[str, Any] = {
        "date": created,
        "user": user,
        "level": level,
        "source": source,
        "tags": all_tags,
        "exclusions": settings.data_exclusions,
    }
    if exc is None:
        fast = _fast_log_event(settings, message, created, user, level, source, all_tags, data)
        if fast is not None:
            return fast
        return log_event(message, data=data, **common)
    data = dict(data) if data else {}
    request = get_request()
    if request is not None and "@request" not in data:
        data["@request"] = request
    if settings.include_environment and "@environment" not in data:
        environment = {**environment_info(), **thread_info()}
        key = settings.api_key
        if key and key in environment["command_line"]:  # a key given as a plain argument
            environment["command_line"] = environment["command_line"].replace(key, MASK)
        data["@environment"] = environment
    event = error_event(exc, message=message, data=data, **common)
    mark_reported(exc)
    return event


def _fast_log_event(
    settings: Settings,
    message: Any,
    created: float,
    user: dict[str, Any] | None,
    level: str,
    source: str | None,
    tags: Iterable[Any],
    data: dict[str, Any] | None,
) -> dict[str, Any] | None:
    """:func:`~eventlog_handler.events.log_event`'s result, built faster for the common case
    (a string message, a flat ``data`` of plain values); ``None`` when that case doesn't hold.
    """
    if type(message) is not str or (source is not None and type(source) is not str):
        return None
    clean_data: dict[str, Any] | None = None
    if data:
        clean_data = _flat_data(data, settings.data_exclusions)
        if clean_data is None:
            return None
    event: dict[str, Any] = {
        "type": "log",
        "message": message if len(message) <= MAX_MESSAGE else truncate(message, MAX_MESSAGE),
        "date": format_date(created),
    }
    if user:
        event["@user"] = user_with_exclusions(user, settings.data_exclusions)
    event["@level"] = level
    if source:
        event["source"] = source if len(source) <= MAX_SOURCE else truncate(source, MAX_SOURCE)
    if tags:
        clean_tags = normalize_tags(tags)
        if clean_tags:
            event["tags"] = clean_tags
    if clean_data:
        event["data"] = clean_data
    event["reference_id"] = new_reference_id()
    return event


_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1
#: Whether a data key is excluded, per exclusion list (keys of a program repeat endlessly).
_EXCLUDED: dict[tuple[str, ...], dict[str, bool]] = {}


def _flat_data(data: Mapping[str, Any], exclusions: tuple[str, ...]) -> dict[str, Any] | None:
    """A copy of ``data`` with excluded values masked, if every key is a short string and every
    value a short string, a 64-bit int, a finite float, a bool or ``None``; else ``None``."""
    if len(data) > MAX_ITEMS:
        return None  # the general builder keeps MAX_ITEMS and marks the rest
    cache = _EXCLUDED.get(exclusions)
    if cache is None:
        cache = _EXCLUDED.setdefault(exclusions, {})
    result: dict[str, Any] = {}
    for key, value in data.items():
        kind = type(value)
        if kind is str:
            if len(value) > MAX_STRING:
                return None
        elif kind is int:
            if not _INT_MIN <= value <= _INT_MAX:
                return None
        elif kind is float:
            if not math.isfinite(value):
                return None
        elif value is not None and kind is not bool:
            return None
        excluded = cache.get(key)
        if excluded is None:
            if type(key) is not str or len(key) > 200:
                return None
            excluded = is_excluded(key, exclusions)
            if len(cache) < 10_000:
                cache[key] = excluded
        result[key] = MASK if excluded else value
    return result


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


def record_to_event(
    record: logging.LogRecord,
    settings: Settings,
    formatter: logging.Formatter | None = None,
) -> dict[str, Any]:
    """The event of ``record`` (see the module docstring). May raise only on a broken record;
    the handler catches that."""
    user: dict[str, Any] | None = None
    tags: tuple[Any, ...] = ()
    attributes = record.__dict__
    # A record's own attributes come first (its constructor sets them) and `extra=` fields
    # after, so only the keys past the constructor's are looked at.
    keys = list(attributes)
    start = _RECORD_ATTRIBUTE_COUNT
    if len(keys) < start or keys[start - 1] != _LAST_RECORD_ATTRIBUTE:
        start = 0  # an unusual record: look at every key
    data = {key: attributes[key] for key in keys[start:] if key not in RESERVED_ATTRS}
    if data:
        if TAGS_KEY in data:
            tags = tags_from(data.pop(TAGS_KEY))
        if USER_KEY in data:
            user = user_from(data.pop(USER_KEY))
    msg = record.msg
    if type(msg) is dict and "_logger" in attributes:
        # A structlog event dict carried by ProcessorFormatter.wrap_for_formatter.
        message: Any = msg.get("event", "")
        structlog_data = {
            key: value
            for key, value in msg.items()
            if key not in _STRUCTLOG_KEYS and not key.startswith("_")
        }
        data.update(structlog_data)
        if TAGS_KEY in data:
            tags = (*tags, *tags_from(data.pop(TAGS_KEY)))
        if USER_KEY in data:
            user = user_from(data.pop(USER_KEY))
        exc = exception_of(record.exc_info) or exception_of(msg.get("exc_info"))
    else:
        message, failure = record_message(record, formatter)
        if failure:
            data.update(failure)
        exc = exception_of(record.exc_info) if record.exc_info else None
    if record.stack_info:
        data["@stack_info"] = record.stack_info
    return build_event(
        settings,
        message=message,
        levelno=record.levelno,
        source=record.name,
        created=record.created,
        data=data,
        exc=exc,
        user=user,
        tags=tags,
    )


#: Keys of a structlog event dict that are not data.
_STRUCTLOG_KEYS = frozenset(
    {"event", "level", "logger", "logger_name", "timestamp", "exc_info", "positional_args"}
)
