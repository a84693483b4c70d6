"""Uncaught exceptions as error events: ``sys.excepthook`` and ``threading.excepthook``.

:func:`install_hooks` wraps both hooks. When an exception goes uncaught, the wrapper queues
an error event and waits briefly (``min(shutdown_timeout, 2)`` seconds at most) until the
service has it, because the process, or the thread, is about to end. Then it calls the hook
that was there before, so the traceback is still printed and the exit status is unchanged.

- Main thread: ``@level`` ``Fatal``, ``data["@submission_method"]`` ``unhandled_exception``.
- Other threads: ``@level`` ``Error``, ``data["@submission_method"]``
  ``unhandled_thread_exception``, ``@environment`` naming the thread.
- ``KeyboardInterrupt`` (and ``SystemExit`` in a thread) is not reported, only passed on.
- An exception that was already sent (for instance by ``logger.exception`` before it was
  re-raised) is not sent again.
- In an interactive session (``python -i``, the REPL, IPython) the hooks are not installed
  unless ``force=True``: an exception typed at the prompt is not a crash.

:meth:`ExceptionHooks.uninstall` puts back the previous hook only where ours is still the one
installed; where another library wrapped ours since, ours stays in the chain but does nothing.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

from eventlog_handler.records import build_event, was_reported
from eventlog_handler.settings import Settings
from eventlog_handler.transport import get_engine, is_sender_thread

#: The longest an uncaught exception waits for its event to be delivered.
MAX_HOOK_FLUSH = 2.0

_SysHook = Callable[[type[BaseException], BaseException, TracebackType | None], Any]
_ThreadHook = Callable[[Any], Any]


def is_interactive() -> bool:
    """Whether Python runs an interactive session (a prompt, ``-i``)."""
    return hasattr(sys, "ps1") or bool(sys.flags.interactive)


class ExceptionHooks:
    """The pair of wrapped hooks of one configuration (see the module docstring)."""

    def __init__(self, settings: Settings, *, source: str | None = None) -> None:
        self.settings = settings
        self.source = source
        self.active = False
        self._previous_sys: _SysHook | None = None
        self._previous_thread: _ThreadHook | None = None
        self._sys_hook: _SysHook | None = None
        self._thread_hook: _ThreadHook | None = None

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

        sys_hook.__eventlog_hooks__ = self  # type: ignore[attr-defined]
        thread_hook.__eventlog_hooks__ = self  # type: ignore[attr-defined]
        self._previous_sys, self._previous_thread = previous_sys, previous_thread
        self._sys_hook, self._thread_hook = sys_hook, thread_hook
        sys.excepthook = sys_hook
        threading.excepthook = thread_hook
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

    # -- reporting --------------------------------------------------------------------------------

    def _on_main(
        self, exc_type: type[BaseException], exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if not self.active or exc is None or issubclass(exc_type, KeyboardInterrupt):
                return
            if exc.__traceback__ is None and tb is not None:
                exc = exc.with_traceback(tb)
            self.report(exc, level="Fatal", submission_method="unhandled_exception")
        except Exception:  # pragma: no cover - a hook must not fail
            pass

    def _on_thread(self, args: Any) -> None:
        try:
            exc_type = args.exc_type
            exc = args.exc_value
            if (
                not self.active
                or exc is None
                or issubclass(exc_type, (KeyboardInterrupt, SystemExit))
                or is_sender_thread()
            ):
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

    def report(
        self,
        exc: BaseException,
        *,
        level: str,
        submission_method: str,
        data: dict[str, Any] | None = None,
    ) -> bool:
        """Send ``exc`` now (queue it, then flush for a moment); ``False`` if it was skipped."""
        if was_reported(exc):
            return False
        event = build_event(
            self.settings,
            message=None,
            levelno=0,
            level=level,
            source=self.source,
            created=time.time(),
            data=data,
            exc=exc,
            submission_method=submission_method,
        )
        engine = get_engine(self.settings)
        engine.enqueue(event)
        engine.flush(self.flush_timeout)
        return True


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
    settings = Settings.from_options({"api_key": api_key, "server_url": server_url, **options})
    return install_with(settings, force=force)


def install_with(settings: Settings, *, force: bool = False) -> ExceptionHooks | None:
    """:func:`install_hooks` with ready settings."""
    if not force and is_interactive():
        return None
    hooks = ExceptionHooks(settings)
    hooks.install()
    return hooks
