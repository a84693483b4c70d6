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
import multiprocessing.util
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from eventlog_handler import errors
from eventlog_handler.api import Client, compress
from eventlog_handler.buffer import Entry, EventBuffer
from eventlog_handler.events import MAX_AGE_SECONDS, MAX_EVENT_BYTES, encode_batch, fit
from eventlog_handler.jsonsafe import safe_str
from eventlog_handler.retry import Action, RetryPolicy
from eventlog_handler.settings import Settings, mask_secret

DROP_REASONS = ("queue_full", "rejected", "too_large", "expired", "shutdown")

#: Events this close to the service's 3-day window are dropped rather than sent.
EXPIRY_MARGIN_SECONDS = 60

#: Threads that send (workers, or an exiting thread draining the buffer): what they log is
#: never captured, so the HTTP library's own logs can't feed back into the engine.
_SENDER_THREADS: set[int] = set()


def is_sender_thread() -> bool:
    """Whether the calling thread is sending events for some engine."""
    return threading.get_ident() in _SENDER_THREADS


class _Part:
    """The events of one request in the making, with their JSON.

    Either ``bodies`` holds each event's JSON, or ``body`` the whole array's (the fast path);
    splitting a part encodes its events one by one.
    """

    __slots__ = ("_body", "bodies", "events", "shrunk")

    def __init__(
        self,
        events: list[dict[str, Any]],
        bodies: list[bytes],
        shrunk: bool = False,
        body: bytes | None = None,
    ) -> None:
        self.events = events
        self.bodies = bodies
        self.shrunk = shrunk
        self._body = body

    def __len__(self) -> int:
        return len(self.events)

    def halves(self) -> tuple[_Part, _Part]:
        if len(self.bodies) != len(self.events):
            fitted = [fit(event) for event in self.events]
            self.events = [pair[0] for pair in fitted]
            self.bodies = [pair[1] for pair in fitted]
        mid = len(self.events) // 2
        return (
            _Part(self.events[:mid], self.bodies[:mid]),
            _Part(self.events[mid:], self.bodies[mid:]),
        )

    def body(self) -> bytes:
        if self._body is None:
            self._body = b"[" + b",".join(self.bodies) + b"]"
        return self._body


class Engine:
    """The queue, the worker, batching, retries, flush/close, exit and fork handling."""

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
        self._reset_process_state()

    def __repr__(self) -> str:
        return (
            f"<Engine {self.settings.server_url} key={mask_secret(self.settings.api_key)} "
            f"queued={len(self._buffer)}>"
        )

    # -- state of this process ----------------------------------------------------------------

    def _reset_process_state(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._buffer = EventBuffer(self.settings.queue_size)
        self._yield_above = max(self.settings.batch_size, self.settings.queue_size // 10)
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
                ):
                    self._changed.notify_all()
                if self._worker is None:
                    self._start_worker()
                backlog = len(self._buffer) > self._yield_above and not self._retrying
            if backlog:
                # A burst is outrunning the worker while the service accepts events: give the
                # worker the interpreter now rather than at the next forced switch (5 ms
                # later), so it keeps up instead of the buffer overflowing. This waits for no
                # I/O: only for the worker's turn on the CPU.
                time.sleep(0)
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
                batch = self._next_batch()
                if batch is None:
                    return
                self._deliver(batch)
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
        """Wait until a batch is due and take it; ``None`` when the worker should stop."""
        settings = self.settings
        with self._lock:
            while True:
                if self._finished or self._pid != os.getpid():
                    return None
                buffer = self._buffer
                if not buffer:
                    self._changed.notify_all()  # idle: wake flush() waiters
                    if self._stop_worker:
                        self._worker = None
                        return None
                    self._changed.wait(timeout=60.0)
                    continue
                now = time.monotonic()
                if self._closing or self._flushing or len(buffer) >= settings.batch_size:
                    due = now
                else:
                    oldest_error, oldest_log = buffer.oldest()
                    due = float("inf")
                    if oldest_error is not None:
                        due = oldest_error.enqueued + settings.error_delay
                    if oldest_log is not None:
                        due = min(due, oldest_log.enqueued + settings.flush_interval)
                if due <= now:
                    batch = buffer.take(settings.batch_size)
                    self._in_flight += len(batch)
                    return batch
                self._changed.wait(timeout=due - now)

    def _client_for(self, timeout: float | None = None) -> Client:
        if timeout is not None:
            return self._client_factory(self.settings, timeout)
        if self._client is None:
            self._client = self._client_factory(self.settings, None)
        return self._client

    def _deliver(self, batch: list[Entry], client: Client | None = None) -> None:
        """Send ``batch`` until every event in it is delivered or dropped (or time is up)."""
        oldest_allowed = time.time() - MAX_AGE_SECONDS + EXPIRY_MARGIN_SECONDS
        fresh = [entry.event for entry in batch if entry.created >= oldest_allowed]
        if len(fresh) < len(batch):
            self._settle(len(batch) - len(fresh), "expired")
        parts = deque(self._encode(fresh))
        client = client or self._client_for()
        attempt = 0
        while parts:
            if self._finished:
                return
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
                self._last_error = f"{decision.reason}: {safe_str(error)}"
                if decision.action in (Action.RETRY, Action.REFUSED):
                    if decision.action is Action.REFUSED:
                        self._say_refused(error)
                    with self._lock:
                        self._retries += 1
                    attempt += 1
                    self._retrying = True
                    if not self._pause(decision.delay):
                        return
                elif decision.action is Action.SPLIT:
                    parts.popleft()
                    parts.extendleft(reversed(part.halves()))
                elif decision.action is Action.SHRINK and not part.shrunk:
                    parts[0] = self._shrunk(part)
                else:
                    parts.popleft()
                    reason = "rejected" if decision.action is Action.DROP else "too_large"
                    self._settle(len(part), reason)
                continue
            except Exception as exc:  # pragma: no cover - a bug must not lose the batch silently
                parts.popleft()
                self._last_error = f"unexpected: {type(exc).__name__}: {safe_str(exc)}"
                self._settle(len(part), "rejected")
                continue
            parts.popleft()
            attempt = 0
            self._refused_said = self._retrying = False
            with self._lock:
                self._batches += 1
                self._bytes_sent += result.bytes_sent
            self._settle(len(part), None)

    def _encode(self, events: list[dict[str, Any]]) -> list[_Part]:
        """The events as request parts, each under the raw size limit.

        The common case (a batch well under the limits) is one ``json.dumps`` of the whole list,
        more than twice as fast as encoding events one by one; only a batch that is too big is
        encoded event by event, shrinking any single event over :data:`MAX_EVENT_BYTES`.
        """
        if not events:
            return []
        body = encode_batch(events)
        if len(body) <= min(self.settings.max_raw_batch_bytes, MAX_EVENT_BYTES):
            return [_Part(events, [], body=body)]
        fitted = [fit(event) for event in events]
        return list(
            self._split_by_raw_size([pair[0] for pair in fitted], [pair[1] for pair in fitted])
        )

    def _split_by_raw_size(
        self, events: list[dict[str, Any]], bodies: list[bytes]
    ) -> Iterator[_Part]:
        limit = self.settings.max_raw_batch_bytes
        start, size = 0, 2
        for index, body in enumerate(bodies):
            if index > start and size + len(body) + 1 > limit:
                yield _Part(events[start:index], bodies[start:index])
                start, size = index, 2
            size += len(body) + 1
        if start < len(bodies):
            yield _Part(events[start:], bodies[start:])

    @staticmethod
    def _shrunk(part: _Part) -> _Part:
        body = part.body()
        event, smaller = fit(part.events[0], max(2_000, min(len(body) // 4, 32_000)))
        return _Part([event], [smaller], shrunk=True)

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

    def _pause(self, delay: float) -> bool:
        """Wait ``delay`` seconds before a retry; ``False`` when the engine must stop sending.

        The pause ends early when the exit flush begins (one more try is worth it then), and
        never runs past the exit deadline.
        """
        with self._lock:
            was_closing = self._closing
            end = time.monotonic() + delay
            if self._deadline is not None:
                end = min(end, self._deadline)
            while not self._finished:
                if self._closing and not was_closing:
                    return True
                remaining = end - time.monotonic()
                if remaining <= 0:
                    break
                self._changed.wait(timeout=remaining)
            if self._finished:
                return False
            return self._deadline is None or time.monotonic() < self._deadline

    def _say_refused(self, error: errors.EventLogError) -> None:
        if self._refused_said:
            return
        self._refused_said = True
        status = getattr(error, "status", "?")
        _say(
            f"eventlog_handler: {self.settings.server_url} refused the API key "
            f"{mask_secret(self.settings.api_key)} ({status}: {safe_str(error)}). Events are kept "
            f"(up to {self.settings.queue_size}) and retried every "
            f"{self.policy.refused_delay:g} s or more; check EVENTLOG_API_KEY / api_key."
        )

    # -- flush, close, exit -------------------------------------------------------------------------

    def _idle(self) -> bool:
        return not self._buffer and self._in_flight == 0

    def flush(self, timeout: float = 5.0) -> bool:
        """Send what is pending now; wait at most ``timeout`` s. ``True`` when all was settled."""
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
        """The exit flush: send for at most ``timeout`` s, then give up. Returns events unsent.

        What could not be sent is counted as dropped (``shutdown``) and reported on stderr.
        After this the engine sends nothing more; events captured later are counted as dropped.
        """
        timeout = self.settings.shutdown_timeout if timeout is None else timeout
        deadline = time.monotonic() + max(0.0, timeout)
        try:
            self._check_pid()
            with self._lock:
                if self._finished:
                    return 0
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
            with self._lock:
                unsent = len(self._buffer) + self._in_flight
                self._dropped["shutdown"] += unsent
                self._buffer.clear()
                self._in_flight = 0
                self._finished = True
                self._changed.notify_all()
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
                    self._deliver(batch, self._client_for(timeout=remaining))
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
        retries, batches and bytes sent, and the last error."""
        self._check_pid()
        with self._lock:
            return {
                "captured": self._captured,
                "delivered": self._delivered,
                "dropped": dict(self._dropped),
                "dropped_total": sum(self._dropped.values()),
                "queued": len(self._buffer),
                "in_flight": self._in_flight,
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
