"""The intake: events read from a request are stored by a worker thread after the answer.

The service answers 202 once a post is queued and stores its events a moment later; the
collector does the same, which lets a client send its next batch while the previous one is
stored (the store's SQLite work runs outside the GIL, next to the parsing of the next request).

Nobody can observe the difference: every read (the API, the dashboard, the Python API) first
waits until what was posted before it is stored (:meth:`Intake.wait`), so a client that reads
after its 202 always finds its events. The queue is bounded by the events it holds; a post
that finds it full waits for room (the client feels back-pressure) and, after a while, is
answered 503.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from eventlog_handler.collector.ingest import Received
from eventlog_handler.collector.normalize import NormalizedEvent
from eventlog_handler.collector.problems import HttpError
from eventlog_handler.collector.storage import Storage, StorageClosed, StoreOutcome

__all__ = ["DEFAULT_PENDING_EVENTS", "Intake", "Job"]

logger = logging.getLogger("eventlog_handler.collector")

DEFAULT_PENDING_EVENTS = 100_000
_ROOM_TIMEOUT = 30.0


@dataclass
class Job:
    """The events of one request, to be stored."""

    organization_id: str
    project_id: str
    events: list[NormalizedEvent]
    received: datetime
    body: Received | None = None
    ticket: int = 0


class Intake:
    """A queue of :class:`Job` and the thread that stores them, in order.

    :param on_stored: called (on the worker thread) with each job and its outcome.
    :param max_pending_events: events queued before posts wait for room.
    """

    def __init__(
        self,
        storage: Storage,
        on_stored: Callable[[Job, StoreOutcome], None] | None = None,
        *,
        max_pending_events: int = DEFAULT_PENDING_EVENTS,
    ) -> None:
        self.storage = storage
        self.on_stored = on_stored
        self.max_pending_events = max_pending_events
        self._jobs: deque[Job] = deque()
        self._pending = 0
        self._submitted = 0
        self._finished = 0
        self._closed = False
        self._changed = threading.Condition()
        self._worker: threading.Thread | None = None

    @property
    def pending_events(self) -> int:
        """Events queued and not stored yet."""
        with self._changed:
            return self._pending

    def submit(self, job: Job) -> int:
        """Queue a job; returns its ticket. Waits while the queue is full (503 after 30 s,
        or at once when the collector is closing)."""
        size = len(job.events)
        deadline = time.monotonic() + _ROOM_TIMEOUT
        with self._changed:
            while (
                not self._closed
                and self._pending
                and self._pending + size > self.max_pending_events
            ):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise HttpError(503, "The collector is busy storing events; try again.")
                self._changed.wait(remaining)
            if self._closed:
                raise StorageClosed("the collector is stopping")
            self._submitted += 1
            job.ticket = self._submitted
            self._jobs.append(job)
            self._pending += size
            if self._worker is None:
                self._worker = threading.Thread(
                    target=self._run, name="eventlog-collector-intake", daemon=True
                )
                self._worker.start()
            self._changed.notify_all()
            return job.ticket

    def wait(self, ticket: int | None = None, timeout: float | None = None) -> bool:
        """Wait until the job with ``ticket`` (by default: every job submitted so far) is
        stored; False if ``timeout`` seconds passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            target = self._submitted if ticket is None else ticket
            while self._finished < target:
                if self._worker is None or not self._worker.is_alive():
                    return self._finished >= target
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._changed.wait(remaining)
            return True

    def close(self, timeout: float = 30.0) -> bool:
        """Refuse new jobs, store the queued ones (for at most ``timeout`` seconds) and end the
        worker; True when everything queued was stored."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()
            worker = self._worker
        if worker is not None:
            worker.join(timeout)
        with self._changed:
            return not self._jobs

    def _run(self) -> None:
        while True:
            with self._changed:
                while not self._jobs and not self._closed:
                    self._changed.wait()
                if not self._jobs:
                    return
                job = self._jobs[0]
            try:
                outcome = self.storage.insert_events(
                    job.organization_id,
                    job.project_id,
                    job.events,
                    job.received,
                    body=job.body,
                )
            except StorageClosed:
                outcome = StoreOutcome()
            except Exception:
                logger.exception("the collector could not store %d events", len(job.events))
                outcome = StoreOutcome()
            if self.on_stored is not None:
                try:
                    self.on_stored(job, outcome)
                except Exception:
                    logger.exception("the collector failed after storing events")
            with self._changed:
                self._jobs.popleft()
                self._pending -= len(job.events)
                self._finished = job.ticket
                self._changed.notify_all()
