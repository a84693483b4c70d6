"""Celery: what ``setup()`` does when Celery is imported.

With Celery's defaults a worker configures logging itself as it starts
(``worker_hijack_root_logger``): it takes every handler off the root logger, so a handler
attached before would silently stop receiving records. Through Celery's signals:

- ``after_setup_logger``: the handlers of the current :func:`~eventlog_handler.setup` are put
  back on the root logger (Celery's own handlers stay, and so does the level it set);
- ``after_setup_task_logger``: they are added to ``celery.task``, which does not propagate, so
  what tasks log with ``get_task_logger`` is sent too (a ``setup()`` made after that signal,
  in a ``worker_process_init`` handler, adds them to the logger as it finds it);
- ``task_prerun`` / ``task_postrun``: each task runs in a scope of its own (a user or tags set in
  one task never reach the next), tagged with the task's name;
- ``worker_process_shutdown``: a pool child (prefork) sends what it logged before it ends, also
  when it is recycled (``max_tasks_per_child``); it ends with ``os._exit``, which skips
  ``atexit``. The main process flushes on ``worker_shutdown`` (a warm shutdown) and at exit.

A task's failure is reported once, at its final failure: Celery logs it at ``ERROR`` with the
exception. Retries (``self.retry``, ``autoretry_for``), ``Ignore`` and ``Reject`` are logged below
``WARNING`` on Celery's loggers, whose routine lines are not events. A pool child's end that the
main process reports (``TimeLimitExceeded``, ``WorkerLostError``) comes wrapped in billiard's
``ExceptionWithTraceback``: the exception inside is reported
(:func:`eventlog_handler.capture._records.exception_of`), once, from ``task_failure``, as an
error of the task (Celery's line about it names no task; its hard time limit line is no event). What a worker's tasks print (Celery
logs stdout on ``celery.redirected``; structlog's ``PrintLogger`` writes there too) is output,
not events: in the trace log only.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from types import FrameType
from typing import Any

from eventlog_handler.capture._admit import mark_reported
from eventlog_handler.capture._context import RequestScope, add_tags
from eventlog_handler.capture._exceptions import capture_error
from eventlog_handler.capture._records import exception_of
from eventlog_handler.delivery import _engine as transport
from eventlog_handler.wire._simple_error import type_name
from eventlog_handler.wire._stacking import manual_stack

#: The handlers to keep on the root logger (set by setup()), or an empty list.
_handlers: Callable[[], list[logging.Handler]] = list
_connected = False
_lock = threading.Lock()
_scopes: dict[str, tuple[RequestScope, Any]] = {}


def install(handlers: Callable[[], list[logging.Handler]]) -> bool:
    """Connect to Celery's signals (once per process); ``handlers()`` gives the handlers of the
    current setup. ``False`` when Celery can't be imported."""
    global _handlers, _connected
    try:
        from celery import signals  # type: ignore[import-untyped,unused-ignore]
    except Exception:
        return False
    with _lock:
        _handlers = handlers
        for handler in handlers():
            if _FILTER not in handler.filters:
                handler.addFilter(_FILTER)
        if _connected:
            return True
        signals.after_setup_logger.connect(_after_setup_logger, weak=False)
        signals.after_setup_task_logger.connect(_after_setup_task_logger, weak=False)
        signals.task_prerun.connect(_task_prerun, weak=False)
        signals.task_postrun.connect(_task_postrun, weak=False)
        signals.worker_process_shutdown.connect(_worker_process_shutdown, weak=False)
        signals.worker_shutdown.connect(_worker_shutdown, weak=False)
        signals.task_failure.connect(_task_failure, weak=False)
        _connected = True
    # A setup() made after Celery set up its task logger (in a worker_process_init handler, in
    # a pool child) comes after that signal: the logger is taken as it is now.
    with contextlib.suppress(Exception):
        task_logger = logging.Logger.manager.loggerDict.get("celery.task")
        if isinstance(task_logger, logging.Logger):
            _after_setup_task_logger(task_logger)
    return True


def _attach(logger: logging.Logger) -> None:
    for handler in _handlers():
        if handler not in logger.handlers:
            logger.addHandler(handler)


def _after_setup_logger(logger: logging.Logger | None = None, **_: Any) -> None:
    with contextlib.suppress(Exception):  # Celery's start must not fail because of us
        _attach(logger if isinstance(logger, logging.Logger) else logging.getLogger())


def _after_setup_task_logger(logger: logging.Logger | None = None, **_: Any) -> None:
    try:
        if isinstance(logger, logging.Logger) and not logger.propagate:
            _attach(logger)
    except Exception:  # pragma: no cover
        pass


def _task_prerun(task_id: str | None = None, task: Any = None, **_: Any) -> None:
    try:
        scope = RequestScope()
        name = getattr(task, "name", None)
        tags = add_tags("celery", name) if isinstance(name, str) and name else add_tags("celery")
        if task_id:
            _scopes[task_id] = (scope, tags)
    except Exception:  # pragma: no cover
        pass


def _task_postrun(task_id: str | None = None, **_: Any) -> None:
    try:
        found = _scopes.pop(task_id, None) if task_id else None
        if found is not None:
            scope, tags = found
            tags.reset()
            scope.close()
    except Exception:  # pragma: no cover
        pass


def _worker_process_shutdown(**_: Any) -> None:
    with contextlib.suppress(Exception):
        transport.shutdown_all()


def _worker_shutdown(**_: Any) -> None:
    try:
        for engine in transport.engines():
            engine.flush(engine.settings.shutdown_timeout)
    except Exception:  # pragma: no cover
        pass


#: The failures of a pool child that the main process reports (its own line about them names
#: the exception but not the task).
_POOL_FAILURES = frozenset({"TimeLimitExceeded", "WorkerLostError"})
#: Tasks whose pool failure was reported, and when (monotonic): Celery tells one incident
#: up to twice (``task_failure`` at the time limit, then its line when the pool tells the
#: child's end), within moments; a task requeued after it (``acks_late``) may fail again.
_pool_failed: OrderedDict[str, float] = OrderedDict()
#: Seconds within which the reports of one task id are one incident, when Celery's request
#: object for the delivery is not found on the stack (else it decides: :data:`_incidents`).
SAME_INCIDENT = 0.5
#: The request objects whose pool failure was reported (the latest 100), by id.
_incidents: OrderedDict[int, Any] = OrderedDict()
#: Celery's line at a hard time limit: the error reported with the task says it.
_HARD_LIMIT_LINE = "Hard time limit (%ss) exceeded for %s[%s]"
#: Celery's line for a failure the main process handles (``Request.on_failure``): for a pool
#: child's end, reported with the task it was running (the line names none).
_HANDLER_LINE = "Task handler raised error: %r"


def _task_failure(
    sender: Any = None, task_id: str | None = None, exception: Any = None, **_: Any
) -> None:
    """A task failed: in the main process, a pool child's end (a hard time limit, a lost
    child) is reported here, once, as an error of the task (its name as source and tag, its
    id in ``data["@celery"]``). A task's own exception is reported where it ran."""
    with contextlib.suppress(Exception):
        exc = exception_of(exception)
        request = _request_logging(("on_timeout", "on_failure"))
        _report_pool_failure(getattr(sender, "name", None), task_id, exc, request)


def _report_pool_failure(
    name: Any, task_id: Any, exc: BaseException | None, request: Any = None
) -> bool:
    """Report a pool child's end ``exc`` as an error of task ``name`` (id ``task_id``), once
    per incident: per ``request`` (Celery's object for one delivery of the task) when known,
    else per task id within :data:`SAME_INCIDENT`; ``False`` when ``exc`` is no such failure."""
    try:
        if exc is None or type(exc).__name__ not in _POOL_FAILURES:
            return False
        now = time.monotonic()
        with _lock:
            if request is not None:  # kept while remembered: its id is its own
                seen = id(request) in _incidents
                _incidents[id(request)] = request
                while len(_incidents) > 100:
                    _incidents.popitem(last=False)
            else:
                last = _pool_failed.get(task_id) if isinstance(task_id, str) else None
                seen = last is not None and now - last < SAME_INCIDENT
                if isinstance(task_id, str) and not seen:
                    _pool_failed[task_id] = now
                    _pool_failed.move_to_end(task_id)
                    while len(_pool_failed) > 1000:
                        _pool_failed.popitem(last=False)
        if seen:
            mark_reported(exc)  # the incident's other report is not a second error
            return True
        name = name if isinstance(name, str) and name else None
        scope = RequestScope()
        tags = add_tags("celery", name) if name else add_tags("celery")
        # Raised in the pool's code (billiard), its frames are the same for every task: one
        # stack per task and kind of end (its text holds a job number, and is left out).
        kind = type_name(type(exc))
        signature = {"type": kind, "task": name or "?"}
        try:
            capture_error(
                exc,
                submission_method="celery_task",
                source=name,
                data={"@celery": {"task": name, "id": task_id}},
                stack=manual_stack(
                    {"title": f"{name or '?'}: {kind}", "signature_data": signature}
                ),
            )
        finally:
            tags.reset()
            scope.close()
    except Exception:  # pragma: no cover - a signal handler must not fail the worker
        pass
    return True


def _request_logging(methods: tuple[str, ...] = ("on_failure",)) -> Any:
    """The ``celery.worker.request.Request`` whose ``methods`` (``on_failure``: its line about
    a failure) run now on this thread, if any."""
    frame: FrameType | None = sys._getframe(2)
    for _ in range(16):
        if frame is None:
            return None
        if frame.f_code.co_name in methods:
            request = frame.f_locals.get("self")
            if hasattr(request, "id") and hasattr(request, "name"):
                return request
        frame = frame.f_back
    return None


class _PoolFailureLines(logging.Filter):
    """Keeps Celery's lines about a pool child's end out of the events: the one at a hard
    time limit, and the handler's line, reported instead as an error of the task it names
    none of (when ``task_failure`` did not come first: a task requeued with ``acks_late``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg == _HARD_LIMIT_LINE:
            return False
        if record.msg != _HANDLER_LINE or not record.exc_info:
            return True
        try:
            request = _request_logging()
            if request is None:
                return True
            exc = exception_of(record.exc_info)
            return not _report_pool_failure(request.name, request.id, exc, request)
        except Exception:  # pragma: no cover - the record goes as it is
            return True


_FILTER = _PoolFailureLines()
