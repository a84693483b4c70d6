"""Report a caught exception from code that is not a logging call (middleware, job runners).

>>> from eventlog_handler.capture._exceptions import capture_exception
>>> try:
...     handle(request)                        # doctest: +SKIP
... except Exception as exc:
...     capture_exception(exc)                 # doctest: +SKIP
...     raise

The event goes to the engine of the current :func:`~eventlog_handler.setup` (or of the
``settings`` given), with the context's user, tags and ``@request``. An exception is reported
once: one already sent (by ``logger.exception``, a hook or an earlier call) is skipped, and once
sent here, a framework that logs it afterwards does not send it again. The admission rules are
those of every entry point (:func:`~eventlog_handler.capture._admit.admit`): an exception turned
off by ``ignore_exceptions``, the service's ``@@error:*`` settings or a task queue's control flow
is counted as dropped (``filtered``) and not sent.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

from eventlog_handler.capture._admit import SEND, admit
from eventlog_handler.capture._records import build_event
from eventlog_handler.delivery._engine import get_engine, is_sender_thread
from eventlog_handler.delivery._stderr import say_capture_failed, say_once
from eventlog_handler.settings import Settings
from eventlog_handler.wire._jsonsafe import safe_str
from eventlog_handler.wire._levels import NUMBERS, level_name

#: The settings of the current :func:`~eventlog_handler.setup` (it sets and clears them).
_active: Settings | None = None


def set_active(settings: Settings | None) -> None:
    """Make ``settings`` the default of :func:`capture_exception` (``None``: no default)."""
    global _active
    _active = settings


def current_settings() -> Settings | None:
    """The settings of the current :func:`~eventlog_handler.setup`, or ``None``."""
    return _active


def capture_exception(
    exc: BaseException,
    *,
    level: str | int = "Error",
    submission_method: str | None = None,
    source: str | None = None,
    data: dict[str, Any] | None = None,
    settings: Settings | None = None,
    stack: dict[str, Any] | None = None,
    **unknown: Any,
) -> bool:
    """Queue ``exc`` as an error event; ``True`` when it was queued. Never raises.

    ``level``: the event's ``@level``, a name (``"warning"``, ``"Warn"``, ``"critical"``) or a
    :mod:`logging` level number; ``source``: its source (a logger's name); ``data``: values
    added to its ``data``. ``stack``: a manual stack for it (the value of
    :func:`~eventlog_handler.wire._stacking.manual_stack`), for an exception that was raised
    nowhere and has no frames to be grouped by. A wrong argument (an exception class, an
    unknown level or option) is said once on stderr, not raised: this runs in ``except``
    blocks, where an exception would take the place of the one being handled."""
    try:
        if unknown:
            _say_wrong(
                "options",
                f"has no option {', '.join(map(repr, sorted(unknown)))} (it takes level, "
                "source and data); ignored",
            )
        given: Any = exc  # what a caller passes is not always what the signature says
        if not isinstance(given, BaseException):
            what = (
                f"the class {given.__name__}" if isinstance(given, type) else type(given).__name__
            )
            _say_wrong("exc", f"takes an exception (an instance), got {what}; nothing is sent")
            return False
        level = _level(level)
        given = data
        if given is not None and not isinstance(given, dict):
            _say_wrong("data", f"takes data as a dict, got {type(given).__name__}; left out")
            data = None
        settings = settings or current_settings()
        if settings is None:
            _say_wrong("setup", "was called before setup(): nothing is sent")
            return False
        if is_sender_thread():
            return False
        engine = get_engine(settings)
        if admit(source, logging.ERROR, exc, settings, engine) != SEND:
            return False
        event = build_event(
            settings,
            message=None,
            levelno=0,
            level=level,
            source=source,
            created=time.time(),
            data=data,
            exc=exc,
            submission_method=submission_method,
            stack=stack,
        )
        return engine.enqueue(
            event, exc=exc if settings.before_send is not None else None, settings=settings
        )
    except Exception as failure:  # reporting must never raise into the application
        with contextlib.suppress(Exception):
            if settings is not None:
                text = f"{type(failure).__name__}: {safe_str(failure)}"[:500]
                say_capture_failed(None, text, settings)
        return False


def _level(level: Any) -> str:
    """The service's ``@level`` for a level name or number; ``Error`` for anything else."""
    if isinstance(level, int) and not isinstance(level, bool):
        return level_name(level)
    number = NUMBERS.get(level.strip().lower()) if isinstance(level, str) else None
    if number is None:
        _say_wrong("level", f"has no level {safe_str(level)[:40]!r}; Error is used")
        return "Error"
    return level_name(number)


def _say_wrong(what: str, text: str) -> None:
    say_once(f"capture_exception {what}", f"eventlog_handler: capture_exception() {text}.")
