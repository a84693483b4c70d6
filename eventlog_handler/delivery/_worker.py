"""The delivery worker: a daemon thread that waits until something is due, takes it and sends it.

What is due, earliest first:

- the service's settings, once at start and whenever an answer says there is a newer version,
  fetched on a short-lived thread of their own, so that a slow answer never holds back events
  or the exit flush (the first batch waits for the first settings at most
  :data:`FIRST_SETTINGS_WAIT` seconds, less in a burst, and not at all once the program exits);
- a batch from memory: a whole batch is ready, an error has waited ``error_delay``, a log has
  waited ``flush_interval``, or someone flushes or the program exits;
- a roll-up whose window ended (:mod:`eventlog_handler.delivery._rollup`);
- spool work: rows of this process due for sending, files of ended processes to replay;
- errands (:mod:`eventlog_handler.delivery._errands`): user descriptions, session heartbeats,
  made after the batch taken with them, on a short-lived thread of their own (one at a time):
  a slow answer to one never holds back events (an error still leaves within
  ``error_delay``).

When nothing is due the worker sleeps on the engine's condition with no timeout at all (it
costs nothing while the program is idle), and the logging thread wakes it when the event it
adds is due before the worker would wake by itself (:mod:`eventlog_handler.delivery._intake`). A taken
batch goes through the :class:`~eventlog_handler.delivery._pipeline.Pipeline`, then to disk (when the
spool should take it) or to :class:`~eventlog_handler.delivery._delivery.Delivery`.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Any

from eventlog_handler.api._client import Client
from eventlog_handler.delivery._buffer import Entry
from eventlog_handler.delivery._delivery import Delivery
from eventlog_handler.delivery._errands import Errands
from eventlog_handler.delivery._intake import BUSY, Intake
from eventlog_handler.delivery._ledger import Ledger
from eventlog_handler.delivery._pipeline import Pipeline
from eventlog_handler.delivery._rollup import Rollup
from eventlog_handler.delivery._server_settings import CONFIG_TIMEOUT, SettingsFetch
from eventlog_handler.delivery._sigterm import block_signals
from eventlog_handler.delivery._spooling import SpoolTraffic
from eventlog_handler.delivery._state import RunState
from eventlog_handler.delivery._stderr import say
from eventlog_handler.settings import Settings
from eventlog_handler.wire._jsonsafe import safe_str

#: Threads that send (workers, or an exiting thread draining the buffer): what they log is
#: never captured, so the HTTP library's own logs can't feed back into the engine.
SENDER_THREADS: set[int] = set()
#: Seconds the first batch waits for the service's first settings (their data exclusions and
#: filters) while they are being fetched; then it goes with the local settings alone.
FIRST_SETTINGS_WAIT = 1.0
#: ... and at most this long while logging threads wait for the worker (a burst at start:
#: held longer than the intake's PUSHBACK_WAIT, they would evict the oldest logs).
BURST_SETTINGS_WAIT = 0.3


def is_sender_thread() -> bool:
    """Whether the calling thread is sending events for some engine."""
    return threading.get_ident() in SENDER_THREADS


class Worker:
    """The worker thread of one engine in one process (see the module docstring)."""

    def __init__(
        self,
        settings: Settings,
        ledger: Ledger,
        intake: Intake,
        state: RunState,
        pipeline: Pipeline,
        rollup: Rollup,
        delivery: Delivery,
        spooling: SpoolTraffic | None,
        server_settings: SettingsFetch,
        client: Callable[[float | None], Client],
        same_process: Callable[[], bool],
        errands: Errands,
    ) -> None:
        self.settings = settings
        self.ledger = ledger
        self.intake = intake
        self.state = state
        self.pipeline = pipeline
        #: The pipeline's roll-up: what it holds is due at the end of its window.
        self.rollup = rollup
        self.delivery = delivery
        self.spooling = spooling
        self.server_settings = server_settings
        self.client = client
        #: ``False`` in a forked child for a worker made by the parent: it must stop.
        self.same_process = same_process
        self.errands = errands
        self.thread: threading.Thread | None = None
        self.ident: int | None = None
        #: Set by ``close()``: the worker ends once nothing is pending.
        self.stop = False
        #: The thread fetching the service's settings, and when it started (monotonic).
        self._fetching: threading.Thread | None = None
        self._fetch_started = 0.0
        #: Whether a thread is making errands (set and cleared with the lock held).
        self._errands_running = False

    def start(self) -> bool:
        """Start the thread (the lock is held). ``False`` when threads can't start any more."""
        intake = self.intake
        if intake.finished:
            return False
        thread = threading.Thread(target=self._run, name="eventlog-handler-worker", daemon=True)
        self.stop = False
        try:
            thread.start()
        except RuntimeError:  # "can't create new thread at interpreter shutdown"
            self.thread = None
            intake.worker_running = False
            return False
        self.thread = thread
        intake.worker_running = True
        return True

    def is_current(self) -> bool:
        return self.thread is not None and self.ident == threading.get_ident()

    # -- the loop -----------------------------------------------------------------------------

    def _run(self) -> None:
        block_signals()  # a program's signals go to its own threads (sigwait included)
        ledger = self.ledger
        ident = threading.get_ident()
        self.ident = ident
        SENDER_THREADS.add(ident)
        try:
            while not self.state.over(time.monotonic()):
                self._refresh_settings()
                if self.spooling is not None:
                    self.spooling.work(self.delivery)
                batch = self._next()
                if batch is None:
                    return
                if batch:
                    self._wait_for_first_settings()
                self._process(batch)
                if self.state.over(time.monotonic()):
                    return  # the exit path saves or counts what is left
                self._start_errands()
                ledger.in_flight_bytes = 0
                ledger.held_bytes = self.rollup.bytes
        except BaseException as exc:  # pragma: no cover - the worker must not die silently
            ledger.last_error = f"worker failed: {type(exc).__name__}: {safe_str(exc)}"
            say(f"eventlog_handler: the delivery worker stopped: {ledger.last_error}")
        finally:
            SENDER_THREADS.discard(ident)
            with ledger.lock:
                if self.thread is not None and self.thread.ident == ident:
                    self.thread = None
                    self.intake.worker_running = False
                ledger.changed.notify_all()

    def _refresh_settings(self) -> None:
        """Start fetching the service's settings when a fetch is wanted and none is under way."""
        if not self.server_settings.take():
            return
        thread = threading.Thread(
            target=self._fetch_on_own_thread, name="eventlog-handler-settings", daemon=True
        )
        try:
            thread.start()
        except RuntimeError:  # interpreter shutdown: the settings in force stay
            self.server_settings.fetching = False
            return
        self._fetching, self._fetch_started = thread, time.monotonic()

    def _fetch_on_own_thread(self) -> None:
        block_signals()
        ident = threading.get_ident()
        SENDER_THREADS.add(ident)  # what the HTTP library logs here is not captured
        try:
            self.server_settings.run(self._fetch_settings)
        except BaseException:  # pragma: no cover - run() handles every failure of the fetch
            pass
        finally:
            SENDER_THREADS.discard(ident)
            with self.ledger.lock:
                self.ledger.changed.notify_all()

    def _start_errands(self) -> None:
        """Start a thread making the errands due now, unless one is at it."""
        now = time.monotonic()
        with self.ledger.lock:
            if self._errands_running or self.errands.due_at(self.state.hurried) > now:
                return
            self._errands_running = True
        thread = threading.Thread(
            target=self._make_errands, args=(now,), name="eventlog-handler-errands", daemon=True
        )
        try:
            thread.start()
        except RuntimeError:  # interpreter shutdown: the exit path makes what is left
            with self.ledger.lock:
                self._errands_running = False

    def _make_errands(self, until: float) -> None:
        block_signals()
        ident = threading.get_ident()
        SENDER_THREADS.add(ident)  # what the HTTP library logs here is not captured
        made: list[Client] = []

        def client() -> Client:  # a client of its own, closed after
            if not made:
                made.append(self.client(self.settings.timeout))
            return made[0]

        try:
            self.errands.work(client, self.state.hurried, until)
        except BaseException:  # pragma: no cover - work() settles every failure of an errand
            pass
        finally:
            for each in made:
                each.close()
            SENDER_THREADS.discard(ident)
            with self.ledger.lock:
                self._errands_running = False
                self.ledger.changed.notify_all()

    def _wait_for_first_settings(self) -> None:
        """Before the first batch: the first settings, while being fetched, for at most
        :data:`FIRST_SETTINGS_WAIT` seconds since the fetch began (:data:`BURST_SETTINGS_WAIT`
        while logging threads wait for the worker); not once the program exits."""
        fetching = self._fetching
        if fetching is None or self.server_settings.current.version >= 0:
            return
        end = self._fetch_started + FIRST_SETTINGS_WAIT
        burst_end = time.monotonic() + BURST_SETTINGS_WAIT
        ledger, intake = self.ledger, self.intake
        with ledger.lock:
            while self.server_settings.fetching and not self.state.closing:
                remaining = (min(end, burst_end) if intake.waiting else end) - time.monotonic()
                if remaining <= 0:
                    return
                ledger.changed.wait(timeout=min(remaining, 0.05))

    def _fetch_settings(self, version: int | None) -> dict[str, Any] | None:
        client = self.client(CONFIG_TIMEOUT)  # a client of its own, closed after
        try:
            return client.get_config(version)
        finally:
            client.close()

    def _next(self) -> list[Entry] | None:
        """Wait until a batch (or other work) is due and take it; ``None`` to stop.

        An empty list means: nothing from memory, but other work is due.
        """
        intake, ledger, spooling = self.intake, self.ledger, self.spooling
        rollup = self.rollup
        with ledger.lock:
            try:
                while True:
                    now = time.monotonic()
                    if intake.finished or not self.same_process() or self.state.over(now):
                        return None
                    if self.server_settings.check_due(now):
                        return []
                    other = min(
                        rollup.due(),
                        self.server_settings.due_at(),
                        # While a thread makes errands, it takes those that come due.
                        math.inf
                        if self._errands_running
                        else self.errands.due_at(self.state.hurried),
                    )
                    if spooling is not None:
                        other = min(other, spooling.due_at(now))
                    if rollup.held and self.state.hurried:
                        other = now
                    buffer = intake.buffer
                    if not buffer:
                        if other <= now:
                            return []
                        ledger.changed.notify_all()  # idle: wake flush() waiters
                        if (
                            self.stop
                            and not ledger.spooled
                            and not rollup.held
                            and not self.errands.queue
                        ):
                            self.thread = None
                            intake.worker_running = False
                            return None
                        self._sleep(other, now)
                        continue
                    due = intake.due(now)
                    if due <= now:
                        batch = intake.take(to_send=True)
                        ledger.in_flight += len(batch)
                        ledger.in_flight_bytes = sum(entry.size for entry in batch)
                        intake.taken()
                        return batch
                    if other <= now:
                        return []
                    self._sleep(min(due, other), now)
            finally:
                intake.wake_at = BUSY

    def _sleep(self, until: float, now: float) -> None:
        """Wait on the condition until ``until`` (``inf``: until woken); the lock is held."""
        intake = self.intake
        intake.wake_at = until
        self.ledger.changed.wait(None if until == math.inf else max(0.0, until - now))
        intake.wake_at = BUSY

    def _process(self, batch: list[Entry]) -> None:
        pipeline = self.pipeline
        if batch:
            events, created, weights = pipeline.run(batch)  # empties ``batch``
        else:  # woken for other work: roll-ups due, or all of them to flush or exit
            events, created, weights = pipeline.pending_rollups(self.state.hurried)
        if not events:
            return
        spooling = self.spooling
        if spooling is not None and spooling.should_spill():
            left = spooling.spill_events(events, created, weights)
            if left is not None:  # on disk, but for what a full disk had no room for
                if left:
                    self.delivery.send_parts(left)
                return
        self.delivery.send_events(events, created, weights)
