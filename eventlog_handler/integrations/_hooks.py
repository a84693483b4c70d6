"""Uncaught exceptions as error events: ``sys.excepthook``, ``threading.excepthook``,
``sys.unraisablehook`` and asyncio's exception handler.

:func:`install_hooks` wraps all four. When an exception goes uncaught, the wrapper queues
an error event and waits briefly (``min(shutdown_timeout, 2)`` seconds at most) until the
service has it, because the process, or the thread, is about to end. Then it calls the hook
that was there before, so the traceback is still printed and the exit status is unchanged.

- Main thread: ``@level`` ``Fatal``, ``data["@submission_method"]`` ``unhandled_exception``.
- Other threads: ``@level`` ``Error``, ``data["@submission_method"]``
  ``unhandled_thread_exception``, ``@environment`` naming the thread.
- Exceptions Python can't raise anywhere (in ``__del__``, a weakref callback, a generator
  closed by the garbage collector: ``sys.unraisablehook``): ``@level`` ``Error``,
  ``unraisable_exception``, with what Python says about them in ``data["@unraisable"]``. They
  are queued, not waited for: the program goes on.
- Exceptions of asyncio tasks and callbacks that nobody retrieved (the event loop's exception
  handler, also one set with ``loop.set_exception_handler``): ``@level`` ``Error``,
  ``unhandled_async_exception``, with the loop's message and the task in ``data["@asyncio"]``;
  queued, not waited for.
- Under gevent (imported before the hooks are installed), exceptions of greenlets and loop
  callbacks that its hub reports: ``@level`` ``Error``, ``unhandled_greenlet_exception``, the
  greenlet in ``data["@greenlet"]``; queued, not waited for.
- A ``multiprocessing.Process`` whose ``run`` (its target) raises: ``multiprocessing`` prints
  the traceback itself, so ``sys.excepthook`` never sees it. ``@level`` ``Fatal``,
  ``unhandled_process_exception``, the process's name in ``data["process"]``. Fork and
  forkserver run ``multiprocessing``'s after-fork hooks before ``run``; spawn runs none, so a
  spawned child that imports the package with its main module hooks spawn's own after-fork
  step (:func:`_hook_spawned_process`).
- ``KeyboardInterrupt`` and asyncio's ``CancelledError`` (and ``SystemExit`` in a thread or an
  asyncio task) are not reported, only passed on.
- An exception that was already sent (for instance by ``logger.exception`` before it was
  re-raised) is not sent again.
- In an interactive session (``python -i``, the REPL, IPython) the hooks are not installed
  unless ``force=True``: an exception typed at the prompt is not a crash.

:meth:`ExceptionHooks.uninstall` puts back the previous hook only where ours is still the one
installed; where another library wrapped ours since, ours stays in the chain but does nothing.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import importlib.util
import multiprocessing
import multiprocessing.util
import sys
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

from eventlog_handler.capture._admit import mark_reported
from eventlog_handler.capture._exceptions import capture_error
from eventlog_handler.delivery import _engine as transport
from eventlog_handler.delivery._engine import get_engine, is_sender_thread
from eventlog_handler.delivery._stderr import say_unconfigured
from eventlog_handler.settings import Settings
from eventlog_handler.wire._jsonsafe import safe_repr

#: The longest an uncaught exception waits for its event to be delivered.
MAX_HOOK_FLUSH = 2.0
#: Seconds after a hook's wait that ran out during which hooks queue without waiting.
NO_WAIT_AFTER_TIMEOUT = 60.0
_no_wait_until = 0.0

_SysHook = Callable[[type[BaseException], BaseException, TracebackType | None], Any]
_ThreadHook = Callable[[Any], Any]


def is_interactive() -> bool:
    """Whether Python runs an interactive session (a prompt, ``-i``)."""
    return hasattr(sys, "ps1") or bool(sys.flags.interactive)


def _stops(exc: BaseException, kinds: tuple[type[BaseException], ...]) -> bool:
    """Whether ``exc`` is one of ``kinds`` or asyncio's ``CancelledError`` (a task or a program
    cancelled: a stop, as ``KeyboardInterrupt`` is, not a failure)."""
    asyncio = sys.modules.get("asyncio")  # not imported: none of its errors can come
    cancelled = getattr(asyncio, "CancelledError", None) if asyncio is not None else None
    return isinstance(exc, kinds) or (cancelled is not None and isinstance(exc, cancelled))


class ExceptionHooks:
    """The four wrapped hooks of one configuration (see the module docstring)."""

    def __init__(self, settings: Settings, *, source: str | None = None) -> None:
        self.settings = settings
        self.source = source
        self.active = False
        self._previous_sys: _SysHook | None = None
        self._previous_thread: _ThreadHook | None = None
        self._sys_hook: _SysHook | None = None
        self._thread_hook: _ThreadHook | None = None
        self._previous_unraisable: _ThreadHook | None = None
        self._unraisable_hook: _ThreadHook | None = None

    @property
    def flush_timeout(self) -> float:
        return min(self.settings.shutdown_timeout, MAX_HOOK_FLUSH)

    def install(self) -> None:
        """Wrap the current ``sys.excepthook`` and ``threading.excepthook``."""
        if self.active:
            return
        previous_sys: _SysHook = sys.excepthook
        previous_thread: _ThreadHook = threading.excepthook

        def sys_hook(
            exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None
        ) -> Any:
            self._on_main(exc_type, exc, tb)
            return previous_sys(exc_type, exc, tb)

        def thread_hook(args: Any) -> Any:
            self._on_thread(args)
            return previous_thread(args)

        previous_unraisable: _ThreadHook = sys.unraisablehook

        def unraisable_hook(args: Any) -> Any:
            self._on_unraisable(args)
            return previous_unraisable(args)

        sys_hook.__eventlog_hooks__ = self  # type: ignore[attr-defined]
        thread_hook.__eventlog_hooks__ = self  # type: ignore[attr-defined]
        unraisable_hook.__eventlog_hooks__ = self  # type: ignore[attr-defined]
        self._previous_sys, self._previous_thread = previous_sys, previous_thread
        self._sys_hook, self._thread_hook = sys_hook, thread_hook
        self._previous_unraisable, self._unraisable_hook = previous_unraisable, unraisable_hook
        sys.excepthook = sys_hook
        threading.excepthook = thread_hook
        sys.unraisablehook = unraisable_hook
        _installed_hooks.add(self)
        _patch_asyncio()
        _patch_gevent()
        self.active = True

    def uninstall(self) -> None:
        """Stop reporting; restore each previous hook where ours is still the installed one."""
        self.active = False
        if self._sys_hook is not None and sys.excepthook is self._sys_hook:
            assert self._previous_sys is not None
            sys.excepthook = self._previous_sys
        if self._thread_hook is not None and threading.excepthook is self._thread_hook:
            assert self._previous_thread is not None
            threading.excepthook = self._previous_thread
        if self._unraisable_hook is not None and sys.unraisablehook is self._unraisable_hook:
            assert self._previous_unraisable is not None
            sys.unraisablehook = self._previous_unraisable
        _installed_hooks.discard(self)

    # -- reporting --------------------------------------------------------------------------------

    def _on_main(
        self, exc_type: type[BaseException], exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if not self.active or exc is None or self._ignores(exc, (KeyboardInterrupt,)):
                return
            if exc.__traceback__ is None and tb is not None:
                exc = exc.with_traceback(tb)
            began = time.monotonic()
            self.report(exc, level="Fatal", submission_method="unhandled_exception")
            transport.exit_begins(began)  # the exit flush's deadline counts from then
        except Exception:  # pragma: no cover - a hook must not fail
            pass

    def _ignores(
        self, exc: BaseException | None, kinds: tuple[type[BaseException], ...] = ()
    ) -> bool:
        """Whether a hook passes ``exc`` by: hooks off, no exception, one of ``kinds`` (asyncio's
        ``CancelledError`` with them: :func:`_stops`), or raised on the package's own sending
        threads."""
        if not self.active or exc is None or is_sender_thread():
            return True
        return bool(kinds) and _stops(exc, kinds)

    def _on_thread(self, args: Any) -> None:
        try:
            exc = args.exc_value
            if self._ignores(exc, (KeyboardInterrupt, SystemExit)):
                return
            if exc.__traceback__ is None and args.exc_traceback is not None:
                exc = exc.with_traceback(args.exc_traceback)
            thread = args.thread
            data = {"thread": getattr(thread, "name", None)} if thread is not None else None
            self.report(
                exc,
                level="Error",
                submission_method="unhandled_thread_exception",
                data=data,
            )
        except Exception:  # pragma: no cover - a hook must not fail
            pass

    def _on_unraisable(self, args: Any) -> None:
        try:
            exc = args.exc_value
            if self._ignores(exc):
                return
            if exc.__traceback__ is None and args.exc_traceback is not None:
                exc = exc.with_traceback(args.exc_traceback)
            about = {"message": args.err_msg or "Exception ignored in"}
            if args.object is not None:
                about["object"] = safe_repr(args.object)[:500]
            self.report(
                exc,
                level="Error",
                submission_method="unraisable_exception",
                data={"@unraisable": about},
                wait=False,
            )
        except Exception:  # pragma: no cover - a hook must not fail
            pass

    def on_asyncio(self, context: dict[str, Any]) -> None:
        """An asyncio loop's exception handler was called with ``context``."""
        try:
            exc = context.get("exception")
            if not isinstance(exc, BaseException):
                return
            if self._ignores(exc, (KeyboardInterrupt, SystemExit)):
                if self.active and _stops(exc, (KeyboardInterrupt, SystemExit)):
                    mark_reported(exc)  # asyncio logs it next ("never retrieved"): nor that
                return
            about: dict[str, Any] = {"message": str(context.get("message") or "")}
            for name in ("task", "future", "handle"):
                if context.get(name) is not None:
                    about[name] = safe_repr(context[name])[:500]
            report = functools.partial(
                self.report,
                exc,
                level="Error",
                submission_method="unhandled_async_exception",
                data={"@asyncio": about},
                wait=False,
            )
            # In the context of the task or callback that failed (its trace log), where it can
            # be had (a task's from Python 3.12): the handler runs in whichever collected it.
            ran: list[bool] = []

            def run_report() -> None:
                ran.append(True)
                report()

            for name in ("future", "task", "handle"):
                owner = context.get(name)
                own = getattr(owner, "get_context", None)
                found = own() if callable(own) else getattr(owner, "_context", None)
                if isinstance(found, contextvars.Context):
                    with contextlib.suppress(RuntimeError):  # that context runs now
                        found.run(run_report)
                    break
            if not ran:
                report()
        except Exception:  # pragma: no cover - a hook must not fail
            pass

    def on_greenlet(self, context: Any, exc: BaseException | None) -> None:
        """gevent's hub reports an exception a greenlet (or a callback: ``context``) raised."""
        try:
            if exc is None or self._ignores(exc, (KeyboardInterrupt, SystemExit)):
                return
            self.report(
                exc,
                level="Error",
                submission_method="unhandled_greenlet_exception",
                data={"@greenlet": safe_repr(context)[:500]},
                wait=False,
            )
        except Exception:  # pragma: no cover - a hook must not fail
            pass

    def on_process(self, exc: BaseException, name: str) -> None:
        try:
            if self._ignores(exc, (KeyboardInterrupt, SystemExit)):
                return
            self.report(
                exc,
                level="Fatal",
                submission_method="unhandled_process_exception",
                data={"process": name},
            )
        except Exception:  # pragma: no cover - a hook must not fail
            pass

    def report(
        self,
        exc: BaseException,
        *,
        level: str,
        submission_method: str,
        data: dict[str, Any] | None = None,
        wait: bool = True,
    ) -> bool:
        """Send ``exc`` (queue it, then, with ``wait``, flush for a moment, because the process
        or thread is about to end); ``False`` if it was skipped."""
        queued = capture_error(
            exc,
            level=level,
            submission_method=submission_method,
            source=self.source,
            data=data,
            settings=self.settings,
        )
        global _no_wait_until
        # Not past a failed attempt: the worker and the exit retry. Nor again soon after a
        # wait that ran out (a server that never answers: each thread that died waited it
        # out in full); the event is queued all the same.
        started = time.monotonic()
        if queued and wait and started >= _no_wait_until:
            settled = get_engine(self.settings).flush(self.flush_timeout, until_failure=True)
            if not settled and time.monotonic() - started >= self.flush_timeout * 0.9:
                _no_wait_until = time.monotonic() + NO_WAIT_AFTER_TIMEOUT
        return queued


def install_hooks(
    api_key: str | None = None,
    server_url: str | None = None,
    *,
    force: bool = False,
    **options: Any,
) -> ExceptionHooks | None:
    """Report uncaught exceptions of the main thread and other threads (see the module doc).

    Takes the options of :class:`~eventlog_handler.EventLogHandler`. Returns the installed
    :class:`ExceptionHooks` (call ``.uninstall()`` to stop), or ``None`` in an interactive
    session unless ``force=True``.
    """
    settings = Settings.from_options(
        {"api_key": api_key, "server_url": server_url, **options}, lenient=True
    )
    say_unconfigured(settings)
    return install_with(settings, force=force)


def install_with(settings: Settings, *, force: bool = False) -> ExceptionHooks | None:
    """:func:`install_hooks` with ready settings."""
    if not force and is_interactive():
        return None
    hooks = ExceptionHooks(settings)
    hooks.install()
    return hooks


# -- multiprocessing ----------------------------------------------------------------------------


class _ProcessRun:
    """Anchor of the multiprocessing after-fork registration (kept by weak reference)."""

    @staticmethod
    def wrap(_anchor: object) -> None:
        """In a process that ``multiprocessing`` started (its bootstrap runs the after-fork
        hooks before ``run`` under fork and forkserver, and, in a spawned child,
        :func:`_hook_spawned_process`'s step), report an exception that ends ``run``."""
        try:
            process = multiprocessing.current_process()
            run = process.run

            def run_and_report() -> None:
                try:
                    run()
                except BaseException as exc:
                    if exc.__traceback__ is not None:  # the stack as it is without this frame
                        exc.__traceback__ = exc.__traceback__.tb_next
                    for hooks in list(_installed_hooks):
                        hooks.on_process(exc, process.name)
                    raise

            process.run = run_and_report  # type: ignore[method-assign]
        except Exception:  # pragma: no cover - the process runs as it would have
            pass


_PROCESS_RUN = _ProcessRun()
multiprocessing.util.register_after_fork(_PROCESS_RUN, _ProcessRun.wrap)


#: What a spawned child does once its process object is here, before ``run`` (see
#: :func:`_hook_spawned_process`): ``setup()``'s module adds its adoption of the parent's setup.
WHEN_SPAWNED: list[Callable[[], None]] = []


def _hook_spawned_process() -> None:
    """In a child that ``multiprocessing`` is spawning (it imports the parent's main module
    before its process object arrives): spawn runs no after-fork hook before ``run``, only its
    class's ``_after_fork`` step, which does nothing; have that step run :data:`WHEN_SPAWNED`
    and wrap ``run`` (here only: the step runs in a spawned child alone, and this process is
    one)."""
    if not getattr(multiprocessing.current_process(), "_inheriting", False):
        return
    spawn_process = getattr(multiprocessing.context, "SpawnProcess", None)
    step = getattr(spawn_process, "__dict__", {}).get("_after_fork")
    if not isinstance(step, staticmethod):
        return
    own_step = step.__func__

    def after_spawn() -> None:
        own_step()
        for callback in WHEN_SPAWNED:
            callback()
        _ProcessRun.wrap(_PROCESS_RUN)

    spawn_process._after_fork = staticmethod(after_spawn)  # type: ignore[union-attr]


_hook_spawned_process()


# -- asyncio ------------------------------------------------------------------------------------

#: The installed hooks (they want asyncio's, gevent's and multiprocessing's unhandled exceptions).
_installed_hooks: set[ExceptionHooks] = set()
_asyncio_patched = False


def _patch_asyncio() -> None:
    """Report what every asyncio loop passes to its exception handler (default or custom).

    ``call_exception_handler`` is where a loop sends an exception nobody retrieved (a task's, a
    callback's): it is wrapped once, on first install, on the standard library's
    ``BaseEventLoop`` and, when uvloop is installed, on ``uvloop.Loop`` (its loop does not
    derive from the standard library's, and calls that method of its own); the wrapper then
    calls the original, so the loop's own handler (and its console output) still runs.
    """
    global _asyncio_patched
    if _asyncio_patched:
        return
    import asyncio.base_events

    _wrap_exception_handler(asyncio.base_events.BaseEventLoop)
    if "uvloop" in sys.modules or importlib.util.find_spec("uvloop") is not None:
        try:
            import uvloop
        except Exception:  # pragma: no cover - a broken install: the standard loops still are
            pass
        else:
            _wrap_exception_handler(uvloop.Loop)
    _asyncio_patched = True


def _patch_gevent() -> None:
    """Report what gevent's hub reports: an exception a greenlet (``gevent.spawn``) or a
    callback of its loop raised and nobody will see otherwise. ``Hub.handle_error`` is wrapped
    once, where gevent is imported when the hooks are installed (a script that monkey-patches
    first, ``gunicorn -k gevent``, ``celery -P gevent``); the original then runs, so gevent
    still prints its report."""
    hub = sys.modules.get("gevent.hub")
    if hub is None:
        return
    original = getattr(hub.Hub, "handle_error", None)
    if original is None or getattr(original, "__wrapped__", None) is not None:
        return

    def handle_error(self: Any, context: Any, kind: Any, value: Any, tb: Any) -> Any:
        exc = value if isinstance(value, BaseException) else None
        if exc is not None and exc.__traceback__ is None and tb is not None:
            exc = exc.with_traceback(tb)
        for hooks in list(_installed_hooks):
            hooks.on_greenlet(context, exc)
        return original(self, context, kind, value, tb)

    handle_error.__wrapped__ = original  # type: ignore[attr-defined]
    hub.Hub.handle_error = handle_error


def _wrap_exception_handler(loop_class: Any) -> None:
    original = loop_class.call_exception_handler
    if getattr(original, "__wrapped__", None) is not None:
        return

    def call_exception_handler(loop: Any, context: dict[str, Any]) -> Any:
        for hooks in list(_installed_hooks):
            hooks.on_asyncio(context)
        return original(loop, context)

    call_exception_handler.__wrapped__ = original  # type: ignore[attr-defined]
    loop_class.call_exception_handler = call_exception_handler
