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
sent here, a framework that logs it afterwards does not send it again.
"""

from __future__ import annotations

import time
from typing import Any

from eventlog_handler.capture._admit import was_reported
from eventlog_handler.capture._records import build_event
from eventlog_handler.delivery._engine import get_engine, is_sender_thread
from eventlog_handler.settings import Settings

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
    level: str = "Error",
    submission_method: str | None = None,
    source: str | None = None,
    data: dict[str, Any] | None = None,
    settings: Settings | None = None,
) -> bool:
    """Queue ``exc`` as an error event; ``True`` when it was queued. Never raises."""
    try:
        settings = settings or current_settings()
        if settings is None or is_sender_thread() or was_reported(exc):
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
        )
        return get_engine(settings).enqueue(event)
    except Exception:  # pragma: no cover - reporting must never raise into the application
        return False
