"""Posts answered and not yet stored: the collector answers first, then stores.

The service answers a post once it is queued and stores its events a moment later; the
collector answers as soon as a post's events are read (so the client can prepare and send its
next batch) and stores them right after, on the same thread, before that connection reads its
next request. :class:`PendingStores` tracks those stores so that every read (the API, the
dashboard, the Python API) first waits for the stores begun before it: a client that reads after
its 202 always finds its events.
"""

from __future__ import annotations

import itertools
import threading
import time

__all__ = ["PendingStores"]


class PendingStores:
    """The stores in progress, each identified by a ticket."""

    def __init__(self) -> None:
        self._tickets = itertools.count(1)
        self._active: set[int] = set()
        self._changed = threading.Condition()

    def begin(self) -> int:
        """A store is about to start (the answer is being sent); returns its ticket."""
        with self._changed:
            ticket = next(self._tickets)
            self._active.add(ticket)
            return ticket

    def end(self, ticket: int) -> None:
        """The store with ``ticket`` finished (stored or failed)."""
        with self._changed:
            self._active.discard(ticket)
            self._changed.notify_all()

    def wait(self, timeout: float | None = 30.0) -> bool:
        """Wait until every store begun so far has finished (stores begun later do not hold
        the caller up); False if ``timeout`` seconds passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            waiting = set(self._active)
            while waiting & self._active:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._changed.wait(remaining)
            return True

    @property
    def active(self) -> int:
        """How many stores are in progress."""
        with self._changed:
            return len(self._active)
