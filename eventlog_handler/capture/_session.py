"""The caller's side of sessions (``sessions=True``): open the process's session for the user
known then, and let :func:`~eventlog_handler.set_user` outside a web request move it to another
user. The session itself (its events, heartbeats, end) is the engine's:
:mod:`eventlog_handler.delivery._sessions`.
"""

from __future__ import annotations

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
    context.user_listener = sessions.follow_user


def close_session(settings: Settings) -> None:
    """End the session of ``settings``' engine (a heartbeat with ``close=true``)."""
    if not settings.sessions:
        return
    sessions = get_engine(settings).sessions
    if sessions is None:
        return
    if context.user_listener == sessions.follow_user:
        context.user_listener = None
    sessions.end()
