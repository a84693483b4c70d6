"""The flush of a :mod:`multiprocessing` child when ``SIGTERM`` ends it.

``Pool.__exit__`` and ``Process.terminate()`` end children with ``SIGTERM``, whose default ends a
process at once, without ``atexit``: the events a pool worker logged just before would die with
it. So a child that logs gets a ``SIGTERM`` handler (only where none was set): it runs the exit
flush, then ends the process by ``SIGTERM`` as before.

A Python signal handler runs in the main thread, between two bytecodes. A signal that arrives
just before the main thread blocks in C (a pool worker waiting on its task queue's semaphore,
which ``Pool.terminate`` holds) is caught but its handler never runs: the wait is not
interrupted, and the process would never end. So a small watcher thread reads the signal
wakeup file descriptor (where the C-level handler writes the number of each signal caught,
whatever the thread); when ``SIGTERM`` came and the handler has not started, it sends
``SIGTERM`` again to the main thread itself, which interrupts the wait and runs the handler.
The watcher is only started where no wakeup descriptor was set (asyncio sets its own).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable
from typing import Any

#: The attribute that marks a SIGTERM handler as this package's flush (the one ``setup()``
#: installs is replaced in a child by this one, which also has the watcher).
FLUSH_MARK = "_eventlog_handler_flush"

#: Seconds the watcher gives the main thread to start the handler before it signals again.
NUDGE_AFTER = 0.2


def terminate_gracefully(shutdown_all: Callable[[], Any]) -> bool:
    """Install the flush on ``SIGTERM`` (see the module docstring); ``True`` if installed.
    Only from the main thread, and only where ``SIGTERM`` has its default disposition."""
    if threading.current_thread() is not threading.main_thread():
        return False
    try:
        current = signal.getsignal(signal.SIGTERM)
        if current is not signal.SIG_DFL and not getattr(current, FLUSH_MARK, False):
            return False  # the program's own handler (a flush of ours is replaced: see below)
        started = threading.Event()

        def on_sigterm(signum: int, frame: Any) -> None:
            if started.is_set():
                return  # a nudge from the watcher while the flush runs
            started.set()
            try:
                shutdown_all()
            finally:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                os.kill(os.getpid(), signal.SIGTERM)

        setattr(on_sigterm, FLUSH_MARK, True)
        signal.signal(signal.SIGTERM, on_sigterm)
    except (ValueError, OSError, AttributeError):  # no SIGTERM here, or not allowed
        return False
    _watch(started)
    return True


def _watch(started: threading.Event) -> None:
    """Start the watcher thread (see the module docstring), where the wakeup fd is free."""
    if not hasattr(signal, "pthread_kill"):
        return
    reader, writer = os.pipe()
    try:
        os.set_blocking(writer, False)
        previous = signal.set_wakeup_fd(writer, warn_on_full_buffer=False)
    except (ValueError, OSError):
        os.close(reader)
        os.close(writer)
        return
    if previous != -1:  # somebody else's: leave it to them
        signal.set_wakeup_fd(previous)
        os.close(reader)
        os.close(writer)
        return
    main = threading.main_thread().ident
    thread = threading.Thread(
        target=_watcher, args=(reader, started, main), name="eventlog-handler-sigterm", daemon=True
    )
    thread.start()


def _watcher(reader: int, started: threading.Event, main: int | None) -> None:
    with contextlib.suppress(Exception):
        while True:
            caught = os.read(reader, 64)
            if not caught:
                return
            if signal.SIGTERM not in caught:
                continue
            while main is not None and not started.wait(NUDGE_AFTER):
                signal.pthread_kill(main, signal.SIGTERM)
            return
