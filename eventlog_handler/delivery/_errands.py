"""Requests of the engine that are not event posts: user descriptions and session heartbeats.

Both go to routes of their own (``POST /api/v2/events/by-ref/{id}/user-description``,
``GET /api/v2/events/session/heartbeat``) and are sent by the delivery worker like batches:
queued by the caller in O(1), never blocking it, retried, counted, and bounded in number and in
bytes. The worker starts a thread making the errands that are due between batches, so a
description queued right after its error is sent after that error (it waits ``error_delay``,
as the error does, and a batch due at the same moment goes first), and a slow answer to an
errand does not hold back events.

=========================  =====================================================================
answer                     what happens
=========================  =====================================================================
2xx                        ``sent``
refused, reset, timeout,   a user description or a session's end: retried with the engine's
5xx, 429, 402              backoff, at most :data:`MAX_ATTEMPTS` times (then ``failed``); a
                           heartbeat is not retried (the next one follows)
another 4xx                ``rejected``, said once on stderr with the service's reason
=========================  =====================================================================

At the exit flush, errands still queued at the deadline are dropped (``shutdown``). The counts
are in ``stats()["side_requests"]``.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from eventlog_handler.api import _errors as errors
from eventlog_handler.api._client import Client
from eventlog_handler.delivery._ledger import Ledger
from eventlog_handler.delivery._retry import RetryPolicy
from eventlog_handler.delivery._stderr import say
from eventlog_handler.wire._jsonsafe import safe_str

#: Errands queued at most; beyond it the oldest is dropped (``queue_full``).
MAX_ERRANDS = 200
#: Bytes the queued errands may hold at most (user descriptions are clipped well below it).
MAX_ERRAND_BYTES = 1_000_000
#: Attempts of one retried errand before it is given up (``failed``).
MAX_ATTEMPTS = 8
#: Why an errand was not sent.
ERRAND_DROP_REASONS = ("queue_full", "rejected", "failed", "shutdown")


class Errand:
    """One request to make: ``call(client)`` makes it; ``retry`` says whether a failure is
    tried again."""

    __slots__ = ("attempts", "call", "due", "kind", "retry", "size")

    def __init__(
        self, kind: str, call: Callable[[Client], Any], size: int, due: float, retry: bool
    ) -> None:
        self.kind = kind
        self.call = call
        self.size = size
        self.due = due
        self.retry = retry
        self.attempts = 0


class Errands:
    """The queue of errands of one engine in one process (see the module docstring).

    Every method is called with the ledger's lock held except :meth:`work`, which takes it.
    """

    def __init__(self, ledger: Ledger, policy: RetryPolicy) -> None:
        self.ledger = ledger
        self.policy = policy
        self.queue: deque[Errand] = deque()
        self.bytes = 0
        #: Errands being made right now (taken from the queue, not yet settled).
        self.busy = 0
        self.sent = 0
        self.dropped = dict.fromkeys(ERRAND_DROP_REASONS, 0)
        #: Called by :meth:`work` before the queue: what recurs (a session's heartbeat) adds
        #: itself here; returns the monotonic time it is next due.
        self.recurring: Callable[[float], float] | None = None
        self.recurring_due = math.inf
        self._said: set[str] = set()

    def put(self, errand: Errand) -> None:
        """Queue ``errand`` (the lock is held); the oldest go when the bounds are passed."""
        self.queue.append(errand)
        self.bytes += errand.size
        while len(self.queue) > MAX_ERRANDS or (self.bytes > MAX_ERRAND_BYTES and self.queue):
            oldest = self.queue.popleft()
            self.bytes -= oldest.size
            self.dropped["queue_full"] += 1
        self.ledger.changed.notify_all()

    @property
    def pending(self) -> int:
        """Errands queued or being made."""
        return len(self.queue) + self.busy

    def due_at(self, hurried: bool = False) -> float:
        """When the worker must next call :meth:`work` (``inf``: nothing to do); ``hurried``
        (a flush, the exit): errands not yet tried are due at once."""
        first = min((_due(errand, hurried) for errand in self.queue), default=math.inf)
        return min(first, self.recurring_due)

    def work(self, client: Callable[[], Client], hurried: bool, until: float = math.inf) -> None:
        """Make every errand that is due now (``hurried``: all of them), or was at ``until``
        (the worker's batches due by then are sent: a description follows its error)."""
        now = min(time.monotonic(), until)
        if self.recurring is not None and self.recurring_due <= now:
            with self.ledger.lock:
                self.recurring_due = self.recurring(now)
        while True:
            with self.ledger.lock:
                now = min(time.monotonic(), until)
                errand = next((item for item in self.queue if _due(item, hurried) <= now), None)
                if errand is None:
                    return
                self.queue.remove(errand)
                self.bytes -= errand.size
                self.busy += 1
            outcome: str | None = "failed"
            try:
                outcome = self._attempt(errand, client)
            finally:
                # Settled in the same step that ends "busy": whoever sees nothing pending
                # (flush) sees the outcome counted.
                with self.ledger.lock:
                    self.busy -= 1
                    if outcome is None:
                        self.sent += 1
                    elif outcome == "retry":
                        self.queue.append(errand)
                        self.bytes += errand.size
                    else:
                        self.dropped[outcome] += 1
                    self.ledger.changed.notify_all()

    def _attempt(self, errand: Errand, client: Callable[[], Client]) -> str | None:
        """``None`` when sent, ``"retry"`` (rescheduled), or the reason it is dropped."""
        try:
            errand.call(client())
            return None
        except errors.EventLogError as exc:
            errand.attempts += 1
            decision = self.policy.decide(exc, errand.attempts - 1, 1)
            if decision.action.value == "retry":
                if not errand.retry or errand.attempts >= MAX_ATTEMPTS:
                    return "failed"
                errand.due = time.monotonic() + decision.delay
                return "retry"
            self._say_once(errand.kind, f"the service refused it: {safe_str(exc)}")
            return "rejected"
        except Exception as exc:  # pragma: no cover - a bug must not stop the worker
            self._say_once(errand.kind, f"{type(exc).__name__}: {safe_str(exc)}")
            return "failed"

    def _say_once(self, kind: str, why: str) -> None:
        if kind in self._said:
            return
        self._said.add(kind)
        say(
            f"eventlog_handler: a {kind.replace('_', ' ')} was not sent ({why}); counted in "
            f"stats()['side_requests'], said once."
        )

    def give_up(self) -> int:
        """The exit deadline passed: drop what is queued (``shutdown``); return how many."""
        left = len(self.queue)
        self.queue.clear()
        self.bytes = 0
        self.dropped["shutdown"] += left
        return left

    def snapshot(self) -> dict[str, Any]:
        return {"queued": len(self.queue), "sent": self.sent, "dropped": dict(self.dropped)}


def _due(errand: Errand, hurried: bool) -> float:
    return -math.inf if hurried and errand.attempts == 0 else errand.due
