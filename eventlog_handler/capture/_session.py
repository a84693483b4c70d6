"""The caller's side of sessions (``sessions=True``): open the process's session for the user
known then, and let :func:`~eventlog_handler.set_user` outside a web request move it to another
user. The session itself (its events, heartbeats, end) is the engine's:
:mod:`eventlog_handler.delivery._sessions`.
"""

from __future__ import annotations

from typing import Any

from eventlog_handler.capture import _context as context
from eventlog_handler.delivery._engine import get_engine
from eventlog_handler.settings import Settings


def open_session(settings: Settings) -> None:
    """Start the session of ``settings``' engine, unless one is open or sessions are off."""
    if not settings.sessions or settings.problem is not None:
        return
    sessions = get_engine(settings).sessions
    if sessions is None or sessions.current is not None:
        return
    sessions.start(context.get_user())

    def follow(user: dict[str, Any] | None) -> None:
        # Looked up at each call: a forked child's engine has sessions of its own.
        current = get_engine(settings).sessions
        if current is not None:
            current.follow_user(user)

    follow.settings = settings  # type: ignore[attr-defined]
    context.user_listener = follow


def close_session(settings: Settings) -> None:
    """End the session of ``settings``' engine (a heartbeat with ``close=true``)."""
    if not settings.sessions:
        return
    sessions = get_engine(settings).sessions
    if sessions is None:
        return
    if getattr(context.user_listener, "settings", None) is settings:
        context.user_listener = None
    sessions.end()
