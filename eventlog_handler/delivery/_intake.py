"""The caller's side of the engine: put an entry in the bounded buffer, wake the worker if it
must, and push back on a burst that outruns it.

What a log call costs here: one lock, a count, an O(1) append, and two comparisons. The worker
is woken only when it has to be: when it sleeps past the moment the new entry is due (an idle
worker waits without a timeout, so the first event after a quiet minute wakes it at once), or
when a whole batch is ready.

Back-pressure: when the buffer is past three quarters of its capacity (or of
:attr:`Intake.high_bytes`) and the service is accepting events, the logging thread waits until
the worker has taken the buffer below :attr:`Intake.low_water`. Waiting on a condition lets the
worker have the interpreter at once; yielding (``sched_yield``) doesn't on a machine with more
than one core, because the yielding thread takes the interpreter lock straight back. The wait is
for the worker's work on the CPU, not for the network: while the worker's request is on the
wire, logging threads go on until the buffer is a batch short of its capacity
(:attr:`Intake.full_water`) or short of the room the batch in flight leaves
(:meth:`Intake.full_room`), so both threads are not idle during a post; a request that
logging threads have waited for longer than :data:`STUCK_AFTER`, a retry under way, or a
worker that stopped ends every wait, and after :data:`PUSHBACK_WAIT` seconds without enough
progress nobody waits for :data:`PUSHBACK_PAUSE` seconds. Then the bound on memory does its job
(the oldest logs are evicted, counted as ``queue_full``).

Both clocks count time spent waiting, not time the process stood still: a waiting thread's
poll that comes back late (a long garbage collection, the machine busy with other work, a
throttled container) counts as no more than :data:`POLL` + :data:`STALL_SLACK`, and time
between log calls counts for nothing. Measured from the moment the request was sent instead,
one long collection during a post (in a process with a large heap, or with a loopback server
in it) would make the next log calls evict a burst that a healthy service was taking.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from eventlog_handler.delivery._buffer import Entry, EventBuffer, entry_size
from eventlog_handler.delivery._ledger import Ledger
from eventlog_handler.delivery._state import RunState
from eventlog_handler.settings import Settings

#: The longest a logging thread waits for the worker in one call (the worker is busy with
#: the interpreter all along: building, encoding, or a request that is being answered).
PUSHBACK_WAIT = 1.0
#: Logging threads that waited this long for one request on the wire: the worker is waiting
#: on the network.
STUCK_AFTER = 0.5
#: After a wait that brought no progress, nobody waits for this long.
PUSHBACK_PAUSE = 1.0
#: How often a waiting logging thread looks again.
POLL = 0.05
#: A poll that comes back later than :data:`POLL` by more than this says the process stood
#: still meanwhile.
STALL_SLACK = 0.1

#: ``Intake.wake_at`` while the worker is busy (it looks at the buffer before it sleeps again).
BUSY = -math.inf


class Intake:
    """The buffer and the caller's path into it (one per engine and process)."""

    def __init__(self, settings: Settings, ledger: Ledger, state: RunState) -> None:
        self.settings = settings
        self.ledger = ledger
        self.state = state
        self.buffer = EventBuffer(settings.queue_size)
        #: When the sleeping worker wakes by itself (``inf``: only when woken; ``BUSY``).
        self.wake_at = BUSY
        #: Set by the engine: start the worker (the lock is held); ``False`` if it can't.
        self.start_worker: Callable[[], bool] = lambda: False
        self.worker_running = False
        #: No more sending or counting: events captured now are dropped (``shutdown``), unless
        #: ``send_late`` takes them.
        self.finished = False
        #: Set by the engine's exit flush: takes an entry captured after it (counted as
        #: captured), to send it from the calling thread or drop it; ``None``: drop it.
        self.send_late: Callable[[Entry], bool] | None = None
        #: The service is failing (a backoff is under way): nobody waits for the worker.
        self.retrying = False
        #: Set by the engine when it has a spool: whether the disk takes events now (then a
        #: logging thread waits for the worker to write them there even while the service fails,
        #: rather than see them evicted).
        self.spilling: Callable[[], bool] = lambda: False
        #: Monotonic time the worker's current request went on the wire, or ``None``.
        self.posting_since: float | None = None
        #: Seconds logging threads have waited for the current request on the wire, and until
        #: when (several waiting threads count a moment once).
        self.waited = 0.0
        self._waited_to = 0.0
        self.high_water = max(settings.batch_size, settings.queue_size * 3 // 4)
        self.low_water = max(0, self.high_water - settings.batch_size)
        self.budget = settings.memory_budget
        #: Past this many bytes in the buffer, logging threads wait for the worker too.
        self.high_bytes = self.budget * 3 // 8
        self.low_bytes = self.high_bytes // 2
        #: While the worker's request is on the wire, logging threads go on below these.
        self.full_water = max(self.high_water, settings.queue_size - settings.batch_size)
        self.full_bytes = self.budget * 5 // 8
        #: ... and below the room the batch in flight leaves, less this.
        self.headroom = self.budget // 8
        #: The most bytes of entries the worker takes at once to spool: what it builds and
        #: encodes from them is in memory beside the budget.
        self.part_bytes = max(1, self.budget // 16)
        #: ... and to send: not below what one request takes before compression, so that
        #: with a small budget a batch of small events stays whole (fewer events per request
        #: made logging threads wait).
        self.send_bytes = max(self.part_bytes, settings.max_raw_batch_bytes)
        self.waiting = 0  # logging threads waiting for the worker
        self._pushback_off_until = 0.0
        self._error_delay = settings.error_delay
        self._log_delay = settings.flush_interval
        self._batch = settings.batch_size
        self._eager = settings.spool_all  # every event goes to disk at once

    def put(self, entry: Entry) -> bool:
        """Queue ``entry`` (its ``enqueued`` time set; its :attr:`~Entry.size` estimated unless
        its capture did). ``False`` when it was dropped at once."""
        ledger = self.ledger
        buffer = self.buffer
        errors, logs = buffer.errors, buffer.logs
        is_error = entry.is_error
        nbytes = entry.size  # set at capture (a log record's), else 0: estimated here
        if not nbytes:
            entry.size = nbytes = entry_size(entry)
        if self.finished:
            return self._put_late(entry)
        with ledger.lock:
            ledger.captured += 1
            if self.finished:  # the exit flush came meanwhile
                ledger.dropped["shutdown"] += 1  # type: ignore[unreachable]
                return False
            size = len(errors) + len(logs)
            evicted: list[Entry] = []
            if size < buffer.capacity and buffer.bytes + nbytes <= self.room():
                (errors if is_error else logs).append(entry)
                buffer.bytes += nbytes
                size += 1
            else:
                evicted = buffer.put(entry, is_error, self.room())
                ledger.dropped["queue_full"] += len(evicted)
                size = len(errors) + len(logs)
            wake_at = self.wake_at
            if wake_at != BUSY:
                due = entry.enqueued + (self._error_delay if is_error else self._log_delay)
                if due < wake_at or size >= self._batch or self._eager:
                    self.wake_at = BUSY
                    ledger.changed.notify_all()
            if not self.worker_running:
                self.start_worker()
            pushback = (size > self.high_water or buffer.bytes > self.high_bytes) and self._holds(
                time.monotonic()
            )
        if pushback:
            self._wait_for_worker()
        return not evicted or evicted[-1] is not entry

    def _put_late(self, entry: Entry) -> bool:
        """An entry captured after the exit flush: :attr:`send_late` sends it, or it is
        dropped (``shutdown``)."""
        ledger = self.ledger
        with ledger.lock:
            ledger.captured += 1
            send_late = self.send_late
            if send_late is None:
                ledger.dropped["shutdown"] += 1
                return False
        return send_late(entry)

    def room(self) -> int:
        """Bytes the buffer may hold now: the memory budget less what the worker holds (the
        batch in flight, the roll-up's held events)."""
        ledger = self.ledger
        return self.budget - ledger.in_flight_bytes - ledger.held_bytes

    def full_room(self) -> int:
        """Bytes up to which logging threads go on while a request is on the wire: 5/8 of the
        budget, and an eighth of it short of :meth:`room` (a large batch in flight, or held
        roll-ups, leave less; past the room the oldest logs would be evicted)."""
        return min(self.full_bytes, self.room() - self.headroom)

    def _holds(self, now: float) -> bool:
        """Whether a logging thread past the high water waits for the worker now (the lock is
        held). Not without a worker, nor in the pause after a wait that brought no progress,
        nor while the service fails (unless the spool takes events), nor while the worker waits
        for the network: its request waited for long already, or the buffer still short of
        :attr:`full_water` and :meth:`full_room`. Looked at in :meth:`put` itself: in a flood,
        most calls past the high water find the worker's request on the wire, and going on at
        once without taking the lock again halves what they cost there."""
        if now < self._pushback_off_until or not self.worker_running:
            return False
        if self.retrying and not self.spilling():
            return False
        since = self.posting_since
        if since is None:
            return True
        buffer = self.buffer
        return self.waited <= STUCK_AFTER and (
            len(buffer) >= self.full_water or buffer.bytes >= self.full_room()
        )

    def _wait_for_worker(self) -> None:
        """Let the worker take a batch before this thread logs more (see the module docstring)."""
        ledger = self.ledger
        with ledger.lock:
            polled = time.monotonic()
            waited = 0.0  # in this call
            self.waiting += 1
            try:
                if self.wake_at != BUSY:
                    self.wake_at = BUSY
                    ledger.changed.notify_all()
                buffer = self.buffer
                # A worker that stopped will not take the buffer down: the bound on memory will.
                while (
                    (len(buffer) > self.low_water or buffer.bytes > self.low_bytes)
                    and not self.finished
                    and self.worker_running
                ):
                    now = time.monotonic()
                    waited += self._count_wait(polled, now)
                    if not self._holds(now):
                        return  # e.g. the worker waits for the network: so does nobody else
                    if waited > PUSHBACK_WAIT:
                        self._pushback_off_until = now + PUSHBACK_PAUSE
                        return
                    ledger.changed.wait(POLL)
                    polled = now
            finally:
                self.waiting -= 1

    def _count_wait(self, polled: float, now: float) -> float:
        """A logging thread waited from ``polled`` to ``now`` (the lock is held): count it for
        the request on the wire (once, however many threads waited). A poll back late counts
        as no more than ``POLL + STALL_SLACK``: the rest, the process stood still. Returns
        the seconds counted."""
        seconds = min(now - polled, POLL + STALL_SLACK)
        since = self.posting_since
        if since is not None:
            begin = max(polled, since, self._waited_to)
            if now > begin:
                self.waited += min(now - begin, seconds)
                self._waited_to = now
        return seconds

    def due(self, now: float) -> float:
        """When the events in memory are due to be taken (the lock is held)."""
        buffer = self.buffer
        if not buffer:
            return math.inf
        if (
            self.state.hurried
            or len(buffer) >= self._batch
            or self._eager
            or buffer.bytes > self.high_bytes  # fewer events than a batch, but large ones
        ):
            return now
        oldest_error, oldest_log = buffer.oldest()
        due = math.inf
        if oldest_error is not None:
            due = oldest_error.enqueued + self._error_delay
        if oldest_log is not None:
            due = min(due, oldest_log.enqueued + self._log_delay)
        return due

    def take(self, most: int | None = None, *, to_send: bool = False) -> list[Entry]:
        """The next part's entries (the lock is held): a batch at most (or ``most``), stopping
        once they reach :attr:`part_bytes` (:attr:`send_bytes` ``to_send``)."""
        count = self._batch if most is None else min(most, self._batch)
        return self.buffer.take(count, self.send_bytes if to_send else self.part_bytes)

    def taken(self) -> None:
        """The worker took entries (the lock is held): release logging threads waiting."""
        buffer = self.buffer
        if self.waiting and len(buffer) <= self.low_water and buffer.bytes <= self.low_bytes:
            self.ledger.changed.notify_all()

    def give_back(self, entries: list[Entry]) -> None:
        """Return in-flight entries to the front of the buffer (the lock is held). They are the
        oldest, so where room runs out the buffer's rule applies: a returned log is dropped, a
        returned error pushes out the oldest log in the buffer (``queue_full`` either way)."""
        ledger = self.ledger
        ledger.in_flight_bytes = max(
            0, ledger.in_flight_bytes - sum(entry.size for entry in entries)
        )
        buffer = self.buffer
        room = self.room()
        dropped = 0
        for entry in reversed(entries):
            while (
                entry.is_error
                and buffer.logs
                and (len(buffer) >= buffer.capacity or buffer.bytes + entry.size > room)
            ):
                buffer.bytes -= buffer.logs.popleft().size  # the oldest log goes first
                dropped += 1
            if len(buffer) >= buffer.capacity or buffer.bytes + entry.size > room:
                dropped += 1
                continue
            buffer.put_front(entry)
        ledger.in_flight = max(0, ledger.in_flight - len(entries))
        ledger.dropped["queue_full"] += dropped
