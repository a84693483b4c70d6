"""The trace log: the last log records of a thread or task, sent with its errors as ``@trace``.

Every record that reaches a handler (at any level, also below the level at which it sends
events) is noted in a small ring buffer of the thread that logged it, or of the asyncio task,
or of the unit of work a :class:`~eventlog_handler.capture._context.RequestScope` opened. When an error
event is captured, the ring's lines (oldest first) become ``data["@trace"]``: what the program
was doing just before it failed, as the official clients' trace log (and sentry's breadcrumbs)
give it.

Noting a record costs one context-variable lookup and one ``deque.append`` of a small tuple:
the message is formatted only when an error needs the lines, if its template is a short string
and its arguments are short strings, numbers, booleans or ``None`` (:func:`_kept`). Any other
record is formatted at once: a ring must not keep the program's objects alive (a payload, a
connection its program has let go of), nor show them as they were changed later. Rings are bounded (their length
is the largest ``trace_size`` asked for, at most :data:`MAX_TRACE`), belong to their thread or
task and go away with it. Lines carry no ``extra=`` data, only the message, and are scrubbed
of secrets with the rest of the event before it is sent.
"""

from __future__ import annotations

import contextvars
import logging
import sys
import threading
import time
import weakref
from collections import deque
from typing import Any

from eventlog_handler.wire._jsonsafe import safe_str, truncate
from eventlog_handler.wire._levels import level_name
from eventlog_handler.wire._simple_error import main_named

#: The longest trace log kept per thread or task.
MAX_TRACE = 250
#: Characters kept per line.
MAX_LINE = 500

#: A noted record: ``(id, created, levelno, name, msg, args)``, or, once formatted, ``(id,
#: created, line)`` (an error formats the lines it sends, and the next error reuses them).
_Note = tuple[Any, ...]


class _Scope:
    """The trace log of a unit of work, held in a context variable: a request's (a
    :class:`~eventlog_handler.capture._context.RequestScope`'s, ``task`` is ``None``: shared by
    its tasks and threads) or an asyncio task's (``task``: its id). Copies of the context (a
    sync endpoint run in a thread pool, a middleware's child task, structlog's ``ainfo`` run in
    the loop's executor) share the object, and so the ring, which is made on first use: most
    requests log little."""

    __slots__ = ("ring", "task", "thread")

    def __init__(self, task: Any = None) -> None:
        self.ring: deque[_Note] | None = None
        #: A thread's own scope: the thread's token (it is used in that thread only).
        self.thread: object = None
        #: The task's weak reference (its id would be a later task's too).
        self.task: Any = None if task is None else weakref.ref(task)


_SCOPE: contextvars.ContextVar[_Scope | None] = contextvars.ContextVar(
    "eventlog_handler_trace", default=None
)
_size = 0


class _Threads(threading.local):
    """A token per thread: unlike its ident, never the token of a thread that ended."""

    def __init__(self) -> None:
        self.token = object()


_THREADS = _Threads()


def _in_thread() -> None:
    """The ``task`` of a thread's own scope: called like a task's weak reference, it is no
    task, so a task started from the thread makes a scope of its own."""
    return None


def _loop_before_asyncio() -> Any:
    """:func:`asyncio.events._get_running_loop` once :mod:`asyncio` is imported (no loop runs
    before), without importing it: the program may never use it. Not by importing ``_asyncio``
    before it either: :mod:`asyncio` then falls back to its pure-Python task registry, which its
    C tasks do not fill, and ``current_task()`` is ``None`` in every task (``TaskGroup`` and
    ``asyncio.timeout`` fail)."""
    global _get_running_loop
    events = sys.modules.get("asyncio.events")
    found = getattr(events, "_get_running_loop", None)
    if found is None:
        return None
    if getattr(sys.modules.get("asyncio"), "run", None) is not None:
        # Kept once asyncio's import is done: while asyncio.events runs, its pure-Python
        # function is there until the module's end puts _asyncio's in its place.
        _get_running_loop = found
    return found()


_get_running_loop: Any = _loop_before_asyncio


def want(size: int) -> None:
    """Make rings hold at least ``size`` lines (up to :data:`MAX_TRACE`); 0 changes nothing."""
    global _size
    size = min(max(0, size), MAX_TRACE)
    if size > _size:
        _size = size
        scope = _SCOPE.get()
        ring = None if scope is None else scope.ring
        if ring is not None and ring.maxlen is not None and ring.maxlen < size:
            scope.ring = deque(ring, maxlen=size)  # type: ignore[union-attr]


def enabled() -> bool:
    """Whether any handler asked for a trace log."""
    return _size > 0


def _ring() -> deque[_Note]:
    scope = _SCOPE.get()
    task = None
    if _get_running_loop() is not None:
        task = sys.modules["asyncio"].current_task()  # a loop runs: asyncio is imported
    if (
        scope is None
        or (task is not None and scope.task is not None and scope.task() is not task)
        or (task is None and scope.task is _in_thread and scope.thread is not _THREADS.token)
        or (task is None and scope.task is not None and scope.task is not _in_thread)
    ):
        # A task's own (a child task copied its parent's context), or a thread's: made in the
        # context the thread runs, so work run in a copy of another context (asyncio.to_thread,
        # a pool's job) has its own, and not the ring of every job the thread ran before. In a
        # task's context (to_thread, a callback it scheduled), it starts with the task's lines
        # and keeps its own apart: a task that had not logged has its parent's scope, and the
        # jobs of all its siblings wrote into it, each error carrying the others' lines.
        before = None
        if task is None and scope is not None and scope.task not in (None, _in_thread):
            before = scope.ring  # a task's lines, which the thread's start with
        scope = _Scope(task)
        if task is None:
            scope.task = _in_thread
            scope.thread = _THREADS.token
            if before:
                scope.ring = deque(before, maxlen=before.maxlen)
        _SCOPE.set(scope)
    ring = scope.ring
    if ring is None:
        ring = scope.ring = deque(maxlen=_size or 1)
    return ring


def note(record: logging.LogRecord) -> None:
    """Remember ``record`` in the ring of the current thread or task (once per record)."""
    scope = _SCOPE.get()
    ring = None
    if scope is not None and scope.thread is _THREADS.token and _get_running_loop() is None:
        ring = scope.ring  # a plain thread's: the common case, without a call
    if ring is None:
        ring = _ring()
    created = record.created
    if ring:
        last = ring[-1]
        if last[1] == created and last[0] == id(record):
            return  # a second handler saw the same record
    item = (id(record), created, record.levelno, record.name, record.msg, record.args)
    ring.append(item if _kept(item[4], item[5]) else (item[0], created, _line(item)))


def note_event(created: float, levelno: int, source: str | None, message: Any) -> None:
    """Remember an event that did not come from a :class:`logging.LogRecord` (structlog)."""
    item = (0, created, levelno, source or "", message, None)
    _ring().append(item if _kept(message, None) else (0, created, _line(item)))


def _kept(msg: Any, args: Any) -> bool:
    """Whether a record's template and arguments may wait in a ring as they are: a string of
    at most :data:`MAX_LINE` characters, and arguments (a tuple) that are such strings, numbers,
    booleans or ``None``. Nothing else is kept: it could be large, hold a resource, or change."""
    if type(msg) is not str or len(msg) > MAX_LINE:
        return False
    if not args:
        return True
    if type(args) is not tuple:
        return False  # a mapping for %(name)s
    for arg in args:
        kind = type(arg)
        if kind is str:
            if len(arg) > MAX_LINE:
                return False
        elif kind is not int and kind is not float and kind is not bool and arg is not None:
            return False
    return True


def lines(limit: int) -> list[str]:
    """The last ``limit`` lines of the current thread or task, oldest first."""
    if limit <= 0 or not _size:
        return []
    ring = _ring()
    first = max(0, len(ring) - limit)
    found: list[str] = []
    for index in range(first, len(ring)):
        item = ring[index]
        if len(item) == 3:
            found.append(item[2])
            continue
        line = _line(item)
        ring[index] = (item[0], item[1], line)
        found.append(line)
    return found


def clear() -> None:
    """Forget the lines of the current thread or task (a test's, before the next one)."""
    scope = _SCOPE.get()
    if scope is not None and scope.ring is not None:
        scope.ring.clear()


def new_scope_ring() -> contextvars.Token[_Scope | None]:
    """Give the current context (a request) a ring of its own, made when first used; reset it
    with the token."""
    return _SCOPE.set(_Scope())


def reset_scope_ring(token: contextvars.Token[_Scope | None]) -> None:
    _SCOPE.reset(token)


#: Formatted seconds (lines of one error share a few).
_STAMPS: dict[int, str] = {}


def _line(item: _Note) -> str:
    _, created, levelno, name, msg, args = item
    try:
        message = safe_str(msg) if not args else safe_str(msg) % args
    except Exception:
        message = f"{safe_str(msg)} {safe_str(args)}"
    second = int(created)
    stamp = _STAMPS.get(second)
    if stamp is None:
        if len(_STAMPS) > 64:
            _STAMPS.clear()
        stamp = _STAMPS[second] = time.strftime("%H:%M:%S", time.localtime(second))
    millis = int((created - second) * 1000)
    text = f"{stamp}.{millis:03d} {level_name(levelno)} {main_named(name)}: {message}"
    return truncate(text, MAX_LINE)
