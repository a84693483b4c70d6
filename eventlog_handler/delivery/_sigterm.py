"""The flush on ``SIGTERM``: one handler, for a program and for a :mod:`multiprocessing` child.

A process manager (systemd, Kubernetes, ``docker stop``) and ``Pool.__exit__`` end a process
with ``SIGTERM``, whose default ends it at once, without ``atexit``: the events it logged just
before would die with it. The handler made here runs the exit flush, then does what was going
to happen anyway: it calls the previous Python handler, does nothing (``SIG_IGN``), or, for the
default, ends the process by ``SIGTERM`` as before.

A Python signal handler runs in the main thread, between two bytecodes. A signal that arrives
just before the main thread blocks in C (``time.sleep``, a join, a pool worker waiting on its
task queue's semaphore), or that the kernel hands to another thread, is caught but its handler
does not run until that call returns, perhaps never. The default action would have ended the
process at once, so a handler that replaces it must not leave the process hanging there. A
small watcher thread reads the signal wakeup file descriptor (where the C-level handler writes
the number of each signal caught, whatever the thread); when ``SIGTERM`` came and the flush
has not started, it sends ``SIGTERM`` again to the main thread itself, which interrupts the
wait and runs the handler. The watcher serves only a handler that ends in the default action
(a program's own Python handler has that race without this package too), and is only started
where no wakeup descriptor was set. A library that sets its own later (asyncio, trio, Twisted)
takes it over and is told that none was set, as it would be without this package. A forked
child does not share the parent's descriptor: it starts over without one.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

Handler = Callable[[int, "FrameType | None"], None]

#: The attribute of a handler made here that ends the process by the default action: the
#: event set when its flush starts (the watcher reads it; a child replaces such a handler).
FLUSH_MARK = "_eventlog_handler_flush"

#: Seconds the watcher gives the main thread to start the handler before it signals again.
NUDGE_AFTER = 0.2

#: This process's wakeup pipe (reader, writer), while its watcher runs.
_pipe: tuple[int, int] | None = None

#: :func:`signal.set_wakeup_fd` as it was, before it was wrapped (see :func:`_set_wakeup_fd`).
_original_set_wakeup_fd = signal.set_wakeup_fd


def install(flush: Callable[[], object], previous: Any) -> Handler:
    """Install the ``SIGTERM`` handler that runs ``flush`` and then chains to ``previous``
    (see the module docstring); the main thread only. Returns the handler."""
    handler = _flush_then(flush, previous)
    signal.signal(signal.SIGTERM, handler)
    if getattr(handler, FLUSH_MARK, None) is not None:
        _watch()
    return handler


def terminate_gracefully(flush: Callable[[], object]) -> bool:
    """In a multiprocessing child, flush when ``SIGTERM`` ends it; ``True`` if installed.
    Only from the main thread, and only where ``SIGTERM`` has its default disposition (or the
    flush this process inherited from its parent, which is replaced)."""
    if threading.current_thread() is not threading.main_thread():
        return False
    try:
        current = signal.getsignal(signal.SIGTERM)
        if current is not signal.SIG_DFL and getattr(current, FLUSH_MARK, None) is None:
            return False  # the program's own handler
        install(flush, signal.SIG_DFL)
    except (ValueError, OSError, AttributeError):  # no SIGTERM here, or not allowed
        return False
    return True


def _flush_then(flush: Callable[[], object], previous: Any) -> Handler:
    ends = previous in (signal.SIG_DFL, None)  # None: a handler not set from Python
    started = threading.Event()

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        if started.is_set():
            return  # the watcher's nudge, or a second SIGTERM, while the flush runs
        started.set()
        try:
            flush()
        finally:
            if ends:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                os.kill(os.getpid(), signal.SIGTERM)
            else:
                started.clear()
        if callable(previous):
            previous(signum, frame)

    if ends:
        setattr(on_sigterm, FLUSH_MARK, started)
    return on_sigterm


def _watch() -> None:
    """Start this process's watcher thread (see the module docstring), where the wakeup
    descriptor is free."""
    global _pipe
    if not hasattr(signal, "pthread_kill"):
        return
    if _pipe is not None:  # the watcher runs: take the descriptor back if it was let go since
        with contextlib.suppress(ValueError, OSError):
            current = _original_set_wakeup_fd(_pipe[1], warn_on_full_buffer=False)
            if current not in (-1, _pipe[1]):
                _original_set_wakeup_fd(current)  # somebody else's: leave it to them
        return
    reader, writer = os.pipe()
    try:
        os.set_blocking(writer, False)
        previous = _original_set_wakeup_fd(writer, warn_on_full_buffer=False)
    except (ValueError, OSError):
        os.close(reader)
        os.close(writer)
        return
    if previous != -1:  # somebody else's: leave it to them
        _original_set_wakeup_fd(previous)
        os.close(reader)
        os.close(writer)
        return
    _pipe = (reader, writer)
    signal.set_wakeup_fd = _set_wakeup_fd
    main = threading.main_thread().ident
    thread = threading.Thread(
        target=_watcher, args=(reader, main), name="eventlog-handler-sigterm", daemon=True
    )
    thread.start()


def _set_wakeup_fd(fd: int, /, *, warn_on_full_buffer: bool = True) -> int:
    """:func:`signal.set_wakeup_fd`, to which the watcher's descriptor is invisible: a library
    that sets its own (asyncio, trio, Twisted) takes it over, and is told that none was set,
    as it would have been without this package (trio warns of a collision otherwise)."""
    previous = _original_set_wakeup_fd(fd, warn_on_full_buffer=warn_on_full_buffer)
    if _pipe is not None and previous == _pipe[1] and fd != previous:
        return -1
    return previous


def _watcher(reader: int, main: int | None) -> None:
    try:
        while main is not None:
            caught = os.read(reader, 64)
            if not caught:
                return  # the writer was closed: the flush was removed
            if signal.SIGTERM not in caught:
                continue
            started = getattr(signal.getsignal(signal.SIGTERM), FLUSH_MARK, None)
            while started is not None and not started.wait(NUDGE_AFTER):
                signal.pthread_kill(main, signal.SIGTERM)
    except Exception:  # pragma: no cover - a watcher that fails leaves the handler as it is
        pass
    finally:
        with contextlib.suppress(OSError):
            os.close(reader)


def stop_watching() -> None:
    """Give the wakeup descriptor back (unless somebody else has set theirs since) and let the
    watcher end: when the flush is removed."""
    _release(forked=False)


def _release(forked: bool) -> None:
    global _pipe
    if _pipe is None:
        return
    reader, writer = _pipe
    _pipe = None
    with contextlib.suppress(ValueError, OSError):
        current = _original_set_wakeup_fd(-1)
        if current != writer:
            _original_set_wakeup_fd(current)  # set by somebody else since: theirs
    # The watcher reads the end of the pipe once its writer is closed, and closes the reader
    # itself. A forked child has no watcher: it closes both, so that a signal it catches can't
    # make the parent's watcher nudge the parent (the child's own flush starts its own).
    for fd in (writer, reader) if forked else (writer,):
        with contextlib.suppress(OSError):
            os.close(fd)


def _after_fork_in_child() -> None:
    _release(forked=True)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
