"""Flush, close and exit of an engine, and the process events around it (exit, fork, SIGTERM).

- :meth:`Lifecycle.flush` asks the worker to send everything now and waits, at most until its
  deadline, until nothing is pending. When the worker can't run (threads can't start at
  interpreter shutdown), the calling thread sends (:meth:`Lifecycle.drain_here`).
- :meth:`Lifecycle.shutdown` is the exit flush: everything pending gets ``shutdown_timeout``
  seconds to be sent. Then every event has exactly one outcome or is honestly pending: what
  was never sent is dropped (``shutdown``), what is on the wire at the deadline stays
  ``in_flight`` and is reported as "outcome unknown" (its answer may still arrive and count it
  as delivered), and with a spool, what is pending is written to disk for the next start.
  stderr says how many of each.
- Fork: the child starts with an empty buffer, new counts, lock, session and worker, and never
  sends its parent's events. A :mod:`multiprocessing` child also flushes when it ends through
  ``os._exit`` (which skips ``atexit``) and when it is terminated with ``SIGTERM``, as
  ``Pool.__exit__`` does to its workers.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import TYPE_CHECKING

from eventlog_handler.delivery._batches import Part
from eventlog_handler.delivery._buffer import Entry
from eventlog_handler.delivery._delivery import engine_say
from eventlog_handler.delivery._worker import SENDER_THREADS
from eventlog_handler.wire._jsonsafe import safe_str

if TYPE_CHECKING:
    from eventlog_handler.delivery._engine import Engine


class Lifecycle:
    """Flush, close and the exit flush of one engine (see the module docstring)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def idle(self) -> bool:
        """Nothing pending: the buffer is empty, nothing in flight, nothing on disk."""
        ledger = self.engine.ledger
        return not self.engine.intake.buffer and ledger.in_flight == 0 and ledger.spooled == 0

    def flush(self, timeout: float) -> bool:
        """Send what is pending now; wait at most ``timeout`` s. ``True`` when all was sent."""
        engine = self.engine
        engine.check_process()
        if threading.get_ident() in SENDER_THREADS:
            return False
        deadline = time.monotonic() + max(0.0, timeout)
        ledger = engine.ledger
        with ledger.lock:
            if self.idle():
                return True
            usable = engine.worker.thread is not None or engine.worker.start()
        if not usable:
            return self.drain_here(deadline)
        with ledger.lock:
            engine.flushing += 1
            ledger.changed.notify_all()
            try:
                while not self.idle() and not engine.intake.finished:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0 or engine.worker.thread is None:
                        break
                    ledger.changed.wait(timeout=remaining)
                return self.idle()
            finally:
                engine.flushing -= 1

    def close(self, timeout: float) -> bool:
        """Flush, then stop the worker; a later event starts a new one. Returns by the deadline."""
        engine = self.engine
        deadline = time.monotonic() + max(0.0, timeout)
        done = self.flush(timeout)
        with engine.ledger.lock:
            engine.worker.stop = True
            engine.ledger.changed.notify_all()
            thread = engine.worker.thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(max(0.0, deadline - time.monotonic()))
        return done

    def shutdown(self, timeout: float | None) -> int:
        """The exit flush (see the module docstring). Returns the events not sent."""
        engine = self.engine
        settings = engine.settings
        timeout = settings.shutdown_timeout if timeout is None else timeout
        deadline = time.monotonic() + max(0.0, timeout)
        ledger, intake = engine.ledger, engine.intake
        try:
            engine.check_process()
            with ledger.lock:
                if intake.finished:
                    return 0
                if engine.spooling is not None and intake.retrying:
                    deadline = time.monotonic()  # the service is failing: go to disk now
                engine.closing = True
                engine.deadline = deadline
                ledger.changed.notify_all()
                worker = engine.worker
                usable = worker.thread is not None or (
                    bool(intake.buffer or engine.pipeline.rollup.held) and worker.start()
                )
                if usable and not worker.is_current():
                    while not self.idle() and worker.thread is not None:
                        remaining = deadline - time.monotonic()
                        if remaining <= 0:
                            break
                        ledger.changed.wait(timeout=remaining)
            if not usable:
                self.drain_here(deadline)
            kept = self.keep_on_disk()
            with ledger.lock:
                never_sent = len(intake.buffer)
                on_wire = min(ledger.posting, ledger.in_flight)
                unsent = never_sent + ledger.in_flight - on_wire
                ledger.dropped["shutdown"] += unsent
                intake.buffer.clear()
                ledger.in_flight = on_wire
                intake.finished = True
                ledger.changed.notify_all()
            if engine.spooling is not None:
                engine.spooling.close()
            self._report(kept, unsent, on_wire)
            return unsent
        except Exception as exc:  # pragma: no cover - the exit path must never raise
            engine_say(
                f"eventlog_handler: exit flush failed: {type(exc).__name__}: {safe_str(exc)}"
            )
            return 0

    def _report(self, kept: int, unsent: int, on_wire: int) -> None:
        engine = self.engine
        server = engine.settings.server_url
        if kept and engine.spooling is not None:
            engine_say(
                f"eventlog_handler: {kept} event(s) kept in the spool "
                f"{engine.spooling.spool.directory} to send at the next start"
            )
        last_error = engine.ledger.last_error
        if unsent:
            detail = f" (last error: {last_error})" if last_error else ""
            engine_say(
                f"eventlog_handler: {unsent} event(s) could not be sent to {server} "
                f"before exit{detail}"
            )
        if on_wire:
            engine_say(
                f"eventlog_handler: {on_wire} event(s) were on their way to {server} at the "
                f"exit deadline; their outcome is unknown (the service may have stored them)"
            )

    def keep_on_disk(self) -> int:
        """Write what is still pending in memory to the spool; return how many are on disk."""
        engine = self.engine
        spooling = engine.spooling
        if spooling is None:
            return 0
        ledger = engine.ledger
        with ledger.lock:
            entries = engine.intake.buffer.take(len(engine.intake.buffer))
            ledger.in_flight += len(entries)
            current = list(engine.delivery.current)
            if ledger.posting and current:
                current = current[1:]  # on the wire: its outcome is the service's to tell
        if entries:
            engine.spool_entries(entries)
        waiting: deque[Part] = deque(part for part in current if part.origin is None)
        if waiting:
            spooling.spill_parts(waiting)
        with ledger.lock:
            return ledger.spooled

    def drain_here(self, deadline: float) -> bool:
        """Send from the calling thread (the worker can't run); stop at ``deadline``."""
        engine = self.engine
        ledger = engine.ledger
        ident = threading.get_ident()
        SENDER_THREADS.add(ident)
        try:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0.05:
                    break
                with ledger.lock:
                    if engine.intake.finished or ledger.in_flight:
                        break
                    batch: list[Entry] = engine.intake.buffer.take(engine.settings.batch_size)
                    if not batch:
                        break
                    ledger.in_flight += len(batch)
                    previous, engine.deadline = engine.deadline, deadline
                try:
                    events, created, weights = engine.pipeline.run(batch, rollup=False)
                    engine.delivery.send_events(
                        events, created, weights, engine.client(timeout=remaining)
                    )
                finally:
                    with ledger.lock:
                        engine.deadline = previous
                if ledger.in_flight:
                    break
        finally:
            SENDER_THREADS.discard(ident)
        with ledger.lock:
            return self.idle()
