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
after the call returns. For a log record whose ``extra=`` values are immutable scalars
(strings, numbers, booleans, ``None``), that is the formatted message and a shallow copy of the
extras: they are sorted out and made JSON-safe on the delivery worker
(:mod:`eventlog_handler.delivery._finish`). Errors are built at once, while their traceback
exists.
"""

from __future__ import annotations

import logging
import sys
import time
import traceback
from collections.abc import Iterable
from itertools import islice
from sys import getsizeof
from types import FrameType
from typing import Any

from eventlog_handler.capture import _tracelog as tracelog
from eventlog_handler.capture._admit import handled, mark_reported
from eventlog_handler.capture._context import (
    _TAGS,
    _USER,
    get_request,
    get_tags,
    get_user,
    note_reference,
)
from eventlog_handler.delivery._buffer import ENTRY_OVERHEAD, Entry, data_size
from eventlog_handler.settings import MASK, Settings
from eventlog_handler.wire._events import environment_info, error_event, thread_info
from eventlog_handler.wire._extras import (
    SPECIAL_EXTRAS,
    sort_extras,
    take_special,
)
from eventlog_handler.wire._frames import FRAMES_KEY, call_site, error_refs
from eventlog_handler.wire._jsonsafe import safe_str, to_jsonable
from eventlog_handler.wire._levels import level_name
from eventlog_handler.wire._logs import JSON_READY, RAW, SORTED, log_event
from eventlog_handler.wire._simple_error import chained, group_member_errors, group_members

__all__ = [
    "build_event",
    "capture_record",
    "event_exception",
    "exception_of",
    "record_exception",
    "record_to_event",
]

_RECORD_ATTRIBUTES = list(vars(logging.LogRecord("", logging.INFO, "", 0, "", None, None)))
_RECORD_ATTRIBUTE_COUNT = len(_RECORD_ATTRIBUTES)
_LAST_RECORD_ATTRIBUTE = _RECORD_ATTRIBUTES[-1]

#: Types whose values can't change after the call: extras of these types are copied as they
#: are and made JSON-safe on the worker.
_SCALARS = frozenset({str, int, float, bool, type(None)})


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
    template: Any = None,
    caller: FrameType | None = None,
) -> dict[str, Any]:
    """One complete event from its parts, built now; the hooks, the structlog processor and
    errors use it. ``caller``: where the log call was made, when not on this thread (structlog's
    async methods), for a serious log's call site.

    Adds the context's user (unless ``user`` is given), the settings' tags and the context's
    tags, applies the settings' data exclusions, and for an exception builds the error form
    with ``@environment``. An exception, or a level at ``ERROR`` or above, adds the request
    scope's ``@request`` and the trace log (``@trace``). Marks ``exc`` as reported.

    Frames (:mod:`eventlog_handler.wire._frames`): an error's ``@simple_error`` levels get
    references to their frames (and, with ``include_locals``, the locals of the application's
    frames), a serious log without an exception the references of its call site and its stack
    (:func:`~eventlog_handler.wire._grouping.log_stack`, by ``template``, else ``message``);
    the worker resolves them (:func:`eventlog_handler.delivery._finish.finish`).
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
    trace: list[str] | None = None
    if submission_method is not None or serious:
        data = dict(data) if data else {}
        if submission_method is not None:
            data["@submission_method"] = submission_method
        if serious:
            request = get_request()
            if request is not None and "@request" not in data:
                data["@request"] = request
            if settings.trace_size and "@trace" not in data:
                # Lines of text, each bounded already: added after the data is made JSON-safe.
                trace = tracelog.lines(settings.trace_size) or None
    common: dict[str, Any] = {
        "date": created,
        "user": user,
        "level": level,
        "source": source,
        "tags": all_tags,
        "exclusions": settings.data_exclusions,
    }
    if exc is None:
        event = log_event(message, data=data, **common)
        if trace is not None:
            _add_data(event, "@trace", trace)
        if serious:
            note_reference(event.get("reference_id"))
            site = caller if caller is not None else sys._getframe(1)
            return _with_call_site(event, settings, stack, source, template, message, site)
        return _with_stack(event, stack)
    assert data is not None
    environment: dict[str, Any] | None = None
    if settings.include_environment and "@environment" not in data:
        # Plain text and numbers (JSON-safe already): added after the data is made JSON-safe.
        environment = {**environment_info(), **thread_info()}
        key = settings.api_key
        if key and key in environment["command_line"]:  # a key given as a plain argument
            environment["command_line"] = environment["command_line"].replace(key, MASK)
    event = error_event(exc, message=message, data=data, **common)
    if environment is not None:
        _add_data(event, "@environment", environment)
    if trace is not None:
        _add_data(event, "@trace", trace)
    note_reference(event.get("reference_id"))
    mark_reported(exc, event.get("reference_id"))
    _with_frames(event, exc, settings)
    if exc.__traceback__ is None and stack is None:  # never raised: where it was captured
        site = caller if caller is not None else sys._getframe(1)
        return _with_call_site(event, settings, stack, source, template, message, site)
    return _with_stack(event, stack)


def _with_frames(event: dict[str, Any], exc: BaseException, settings: Settings) -> None:
    """Frame references under each ``@simple_error`` level's ``data["@frames"]`` (and each
    exception group member's: they tell one group's failure from another's)."""
    locals_for = None
    if settings.include_locals:
        locals_for = (settings.in_app_include, settings.in_app_exclude, settings.data_exclusions)
    _frames_of_chain(event.get("@simple_error"), exc, locals_for, set(), 2)


def _frames_of_chain(
    node: Any, current: BaseException | None, locals_for: Any, seen: set[int], groups: int
) -> None:
    while isinstance(node, dict) and current is not None and id(current) not in seen:
        seen.add(id(current))
        try:
            refs = error_refs(current, locals_for=locals_for)
        except Exception:  # a broken frame or traceback: the error goes without frames
            refs = None
        if refs:
            data = node.get("data")
            if not isinstance(data, dict):
                data = node["data"] = {}
            data[FRAMES_KEY] = refs
        if groups:
            members = zip(group_member_errors(node), group_members(current), strict=False)
            for member_node, member in members:
                _frames_of_chain(member_node, member, None, seen, groups - 1)
        node = node.get("inner")
        current = chained(current)


def _with_call_site(
    event: dict[str, Any],
    settings: Settings,
    stack: dict[str, Any] | None,
    source: str | None,
    template: Any,
    message: Any,
    frame: FrameType,
) -> dict[str, Any]:
    """A serious log event with its call site, from ``frame`` up (the worker makes its frames
    and, unless ``stack`` is given, its stack:
    :func:`eventlog_handler.delivery._finish.complete`)."""
    try:
        site = call_site(
            frame,
            source,
            message if template is None else template,
            settings.in_app_include,
            settings.in_app_exclude,
        )
    except Exception:  # pragma: no cover - a frame that can't be read
        return _with_stack(event, stack)
    _add_data(event, FRAMES_KEY, site)
    return _with_stack(event, stack)


def _add_data(event: dict[str, Any], key: str, value: Any) -> None:
    data = event.get("data")
    if not isinstance(data, dict):
        data = event["data"] = {}
    data[key] = value


def _with_stack(event: dict[str, Any], stack: dict[str, Any] | None) -> dict[str, Any]:
    """``event`` with its manual stack (added after the data exclusions, which would take
    ``signature_data`` for a secret)."""
    if stack is not None:
        _add_data(event, "@stack", stack)
    return event


def exception_of(exc_info: Any) -> BaseException | None:
    """The exception of an ``exc_info`` value: a 3-tuple, an exception, or ``True``. An
    exception that only carries another across processes (billiard's
    ``ExceptionWithTraceback``, which Celery logs for a pool child's ``TimeLimitExceeded`` or
    ``WorkerLostError``) stands for the one it carries."""
    if exc_info is None or exc_info is False:
        return None
    value: Any = None
    if isinstance(exc_info, BaseException):
        value = exc_info
    elif isinstance(exc_info, tuple):
        value = exc_info[1] if len(exc_info) >= 2 else None
    elif exc_info is True:
        value = sys.exc_info()[1]
    if type(value).__name__ == "ExceptionWithTraceback":
        carried = getattr(value, "exc", None)
        if isinstance(carried, BaseException):
            return carried
    return value if isinstance(value, BaseException) else None


def record_exception(record: logging.LogRecord) -> BaseException | None:
    """The exception ``record`` is an error of: its ``exc_info``'s (or, for a structlog event
    dict, :func:`event_exception`'s), unless the framework that logged it handled it
    (:func:`~eventlog_handler.capture._admit.handled`)."""
    if record.exc_info:
        exc = exception_of(record.exc_info)
    elif type(record.msg) is dict:
        exc = event_exception(record.msg)
    else:
        return None
    return None if exc is None or handled(record.name, record.levelno) else exc


def event_exception(event_dict: Any) -> BaseException | None:
    """The exception of a structlog event dict: its ``exc_info``'s, or, where a processor
    before made it text or a list under ``"exception"`` (``format_exc_info``, in structlog's
    own recipes, or ``dict_tracebacks``), the exception being handled when that is its
    traceback (the call is made in its ``except`` block). ``None`` else."""
    exc = exception_of(event_dict.get("exc_info"))
    if exc is not None:
        return exc
    rendered = event_dict.get("exception")
    current = sys.exc_info()[1]
    if current is None or not isinstance(rendered, str | list):
        return None
    try:
        if isinstance(rendered, list):  # dict_tracebacks: the exceptions of the chain
            name, text = type(current).__name__, str(current)
            return next(
                (
                    current
                    for item in rendered
                    if isinstance(item, dict)
                    and item.get("exc_type") == name
                    and item.get("exc_value") == text
                ),
                None,
            )
        last = traceback.format_exception_only(type(current), current)[-1].strip()
    except Exception:  # its __str__ failed: not told apart
        return None
    return current if last and rendered.rstrip().endswith(last) else None


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
    data, user, tags, stack = sort_extras({key: attributes[key] for key in keys})
    return data or None, user, tags, stack


_MISSING = object()
#: :func:`~eventlog_handler.capture._context.get_user` and ``get_tags`` on the log call's path:
#: the context variables' own methods, without a Python frame.
_context_user, _context_tags = _USER.get, _TAGS.get


def capture_record(
    record: logging.LogRecord,
    settings: Settings,
    formatter: logging.Formatter | None = None,
) -> Entry:
    """Snapshot ``record`` for the worker (see the module docstring). May raise only on a
    broken record; the handler catches that.

    The common case, a log record whose template is a string and whose ``extra=`` values are
    immutable scalars, costs formatting the message (as ``QueueHandler.prepare`` does) and a
    shallow copy of the extras, which are sorted out on the worker
    (:func:`~eventlog_handler.delivery._finish.built`). Everything else is snapshotted here
    (:func:`capture_full`).
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
    args = record.args
    if args and type(args) is not tuple:
        return capture_full(record, settings, formatter)
    attributes = record.__dict__
    data: dict[str, Any] | None = None
    # The entry's size (what :func:`~eventlog_handler.delivery._buffer.entry_size` gives),
    # counted in the look at the extras' types: no second walk in the intake.
    size = ENTRY_OVERHEAD
    if len(attributes) > _RECORD_ATTRIBUTE_COUNT:
        data = dict(islice(attributes.items(), _RECORD_ATTRIBUTE_COUNT - 1, None))
        if data.pop(_LAST_RECORD_ATTRIBUTE, _MISSING) is _MISSING:
            return capture_full(record, settings, formatter)  # an unusual record
        extras = data_size(data, True)
        if extras < 0:  # a value that could change after the call: snapshotted there
            return capture_full(record, settings, formatter)
        size += extras
    if args:
        try:
            msg = msg % args  # as record.getMessage(), for a str template
        except Exception:
            return capture_full(record, settings, formatter)  # said in data there
    entry = Entry(
        settings,
        None,
        levelno,
        record.name,
        msg,
        record.created,
        time.monotonic(),
        data,
        RAW,
        _context_user(),
        _context_tags(),
    )
    entry.size = size + len(msg) if msg.isascii() else size + getsizeof(msg)
    return entry


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
    exc = record_exception(record)
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
            template=msg,
        )
        return Entry(
            settings,
            event,
            levelno,
            record.name,
            None,
            record.created,
            time.monotonic(),
            is_error=True,
            exc=exc if settings.before_send is not None else None,
        )
    message: Any = msg
    if formatter is not None or type(msg) is not str or record.args:
        message, failure = record_message(record, formatter)
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
    if not SPECIAL_EXTRAS.isdisjoint(data):
        own_user, own_tags, own_stack = take_special(data)
        tags = (*tags, *own_tags)
        if own_user is not None:
            user = own_user
        if own_stack is not None:
            stack = own_stack
    exc = exception_of(record.exc_info) or event_exception(msg)
    if exc is not None and "exc_info" not in msg:
        data.pop("exception", None)  # its text, made by format_exc_info: in @simple_error
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
