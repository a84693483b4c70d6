"""Sessions, as the official clients send them (opt-in: ``setup(sessions=True)``).

A session is a ``type: "session"`` event whose ``reference_id`` is the session's id, every
event of the session carrying ``data["@ref:session"]`` = that id, a heartbeat
(``GET /api/v2/events/session/heartbeat?id=...``) every ``heartbeat_interval`` seconds, and a
heartbeat with ``close=true`` at its end. The service turns them into a session stack with its
user, start, duration and end.

One session at a time per process, following the process's user:

- ``setup(sessions=True)`` starts one, for the user known then (or none: a worker, a CLI);
- :func:`~eventlog_handler.set_user` with another identity outside a web request ends it and
  starts one for the new user (inside a request, every event already carries ``@user``, from
  which the service makes its own per-user sessions); a user cleared (``clear_user()``,
  ``set_user(None)``, the end of a ``user_context()`` block with no user around it) ends the
  user's session and starts one with no user;
- the exit flush and ``EventLogSetup.close()`` end it.

No thread of its own: the heartbeat is an errand the delivery worker makes when it is due
(:mod:`eventlog_handler.delivery._errands`). An event belongs to the session that was open when
it was captured (its creation time is compared with the sessions' starts), so an event
captured just before a change of user is not counted in the next user's session; and only when
its user is that session's user (the same identity, or none for both), so an event of another
user (a web request's, another thread's) is never counted in this one: the service gives it a
session of its own user.
"""

from __future__ import annotations

import math
import time
import uuid
from collections import deque
from collections.abc import Callable
from typing import Any

from eventlog_handler.delivery._errands import Errand, Errands
from eventlog_handler.delivery._ledger import Ledger
from eventlog_handler.settings import Settings
from eventlog_handler.wire._logs import log_event

#: Types that are never stamped with ``@ref:session`` (the session's own events).
SESSION_TYPES = frozenset(("session", "sessionend", "heartbeat"))
#: Past sessions remembered to stamp events captured while they were open.
HISTORY = 16


class Sessions:
    """The session of one engine in one process (see the module docstring)."""

    def __init__(
        self,
        settings: Settings,
        ledger: Ledger,
        errands: Errands,
        enqueue: Callable[[dict[str, Any]], bool],
    ) -> None:
        self.settings = settings
        self.ledger = ledger
        self.errands = errands
        self.enqueue = enqueue
        self.interval = settings.heartbeat_interval
        #: The open session: ``(id, identity)``, or ``None``.
        self.current: tuple[str, str | None] | None = None
        #: ``[start, end, id, identity]`` of the latest sessions (POSIX times; ``end`` is
        #: ``inf`` while open), oldest first.
        self.history: deque[list[Any]] = deque(maxlen=HISTORY)
        errands.recurring = self._beat

    def start(self, user: dict[str, Any] | None) -> str:
        """End the open session, if any, and start one for ``user``; return its id."""
        session_id = uuid.uuid4().hex
        now = time.time()
        settings = self.settings
        event = log_event(
            "",
            date=now,
            user=user,
            tags=settings.tags,
            exclusions=settings.data_exclusions,
            reference_id=session_id,
        )
        event["type"] = "session"
        event.pop("message", None)
        with self.ledger.lock:
            self._end(now)
            identity = _identity(user)
            self.current = (session_id, identity)
            self.history.append([now, math.inf, session_id, identity])
            self.errands.recurring_due = time.monotonic() + self.interval
            self.ledger.changed.notify_all()
        self.enqueue(event)
        return session_id

    def follow_user(self, user: dict[str, Any] | None) -> None:
        """The process's user became ``user``: a new session when its identity is another (a
        session with no user when the user is gone)."""
        identity = _identity(user)
        current = self.current
        if current is None and identity is None:
            return  # no session to end, none to start for nobody (after close())
        if current is not None and current[1] == identity:
            return
        self.start(user if identity is not None else None)

    def end(self) -> None:
        """End the open session (a heartbeat with ``close=true``); stop the heartbeats."""
        with self.ledger.lock:
            self._end(time.time())

    def _end(self, now: float) -> None:
        current = self.current
        if current is None:
            return
        self.current = None
        self.errands.recurring_due = math.inf
        for item in self.history:
            if item[2] == current[0]:
                item[1] = now
        self.errands.put(self._heartbeat(current[0], close=True))

    def id_at(self, created: float, identity: Any = None) -> str | None:
        """The id of the session open at POSIX time ``created``, if any, and if it is the
        session of the user ``identity`` (``None``: no user)."""
        for start, end, session_id, owner in reversed(self.history):
            if start <= created < end:
                return str(session_id) if owner == identity else None
        return None

    def _beat(self, now: float) -> float:
        """Queue the open session's heartbeat (the lock is held); when the next is due."""
        current = self.current
        if current is None:
            return math.inf
        self.errands.put(self._heartbeat(current[0], close=False, due=now))
        return now + self.interval

    def _heartbeat(self, session_id: str, close: bool, due: float | None = None) -> Errand:
        return Errand(
            "session end" if close else "heartbeat",
            lambda client: client.heartbeat(session_id, close=close),
            len(session_id) + 64,
            time.monotonic() + self.settings.error_delay if due is None else due,
            retry=close,
        )


def _identity(user: dict[str, Any] | None) -> str | None:
    identity = user.get("identity") if user else None
    return identity if isinstance(identity, str) else None
