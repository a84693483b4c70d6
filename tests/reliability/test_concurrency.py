"""Threads, reconfiguration and garbage collection: nothing hangs, nothing is lost uncounted.

Every scenario runs under a watchdog: the threads are joined with a timeout, and a thread still
alive after it fails the test with every thread's stack.
"""

from __future__ import annotations

import gc
import logging
import logging.config
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from eventlog_handler import EventLogHandler
from eventlog_handler.delivery import _engine as transport
from tests.reliability.conftest import FAST, all_threads_stack
from tests.support.constants import API_KEY
from tests.support.faultserver import FaultServer

WATCHDOG_SECONDS = 60.0
SECOND_KEY = API_KEY[::-1]


def run_all(targets: list[Callable[[], None]], timeout: float = WATCHDOG_SECONDS) -> None:
    """Run each target in a thread; fail (with every stack) if one is still running after
    ``timeout`` seconds, and re-raise the first error of a target."""
    errors: list[BaseException] = []

    def guarded(target: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                target()
            except BaseException as exc:  # reported to the test below
                errors.append(exc)

        return run

    threads = [
        threading.Thread(target=guarded(target), name=f"reliability-{index}", daemon=True)
        for index, target in enumerate(targets)
    ]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    hung = [thread.name for thread in threads if thread.is_alive()]
    assert not hung, f"hung threads {hung}:\n{all_threads_stack()}"
    if errors:
        raise errors[0]


def config(url: str, key: str) -> dict[str, Any]:
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "handlers": {
            "eventlog": {
                "class": "eventlog_handler.EventLogHandler",
                "level": "INFO",
                "api_key": key,
                "server_url": url,
                **FAST,
            }
        },
        "loggers": {
            "reliability.threads": {"handlers": ["eventlog"], "level": "INFO", "propagate": False}
        },
    }


def settled_engines(servers: list[FaultServer]) -> dict[str, int]:
    """Flush every engine; check the sums over engines against what the servers accepted."""
    totals = Counter[str]()
    for engine in transport.engines():
        assert engine.flush(20), engine.stats()
        stats = engine.stats()
        assert stats["queued"] == 0 and stats["in_flight"] == 0, stats
        totals["captured"] += stats["captured"]
        totals["delivered"] += stats["delivered"]
        totals["dropped"] += sum(stats["dropped"].values())
    assert totals["delivered"] + totals["dropped"] == totals["captured"], totals
    accepted = [ref for server in servers for ref in server.accepted_ids()]
    assert all(server.duplicates == [] for server in servers)
    assert len(accepted) == len(set(accepted)) == totals["delivered"], totals
    return dict(totals)


@pytest.mark.parametrize(
    ("threads", "per_thread", "reconfigurations"),
    [
        pytest.param(16, 1_000, 10, id="ci"),
        pytest.param(16, 5_000, 40, id="full", marks=pytest.mark.slow),
    ],
)
def test_threads_log_while_dictconfig_replaces_the_handlers(
    server: FaultServer, threads: int, per_thread: int, reconfigurations: int
) -> None:
    logging.config.dictConfig(config(server.url, API_KEY))
    logger = logging.getLogger("reliability.threads")
    started = threading.Barrier(threads + 1)
    stop_configuring = threading.Event()
    most = 50 * per_thread

    def worker(number: int) -> Callable[[], None]:
        def run() -> None:
            started.wait(10)
            # At least ``per_thread`` events, and on until the reconfigurations are over.
            for index in range(most):
                if index >= per_thread and stop_configuring.is_set():
                    break
                logger.info("thread %d event %d", number, index)
                if index % 50 == 0:
                    time.sleep(0.001)

        return run

    def configure() -> None:
        started.wait(10)
        for round_ in range(reconfigurations):
            # Two keys: two engines, so the sums below run over several engines.
            logging.config.dictConfig(config(server.url, SECOND_KEY if round_ % 2 else API_KEY))
            time.sleep(0.02)
        stop_configuring.set()

    run_all([worker(number) for number in range(threads)] + [configure])
    assert stop_configuring.is_set()
    assert len(transport.engines()) == 2
    assert all(engine.stats()["captured"] > 0 for engine in transport.engines())
    totals = settled_engines([server])
    # Records logged while dictConfig swapped the handlers may reach no handler (that is
    # logging's own behaviour); every record a handler took was captured and accounted for.
    assert 0 < totals["captured"] <= threads * most
    messages = Counter(str(event["message"]) for event in server.accepted)
    assert all(count == 1 for count in messages.values())
    assert len(messages) == totals["delivered"]
    assert all(message.startswith("thread ") for message in messages)


class LogsWhenCollected:
    """Garbage in a reference cycle (only the cycle collector frees it) that logs in ``__del__``."""

    logger = logging.getLogger("reliability.gc")

    def __init__(self, label: str) -> None:
        self.me = self
        self.label = label

    def __del__(self) -> None:
        self.logger.warning("collected %s", self.label)


@pytest.fixture
def gc_under_control() -> Iterator[None]:
    was_enabled = gc.isenabled()
    threshold = gc.get_threshold()
    yield
    gc.set_threshold(*threshold)
    if was_enabled:
        gc.enable()
    else:
        gc.disable()
    gc.collect()


@pytest.fixture
def gc_logger(server: FaultServer) -> Iterator[tuple[logging.Logger, EventLogHandler]]:
    handler = EventLogHandler(api_key=API_KEY, server_url=server.url, **FAST)
    logger = LogsWhenCollected.logger
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.setLevel(logging.INFO)
    yield logger, handler
    logger.handlers.clear()


@pytest.mark.usefixtures("gc_under_control")
def test_del_that_logs_collected_on_the_worker_thread(
    server: FaultServer, gc_logger: tuple[logging.Logger, EventLogHandler]
) -> None:
    logger, handler = gc_logger
    engine = handler.engine
    collected_on_worker: list[int] = []
    original_client_for = engine.client

    def client_for(timeout: float | None = None) -> Any:
        client = original_client_for(timeout)
        post = client.post_payload

        def collect_then_post(*args: Any, **kwargs: Any) -> Any:
            collected_on_worker.append(gc.collect())  # __del__ runs here, on the worker
            return post(*args, **kwargs)

        client.post_payload = collect_then_post  # type: ignore[method-assign]
        return client

    engine.delivery.client = client_for  # the client the delivery posts with
    gc.disable()  # only the worker's gc.collect() frees the garbage
    for round_ in range(5):
        garbage = [LogsWhenCollected(f"worker round {round_} #{i}") for i in range(50)]
        del garbage
        logger.info("round %d", round_)

    def flush() -> None:
        assert engine.flush(20), engine.stats()

    run_all([flush], timeout=30)
    assert sum(collected_on_worker) > 0  # the garbage was collected on the worker thread
    stats = engine.stats()
    # What __del__ logged on the worker is not captured (the recursion guard), the rest is.
    messages = [event["message"] for event in server.accepted]
    assert sorted(m for m in messages if m.startswith("round")) == [f"round {i}" for i in range(5)]
    assert stats["delivered"] == len(messages) == stats["captured"]
    assert server.duplicates == []


@pytest.mark.usefixtures("gc_under_control")
def test_del_that_logs_collected_on_caller_threads(
    server: FaultServer, gc_logger: tuple[logging.Logger, EventLogHandler]
) -> None:
    logger, handler = gc_logger
    engine = handler.engine
    # Collect constantly, so that __del__ runs at any point of a log call, including inside
    # the engine's critical section, and on every thread.
    gc.set_threshold(1, 1, 1)
    gc.enable()

    def caller(number: int) -> Callable[[], None]:
        def run() -> None:
            for index in range(100):
                LogsWhenCollected(f"caller {number} #{index}")
                logger.info("caller %d event %d", number, index)
                if index % 20 == 0:
                    gc.collect()

        return run

    run_all([caller(number) for number in range(4)])
    gc.set_threshold(700, 10, 10)
    gc.collect()

    def flush() -> None:
        assert engine.flush(20), engine.stats()

    run_all([flush], timeout=30)
    stats = engine.stats()
    assert stats["delivered"] + sum(stats["dropped"].values()) == stats["captured"]
    assert stats["delivered"] == len(server.accepted)
    messages = Counter(str(event["message"]) for event in server.accepted)
    assert all(messages[f"caller {n} event {i}"] == 1 for n in range(4) for i in range(100)), (
        messages
    )
    # The objects logged as they were collected (on caller threads), each once.
    collected = [m for m in messages if m.startswith("collected caller")]
    assert collected and all(messages[m] == 1 for m in collected)
    assert server.duplicates == []
