"""When the exit flush stops retrying a failing service early, and what becomes of the events.

A failure during the exit ends its sending at once only where retrying can't help: the service
refused the key or URL, or the spool takes what is left. A spool whose disk is full does not end
it (the events are retried from memory until the deadline, as without a spool), and whatever
ends it, nothing is lost uncounted: the events are on disk, delivered, or counted at exit.
The service is a stand-in client (its answers scripted), the spool a real directory.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from eventlog_handler.api import _errors as errors
from eventlog_handler.api._answers import SubmitResult
from eventlog_handler.delivery import _engine as transport
from eventlog_handler.settings import Settings
from tests.support.accounting import accounted
from tests.support.constants import API_KEY
from tests.support.fixtures import fresh_engines as fresh_engines  # autouse
from tests.support.waits import wait_until


class ScriptedService:
    """Answers posts from a script: an exception to raise, or ``None`` for 202."""

    def __init__(self, *answers: Exception | None, latency: float = 0.0) -> None:
        self.answers = list(answers)
        self.latency = latency
        self.posts: list[int] = []

    def post_payload(self, payload: bytes, gzipped: bool, count: int = 1) -> SubmitResult:
        self.posts.append(count)
        time.sleep(self.latency)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if answer is not None:
            raise answer
        return SubmitResult(202, count, len(payload))

    def get_config(self, version: int | None = None) -> None:
        return None

    closed = 0

    def close(self) -> None:
        """A client the engine made for one use is closed after it (its connections)."""
        self.closed += 1


def engine_for(service: ScriptedService, spool: Path, **options: Any) -> transport.Engine:
    settings = Settings.from_options(
        {"api_key": API_KEY, "server_url": "http://127.0.0.1:9", "spool_path": str(spool)}
        | options,
        environ={},
    )
    return transport.Engine(settings, client_factory=lambda settings, timeout: service)


def log(engine: transport.Engine, message: str, index: int) -> None:
    engine.enqueue({"type": "log", "message": message, "reference_id": f"abcdef0123456789-{index}"})


def test_a_failure_at_exit_with_a_full_disk_is_retried_from_memory(tmp_path: Path) -> None:
    """The disk was just found full: the spool takes nothing, so one 503 at exit does not end
    the sending; the retry delivers (a spool that can't be written is no worse than none)."""
    service = ScriptedService(errors.ServiceUnavailableError(503), None)
    engine = engine_for(service, tmp_path / "spool")
    assert engine.spooling is not None
    engine.spooling._full_until = time.monotonic() + 3600  # found full a moment ago
    for index in range(5):
        log(engine, f"event {index}", index)
    assert engine.shutdown(10) == 0
    stats = engine.stats()
    assert stats["delivered"] == 5 and stats["dropped_total"] == 0, stats
    assert len(service.posts) == 2


def test_a_failure_at_exit_keeps_the_held_roll_ups_on_disk(tmp_path: Path) -> None:
    """Identical events held by the roll-up when a failure at exit ends the sending go to disk
    with the rest, their counts with them, rather than being counted as lost."""
    service = ScriptedService(None, errors.ServiceUnavailableError(503), None)
    engine = engine_for(service, tmp_path / "spool", flush_interval=0.05)
    for index in range(5):
        log(engine, "the same line", index)
    wait_until(lambda: engine.stats()["delivered"] >= 1, 10)
    assert engine.stats()["delivered"] == 1  # the first went; the others are held
    for index in range(3):
        log(engine, f"other {index}", 10 + index)
    assert engine.shutdown(10) == 0
    stats = engine.stats()
    assert stats["dropped_total"] == 0, stats
    assert stats["delivered"] + stats["spooled"] == 8 == accounted(stats), stats


def test_the_exiting_thread_stops_at_a_refusal_and_spools_the_rest(tmp_path: Path) -> None:
    """The worker can't run at exit (the interpreter is going down), so the exiting thread
    sends; a refusal ends that too: one request, the rest on disk, not one request per batch."""
    service = ScriptedService(errors.AuthenticationError(401), latency=0.2)
    engine = engine_for(service, tmp_path / "spool", batch_size=10)
    engine.close(1.0)  # the worker stopped...
    engine.worker.start = lambda: False  # type: ignore[method-assign]  # ...and can't start
    for index in range(100):
        log(engine, f"event {index}", index)
    started = time.monotonic()
    assert engine.shutdown(10) == 0
    assert time.monotonic() - started < 5
    stats = engine.stats()
    assert len(service.posts) == 1
    assert stats["spooled"] == 100 == accounted(stats), stats
    assert service.closed >= 1  # the clients made for the exit are closed after it


def test_a_failed_write_counts_nothing_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The spool's bound leaves some incoming events out (no room), then the write itself
    fails: those events are still in memory, so they are not also counted as dropped
    (``spool_full``) — each event has one outcome."""
    from eventlog_handler.delivery._spool_file import SpoolFile

    service = ScriptedService(errors.ServiceUnavailableError(503))
    engine = engine_for(service, tmp_path / "spool", spool_max_bytes=100_000, batch_size=100)
    write = SpoolFile.append
    failures = []

    def failing_once(self: SpoolFile, rows: Any) -> int:
        rows = list(rows)
        if not failures:  # the first write: more than fits, so the bound left some out
            failures.append(len(rows))
            raise OSError(5, "Input/output error")
        return write(self, rows)

    monkeypatch.setattr(SpoolFile, "append", failing_once)
    filler = "x" * 2_000
    for index in range(300):  # ~600 KB of events for a 100 KB spool: the bound drops some
        log(engine, f"event {index} {filler}", index)
    wait_until(lambda: bool(failures), 20, step=0.05)
    assert failures, "the write never failed (the case is not exercised)"
    assert engine.spooling is not None
    engine.spooling._full_until = 0.0  # the backoff after a failed write is over
    engine.shutdown(5.0)  # the service still fails: what is left goes to disk
    stats = engine.stats()
    assert stats["dropped"]["spool_full"] > 0, stats  # the bound did leave events out
    assert stats["captured"] == 300 == accounted(stats), stats


def test_a_post_under_way_at_the_deadline_is_not_followed_by_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The exit's deadline passes while the worker posts the first of several parts; the
    exiting thread writes the others to the spool. The worker, its post answered, must not
    post them too (they would arrive twice: now and from the spool at the next start)."""
    from eventlog_handler.delivery._spool_file import SpoolFile

    service = ScriptedService(None, latency=1.0)  # healthy, slow
    engine = engine_for(service, tmp_path / "spool", max_raw_batch_bytes=10_000, batch_size=100)
    write = SpoolFile.append

    def slow_disk(self: SpoolFile, rows: Any) -> int:
        time.sleep(0.8)
        return write(self, list(rows))

    monkeypatch.setattr(SpoolFile, "append", slow_disk)
    for index in range(20):  # 20 events of 2 KB: several parts of at most 10 KB
        log(engine, f"event {index} " + "x" * 2_000, index)
    time.sleep(0.2)  # the first part is on the wire
    engine.shutdown(0.5)
    time.sleep(2.0)  # the worker's post is answered meanwhile
    stats = engine.stats()
    assert stats["captured"] == 20 == accounted(stats), (stats, service.posts)
    assert stats["delivered"] + stats["spooled"] <= 20, stats
