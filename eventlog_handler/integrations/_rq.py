"""RQ: what ``setup()`` does when RQ is imported.

An RQ worker runs each job in a *work horse*, a child it forks, which ends with ``os._exit``
once the job is done: ``atexit`` never runs there, so what the job logged would be lost. The
worker's methods are wrapped (once per process):

- ``perform_job`` (in the work horse): the job runs in a scope of its own (a user or tags set in
  one job never reach the next), tagged ``rq`` and with the job's function; when it ends, a work
  horse sends what it logged before RQ ends it (bounded by ``shutdown_timeout``);
- ``handle_exception``: a job's exception is reported once, at its final failure, with the job's
  id, function and queue in ``data["@rq"]``; a failure that RQ will retry (``Retry``) is not an
  error. RQ's own log line for the failure (``rq.worker`` at ``ERROR``, text without the
  exception) is not sent again as an event: it stays on the console;
- ``handle_work_horse_killed`` (in the worker): a work horse that ended before its job did (the
  OOM killer, a ``SIGKILL``, ``os._exit`` in the job) raised nothing anywhere; its job's final
  failure is one error, :class:`WorkHorseTerminated` (the signal or exit status in its
  message, the job in ``data["@rq"]``). RQ's two warnings about it stay on the console.

RQ adds its console handlers (``Job OK``, the job's failure) only when no logger on the way up
has a handler; the package's handlers on the root logger don't count for that check, so RQ's
console output is as it was. RQ then stops its loggers' records from going up
(``propagate = False``): a handler added to the logger (:class:`_UpToOurs`) hands each record
to the package's handlers on the way up, those there at that moment (a ``setup()`` made again
or detached is followed), so RQ's warnings and errors still reach them.

The worker process should have called ``setup()`` before it forks its work horses: put
``eventlog_handler.setup()`` in a module the worker imports at its start, for example the
settings module of ``rq worker -c settings`` (README, "Deploying"). Where it is called only
in the job's module (imported by the work horse, inside the job), the wrap comes too late for
that job's ``perform_job``: RQ's steps after the job (``handle_job_success``,
``handle_job_retry``, ``handle_job_failure``, ``handle_exception``) send what the work horse
logged instead, so nothing is lost; that job has no scope or tags of its own.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from eventlog_handler.capture._context import RequestScope, add_tags
from eventlog_handler.capture._exceptions import capture_error
from eventlog_handler.delivery import _engine as transport
from eventlog_handler.wire._simple_error import type_name
from eventlog_handler.wire._stacking import manual_stack

_lock = threading.Lock()
_installed = False
#: Inside the wrapped ``perform_job`` (it sends what the work horse logged when it ends).
_performing = False
#: Jobs whose failure this module handled (RQ's own line about it is not sent again).
_failed_jobs: OrderedDict[str, None] = OrderedDict()
_FAILED_JOBS_KEPT = 1000


class _FailureLine(logging.Filter):
    """Keeps RQ's log line about a job failure out of the events (the failure is its own
    error event, with the exception; a retried failure is no error)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name != "rq.worker" or record.levelno < logging.WARNING:
            return True
        if isinstance(record.msg, str) and record.msg in _HORSE_LINES:
            return False
        if record.levelno < logging.ERROR:
            return True
        job_id = getattr(record, "job_id", None)
        return not (isinstance(job_id, str) and job_id in _failed_jobs)


_FILTER = _FailureLine()
#: RQ's warnings about a work horse that ended before its job did: the job's failure is an
#: error event of its own (:class:`WorkHorseTerminated`), or none when RQ retries the job.
_HORSE_LINES = frozenset(
    {
        "Worker %s: job %s failed (%s)",
        "Work horse killed for job %s: retpid=%s, ret_val=%s",
    }
)


class WorkHorseTerminated(Exception):
    """An RQ job's work horse ended before the job did, as the worker saw it (killed by a
    signal, or ``os._exit`` in the job)."""


def install(handlers: Callable[[], list[logging.Handler]]) -> bool:
    """Wrap RQ's worker (once per process) and filter RQ's failure lines out of ``handlers()``
    (the current setup's). ``False`` when RQ can't be imported."""
    global _installed
    try:
        from rq import logutils
        from rq import worker as workers
    except Exception:
        return False
    with _lock:
        for handler in handlers():
            if _FILTER not in handler.filters:
                handler.addFilter(_FILTER)
        if _installed:
            return True
        # ``SimpleWorker`` (no work horse: macOS, Windows, tests) derives from ``Worker`` in
        # older RQ and from ``BaseWorker`` beside it in RQ 3: the methods are wrapped on the
        # classes that define them.
        classes = [getattr(workers, name, None) for name in ("Worker", "SimpleWorker")]
        for owner in _owners([cls for cls in classes if isinstance(cls, type)]):
            _wrap_worker(owner)
        _keep_rq_console(logutils, {type(handler) for handler in handlers()})
        _installed = True
    return True


def _owners(classes: list[type]) -> list[type]:
    """The classes that define ``perform_job`` for ``classes`` (each once, base first)."""
    owners: list[type] = []
    for cls in classes:
        owner = next((base for base in cls.__mro__ if "perform_job" in vars(base)), None)
        if owner is not None and owner not in owners:
            owners.append(owner)
    return sorted(owners, key=lambda owner: len(owner.__mro__))


def _wrap_worker(worker: Any) -> None:
    """Wrap ``worker``'s job steps (a class that derives from one wrapped already keeps the
    wrapped steps it inherits; a step it overrides calls the base's through ``super()``, and
    the wrappers then see that they run inside one another)."""
    if "perform_job" not in vars(worker):
        return
    perform_job = worker.perform_job
    handle_exception = worker.handle_exception

    def perform_job_in_scope(self: Any, job: Any, *args: Any, **kwargs: Any) -> Any:
        global _performing
        if _performing:  # an override's super() call: the outer one has the scope
            return perform_job(self, job, *args, **kwargs)
        scope, tags = _enter(job)
        _performing = True
        try:
            return perform_job(self, job, *args, **kwargs)
        finally:
            _performing = False
            _leave(scope, tags)
            if getattr(self, "_is_horse", False):
                # The work horse ends with os._exit right after: send what it logged now.
                _send_before_the_horse_ends()

    def handle_exception_once(self: Any, job: Any, *exc_info: Any) -> Any:
        with contextlib.suppress(Exception):
            _report(job, exc_info)
        try:
            return handle_exception(self, job, *exc_info)
        finally:
            _after_a_step(self)

    perform_job_in_scope.__wrapped__ = perform_job  # type: ignore[attr-defined]
    handle_exception_once.__wrapped__ = handle_exception  # type: ignore[attr-defined]
    worker.perform_job = perform_job_in_scope
    if not _is_wrapped(handle_exception):
        worker.handle_exception = handle_exception_once
    killed = getattr(worker, "handle_work_horse_killed", None)
    if callable(killed) and not _is_wrapped(killed):
        worker.handle_work_horse_killed = _reporting_the_end(killed)
    for name in ("handle_job_success", "handle_job_retry", "handle_job_failure"):
        step = getattr(worker, name, None)
        if callable(step) and not _is_wrapped(step):
            setattr(worker, name, _sending_after(step))


def _is_wrapped(step: Any) -> bool:
    """Whether ``step`` is one of this module's wrappers (inherited from a wrapped class)."""
    return getattr(step, "__module__", None) == __name__ and hasattr(step, "__wrapped__")


def _sending_after(step: Callable[..., Any]) -> Callable[..., Any]:
    """RQ's ``step`` (one of the last of a job), then :func:`_after_a_step`."""

    def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return step(self, *args, **kwargs)
        finally:
            _after_a_step(self)

    wrapped.__wrapped__ = step  # type: ignore[attr-defined]
    return wrapped


def _reporting_the_end(step: Callable[..., Any]) -> Callable[..., Any]:
    """RQ's ``handle_work_horse_killed(job, retpid, ret_val, rusage)``, after reporting the
    job's failure (:func:`_report_the_end`)."""

    def wrapped(self: Any, job: Any, *args: Any, **kwargs: Any) -> Any:
        with contextlib.suppress(Exception):
            status = args[1] if len(args) > 1 else kwargs.get("ret_val")
            _report_the_end(job, status)
        return step(self, job, *args, **kwargs)

    wrapped.__wrapped__ = step  # type: ignore[attr-defined]
    return wrapped


def _report_the_end(job: Any, status: Any) -> None:
    """Report that ``job``'s work horse ended (``status`` from ``waitpid``) before the job."""
    if isinstance(status, int) and os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            how = f"was killed by signal {number} ({signal.Signals(number).name})"
        except ValueError:
            how = f"was killed by signal {number}"
    elif isinstance(status, int) and os.WIFEXITED(status):
        how = f"ended with exit status {os.WEXITSTATUS(status)}"
    else:
        how = f"ended (wait status {status!r})"
    exc = WorkHorseTerminated(f"the work horse running the job {how}")
    # Raised nowhere, it has no frames to tell jobs apart: one stack per job function and
    # way of ending (the OOM killer's SIGKILL, a crash's SIGSEGV).
    function = _function_of(job) or "?"
    signature = {"type": type_name(WorkHorseTerminated), "function": function, "how": how}
    title = f"{function}: {exc}"
    # In the worker's process, in the job's scope as a failure in the horse is: tagged with
    # its function, and a trace of its own, not the lines of the jobs the worker ran before.
    scope, tags = _enter(job)
    try:
        _report(
            job,
            (WorkHorseTerminated, exc, None),
            manual_stack({"title": title, "signature_data": signature}),
        )
    finally:
        _leave(scope, tags)


def _after_a_step(worker: Any) -> None:
    """In a work horse whose job called ``setup()`` itself (no wrapped ``perform_job`` around
    it): send what it logged, since RQ ends it with ``os._exit`` after this step."""
    if not _performing and getattr(worker, "_is_horse", False):
        _send_before_the_horse_ends()


def _send_before_the_horse_ends() -> None:
    with contextlib.suppress(Exception):
        transport.shutdown_all()


def _function_of(job: Any) -> str | None:
    try:
        name = job.func_name
    except Exception:  # a job that can't be deserialized
        return None
    return name if isinstance(name, str) else None


def _enter(job: Any) -> tuple[RequestScope | None, Any]:
    try:
        scope = RequestScope()
        name = _function_of(job)
        return scope, add_tags("rq", name) if name else add_tags("rq")
    except Exception:  # pragma: no cover
        return None, None


def _leave(scope: RequestScope | None, tags: Any) -> None:
    with contextlib.suppress(Exception):
        if tags is not None:
            tags.reset()
        if scope is not None:
            scope.close()


def _will_retry(job: Any) -> bool:
    retry = getattr(job, "should_retry", None)
    if callable(retry):
        retry = retry()
    if isinstance(retry, bool):
        return retry
    left = getattr(job, "retries_left", None)
    return isinstance(left, int) and left > 0


def _report(job: Any, exc_info: tuple[Any, ...], manual: dict[str, Any] | None = None) -> None:
    job_id = getattr(job, "id", None)
    if isinstance(job_id, str):
        with _lock:
            _failed_jobs[job_id] = None
            while len(_failed_jobs) > _FAILED_JOBS_KEPT:
                _failed_jobs.popitem(last=False)
    exc = exc_info[1] if len(exc_info) > 1 else None
    if not isinstance(exc, BaseException) or _will_retry(job):
        return
    function = _function_of(job)
    about = {"job_id": job_id, "function": function, "queue": getattr(job, "origin", None)}
    capture_error(
        exc, submission_method="rq_job", source=function, data={"@rq": about}, stack=manual
    )


class _UpToOurs(logging.Handler):
    """On an RQ logger that RQ keeps from going up: hands each record to the package's
    handlers found on the way up from it now, as propagation would have."""

    def __init__(self, logger: logging.Logger, ours: set[type]) -> None:
        super().__init__()
        self.logger = logger
        self.ours = ours

    def handle(self, record: logging.LogRecord) -> bool:
        current = self.logger.parent
        while current is not None:
            for handler in current.handlers:
                if type(handler) in self.ours and record.levelno >= handler.level:
                    handler.handle(record)
            if not current.propagate:
                break
            current = current.parent
        return True

    def emit(self, record: logging.LogRecord) -> None:  # pragma: no cover - handle() does it
        pass


def _keep_rq_console(logutils: Any, ours: set[type]) -> None:
    """RQ's ``setup_loghandlers`` adds its console handlers only when no handler is found on
    the way up from ``rq.worker``; the package's handlers are not counted."""
    check = getattr(logutils, "_has_effective_handler", None)
    if check is None:  # another RQ: its console is as that version makes it
        return

    def has_effective_handler(logger: logging.Logger) -> bool:
        current: logging.Logger | None = logger
        while current is not None:
            if any(type(handler) not in ours for handler in current.handlers):
                return True
            if not current.propagate:
                break
            current = current.parent
        # RQ adds its console handlers and stops the records going up: they reach the
        # package's handlers through one of the logger's own.
        if not any(isinstance(handler, _UpToOurs) for handler in logger.handlers):
            logger.addHandler(_UpToOurs(logger, ours))
        return False

    has_effective_handler.__wrapped__ = check  # type: ignore[attr-defined]
    logutils._has_effective_handler = has_effective_handler
