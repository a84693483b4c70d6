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
from typing import TYPE_CHECKING, Any

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


def capture_error(
    exc: BaseException,
    *,
    level: str = "Error",
    submission_method: str | None = None,
    source: str | None = None,
    data: dict[str, Any] | None = None,
    settings: Settings | None = None,
    stack: dict[str, Any] | None = None,
) -> bool:
    """Queue ``exc`` as an error event; ``True`` when it was queued. Never raises. What the
    integrations call (the middlewares, the hooks, the task queues), with checked arguments:
    without settings (no ``setup()``), nothing is sent, and nothing said.

    ``stack``: a manual stack for it (the value of
    :func:`~eventlog_handler.wire._stacking.manual_stack`), for an exception that was raised
    nowhere and has no frames to be grouped by."""
    try:
        settings = settings or current_settings()
        if settings is None or is_sender_thread():
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


if TYPE_CHECKING:  # what type checkers see: the arguments it takes

    def capture_exception(
        exc: BaseException,
        *,
        level: str | int = "Error",
        source: str | None = None,
        data: dict[str, Any] | None = None,
        settings: Settings | None = None,
        stack: dict[str, Any] | None = None,
        submission_method: str | None = None,
    ) -> bool:
        """Queue ``exc`` as an error event (see :func:`checked_capture`)."""

else:

    def capture_exception(exc, **arguments):
        """Queue ``exc`` as an error event (see :func:`checked_capture`)."""
        return checked_capture(exc, arguments)


def checked_capture(exc: Any, arguments: dict[str, Any]) -> bool:
    """:func:`capture_exception`: ``exc`` queued as an error event; ``True`` when it was.
    Never raises.

    ``level``: the event's ``@level``, a name (``"warning"``, ``"Warn"``, ``"critical"``) or a
    :mod:`logging` level number; ``source``: its source (a logger's name); ``data``: values
    added to its ``data``; ``settings``: those of another engine than ``setup()``'s. A wrong
    argument (an exception class, an unknown level or option, a call before ``setup()``) is
    said once on stderr, not raised: this runs in ``except`` blocks, where an exception would
    take the place of the one being handled."""
    try:
        known = {name: arguments.pop(name) for name in _ARGUMENTS if name in arguments}
        if arguments:
            _say_wrong(
                "options",
                f"has no option {', '.join(map(repr, sorted(arguments)))} (it takes level, "
                "source and data); ignored",
            )
        if not isinstance(exc, BaseException):
            what = f"the class {exc.__name__}" if isinstance(exc, type) else type(exc).__name__
            _say_wrong("exc", f"takes an exception (an instance), got {what}; nothing is sent")
            return False
        data = known.get("data")
        if data is not None and not isinstance(data, dict):
            _say_wrong("data", f"takes data as a dict, got {type(data).__name__}; left out")
            data = None
        source = known.get("source")
        settings = known.get("settings") or current_settings()
        if settings is None:
            _say_wrong("setup", "was called before setup(): nothing is sent")
            return False
        return capture_error(
            exc,
            level=_level(known.get("level", "Error")),
            source=source if source is None else safe_str(source),
            data=data,
            settings=settings,
            stack=known.get("stack"),
            submission_method=known.get("submission_method"),
        )
    except Exception:  # pragma: no cover - each step above never raises
        return False


_ARGUMENTS = ("level", "source", "data", "settings", "stack", "submission_method")


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
