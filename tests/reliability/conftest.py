"""Fixtures and helpers of the reliability and security tests.

The loopback servers, timings, waits and isolation come from :mod:`tests.support`; what is
added here drives a real :class:`~eventlog_handler.EventLogHandler` through a logger and checks
the delivery invariants: every captured event has exactly one outcome, what arrived is what was
delivered, and no reference id arrives twice.
"""

from __future__ import annotations

import builtins
import logging
import sys
import threading
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from eventlog_handler import EventLogHandler
from eventlog_handler.delivery import _engine as transport
from tests.support import faultserver
from tests.support.accounting import accounted_in_memory as accounted
from tests.support.constants import API_KEY, TRANSPORT_FAST
from tests.support.faultserver import FaultServer
from tests.support.fixtures import collector as collector  # a running Collector
from tests.support.fixtures import collector_client as client  # noqa: F401 - the collector's HTTP helper
from tests.support.fixtures import fault_server as server  # noqa: F401 - the FaultServer fixture
from tests.support.fixtures import isolation as isolation  # autouse: restores logging
from tests.support.waits import free_port

__all__ = [
    "API_KEY",
    "EXCEPTION_GROUP",
    "FAST",
    "Captured",
    "HandlerRun",
    "all_threads_stack",
    "collect",
    "free_port",
    "settle",
]

#: The transport tests' fast timings, typed for keyword arguments.
FAST: dict[str, Any] = dict(TRANSPORT_FAST)

#: ``ExceptionGroup`` where Python has it (3.11+), else ``None``.
EXCEPTION_GROUP: Any = getattr(builtins, "ExceptionGroup", None)

#: Logger names used by these tests start with this; their handlers are removed after each test.
LOGGER_PREFIX = "reliability"


@pytest.fixture(autouse=True)
def reliability_loggers() -> Iterator[None]:
    """Remove the handlers these tests attach to their own loggers."""
    yield
    for name in list(logging.root.manager.loggerDict):
        if name == LOGGER_PREFIX or name.startswith(LOGGER_PREFIX + "."):
            logger = logging.getLogger(name)
            for handler in list(logger.handlers):
                logger.removeHandler(handler)
            logger.setLevel(logging.NOTSET)
            logger.propagate = True
            logger.disabled = False


@pytest.fixture
def no_nagle(monkeypatch: pytest.MonkeyPatch) -> None:
    """Let the fault server write its headers and body without waiting for the client's
    delayed ACK (Nagle), which otherwise costs about 40 ms per error answer."""
    monkeypatch.setattr(faultserver._Handler, "disable_nagle_algorithm", True)


def collect(engine: transport.Engine) -> list[dict[str, Any]]:
    """Make ``engine`` only collect the events it is handed, as its worker would build them
    to send (nothing is queued or sent)."""
    collected: list[dict[str, Any]] = []

    def submit(entry: Any) -> bool:
        events, _, _ = engine.pipeline.run([entry], rollup=False)
        collected.extend(events)
        return True

    engine.submit = submit  # type: ignore[method-assign]
    return collected


def all_threads_stack() -> str:
    """Every thread's stack, for the message of a test that found something hanging."""
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    parts = []
    for ident, frame in sys._current_frames().items():
        parts.append(f"--- thread {names.get(ident, ident)}\n")
        parts.extend(traceback.format_stack(frame))
    return "".join(parts)


class Captured:
    """Records the reference id of every event the engine's worker builds to send (wraps the
    pipeline, where captured entries become wire events)."""

    def __init__(self, engine: transport.Engine) -> None:
        self.engine = engine
        self.ids: list[str] = []
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        pipeline = engine.pipeline
        original = pipeline.run

        def recording(entries: Any, rollup: bool = True) -> Any:
            result = original(entries, rollup)
            with self._lock:
                for event in result[0]:
                    self.ids.append(event["reference_id"])
                    self.events.append(event)
            return result

        pipeline.run = recording  # type: ignore[method-assign]


class HandlerRun:
    """A real :class:`EventLogHandler` on its own logger, with its engine's events recorded."""

    def __init__(self, url: str, name: str = "matrix", **options: Any) -> None:
        merged = {**FAST, **options}
        self.handler = EventLogHandler(api_key=API_KEY, server_url=url, **merged)
        self.engine = self.handler.engine
        self.queue_size = self.engine.settings.queue_size
        self.captured = Captured(self.engine)
        # A logger outside the hierarchy, so that no other handler sees these records
        # (pytest attaches its capture handlers to every non-propagating logger it knows).
        self.logger = logging.Logger(f"{LOGGER_PREFIX}.{name}", logging.DEBUG)
        self.logger.propagate = False
        self.logger.addHandler(self.handler)
        #: The largest ``queued`` seen while logging.
        self.max_queued = 0

    def log(self, count: int, prefix: str = "event", *, error_every: int = 10) -> None:
        """Log ``count`` records (every ``error_every``-th with an exception); each call must
        return normally, and the queue must stay within ``queue_size``."""
        for index in range(count):
            if error_every and index % error_every == error_every - 1:
                try:
                    raise RuntimeError(f"{prefix} failure {index}")
                except RuntimeError:
                    self.logger.exception("%s %d failed", prefix, index)
            else:
                self.logger.info("%s %d", prefix, index, extra={"index": index})
            if index % 25 == 0:
                self.check_bounded()
        self.check_bounded()

    def check_bounded(self) -> None:
        stats = self.engine.stats()
        self.max_queued = max(self.max_queued, stats["queued"])
        assert stats["queued"] <= self.queue_size, stats
        assert stats["captured"] == accounted(stats), stats
        assert self.handler.emit_errors == 0, self.handler.last_emit_error


def settle(
    engine: transport.Engine,
    servers: list[FaultServer],
    captured_ids: list[str],
    *,
    timeout: float = 30.0,
    lost_answers: Callable[[str], bool] | None = None,
) -> dict[str, Any]:
    """Flush ``engine`` and check the invariants of delivery; return its statistics.

    - everything captured has exactly one outcome: ``delivered + dropped == captured``;
    - what the servers accepted is what the engine counts as delivered, and only events the
      engine was handed;
    - no reference id was accepted twice, within or across servers. ``lost_answers(id)`` names
      ids whose first accepted request was answered after the client had given up waiting: the
      client must retry those, and the service discards the copy (the Exceptionless server).
    """
    assert engine.flush(timeout), engine.stats()
    stats = engine.stats()
    assert stats["queued"] == 0 and stats["in_flight"] == 0, stats
    # Events evicted from the memory queue were never built, so they have no reference id.
    assert stats["captured"] == len(captured_ids) + stats["dropped"]["queue_full"], stats
    assert stats["delivered"] + sum(stats["dropped"].values()) == stats["captured"], stats
    arrived: list[str] = []
    duplicates: list[str] = []
    for one_server in servers:
        arrived.extend(one_server.accepted_ids())
        duplicates.extend(one_server.duplicates)
    counts = Counter(arrived)
    unique = set(counts)
    duplicates.extend(ref for ref, count in counts.items() if count > 1)
    if lost_answers is None:
        assert duplicates == [], duplicates[:10]
    else:
        unexpected = [ref for ref in duplicates if not lost_answers(ref)]
        assert unexpected == [], unexpected[:10]
    assert len(unique) == stats["delivered"], (len(unique), stats)
    assert unique <= set(captured_ids)
    return stats
