"""uWSGI, which forks its workers from a master without Python's fork hooks.

Without ``--lazy-apps``, uWSGI loads the program in its master and forks the workers in C:
the hooks of :func:`os.register_at_fork` don't run in them (unless ``--py-call-osafterfork``
or ``--py-call-uwsgi-fork-hooks``), so each worker went on with the master's engine (a
delivery thread that does not exist there: nothing was sent) and the master's reference ids
(two workers gave their events the same ids, and the service keeps one of each). uWSGI calls
``uwsgi.post_fork_hook`` in each worker instead: the engine's after-fork work is chained there,
before a hook the program set.

A thread the master started before the fork (the package's, or any other) may hold the
interpreter's lock at that moment; a worker then waits for it for ever, which no hook can
mend. So a master that sets the package up without ``--lazy-apps`` is told so on stderr, once.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from eventlog_handler.delivery._stderr import say_once
from eventlog_handler.wire._events import new_reference_id

_ADVICE = (
    "eventlog_handler: set up in the uWSGI master, which forks its workers without Python's "
    "fork handling: run uWSGI with --lazy-apps (each worker sets the package up itself), or "
    "with --py-call-osafterfork; else a worker can hang on a lock a thread of the master held"
)


def _uwsgi() -> Any:
    """uWSGI's module, inside uWSGI only."""
    try:
        return importlib.import_module("uwsgi")
    except ImportError:
        return None


def _option(uwsgi: Any, name: str) -> bool:
    options = getattr(uwsgi, "opt", None) or {}
    value = options.get(name, options.get(name.encode()))
    return value not in (None, False, 0, "", b"", "false", b"false")


def chain_post_fork(after_fork: Callable[[], None]) -> None:
    """Inside uWSGI, when its forks run no Python fork hook: run ``after_fork`` in each worker
    it forks, and draw the worker's own reference ids. Never raises."""
    uwsgi = _uwsgi()
    if uwsgi is None or _option(uwsgi, "py-call-osafterfork"):
        return
    if _option(uwsgi, "py-call-uwsgi-fork-hooks"):
        return
    previous = getattr(uwsgi, "post_fork_hook", None)

    def post_fork() -> None:
        try:
            after_fork()
            new_reference_id.reset()
        finally:
            if callable(previous):
                previous()

    try:
        uwsgi.post_fork_hook = post_fork
    except Exception:  # pragma: no cover - a uWSGI without the attribute: nothing to chain
        return


def advise_in_master() -> None:
    """In uWSGI's master, without ``--lazy-apps``: say once what to do (module docstring)."""
    uwsgi = _uwsgi()
    if uwsgi is None or _option(uwsgi, "lazy-apps") or _option(uwsgi, "lazy"):
        return
    try:
        in_master = uwsgi.worker_id() == 0
    except Exception:  # pragma: no cover - an odd uWSGI: say nothing
        return
    if in_master and not _option(uwsgi, "py-call-osafterfork"):
        say_once("uwsgi-master", _ADVICE)
