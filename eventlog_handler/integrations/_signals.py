"""An opt-in flush on ``SIGTERM``, for processes stopped by a supervisor.

A process manager (systemd, Kubernetes, supervisord, ``docker stop``) ends a program with
``SIGTERM``. Python's default is to die at once, without ``atexit``, so pending events would
be lost. :func:`flush_on_sigterm` installs a handler that runs the exit flush (bounded by
``shutdown_timeout``) and then does what was going to happen anyway: it calls the previous
Python handler, or, if there was none, restores the default and sends the signal again, so
the process still ends by ``SIGTERM`` with the same exit status.

It can only be installed from the main thread (a rule of :mod:`signal`); elsewhere it returns
``False`` and changes nothing.
"""

from __future__ import annotations

import os
import signal
import threading
from types import FrameType
from typing import Any

from eventlog_handler.delivery import _engine as transport

_installed: Any = None  # our handler, while it is installed
_previous: Any = None  # the handler it chains to


def flush_on_sigterm(timeout: float | None = None) -> bool:
    """Flush pending events when ``SIGTERM`` arrives, then chain; ``True`` if installed."""
    global _installed, _previous
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "SIGTERM"):
        return False
    if _installed is not None and signal.getsignal(signal.SIGTERM) is _installed:
        return True
    previous = signal.getsignal(signal.SIGTERM)

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        transport.shutdown_all(timeout)
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_IGN:
            return
        else:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_sigterm)
    _installed, _previous = on_sigterm, previous
    return True


def remove_sigterm_flush() -> bool:
    """Put back the previous ``SIGTERM`` handler if ours is still the one installed."""
    global _installed, _previous
    if _installed is None or threading.current_thread() is not threading.main_thread():
        return False
    if signal.getsignal(signal.SIGTERM) is not _installed:
        _installed = None
        return False
    signal.signal(signal.SIGTERM, _previous)
    _installed = _previous = None
    return True
