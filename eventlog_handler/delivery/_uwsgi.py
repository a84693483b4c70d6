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
import sys
from collections.abc import Callable
from typing import Any

from eventlog_handler.delivery._stderr import say_once
from eventlog_handler.wire._dates import new_reference_id

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


def _value(uwsgi: Any, name: str) -> Any:
    options = getattr(uwsgi, "opt", None) or {}
    value = options.get(name, options.get(name.encode()))
    return value.decode() if isinstance(value, bytes) else value


def _option(uwsgi: Any, name: str) -> bool:
    return _value(uwsgi, name) not in (None, False, 0, "", "false")


def _hooks_run(uwsgi: Any) -> bool:
    """Whether uWSGI runs Python's own fork handling in its workers (then nothing to do)."""
    return _option(uwsgi, "py-call-osafterfork") or _option(uwsgi, "py-call-uwsgi-fork-hooks")


_after_fork: Callable[[], None] | None = None


def _post_fork() -> None:
    if _after_fork is not None:
        _after_fork()
    new_reference_id.reset()


def _chained(previous: Callable[[], None]) -> Callable[[], None]:
    def post_fork() -> None:
        try:
            _post_fork()
        finally:
            previous()

    post_fork.__wrapped__ = _post_fork  # type: ignore[attr-defined]
    return post_fork


def chain_post_fork(after_fork: Callable[[], None]) -> None:
    """Inside uWSGI, when its forks run no Python fork hook: run ``after_fork`` in each worker
    it forks, and draw the worker's own reference ids. Called when the package is imported
    and again when an engine is made (a hook the program set since then is chained, not
    replaced). Never raises."""
    global _after_fork
    _after_fork = after_fork
    uwsgi = _uwsgi()
    if uwsgi is None or _hooks_run(uwsgi):
        return
    try:
        previous = getattr(uwsgi, "post_fork_hook", None)
        if _post_fork in (previous, getattr(previous, "__wrapped__", None)):
            return
        decorators = sys.modules.get("uwsgidecorators")
        chain = getattr(decorators, "postfork_chain", None)
        if isinstance(chain, list) and previous is getattr(decorators, "postfork_chain_hook", 0):
            if _post_fork not in chain:
                chain.insert(0, _post_fork)  # its hook runs its chain: ours first
            return
        uwsgi.post_fork_hook = _post_fork if previous is None else _chained(previous)
    except Exception:  # pragma: no cover - an odd uWSGI: nothing to chain
        return


def advise_in_master() -> None:
    """In uWSGI's master, when it forks workers from the app it loaded (no ``--lazy-apps``):
    say once what to do (see the module docstring)."""
    uwsgi = _uwsgi()
    if uwsgi is None or _option(uwsgi, "lazy-apps") or _option(uwsgi, "lazy"):
        return
    try:
        in_master = uwsgi.worker_id() == 0
        processes = int(_value(uwsgi, "processes") or _value(uwsgi, "workers") or 1)
    except Exception:  # pragma: no cover - an odd uWSGI: say nothing
        return
    forks = _option(uwsgi, "master") or processes > 1
    if in_master and forks and not _hooks_run(uwsgi):
        say_once("uwsgi-master", _ADVICE)
