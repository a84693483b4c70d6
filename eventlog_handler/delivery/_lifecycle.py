"""Flush, close and exit of an engine, and the process events around it (exit, fork, SIGTERM).

- :meth:`Lifecycle.flush` asks the worker to send everything now and waits, at most until its
  deadline, until nothing is pending. When the worker can't run (threads can't start at
  interpreter shutdown), the calling thread sends (:meth:`Lifecycle.drain_here`).
- :meth:`Lifecycle.shutdown` is the exit flush: everything pending gets ``shutdown_timeout``
  seconds to be sent. Then every event has exactly one outcome or is honestly pending: what
  was never sent is dropped (``shutdown``), what is still on the wire :data:`ON_WIRE_GRACE`
  seconds after the deadline stays ``in_flight`` and is reported as "outcome unknown" (its
  answer may still arrive and count it as delivered), and with a spool, what is pending is
  written to disk for the next start. stderr says how many of each. At the interpreter's exit,
  an event the main thread captures after the flush (in an ``atexit`` function registered
  before the package was imported, which runs after the flush) is sent by it
  (:meth:`Lifecycle.send_late`) within what the flush left of ``shutdown_timeout``; what can't
  be, and what other threads still running log then, is dropped (``shutdown``) and said.
- Fork: the child starts with an empty buffer, new counts, lock, session and worker, and never
  sends its parent's events. A :mod:`multiprocessing` child also flushes when it ends through
  ``os._exit`` (which skips ``atexit``) and when it is terminated with ``SIGTERM``, as
  ``Pool.__exit__`` does to its workers.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable

from eventlog_handler.api._client import Client
from eventlog_handler.delivery._batches import Part
from eventlog_handler.delivery._buffer import Entry
from eventlog_handler.delivery._delivery import Delivery
from eventlog_handler.delivery._errands import Errands
from eventlog_handler.delivery._intake import Intake
from eventlog_handler.delivery._ledger import Ledger
from eventlog_handler.delivery._pipeline import Pipeline
from eventlog_handler.delivery._rollup import Rollup
from eventlog_handler.delivery._sessions import Sessions
from eventlog_handler.delivery._spooling import SpoolTraffic
from eventlog_handler.delivery._state import RunState
from eventlog_handler.delivery._stderr import say, say_once, shown_server
from eventlog_handler.delivery._worker import SENDER_THREADS, Worker
from eventlog_handler.settings import Settings
from eventlog_handler.wire._jsonsafe import safe_str

#: Seconds the exit waits past its deadline for a request on the wire to end (a request to a
#: server that never answers is then reported as of unknown outcome).
ON_WIRE_GRACE = 0.1


class Lifecycle:
    """Flush, close and the exit flush of one engine (see the module docstring)."""

    def __init__(
        self,
        settings: Settings,
        ledger: Ledger,
        intake: Intake,
        state: RunState,
        worker: Worker,
        pipeline: Pipeline,
        rollup: Rollup,
        delivery: Delivery,
        spooling: SpoolTraffic | None,
        client: Callable[[float | None], Client],
        check_process: Callable[[], None],
        errands: Errands,
        sessions: Sessions | None,
    ) -> None:
        self.settings = settings
        self.ledger = ledger
        self.intake = intake
        self.state = state
        self.worker = worker
        self.pipeline = pipeline
        self.rollup = rollup
        self.delivery = delivery
        self.spooling = spooling
        self.client = client
        #: In a forked child, start the engine over before anything else.
        self.check_process = check_process
        self.errands = errands
        self.sessions = sessions
        #: Seconds the exit flush left of ``shutdown_timeout``, for sending events captured
        #: after it (:meth:`send_late`).
        self._late_left = 0.0
        #: A Ctrl-C (or ``sys.exit`` from a signal handler) ended the exit flush's wait.
        self.interrupted = False
        #: Events of the request on the wire at exit whose copy :meth:`keep_on_disk` wrote.
        self.copied = 0

    def idle(self) -> bool:
        """Nothing pending: the buffer is empty, nothing in flight, nothing on disk, no errand."""
        ledger = self.ledger
        return (
            not self.intake.buffer
            and ledger.in_flight == 0
            and ledger.spooled == 0
            and not self.errands.pending
        )

    def flush(self, timeout: float, *, until_failure: bool = False) -> bool:
        """Send what is pending now; wait at most ``timeout`` s. ``True`` when all was sent.

        Returns ``False`` as soon as the delivery is known to wait to retry a failure until
        after the deadline: a key the service refused (retried every ``min(60 s,
        max_backoff)``), or a long outage (its backoff grown past ``timeout``). Nothing can be
        sent before then; the events wait for the retry and the exit, as they would after the
        wait. ``until_failure``: also as soon as an attempt fails (the exception hooks' wait
        before a thread or the program ends: retrying is the worker's and the exit's job)."""
        self.check_process()
        if threading.get_ident() in SENDER_THREADS:
            return False
        deadline = time.monotonic() + max(0.0, timeout)
        ledger, state, worker = self.ledger, self.state, self.worker
        spooling = self.spooling
        replaying = spooling.replay_pending if spooling is not None else lambda: False
        with ledger.lock:
            if self.idle() and not replaying():
                return True
            usable = worker.thread is not None or worker.start()
        if not usable:
            return self.drain_here(deadline)
        with ledger.lock:
            state.flushing += 1
            ledger.changed.notify_all()
            failures = ledger.retries
            try:
                while (not self.idle() or replaying()) and not self.intake.finished:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0 or worker.thread is None:
                        break
                    if state.retry_after(deadline):
                        break  # no try before the deadline
                    if until_failure and ledger.retries != failures:
                        break
                    ledger.changed.wait(timeout=remaining)
                return self.idle() and not replaying()
            finally:
                state.flushing -= 1

    def close(self, timeout: float) -> bool:
        """Flush, then stop the worker; a later event starts a new one. Returns by the deadline."""
        deadline = time.monotonic() + max(0.0, timeout)
        done = self.flush(timeout)
        with self.ledger.lock:
            self.worker.stop = True
            self.ledger.changed.notify_all()
            thread = self.worker.thread
            # A worker waiting to retry after the deadline stops after that retry (it holds
            # the events of the retry): waiting for it here would be waiting for nothing.
            waiting = self.state.retry_after(deadline)
        if thread is not None and thread is not threading.current_thread() and not waiting:
            thread.join(max(0.0, deadline - time.monotonic()))
        return done

    def shutdown(self, timeout: float | None, *, late: bool = False) -> int:
        """The exit flush (see the module docstring). Returns the events not sent. ``late``:
        the interpreter's exit, where events captured after the flush are sent by the thread
        that logs them (:meth:`send_late`)."""
        timeout = self.settings.shutdown_timeout if timeout is None else timeout
        deadline = time.monotonic() + max(0.0, timeout)
        ledger, intake, state = self.ledger, self.intake, self.state
        interrupted: BaseException | None = None
        try:
            self.check_process()
            if self.sessions is not None:
                self.sessions.end()  # its close heartbeat goes with the exit flush
            with ledger.lock:
                if intake.finished:
                    return 0
                # The service is failing and the spool takes events: no more tries, everything goes
                # to disk now. The worker ends after the step it is in (a write to the spool,
                # a batch being built), which the wait below lets it finish: only then is what
                # it holds on disk or back where this thread finds it.
                to_disk = (
                    self.spooling is not None and intake.retrying and self.spooling.accepting()
                )
                state.closing = True
                state.deadline = time.monotonic() if to_disk else deadline
                ledger.changed.notify_all()
                worker = self.worker
                usable = worker.thread is not None or (
                    bool(intake.buffer or self.rollup.held or self.errands.queue) and worker.start()
                )
                if usable and not worker.is_current():
                    interrupted = self._wait_for_worker(deadline, to_disk)
            if not usable:
                self.drain_here(deadline)
            kept = self.keep_on_disk()
            with ledger.lock:
                never_sent = len(intake.buffer)
                on_wire = min(max(ledger.posting, ledger.uncertain), ledger.in_flight)
                unsent = never_sent + ledger.in_flight - on_wire
                ledger.dropped["shutdown"] += unsent
                intake.buffer.clear()
                if worker.thread is not None:  # what it holds off the wire is counted now
                    ledger.written_off = ledger.in_flight - on_wire
                    ledger.written_off_by = worker.thread.ident
                ledger.in_flight = on_wire
                errands_left = self.errands.give_up()
                intake.finished = True
                if late:
                    intake.send_late = self.send_late
                    self._late_left = max(0.0, deadline - time.monotonic())
                ledger.changed.notify_all()
            earlier = 0
            if self.spooling is not None:
                earlier = self.spooling.left_from_earlier()
                self.spooling.close()
            self._report(kept, unsent, on_wire, earlier)
            if errands_left:
                say(
                    f"eventlog_handler: {errands_left} request(s) other than events (user "
                    f"descriptions, a session's end) could not be sent before exit"
                )
            if interrupted is not None and not late:
                raise interrupted  # a program's own call: its Ctrl-C goes on
            return unsent
        except Exception as exc:  # pragma: no cover - the exit path must never raise
            say(f"eventlog_handler: exit flush failed: {type(exc).__name__}: {safe_str(exc)}")
            return 0

    def _wait_for_worker(self, deadline: float, to_disk: bool) -> BaseException | None:
        """Wait (the lock held) until the worker is idle or the deadline, and for a request on
        the wire a moment more. A second Ctrl-C (or the program's own ``SIGTERM`` handler
        calling ``sys.exit``) ends the wait: the exit then counts and says what is left. While
        the service is not failing, it waits for the replay of what ended processes left in the
        spool too, as :meth:`flush` does (a short job that logs nothing still sends it)."""
        ledger, worker, spooling = self.ledger, self.worker, self.spooling

        def replaying() -> bool:
            return (
                spooling is not None
                and spooling.replay_pending()
                and not self.intake.retrying
                and not self.state.retry_after(deadline)
            )

        try:
            while worker.thread is not None and (to_disk or not self.idle() or replaying()):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                ledger.changed.wait(timeout=remaining)
            # A request on the wire at the deadline: most end within moments (a refused
            # connection, an answer being read), and then their events are known sent or not,
            # rather than reported as of unknown outcome.
            grace_end = time.monotonic() + ON_WIRE_GRACE
            while ledger.posting and worker.thread is not None:
                remaining = grace_end - time.monotonic()
                if remaining <= 0:
                    break
                ledger.changed.wait(timeout=remaining)
        except (KeyboardInterrupt, SystemExit) as exc:
            self.interrupted = True
            return exc
        return None

    def _report(self, kept: int, unsent: int, on_wire: int, earlier: int = 0) -> None:
        server = self.settings.shown_url
        last_error = self.ledger.last_error
        if (kept or earlier) and self.spooling is not None:
            older = f"{earlier} event(s) of earlier runs are still in the spool"
            cause = f" (last error: {last_error})" if last_error else ""
            say(
                f"eventlog_handler: {kept} event(s) kept in the spool "
                f"{self.spooling.directory} to send at the next start"
                + (f", and {older}{cause}" if earlier else "")
                if kept
                else f"eventlog_handler: {older} {self.spooling.directory}, not sent by this "
                f"run{cause}; they are sent at the next start"
            )
        evicted = self.ledger.dropped["queue_full"]
        if evicted:
            say(
                f"eventlog_handler: {evicted} event(s) were dropped from memory while they "
                f"waited, the oldest logs first (queue_full: past queue_size="
                f"{self.settings.queue_size} or memory_budget={self.settings.memory_budget})"
            )
        full = self.ledger.dropped["spool_full"]
        if full and self.spooling is not None:
            say(
                f"eventlog_handler: {full} event(s) did not fit in the spool "
                f"(spool_max_bytes={self.settings.spool_max_bytes}) and were dropped, the oldest "
                f"logs first"
            )
        if unsent:
            detail = f" (last error: {last_error})" if last_error else ""
            next_try = self.state.next_try
            if next_try is not None:  # the service asked to wait past the exit's deadline
                detail += (
                    f"; the next try was due in {max(0.0, next_try):.3g} s, after the exit's "
                    f"deadline"
                )
            say(
                f"eventlog_handler: {unsent} event(s) could not be sent to "
                f"{shown_server(self.settings)} "
                f"before exit{detail}"
            )
        if on_wire:
            copy = ""
            if self.copied and self.spooling is not None:
                some = "" if self.copied >= on_wire else f" of {self.copied} of them"
                copy = (
                    f"; a copy{some} is kept in the spool, sent again at the next start (the "
                    "service stores an event once by its reference_id)"
                )
            say(
                f"eventlog_handler: {on_wire} event(s) were on their way to {server} at the "
                f"exit deadline; their outcome is unknown (the service may have stored them)"
                f"{copy}"
            )

    def keep_on_disk(self) -> int:
        """Write what is still pending in memory to the spool; return how many are on disk.

        What the disk has no room for stays in flight and is counted at exit (the deadline has
        passed, or the service is failing: no more tries)."""
        spooling = self.spooling
        if spooling is None:
            return 0
        ledger, intake = self.ledger, self.intake
        with ledger.lock:
            current = list(self.delivery.current)
            on_wire = current.pop(0) if ledger.posting and current else None
            worker_gone = self.worker.thread is None
            left = len(intake.buffer)  # not what threads still logging add meanwhile
        while left > 0:  # a part at a time: what is built and encoded from it is in memory
            with ledger.lock:
                entries = intake.take(left)
                ledger.in_flight += len(entries)
            left -= len(entries)
            if not entries or spooling.spill_entries(entries) is None:
                break  # None: the spool can't take them now; they went back to the buffer
        if worker_gone and self.rollup.held:  # the worker's own state, now that it has ended
            events, created, counts = self.pipeline.pending_rollups(True)
            if events:
                spooling.spill_events(events, created, counts)
        waiting: deque[Part] = deque(part for part in current if part.origin is None)
        if waiting:
            spooling.spill_parts(waiting)
        if on_wire is not None and on_wire.origin is None:
            # Its outcome is the service's to tell, and the process may end first (a server
            # that never answers): a copy goes to disk, sent again at the next start. Stored
            # already, it is stored once: the service discards a second event with the same
            # reference_id. In this process it stays in flight, of unknown outcome.
            # Never in place of events certainly not sent: it takes only free room.
            spooling.spill_parts(deque([on_wire]), copy=True)
            self.copied = spooling.copied
        with contextlib.suppress(OSError, sqlite3.Error):
            spooling.keep_in_place()  # "kept on disk" must be true: a removed file is made again
        with ledger.lock:
            return ledger.spooled

    def send_late(self, entry: Entry) -> bool:
        """An entry captured after the exit flush (counted as captured): the main thread (an
        ``atexit`` function that runs after the flush) sends it at once, within what the
        flush left of ``shutdown_timeout``; another thread's, or one past that time, is
        dropped (``shutdown``). What is not sent is said on stderr, once for each cause."""
        ledger, state = self.ledger, self.state
        started = time.monotonic()
        main = threading.current_thread() is threading.main_thread()
        with ledger.lock:
            left = self._late_left
            taken = main and left > 0.05
            if taken:
                ledger.in_flight += 1
            else:
                ledger.dropped["shutdown"] += 1
        if not taken:
            said = "by a thread still running" if not main else "past shutdown_timeout"
            self._say_late(said, f"events logged after the exit flush {said} are not sent")
            return False
        ident = threading.get_ident()
        SENDER_THREADS.add(ident)
        previous, state.deadline = state.deadline, started + left
        sent = False
        weight = 1
        try:
            # Its own outcome, whatever else is in flight (a request of the exit flush may
            # still be on the wire): the pipeline counts it if it filters it out, the delivery
            # if it sends or refuses it; what is left in flight after is this entry's.
            events, created, weights = self.pipeline.run([entry], rollup=False)
            weight = sum(weights) if weights is not None else len(events)
            if not events:
                return True
            client = self.client(left)
            try:
                sent = self.delivery.send_events(events, created, weights, client, after_exit=True)
            finally:
                client.close()
        except Exception as exc:  # the exit path must never raise into the program
            ledger.last_error = f"after the exit flush: {type(exc).__name__}: {safe_str(exc)}"
        finally:
            state.deadline = previous
            SENDER_THREADS.discard(ident)
            with ledger.lock:
                self._late_left -= time.monotonic() - started
        if sent:
            return True
        ledger.settle(weight, "shutdown")
        last_error = ledger.last_error
        detail = f" (last error: {last_error})" if last_error else ""
        self._say_late("failed", f"events logged after the exit flush could not be sent{detail}")
        return False

    def _say_late(self, cause: str, what: str) -> None:
        say_once(
            f"late: {cause}",
            f"eventlog_handler: {what} to {shown_server(self.settings)} (counted as dropped: "
            "shutdown)",
        )

    def drain_here(self, deadline: float) -> bool:
        """Send from the calling thread (the worker can't run); stop at ``deadline``."""
        ledger, intake, state = self.ledger, self.intake, self.state
        ident = threading.get_ident()
        SENDER_THREADS.add(ident)
        try:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0.05:
                    break
                with ledger.lock:
                    if intake.finished or ledger.in_flight:
                        break
                    batch: list[Entry] = intake.take(to_send=True)
                    if not batch:
                        break
                    ledger.in_flight += len(batch)
                    previous, state.deadline = state.deadline, deadline
                ended = False
                try:
                    events, created, weights = self.pipeline.run(batch, rollup=False)
                    client = self.client(remaining)
                    try:
                        self.delivery.send_events(events, created, weights, client)
                    finally:
                        client.close()
                finally:
                    with ledger.lock:
                        # The delivery ended the exit's sending early (a refusal, a failure
                        # with a spool): that stands; what is left goes to disk or is counted.
                        ended = state.deadline is not None and state.deadline < deadline
                        if not ended:
                            state.deadline = previous
                if ended or ledger.in_flight:
                    break
            remaining = deadline - time.monotonic()
            if self.errands.queue and remaining > 0.05 and not state.over(time.monotonic()):
                made: list[Client] = []

                def make() -> Client:
                    made.append(self.client(remaining))
                    return made[-1]

                try:
                    self.errands.work(make, hurried=True)
                finally:
                    for each in made:
                        each.close()
        finally:
            SENDER_THREADS.discard(ident)
        with ledger.lock:
            return self.idle()
