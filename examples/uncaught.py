"""An uncaught exception: reported as a ``Fatal`` error before the process ends.

The traceback is still printed and the exit status is still 1. The same happens for an
uncaught exception in a thread (reported as ``unhandled_thread_exception``).
"""

from __future__ import annotations

import logging
import threading

import eventlog_handler

eventlog_handler.setup(tags=["example", "uncaught"])
logging.getLogger("examples.uncaught").info("about to crash")


def worker() -> None:
    raise ValueError("a worker thread failed")


thread = threading.Thread(target=worker, name="example-worker")
thread.start()
thread.join()


def load_config(path: str) -> dict[str, str]:
    raise FileNotFoundError(f"no configuration at {path}")


# The user set here stays current, so the crash report carries it.
eventlog_handler.set_user("ops", name="Operator")
load_config("/etc/example/missing.conf")
