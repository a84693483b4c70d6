"""An opt-in flush on ``SIGTERM``, for processes stopped by a supervisor.

A process manager (systemd, Kubernetes, supervisord, ``docker stop``) ends a program with
``SIGTERM``. Python's default is to die at once, without ``atexit``, so pending events would
be lost. :func:`flush_on_sigterm` installs a handler that runs the exit flush (bounded by
``shutdown_timeout``) and then does what was going to happen anyway: it calls the previous
Python handler, or, if there was none, restores the default and sends the signal again, so
the process still ends by ``SIGTERM`` with the same exit status.

It can only be installed from the main thread (a rule of :mod:`signal`); elsewhere it returns
``False`` and changes nothing.

``SIGHUP`` (a closed terminal, a dropped ssh or tmux session, systemd's ``SendSIGHUP=yes``)
ends a program the same way by default: where it still has Python's default action, the same
flush runs first, then the process ends by ``SIGHUP`` as before. A program that ignores it
(``nohup``) or handles it (a reload) keeps what it has.
"""

from __future__ import annotations

import os
import signal
import time
from types import FrameType
from typing import Any

from eventlog_handler.delivery import _engine as transport
from eventlog_handler.delivery import _sigterm as sigterm

_installed: Any = None  # our handler, while it is installed
_previous: Any = None  # the handler it chains to
_hangup: Any = None  # our SIGHUP handler, while it is installed


def flush_on_sigterm(timeout: float | None = None, *, auto: bool = False) -> bool:
    """Flush pending events when ``SIGTERM`` arrives, then chain; ``True`` if installed.

    ``auto`` (the default of :func:`~eventlog_handler.setup` and of a dictConfig handler):
    install only where ``SIGTERM`` still has Python's default action, so the handler changes
    nothing but the flush. A program or server that sets a handler of its own (before or
    after) keeps it; when such a server puts the previous handler back and sends the signal
    again as it leaves (uvicorn does), this one runs then. The handler itself, and the watcher
    that makes it run while the main thread is blocked in C, are
    :mod:`eventlog_handler.delivery._sigterm`'s.
    """
    global _installed, _previous
    if not sigterm.main_os_thread() or not hasattr(signal, "SIGTERM"):
        return False
    hangup = _flush_on_sighup(timeout)
    if _installed is not None and signal.getsignal(signal.SIGTERM) is _installed:
        return True
    previous = signal.getsignal(signal.SIGTERM)
    if auto and previous not in (signal.SIG_DFL, None):
        return hangup  # the program's own SIGTERM handler: the SIGHUP flush only
    _installed = sigterm.install(
        lambda: transport.shutdown_all(timeout),
        previous,
        transport.forget_finished,
        lambda: flush_and_go_on(timeout),
    )
    _previous = previous
    return True


def flush_and_go_on(timeout: float | None) -> str:
    """The flush on ``SIGTERM`` or ``SIGHUP`` of a process that the signal will not end (process
    1 of its container, :func:`~eventlog_handler.delivery._sigterm.outlives_default`): what
    is pending is sent within ``timeout`` (``shutdown_timeout``), as the exit flush would,
    but the engines go on: what is not sent by then is kept and sent after, not counted as
    lost at an exit that does not come. Returns its outcome, as stderr says it."""
    current = transport.engines()
    if timeout is None:
        timeout = max((engine.settings.shutdown_timeout for engine in current), default=0.0)
    began = time.monotonic()
    deadline = began + timeout
    waiting = 0
    errors: list[str] = []
    for engine in current:
        if engine.flush(max(0.0, deadline - time.monotonic())):
            continue
        stats = engine.stats()
        waiting += stats["queued"] + stats["in_flight"] + stats["spooled"]
        if stats["last_error"]:
            errors.append(str(stats["last_error"]))
    if not waiting:
        return "The events it logged so far were sent, and sending goes on."
    cause = f" (last error: {errors[0]})" if errors else " (no answer from the service yet)"
    waited = min(timeout, time.monotonic() - began)  # less when the next try is past it
    return (
        f"{waiting} event(s) it logged could not be sent in the {waited:.1f} s it waited"
        f"{cause}: they are kept, and sending goes on."
    )


def _flush_on_sighup(timeout: float | None) -> bool:
    """Where ``SIGHUP`` has Python's default action (it ends the process at once, without
    ``atexit``), flush first, then end by ``SIGHUP`` as before; ``True`` if ours is in place.

    One flush at a time: a second ``SIGHUP``, or one during the ``SIGTERM`` flush, changes
    nothing (that flush ends the process), and a ``SIGTERM`` during this one waits for it. A
    process still there after the default action is process 1 of its container, for which the
    kernel ignores it: it runs on as without the package, and so does its sending."""
    global _hangup
    number = getattr(signal, "SIGHUP", None)
    if number is None:
        return False
    current = signal.getsignal(number)
    if _hangup is not None and current is _hangup:
        return True
    if current is not signal.SIG_DFL:
        return False
    started = [0]  # the process whose flush is under way: a child forked meanwhile has none

    def on_sighup(signum: int, frame: FrameType | None) -> None:
        term = getattr(signal.getsignal(signal.SIGTERM), sigterm.FLUSH_MARK, None)
        if started[0] == os.getpid() or (term is not None and term[0]):
            return
        started[0] = os.getpid()
        if term is not None:
            term[0] = True  # the SIGTERM handler and its watcher see a flush under way
        outcome: str | None = None
        try:
            if sigterm.outlives_default():  # process 1: it runs on, and so does delivery
                outcome = flush_and_go_on(timeout)
            else:
                transport.shutdown_all(timeout)
        finally:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            # Still here: process 1 of a container.
            signal.signal(signum, on_sighup)
            transport.forget_finished()
            sigterm.notice_outlived("SIGHUP", outcome)
            started[0] = 0
            if term is not None:
                term[0] = False

    setattr(on_sighup, sigterm.HANDLER_MARK, True)
    signal.signal(number, on_sighup)
    _hangup = on_sighup
    global _fork_hook
    if not _fork_hook and hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_default_sighup_in_child)
        _fork_hook = True
    return True


_fork_hook = False


def _default_sighup_in_child() -> None:
    """A forked child (a pool's worker, forked perhaps while this process flushes) gets
    ``SIGHUP``'s default back, as it gets ``SIGTERM``'s: a hang-up ends it at once."""
    global _hangup
    try:
        if _hangup is not None and signal.getsignal(signal.SIGHUP) is _hangup:
            signal.signal(signal.SIGHUP, signal.SIG_DFL)
        _hangup = None
    except (ValueError, OSError, AttributeError):  # not the main thread, or no SIGHUP
        pass


def decline_sigterm_flush(declined: bool) -> None:
    """Whether the program declined the flush on ``SIGTERM`` (``flush_on_sigterm=False``): then
    neither it nor its children get one, also not a ``multiprocessing`` child that logs."""
    sigterm.declined = declined


_raise_signal: Any = None  # signal.raise_signal as it was, once wrapped


def flush_before_raised_signals() -> None:
    """Run the exit flush when the program sends itself a signal whose action is to end it.

    Servers that handle ``SIGTERM`` and ``SIGINT`` themselves (uvicorn, also in each worker of
    ``--workers N``) shut down gracefully, put back the handler that was there before them
    (Python's default) and send the signal again with :func:`signal.raise_signal`, so the
    process ends as it would have. That default action skips ``atexit``; this wraps
    :func:`signal.raise_signal` so that the events the program logged are sent first (within
    ``shutdown_timeout``). Nothing else about the signal changes. Installed once per process.
    """
    global _raise_signal
    if _raise_signal is not None or not hasattr(signal, "raise_signal"):
        return
    original = signal.raise_signal

    def raise_signal(signalnum: int) -> None:
        try:
            if signal.getsignal(signalnum) == signal.SIG_DFL and signalnum in _ENDING:
                transport.shutdown_all()
        except Exception:  # pragma: no cover - the signal must go out whatever happens
            pass
        original(signalnum)

    raise_signal.__doc__ = original.__doc__
    signal.raise_signal = raise_signal
    _raise_signal = original


#: Signals whose default action ends the process without ``atexit``.
_ENDING = frozenset(
    getattr(signal, name)
    for name in ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT")
    if hasattr(signal, name)
)


def remove_sigterm_flush() -> bool:
    """Put back the previous ``SIGTERM`` handler if ours is still the one installed: the one
    :func:`flush_on_sigterm` installed, or the flush a child's engine installed when it
    started sending (it ends in the default action, which is put back)."""
    global _installed, _previous, _hangup
    if not sigterm.main_os_thread():
        return False
    number = getattr(signal, "SIGHUP", None)
    if _hangup is not None and number is not None and signal.getsignal(number) is _hangup:
        signal.signal(number, signal.SIG_DFL)
    _hangup = None
    current = signal.getsignal(signal.SIGTERM)
    if _installed is None or current is not _installed:
        _installed = _previous = None
        if getattr(current, sigterm.FLUSH_MARK, None) is None:
            sigterm.stop_watching()  # replaced since (or never ours): theirs stays
            return False
        _previous = signal.SIG_DFL  # the engine's, in a child
    signal.signal(signal.SIGTERM, signal.SIG_DFL if _previous is None else _previous)
    sigterm.stop_watching()
    _installed = _previous = None
    return True
