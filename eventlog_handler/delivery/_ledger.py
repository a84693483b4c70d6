"""The engine's books: one lock, one condition, and a count for every outcome.

Every captured event ends in exactly one outcome, ``delivered`` or ``dropped`` for one reason;
until then it is ``queued`` (in memory, waiting for the worker), ``in_flight`` (taken by the
worker: being built, held for a roll-up, waiting for a retry, or on the wire) or ``spooled``
(on disk, waiting for the service). So, at every moment::

    captured == delivered + sum(dropped.values()) + queued + in_flight + spooled

The lock is re-entrant because a log call made from a ``__del__`` run by the garbage collector
may arrive on a thread that already holds it. Whoever changes a count holds the lock; the
condition (on the same lock) wakes the worker and anyone waiting in ``flush``.
"""

from __future__ import annotations

import threading
from typing import Any

#: Why an event was not delivered.
DROP_REASONS = (
    "queue_full",
    "rejected",
    "too_large",
    "expired",
    "shutdown",
    "spool_full",
    "filtered",
    "unconfigured",
)


class Ledger:
    """The counts of one engine in one process (see the module docstring)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.captured = 0
        self.delivered = 0
        self.dropped = dict.fromkeys(DROP_REASONS, 0)
        self.in_flight = 0
        #: Bytes of the batch the worker holds, and of the events the roll-up holds (what the
        #: memory budget leaves for the buffer is the rest).
        self.in_flight_bytes = 0
        #: In-flight events whose last request may have reached the service (the connection
        #: was reset after it was sent): at exit their outcome is unknown, not lost.
        self.uncertain = 0
        self.held_bytes = 0
        self.spooled = 0
        #: Events of this process's in-flight count that are on the wire right now.
        self.posting = 0
        self.retries = 0
        self.batches = 0
        self.bytes_sent = 0
        #: Events merged into another one by the roll-up of duplicates (delivered with it).
        self.rolled_up = 0
        #: ``before_send`` calls that raised (the event was sent unchanged).
        self.hook_errors = 0
        #: Events of ended processes sent from (or dropped out of) the spool.
        self.replayed = {"delivered": 0, "dropped": 0}
        self.last_error: str | None = None
        #: Events the worker thread ``written_off_by`` held off the wire (being built, waiting
        #: for a ``before_send`` hook) when the exit's deadline counted them as dropped
        #: (``shutdown``): their later outcome there is not counted again.
        self.written_off = 0
        self.written_off_by: int | None = None

    def settle(self, count: int, reason: str | None, *, held: bool = False) -> None:
        """``count`` in-flight events got their outcome (``None``: delivered). Lock held or not.
        ``held``: events the calling thread held off the wire (not an answer to a request)."""
        with self.lock:
            if held and self.written_off and threading.get_ident() == self.written_off_by:
                counted = min(count, self.written_off)  # as dropped at the exit already
                self.written_off -= counted
                count -= counted
            if reason is None:
                self.delivered += count
            else:
                self.dropped[reason] += count
            self.in_flight = max(0, self.in_flight - count)
            if self.in_flight == 0:
                self.changed.notify_all()

    def snapshot(self, queued: int) -> dict[str, Any]:
        """The counts as a dict (the caller holds the lock)."""
        return {
            "captured": self.captured,
            "delivered": self.delivered,
            "dropped": dict(self.dropped),
            "dropped_total": sum(self.dropped.values()),
            "queued": queued,
            "in_flight": self.in_flight,
            "spooled": self.spooled,
            "rolled_up": self.rolled_up,
            "replayed": dict(self.replayed),
            "retries": self.retries,
            "batches": self.batches,
            "bytes_sent": self.bytes_sent,
            "hook_errors": self.hook_errors,
            "last_error": self.last_error,
        }
