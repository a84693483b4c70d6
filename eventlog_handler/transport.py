"""The delivery engine: from "an event was captured" to "the service has it".

One :class:`Engine` per process per (server, key), shared by every handler and processor that
points there (:func:`get_engine`). The caller's thread only appends to a bounded buffer under a
short lock (no JSON, no gzip, no network, no I/O while holding it). A daemon worker, started on
first use, takes batches (errors first), encodes and gzips them, posts them and carries out the
:class:`~eventlog_handler.retry.RetryPolicy`'s decision on every failure.

Accounting: every captured event ends in exactly one outcome, ``delivered`` or ``dropped`` for
one reason (``queue_full``, ``rejected``, ``too_large``, ``expired``, ``shutdown``); until then it
is ``queued`` or ``in_flight``. :meth:`Engine.stats` shows them all, so that
``captured == delivered + sum(dropped) + queued + in_flight`` always holds.

Exit: an ``atexit`` hook gives every engine ``shutdown_timeout`` seconds to send what is
pending, then reports on stderr how many events could not be sent. When the worker can't run
(it was never started and threads can't start at interpreter shutdown), the exiting thread
sends. Fork: the child starts with an empty buffer, zeroed statistics, a new lock, session and
worker, and never sends its parent's events.
"""

from __future__ import annotations

import atexit
import math
import multiprocessing.util
import os
import sqlite3
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from eventlog_handler import errors
from eventlog_handler.api import Client, compress
from eventlog_handler.batches import Part, encode_parts
from eventlog_handler.buffer import Entry, EventBuffer
from eventlog_handler.events import MAX_AGE_SECONDS, fit
from eventlog_handler.jsonsafe import safe_str
from eventlog_handler.retry import Action, RetryPolicy
from eventlog_handler.settings import Settings, mask_secret
from eventlog_handler.spool import Spool, SpoolFile

DROP_REASONS = ("queue_full", "rejected", "too_large", "expired", "shutdown", "spool_full")

#: Events this close to the service's 3-day window are dropped rather than sent.
EXPIRY_MARGIN_SECONDS = 60

#: Disk bytes a spooled event takes per byte of its JSON (row, page and journal overhead).
_SPOOL_OVERHEAD = 1.4

#: Threads that send (workers, or an exiting thread draining the buffer): what they log is
#: never captured, so the HTTP library's own logs can't feed back into the engine.
_SENDER_THREADS: set[int] = set()


#: Lets another thread take the interpreter: ``sched_yield`` costs about 1 us where
#: ``time.sleep(0)`` costs the kernel's timer slack (50 us or more) even when nobody waits.
_yield_interpreter: Callable[[], Any] = getattr(os, "sched_yield", lambda: time.sleep(0))


def is_sender_thread() -> bool:
    """Whether the calling thread is sending events for some engine."""
    return threading.get_ident() in _SENDER_THREADS


class Engine:
    """The queue, the worker, batching, retries, the spool, flush/close, exit and fork."""

    def __init__(
        self,
        settings: Settings,
        *,
        client_factory: Callable[[Settings, float | None], Client] | None = None,
    ) -> None:
        if not settings.api_key:
            raise ValueError("eventlog_handler: setting 'api_key' is missing")
        self.settings = settings
        self.policy = RetryPolicy(
            initial=settings.retry_initial,
            maximum=settings.max_backoff,
            refused_delay=min(60.0, settings.max_backoff),
        )
        self._client_factory = client_factory or _default_client
        self._spool: Spool | None = None
        self._reset_process_state()
        if settings.spool_path:
            with self._lock:  # replay what ended processes left in the spool, from the start
                self._start_worker()

    def __repr__(self) -> str:
        return (
            f"<Engine {self.settings.server_url} key={mask_secret(self.settings.api_key)} "
            f"queued={len(self._buffer)}>"
        )

    # -- state of this process ----------------------------------------------------------------

    def _reset_process_state(self) -> None:
        if self._spool is not None:  # a forked child: the parent's file stays the parent's
            self._spool.after_fork()
        self._pid = os.getpid()
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._buffer = EventBuffer(self.settings.queue_size)
        self._yield_above = max(self.settings.batch_size, self.settings.queue_size // 4)
        self._retrying = False  # the last attempt failed: a backoff is under way
        self._in_flight = 0
        self._captured = 0
        self._delivered = 0
        self._dropped = dict.fromkeys(DROP_REASONS, 0)
        self._retries = 0
        self._batches = 0
        self._bytes_sent = 0
        self._last_error: str | None = None
        self._refused_said = False
        self._worker: threading.Thread | None = None
        self._worker_ident: int | None = None
        self._stop_worker = False
        self._flushing = 0
        self._closing = False  # at exit: send everything now
        self._finished = False  # after exit: nothing more is sent or counted
        self._deadline: float | None = None
        self._client: Client | None = None
        self._current: deque[Part] = deque()  # in-memory parts being delivered
        # The disk spool (see eventlog_handler.spool): this process's events on disk, the
        # files of ended processes being replayed, and when to look for more.
        if self.settings.spool_path and self._spool is None:
            self._spool = Spool(self.settings.spool_path, self.settings.spool_max_bytes)
        self._spooled = 0
        self._replayed = {"delivered": 0, "dropped": 0}
        self._orphans: list[SpoolFile] = []
        self._next_scan = 0.0
        self._spool_due = math.inf

    def _check_pid(self) -> None:
        if self._pid != os.getpid():
            self._reset_process_state()

    # -- the caller's side ----------------------------------------------------------------------

    def enqueue(self, event: dict[str, Any], created: float | None = None) -> bool:
        """Queue a JSON-ready event; ``created`` is its POSIX time (default: now).

        O(1) and never raises. Returns whether the event was kept (``False`` when it was dropped
        at once, which is counted, or when the calling thread is a sender, which is not).
        """
        try:
            if self._pid != os.getpid():
                self._check_pid()
            if threading.get_ident() in _SENDER_THREADS:
                return False
            is_error = event.get("type") == "error"
            entry = Entry(event, time.time() if created is None else created, time.monotonic())
            with self._lock:
                self._captured += 1
                if self._finished:
                    self._dropped["shutdown"] += 1
                    return False
                evicted = self._buffer.put(entry, is_error)
                if evicted is not None:
                    self._dropped["queue_full"] += 1
                if (
                    is_error
                    or self._flushing
                    or len(self._buffer) >= self.settings.batch_size
                    or self._closing
                    or self.settings.spool_all
                ):
                    self._changed.notify_all()
                if self._worker is None:
                    self._start_worker()
                backlog = len(self._buffer) > self._yield_above and (
                    not self._retrying or self._spool is not None
                )
            if backlog:
                # A burst is outrunning the worker while it can take events (the service
                # accepts them, or the spool does): give the worker the interpreter now rather
                # than at the next forced switch (5 ms later), so it keeps up instead of the
                # buffer overflowing. This waits for no I/O: only for the worker's turn on the
                # CPU.
                _yield_interpreter()
            return evicted is not entry
        except Exception:  # pragma: no cover - a log call must never raise
            return False

    def _start_worker(self) -> bool:
        """Start the worker (the lock is held). ``False`` when threads can't start any more."""
        if self._finished:
            return False
        worker = threading.Thread(target=self._run, name="eventlog-handler-worker", daemon=True)
        self._stop_worker = False
        try:
            worker.start()
        except RuntimeError:  # "can't create new thread at interpreter shutdown"
            self._worker = None
            return False
        self._worker = worker
        return True

    # -- the worker -----------------------------------------------------------------------------

    def _run(self) -> None:
        ident = threading.get_ident()
        self._worker_ident = ident
        _SENDER_THREADS.add(ident)
        try:
            while True:
                if self._spool is not None:
                    self._spool_work()
                batch = self._next_batch()
                if batch is None:
                    return
                if batch and not (
                    self._spool is not None and self._should_spill() and self._spill(batch)
                ):
                    self._deliver_entries(batch)
        except BaseException as exc:  # pragma: no cover - the worker must not die silently
            self._last_error = f"worker failed: {type(exc).__name__}: {safe_str(exc)}"
            _say(f"eventlog_handler: the delivery worker stopped: {self._last_error}")
        finally:
            _SENDER_THREADS.discard(ident)
            with self._lock:
                if self._worker is not None and self._worker.ident == ident:
                    self._worker = None
                self._changed.notify_all()

    def _next_batch(self) -> list[Entry] | None:
        """Wait until a batch (or spool work) is due and take it; ``None`` to stop the worker.

        An empty list means: nothing from memory, but the spool has work due.
        """
        settings = self.settings
        with self._lock:
            while True:
                if self._finished or self._pid != os.getpid():
                    return None
                now = time.monotonic()
                spool_due = self._spool_due_at(now)
                buffer = self._buffer
                if not buffer:
                    if spool_due <= now:
                        return []
                    self._changed.notify_all()  # idle: wake flush() waiters
                    if self._stop_worker and not self._spooled:
                        self._worker = None
                        return None
                    self._changed.wait(timeout=min(60.0, spool_due - now))
                    continue
                due = self._buffer_due(now)
                if due <= now:
                    batch = buffer.take(settings.batch_size)
                    self._in_flight += len(batch)
                    return batch
                if spool_due <= now:
                    return []
                self._changed.wait(timeout=min(due, spool_due) - now)

    def _buffer_due(self, now: float) -> float:
        """When the events in memory are due to be taken (the lock is held)."""
        settings, buffer = self.settings, self._buffer
        if not buffer:
            return math.inf
        if (
            self._closing
            or self._flushing
            or len(buffer) >= settings.batch_size
            or settings.spool_all
        ):
            return now
        oldest_error, oldest_log = buffer.oldest()
        due = math.inf
        if oldest_error is not None:
            due = oldest_error.enqueued + settings.error_delay
        if oldest_log is not None:
            due = min(due, oldest_log.enqueued + settings.flush_interval)
        return due

    def _client_for(self, timeout: float | None = None) -> Client:
        if timeout is not None:
            return self._client_factory(self.settings, timeout)
        if self._client is None:
            self._client = self._client_factory(self.settings, None)
        return self._client

    def _deliver_entries(self, batch: list[Entry], client: Client | None = None) -> bool:
        """Send in-memory events (taken from the buffer, now in flight)."""
        oldest_allowed = time.time() - MAX_AGE_SECONDS + EXPIRY_MARGIN_SECONDS
        fresh = [entry for entry in batch if entry.created >= oldest_allowed]
        if len(fresh) < len(batch):
            self._settle(len(batch) - len(fresh), "expired")
        parts = encode_parts(
            [entry.event for entry in fresh],
            [entry.created for entry in fresh],
            self.settings.max_raw_batch_bytes,
        )
        self._current = deque(parts)
        try:
            return self._deliver(self._current, client)
        finally:
            self._current = deque()

    def _deliver(self, parts: deque[Part], client: Client | None = None) -> bool:
        """Send ``parts`` until each is delivered or dropped; ``False`` when time ran out or the
        events went to the spool to wait for the service."""
        client = client or self._client_for()
        attempt = 0
        while parts:
            if self._finished:
                return False
            part = parts[0]
            payload, gzipped = compress(part.body())
            if len(payload) > self.settings.max_batch_bytes and len(part) > 1:
                parts.popleft()
                parts.extendleft(reversed(part.halves()))
                continue
            try:
                result = client.post_payload(payload, gzipped, len(part))
            except errors.EventLogError as error:
                decision = self.policy.decide(error, attempt, len(part))
                self._last_error = self._redact(f"{decision.reason}: {safe_str(error)}")
                if decision.action in (Action.RETRY, Action.REFUSED):
                    if decision.action is Action.REFUSED:
                        self._say_refused(error)
                    with self._lock:
                        self._retries += 1
                    attempt += 1
                    self._retrying = True
                    if self._spool is not None and part.origin is None and self._spill_parts(parts):
                        self._pause(decision.delay)
                        return False
                    if not self._pause(decision.delay):
                        return False
                elif decision.action is Action.SPLIT:
                    parts.popleft()
                    parts.extendleft(reversed(part.halves()))
                elif decision.action is Action.SHRINK and not part.shrunk:
                    parts[0] = part.shrunk_copy()
                else:
                    parts.popleft()
                    reason = "rejected" if decision.action is Action.DROP else "too_large"
                    self._settle_part(part, reason)
                continue
            except Exception as exc:  # pragma: no cover - a bug must not lose the batch silently
                parts.popleft()
                self._last_error = f"unexpected: {type(exc).__name__}: {safe_str(exc)}"
                self._settle_part(part, "rejected")
                continue
            parts.popleft()
            attempt = 0
            self._refused_said = self._retrying = False
            with self._lock:
                self._batches += 1
                self._bytes_sent += result.bytes_sent
            self._settle_part(part, None)
        return True

    def _settle(self, count: int, reason: str | None) -> None:
        """Record the outcome of ``count`` in-flight events (``None``: delivered)."""
        with self._lock:
            if self._finished:
                return
            if reason is None:
                self._delivered += count
            else:
                self._dropped[reason] += count
            self._in_flight = max(0, self._in_flight - count)
            if self._in_flight == 0:
                self._changed.notify_all()

    def _settle_part(self, part: Part, reason: str | None) -> None:
        """Record the outcome of a part: in flight from memory, or rows of a spool file."""
        if part.origin is None:
            self._settle(len(part), reason)
            return
        deleted = part.origin.delete(part.rows)
        with self._lock:
            if self._finished:
                return
            if self._spool is not None and part.origin is self._spool.own_file:
                self._spooled = max(0, self._spooled - deleted)
                if reason is None:
                    self._delivered += deleted
                else:
                    self._dropped[reason] += deleted
            else:
                self._replayed["delivered" if reason is None else "dropped"] += deleted
            self._changed.notify_all()

    def _pause(self, delay: float) -> bool:
        """Wait ``delay`` seconds before a retry; ``False`` when the engine must stop sending.

        The pause ends early when the exit flush begins (one more try is worth it then), and
        never runs past the exit deadline. With a spool, events that pile up meanwhile go to
        disk rather than waiting in memory.
        """
        was_closing = self._closing
        end = time.monotonic() + delay
        while True:
            with self._lock:
                if self._deadline is not None:
                    end = min(end, self._deadline)
                spill: list[Entry] = []
                while not self._finished:
                    if self._closing and not was_closing:
                        return True
                    remaining = end - time.monotonic()
                    if remaining <= 0:
                        break
                    if self._spool is not None:
                        due = self._buffer_due(time.monotonic())
                        if due <= time.monotonic():
                            spill = self._buffer.take(len(self._buffer))
                            self._in_flight += len(spill)
                            break
                        remaining = min(remaining, due - time.monotonic())
                    self._changed.wait(timeout=max(0.0, remaining))
                if not spill:
                    if self._finished:
                        return False
                    return self._deadline is None or time.monotonic() < self._deadline
            if not self._spill(spill):
                self._deliver_entries(spill)

    def _redact(self, text: str) -> str:
        """``text`` (which may quote the server) without the API key in it."""
        key = self.settings.api_key
        return text.replace(key, mask_secret(key)) if key else text

    def _say_refused(self, error: errors.EventLogError) -> None:
        if self._refused_said:
            return
        self._refused_said = True
        status = getattr(error, "status", "?")
        _say(
            f"eventlog_handler: {self.settings.server_url} refused the API key "
            f"{mask_secret(self.settings.api_key)} ({status}: {self._redact(safe_str(error))}). "
            f"Events are kept "
            f"(up to {self.settings.queue_size}) and retried every "
            f"{self.policy.refused_delay:g} s or more; check EVENTLOG_API_KEY / api_key."
        )

    # -- the spool ------------------------------------------------------------------------------

    def _should_spill(self) -> bool:
        """Whether in-memory events go to disk now rather than to the service."""
        return (
            self.settings.spool_all
            or self._retrying
            or len(self._buffer) > self.settings.queue_size // 2
        )

    def _spool_due_at(self, now: float) -> float:
        """When the spool next has work: replaying other files, or sending our own rows."""
        if self._spool is None:
            return math.inf
        due = self._next_scan
        if self._orphans and not self._retrying:
            due = now
        if self._spooled:
            due = min(due, now if (self._flushing or self._closing) else self._spool_due)
        return due

    def _spool_work(self) -> None:
        """Look for files of ended processes now and then; send spooled events when due."""
        assert self._spool is not None
        now = time.monotonic()
        if now >= self._next_scan:
            self._next_scan = now + self.settings.spool_scan_interval
            try:
                self._orphans.extend(self._spool.claim_orphans())
            except (OSError, sqlite3.Error) as exc:
                self._last_error = f"spool: {type(exc).__name__}: {safe_str(exc)}"
        for orphan in list(self._orphans):
            if not self._send_file(orphan):
                return
            orphan.close()
            self._orphans.remove(orphan)
        own = self._spool.own_file
        due = own is not None and self._spooled and self._spool_due_at(now) <= now
        if due and own is not None and self._send_file(own):
            with self._lock:
                self._spool_due = math.inf

    def _send_file(self, file: SpoolFile) -> bool:
        """Send a spool file's events, oldest first; ``False`` if the service failed."""
        oldest_allowed = time.time() - MAX_AGE_SECONDS + EXPIRY_MARGIN_SECONDS
        while file.count > 0 and not self._finished:
            try:
                rows = file.oldest(self.settings.batch_size, self.settings.max_raw_batch_bytes)
            except sqlite3.Error as exc:
                self._last_error = f"spool: {type(exc).__name__}: {safe_str(exc)}"
                return False
            if not rows:
                return True
            expired = [row for row in rows if row.created < oldest_allowed]
            if expired:
                self._settle_part(Part.from_rows(file, expired), "expired")
            fresh = [row for row in rows if row.created >= oldest_allowed]
            if not fresh:
                continue
            file.reserved.update(row.id for row in fresh)
            try:
                sent = self._deliver(deque([Part.from_rows(file, fresh)]))
            finally:
                file.reserved.difference_update(row.id for row in fresh)
            if not sent:
                with self._lock:
                    self._spool_due = time.monotonic()
                return False
        return True

    def _spill(self, batch: list[Entry]) -> bool:
        """Move in-flight events from memory to this process's spool file."""
        fitted = [fit(entry.event) for entry in batch]
        part = Part(
            [pair[0] for pair in fitted],
            [pair[1] for pair in fitted],
            [entry.created for entry in batch],
        )
        return self._spill_parts(deque([part]))

    def _spill_parts(self, parts: deque[Part]) -> bool:
        """Write in-memory parts to the spool; they stop being in flight and become spooled."""
        assert self._spool is not None
        rows: list[tuple[float, bool, bytes]] = []
        has_error = False
        for part in parts:
            bodies = part.per_event()
            for index, body in enumerate(bodies):
                is_error = part.events[index].get("type") == "error" if part.events else False
                has_error = has_error or is_error
                rows.append((part.created[index], is_error, body))
        try:
            own = self._spool.own()
            rows = self._bound_spool(rows)  # events it drops are settled as spool_full
            written = own.append(rows)
        except (OSError, sqlite3.Error) as exc:
            self._last_error = f"spool: {type(exc).__name__}: {safe_str(exc)}"
            return False
        parts.clear()
        now = time.monotonic()
        with self._lock:
            self._in_flight = max(0, self._in_flight - written)
            self._spooled += written
            delay = self.settings.error_delay if has_error else self.settings.flush_interval
            self._spool_due = min(self._spool_due, now + delay)
            self._changed.notify_all()
        try:
            self._bound_disk(own)
        except (OSError, sqlite3.Error) as exc:
            self._last_error = f"spool: {type(exc).__name__}: {safe_str(exc)}"
        return True

    def _bound_spool(
        self, rows: list[tuple[float, bool, bytes]]
    ) -> list[tuple[float, bool, bytes]]:
        """Make room for ``rows`` within ``spool_max_bytes`` for the whole directory, and drop
        rows past the 3-day window. Logs go first, the oldest first (those on disk, then the
        incoming ones); errors only when there is no log left. Returns the rows to write."""
        assert self._spool is not None
        own = self._spool.own()
        limit = self.settings.spool_max_bytes
        dropped = 0
        try:
            expired = own.expire(time.time() - MAX_AGE_SECONDS + EXPIRY_MARGIN_SECONDS)
            others = max(0, self._spool.disk_bytes() - own.disk_bytes())
            budget = int((limit - others) / _SPOOL_OVERHEAD)  # bytes of JSON that fit
            incoming = sum(len(row[2]) for row in rows)
            evicted = (0, 0)
            if own.bytes + incoming > budget:
                logs_first = sorted(rows, key=lambda row: row[1])  # incoming logs, then errors
                room = budget - own.bytes
                if room < incoming:  # first, old logs on disk
                    evicted = own.evict_oldest(max(0, budget - incoming), errors=False)
                    room = budget - own.bytes
                while logs_first and incoming > room and not logs_first[0][1]:
                    incoming -= len(logs_first.pop(0)[2])  # then the oldest incoming logs
                    dropped += 1
                if incoming > room:  # nothing but errors left: the oldest go
                    more = own.evict_oldest(max(0, budget - incoming), errors=True)
                    evicted = (evicted[0] + more[0], evicted[1] + more[1])
                kept = set(map(id, logs_first))
                rows = [row for row in rows if id(row) in kept]
        except (OSError, sqlite3.Error) as exc:
            self._last_error = f"spool: {type(exc).__name__}: {safe_str(exc)}"
            return rows
        with self._lock:
            self._spooled = max(0, self._spooled - expired - sum(evicted))
            self._dropped["expired"] += expired
            self._dropped["spool_full"] += sum(evicted) + dropped
            self._in_flight = max(0, self._in_flight - dropped)
        return rows

    def _bound_disk(self, own: SpoolFile) -> None:
        """After a write: if the files really take more than the bound, evict old logs in
        proportion and give the space back to the file system."""
        assert self._spool is not None
        limit = self.settings.spool_max_bytes
        total = self._spool.disk_bytes()
        if total <= limit:
            return
        others = total - own.disk_bytes()
        share = max(0.0, (limit - others) / max(1, total - others))
        evicted = own.evict_oldest(int(own.bytes * share * 0.85))
        own.compact()
        with self._lock:
            self._spooled = max(0, self._spooled - sum(evicted))
            self._dropped["spool_full"] += sum(evicted)

    # -- flush, close, exit -------------------------------------------------------------------------

    def _idle(self) -> bool:
        return not self._buffer and self._in_flight == 0 and self._spooled == 0

    def flush(self, timeout: float = 5.0) -> bool:
        """Send what is pending now; wait at most ``timeout`` s. ``True`` when all was sent."""
        try:
            self._check_pid()
            if threading.get_ident() in _SENDER_THREADS:
                return False
            deadline = time.monotonic() + max(0.0, timeout)
            with self._lock:
                if self._idle():
                    return True
                worker_usable = self._worker is not None or self._start_worker()
            if not worker_usable:
                return self._drain_here(deadline)
            with self._lock:
                self._flushing += 1
                self._changed.notify_all()
                try:
                    while not self._idle() and not self._finished:
                        remaining = deadline - time.monotonic()
                        if remaining <= 0 or self._worker is None:
                            break
                        self._changed.wait(timeout=remaining)
                    return self._idle()
                finally:
                    self._flushing -= 1
        except Exception:  # pragma: no cover - flush must return
            return False

    def close(self, timeout: float = 5.0) -> bool:
        """Flush, then stop the worker; a later event starts a new one. Returns by the deadline."""
        deadline = time.monotonic() + max(0.0, timeout)
        done = self.flush(timeout)
        with self._lock:
            self._stop_worker = True
            self._changed.notify_all()
            worker = self._worker
        if worker is not None and worker is not threading.current_thread():
            worker.join(max(0.0, deadline - time.monotonic()))
        return done

    def shutdown(self, timeout: float | None = None) -> int:
        """The exit flush: send for at most ``timeout`` s, then stop. Returns events unsent.

        With a spool, what could not be sent is written to disk for the next start (and, while
        the service is failing, at once rather than after the timeout). Without one, it is
        counted as dropped (``shutdown``). Either way stderr says how many. After this the
        engine sends nothing more; events captured later are counted as dropped.
        """
        timeout = self.settings.shutdown_timeout if timeout is None else timeout
        deadline = time.monotonic() + max(0.0, timeout)
        try:
            self._check_pid()
            with self._lock:
                if self._finished:
                    return 0
                if self._spool is not None and self._retrying:
                    deadline = time.monotonic()  # the service is failing: go to disk now
                self._closing = True
                self._deadline = deadline
                self._changed.notify_all()
                worker_usable = self._worker is not None or (
                    bool(self._buffer) and self._start_worker()
                )
                if worker_usable and self._worker is not threading.current_thread():
                    while not self._idle() and self._worker is not None:
                        remaining = deadline - time.monotonic()
                        if remaining <= 0:
                            break
                        self._changed.wait(timeout=remaining)
            if not worker_usable:
                self._drain_here(deadline)
            kept = self._keep_at_exit()
            with self._lock:
                unsent = len(self._buffer) + self._in_flight
                self._dropped["shutdown"] += unsent
                self._buffer.clear()
                self._in_flight = 0
                self._finished = True
                self._changed.notify_all()
            self._close_spool()
            if kept:
                assert self._spool is not None
                _say(
                    f"eventlog_handler: {kept} event(s) kept in the spool "
                    f"{self._spool.directory} to send at the next start"
                )
            if unsent:
                detail = f" (last error: {self._last_error})" if self._last_error else ""
                _say(
                    f"eventlog_handler: {unsent} event(s) could not be sent to "
                    f"{self.settings.server_url} before exit{detail}"
                )
            return unsent
        except Exception as exc:  # pragma: no cover - the exit path must never raise
            _say(f"eventlog_handler: exit flush failed: {type(exc).__name__}: {safe_str(exc)}")
            return 0

    def _keep_at_exit(self) -> int:
        """Write what is still pending in memory to the spool; return how many are on disk."""
        if self._spool is None:
            return 0
        with self._lock:
            entries = self._buffer.take(len(self._buffer))
            self._in_flight += len(entries)
            current = deque(self._current)
        if entries:
            self._spill(entries)
        if current:
            self._spill_parts(current)
        with self._lock:
            return self._spooled

    def _close_spool(self) -> None:
        if self._spool is None:
            return
        for orphan in self._orphans:
            orphan.close()
        self._orphans = []
        self._spool.close()

    def _drain_here(self, deadline: float) -> bool:
        """Send from the calling thread (the worker can't run); stop at ``deadline``."""
        ident = threading.get_ident()
        _SENDER_THREADS.add(ident)
        try:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0.05:
                    break
                with self._lock:
                    if self._finished or self._in_flight:
                        break
                    batch = self._buffer.take(self.settings.batch_size)
                    if not batch:
                        break
                    self._in_flight += len(batch)
                    previous, self._deadline = self._deadline, deadline
                try:
                    self._deliver_entries(batch, self._client_for(timeout=remaining))
                finally:
                    with self._lock:
                        self._deadline = previous
                if self._in_flight:
                    break
        finally:
            _SENDER_THREADS.discard(ident)
        with self._lock:
            return self._idle()

    # -- statistics -------------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Counts of this process: captured, delivered, dropped by reason, queued, in flight,
        spooled (on disk, waiting), retries, batches and bytes sent, the last error, and the
        events of ended processes replayed from the spool (not part of ``captured``)."""
        self._check_pid()
        with self._lock:
            own = self._spool.own_file if self._spool is not None else None
            return {
                "captured": self._captured,
                "delivered": self._delivered,
                "dropped": dict(self._dropped),
                "dropped_total": sum(self._dropped.values()),
                "queued": len(self._buffer),
                "in_flight": self._in_flight,
                "spooled": self._spooled,
                "spool_bytes": own.bytes if own is not None else 0,
                "replayed": dict(self._replayed),
                "retries": self._retries,
                "batches": self._batches,
                "bytes_sent": self._bytes_sent,
                "last_error": self._last_error,
                "worker_alive": self._worker is not None and self._worker.is_alive(),
            }

    def is_worker_thread(self) -> bool:
        """Whether the calling thread is this engine's worker."""
        return self._worker_ident == threading.get_ident() and self._worker is not None


def _default_client(settings: Settings, timeout: float | None) -> Client:
    total = settings.timeout if timeout is None else max(0.05, min(timeout, settings.timeout))
    assert settings.api_key is not None
    return Client(
        settings.server_url,
        settings.api_key,
        timeout=(min(total, 5.0), total),
        verify=settings.verify,
    )


def _say(message: str) -> None:
    """Write one line to stderr (the package's own diagnostics; never raises)."""
    try:
        stream = sys.stderr
        if stream is not None:
            stream.write(message + "\n")
            stream.flush()
    except Exception:  # pragma: no cover - stderr closed at exit
        pass


# -- one engine per process per (server, key) -------------------------------------------------

_ENGINES: dict[tuple[str, str], Engine] = {}
_REGISTRY_LOCK = threading.Lock()


def get_engine(settings: Settings) -> Engine:
    """The engine of this process for ``settings``' server and key (created on first use).

    Later settings for the same server and key share the first engine and its options.
    """
    key = settings.engine_key
    engine = _ENGINES.get(key)
    if engine is not None:
        return engine
    with _REGISTRY_LOCK:
        engine = _ENGINES.get(key)
        if engine is None:
            engine = _ENGINES[key] = Engine(settings)
        return engine


def engines() -> list[Engine]:
    """Every engine of this process."""
    return list(_ENGINES.values())


def shutdown_all(timeout: float | None = None) -> int:
    """Run every engine's exit flush within one deadline; return the events left unsent."""
    current = engines()
    if not current:
        return 0
    if timeout is None:
        timeout = max(engine.settings.shutdown_timeout for engine in current)
    deadline = time.monotonic() + timeout
    unsent = 0
    for engine in current:
        unsent += engine.shutdown(max(0.0, deadline - time.monotonic()))
    return unsent


def remove_engines(server_url: str, timeout: float = 1.0) -> int:
    """Shut down and forget every engine that sends to ``server_url``; return events unsent."""
    with _REGISTRY_LOCK:
        keys = [key for key in _ENGINES if key[0] == server_url.rstrip("/")]
        removed = [_ENGINES.pop(key) for key in keys]
    return sum(engine.shutdown(timeout) for engine in removed)


def _forget_engines_for_tests() -> None:
    """Drop every engine without sending (tests only)."""
    with _REGISTRY_LOCK:
        for engine in _ENGINES.values():
            with engine._lock:
                engine._finished = True
                engine._changed.notify_all()
        _ENGINES.clear()


def _after_fork_in_child() -> None:
    global _REGISTRY_LOCK
    _REGISTRY_LOCK = threading.Lock()
    _SENDER_THREADS.clear()
    for engine in _ENGINES.values():
        engine._reset_process_state()


class _ProcessHooks:
    """Anchor of the multiprocessing after-fork registration (it is kept by weak reference)."""

    @staticmethod
    def in_child(_anchor: object) -> None:
        # A multiprocessing child started by fork ends with os._exit(), which skips atexit,
        # but runs multiprocessing's own finalizers: flush there.
        multiprocessing.util.Finalize(None, shutdown_all, exitpriority=100)


_PROCESS_HOOKS = _ProcessHooks()

atexit.register(shutdown_all)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
multiprocessing.util.register_after_fork(_PROCESS_HOOKS, _ProcessHooks.in_child)
