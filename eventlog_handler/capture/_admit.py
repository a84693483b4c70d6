"""Whether a record or an exception becomes an event: the admission rules every entry point
shares (the handler, the structlog processor, the hooks, ``capture_exception``, middleware).

- Loggers whose records never become events, or only from ``WARNING`` up
  (:func:`source_minimum`).
- Exceptions already reported (:func:`was_reported`), so one exception is one event.
- Records the structlog processor already sent (:func:`was_sent`), and the reverse.
- Exceptions the settings or the service turn off (:func:`exception_filtered`).
"""

from __future__ import annotations

import logging
import math
import threading
import time
import weakref
from collections import deque
from typing import Any

from eventlog_handler.settings import Settings
from eventlog_handler.wire._simple_error import type_name

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

#: Loggers inside a library whose records never become events, with their children: Django's
#: development server's request lines (one per request, at the level of its status: a 500's
#: line would be a second error beside the error the middleware reports), like werkzeug's.
IGNORED_SUBLOGGERS = ("django.server",)
#: Loggers whose records below ``ERROR`` tell of an exception the framework handled (Django's
#: ``Forbidden (Permission denied): /path``, logged with the ``PermissionDenied``): sent as the
#: log lines they are, not as errors.
HANDLED_EXCEPTION_LOGGERS = frozenset({"django.request"})

#: Servers and workers whose records below ``WARNING`` are their routine lifecycle lines ("Started
#: server process", "Worker exiting", "Task ... received", "Watching for file changes"): not
#: events, but still in the trace log. Their warnings and errors are sent as usual.
ROUTINE_LOGGERS = frozenset(
    {"uvicorn", "gunicorn", "hypercorn", "waitress", "daphne", "celery", "rq", "kombu", "billiard"}
)
#: ... and such loggers inside a library (with their children).
ROUTINE_SUBLOGGERS = ("django.utils.autoreload",)


def _under(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == prefix or name.startswith(prefix + ".") for prefix in prefixes)


def is_routine_logger(name: str | None) -> bool:
    """Whether the records of ``name`` below ``WARNING`` are a server's routine lines."""
    if not name:
        return False
    text = str(name)
    return text.partition(".")[0] in ROUTINE_LOGGERS or _under(text, ROUTINE_SUBLOGGERS)


#: Whether a logger's records are ignored, by name (names of a program repeat).
_IGNORED_CACHE: dict[str, bool] = {}


def is_ignored_logger(name: str | None) -> bool:
    """Whether records of the logger ``name`` must never become events."""
    if not name:
        return False
    ignored = _IGNORED_CACHE.get(name)
    if ignored is None:
        ignored = name.partition(".")[0] in IGNORED_LOGGERS or _under(name, IGNORED_SUBLOGGERS)
        if len(_IGNORED_CACHE) < 10_000:
            _IGNORED_CACHE[name] = ignored
    return ignored


#: The lowest level of a logger's records that become events, by ignore_loggers and name.
_MINIMUMS: dict[tuple[tuple[str, ...], str], float] = {}


#: Loggers that carry a program's output, not its log (Celery's ``worker_redirect_stdouts``:
#: ``print()`` and structlog's ``PrintLogger`` in a worker, already sent by the processor):
#: never events, still in the trace log.
OUTPUT_LOGGERS = frozenset({"celery.redirected"})


def source_minimum(name: str | None, ignore_loggers: tuple[str, ...] = ()) -> float:
    """The lowest level of the records of the logger ``name`` that become events, for the
    handler and the structlog processor alike: ``inf`` for loggers never sent (this package's
    HTTP stack, :data:`IGNORED_LOGGERS`, the settings' ``ignore_loggers`` and their children),
    ``WARNING`` for a server's routine lines (:data:`ROUTINE_LOGGERS`: still in the trace log),
    above ``CRITICAL`` for a program's output (:data:`OUTPUT_LOGGERS`: in the trace log only),
    else 0. Remembered per name (the names of a program repeat)."""
    if not name:
        return 0.0
    key = (ignore_loggers, name)
    minimum = _MINIMUMS.get(key)
    if minimum is None:
        minimum = 0.0
        if is_ignored_logger(name) or any(
            name == item or name.startswith(item + ".") for item in ignore_loggers
        ):
            minimum = math.inf
        elif name in OUTPUT_LOGGERS:
            minimum = float(logging.CRITICAL + 1)
        elif is_routine_logger(name):
            minimum = float(logging.WARNING)
        if len(_MINIMUMS) < 10_000:
            _MINIMUMS[key] = minimum
    return minimum


# -- exceptions already reported --------------------------------------------------------------

_REPORTED_ATTR = "_eventlog_handler_reported"
_REFERENCE_ATTR = "_eventlog_handler_reference"
# Exceptions that refuse attributes (``__slots__``, a frozen dataclass) are remembered here
# instead, by weak reference where they allow one: holding them would keep their tracebacks,
# and every frame's locals, alive.
_REPORTED_FALLBACK: deque[Any] = deque(maxlen=32)


def mark_reported(exc: BaseException, reference_id: Any = None) -> None:
    """Remember that ``exc`` was sent, so the exception hooks don't send it again, and the
    ``reference_id`` of its event (:func:`reference_of`)."""
    try:
        setattr(exc, _REPORTED_ATTR, True)
        if isinstance(reference_id, str):
            setattr(exc, _REFERENCE_ATTR, reference_id)
    except Exception:
        try:
            _REPORTED_FALLBACK.append(weakref.ref(exc))
        except TypeError:
            _REPORTED_FALLBACK.append(lambda exc=exc: exc)


def reference_of(exc: BaseException | None) -> str | None:
    """The reference id of the event that reported ``exc``, if one did."""
    try:
        found = vars(exc).get(_REFERENCE_ATTR) if exc is not None else None
    except TypeError:  # no __dict__
        return None
    return found if isinstance(found, str) else None


def was_reported(exc: BaseException) -> bool:
    """Whether ``exc`` was already sent as an error event by this package."""
    try:
        if getattr(exc, _REPORTED_ATTR, False) is True:
            return True
    except Exception:
        pass
    return any(item() is exc for item in list(_REPORTED_FALLBACK))


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
#: ... and a processor's note and the record of the text a renderer made of its event dict
#: (structlog rendering, then a stdlib logger: the record's ``msg`` is a new string).
_RENDERED_WINDOW = 0.25

#: ``(objects, record time, noted at, engine key, logger name, level)``; the processor's notes
#: without a record name the stdlib logger the call goes on to, and its level.
_Note = tuple[tuple[Any, ...], "float | None", float, tuple[str, str], "str | None", int]


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
    by: str,
    objs: tuple[Any, ...],
    created: float | None,
    engine_key: tuple[str, str],
    logger: tuple[str, int] | None = None,
) -> None:
    """Remember (on this thread) that ``by`` (:data:`HANDLER` or :data:`PROCESSOR`) sent the
    record whose ``msg`` is one of ``objs``, created at ``created`` (``None``: not known yet);
    ``logger``: the stdlib logger's name and the level of the record to come (structlog's
    stdlib bridge), which the record must have, and whose ``msg`` may be a rendered text."""
    if _processors_exist:
        name, level = logger if logger is not None else (None, 0)
        _RECENT.notes[by].append((objs, created, time.time(), engine_key, name, level))


def was_sent(
    by: str, obj: Any, created: float, engine_key: tuple[str, str], name: str = "", level: int = 0
) -> bool:
    """Whether ``by`` sent the record of logger ``name`` at ``level`` whose ``msg`` is ``obj``,
    created at ``created``, to the engine of ``engine_key``, on this thread, just now. A note
    matches one record only: the first match pins it to that record (its ``msg`` and time), so
    that every later pass over the same record matches it too (the handler, and the processor
    again in a ``ProcessorFormatter``: one record may meet both)."""
    if not _processors_exist:
        return False
    notes = _RECENT.notes[by]
    for index in range(len(notes) - 1, -1, -1):
        objs, item_created, noted, key, noted_name, noted_level = notes[index]
        if key != engine_key:
            continue
        if noted_name is not None and (noted_name != name or noted_level != level):
            continue
        if any(item is obj for item in objs):
            if item_created is None:
                if abs(created - noted) > _MATCH_WINDOW:
                    continue
            elif item_created != created:
                continue
        elif (
            noted_name is None  # only the bridge's note may match a rendered text
            or type(obj) is not str
            or not 0 <= created - noted <= _RENDERED_WINDOW  # made just now
        ):
            continue
        if noted_name is not None or item_created is None:
            notes[index] = ((obj,), created, noted, key, None, 0)
        return True
    return False


def claim(by: str, record: Any, engine_key: tuple[str, str]) -> bool:
    """Whether ``by`` (:data:`HANDLER` or :data:`PROCESSOR`) is the first to send the
    :class:`logging.LogRecord` ``record`` to the engine of ``engine_key``; if so, noted for the
    other. The processor also steps aside for itself: one record can pass it twice (in the
    structlog chain and again in a ``ProcessorFormatter``)."""
    if not _processors_exist:
        return True
    msg, created, name, level = record.msg, record.created, record.name, record.levelno
    if was_sent(PROCESSOR, msg, created, engine_key, name, level) or (
        by == PROCESSOR and was_sent(HANDLER, msg, created, engine_key, name, level)
    ):
        return False
    note_sent(by, (msg,), created, engine_key)
    return True


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


#: Exceptions that are a task queue's control flow, not failures: Celery's retry, ignore and
#: reject (a task that retries is reported once, at its final failure).
CONTROL_FLOW = ("celery.exceptions.Retry", "celery.exceptions.Ignore", "celery.exceptions.Reject")


def exception_filtered(exc: BaseException, settings: Settings, server: Any) -> bool:
    """Whether ``exc`` is not an error to report: a task queue's control flow, or turned off by
    the settings (``ignore_exceptions``) or the service (``@@error:*``)."""
    if type(exc).__module__.startswith("celery") and ignores_exception(exc, CONTROL_FLOW):
        return True
    if settings.ignore_exceptions and ignores_exception(exc, settings.ignore_exceptions):
        return True
    if server.has_error_rules:
        names = tuple(type_name(type(item)) for item in _chain(exc))
        return bool(server.drops_error(names))
    return False


#: What :func:`admit` says of a record or an event that passed the entry point's level.
SEND = 0
#: Its exception was reported already (by middleware, a hook or an earlier call): once only.
ALREADY_REPORTED = 1
#: Its exception is turned off (``ignore_exceptions``, ``@@error:*``, control flow): counted.
FILTERED = 2
#: Below the service's ``@@log`` level for its source.
BELOW_LOG_SETTING = 3


def admit(
    source: str | None, levelno: int, exc: BaseException | None, settings: Settings, engine: Any
) -> int:
    """The one admission decision of every entry point (the handler, the structlog processor,
    :func:`~eventlog_handler.capture._exceptions.capture_exception` and the hooks and
    middleware that call it) for a record or event of ``source`` at ``levelno`` (its exception
    ``exc``, if any), with ``engine``'s server settings: :data:`SEND` or why not. A filtered
    exception is counted here."""
    if exc is not None:
        if was_reported(exc):
            return ALREADY_REPORTED
        if exception_filtered(exc, settings, engine.server):
            engine.count_filtered()
            return FILTERED
        return SEND
    server = engine.server
    if server.has_log_levels:
        minimum = server.log_level(source)
        if minimum is not None and levelno < minimum:
            return BELOW_LOG_SETTING
    return SEND


def handled(source: str | None, levelno: int) -> bool:
    """Whether a record of ``source`` at ``levelno`` with an exception tells of an exception
    the framework handled (:data:`HANDLED_EXCEPTION_LOGGERS`): a log, not an error."""
    return levelno < logging.ERROR and source in HANDLED_EXCEPTION_LOGGERS
