"""The fault matrix: a real ``EventLogHandler`` against a loopback server that misbehaves.

Every scenario logs through a logger (so the log calls themselves must return normally), keeps
an eye on the queue while the fault lasts (``queued <= queue_size``), lets the server recover,
then checks with :func:`settle` that every captured event has exactly one outcome, that what
arrived is what was counted as delivered, and that no reference id arrived twice.

Each scenario has a CI-sized run in the default suite and a larger one marked ``slow``.
"""

from __future__ import annotations

import os
import random
import threading
import time
from typing import Any

import pytest

from tests.reliability.conftest import HandlerRun, settle
from tests.support.faultserver import Delay, FaultServer, Reply
from tests.support.waits import free_port, wait_until

pytestmark = pytest.mark.usefixtures("no_nagle")


@pytest.fixture(
    params=[pytest.param(1, id="ci"), pytest.param(10, id="full", marks=pytest.mark.slow)]
)
def scale(request: pytest.FixtureRequest) -> int:
    """How many times the CI-sized workload a scenario runs."""
    return int(request.param)


def error_ids(run: HandlerRun) -> set[str]:
    return {event["reference_id"] for event in run.captured.events if event.get("type") == "error"}


def test_server_down_at_start_then_up(scale: int) -> None:
    port = free_port()
    run = HandlerRun(f"http://127.0.0.1:{port}", queue_size=200 * scale, batch_size=50)
    run.log(300 * scale)
    assert not run.engine.flush(0.2)  # nobody listens: nothing can be settled yet
    stats = run.engine.stats()
    assert stats["delivered"] == 0
    # More was logged than the queue holds: the oldest logs were evicted, and counted.
    assert stats["dropped"]["queue_full"] > 0
    assert run.max_queued <= 200 * scale
    with FaultServer(port=port) as late:
        stats = settle(run.engine, [late], run.captured.ids)
    assert set(stats["dropped"]) >= {"queue_full"}
    assert stats["delivered"] == stats["captured"] - stats["dropped"]["queue_full"]
    assert sum(stats["dropped"].values()) == stats["dropped"]["queue_full"]
    # Errors are never pushed out by logs: every one of them was kept and delivered.
    assert error_ids(run) <= set(late.accepted_ids())


def test_flapping_server_half_of_the_requests_fail(server: FaultServer, scale: int) -> None:
    rng = random.Random(20_240_501)
    lock = threading.Lock()

    def flap(events: list[dict[str, Any]], size: int) -> Any:
        with lock:
            roll = rng.random()
        if roll < 0.25:
            return 503
        if roll < 0.5:
            return "reset"
        return 202

    server.default = flap
    run = HandlerRun(server.url, batch_size=20)
    for chunk in range(5 * scale):
        run.log(100, f"chunk {chunk}")
        time.sleep(0.02)
    stats = settle(run.engine, [server], run.captured.ids)
    assert stats["delivered"] == stats["captured"] == 500 * scale
    statuses = server.statuses()
    assert {503, "reset", 202} <= set(statuses)
    assert stats["retries"] >= statuses.count(503) + statuses.count("reset")


@pytest.mark.parametrize(
    ("first_delay", "later_delay", "timeout", "count"),
    [
        pytest.param(1.0, 0.05, 0.4, 60, id="ci"),
        pytest.param(5.0, 1.0, 2.0, 400, id="full", marks=pytest.mark.slow),
    ],
)
def test_slow_server_answers_after_the_client_gave_up(
    server: FaultServer, first_delay: float, later_delay: float, timeout: float, count: int
) -> None:
    # The first two answers come after the client's timeout: the client retries the batch,
    # and the service discards the second copy by reference id. Later answers are slow but in
    # time.
    lock = threading.Lock()
    late_ids: set[str] = set()
    requests = [0]

    def slow(events: list[dict[str, Any]], size: int) -> Any:
        with lock:
            requests[0] += 1
            if requests[0] <= 2:
                late_ids.update(event["reference_id"] for event in events)
                return Delay(first_delay, 202)
        return Delay(later_delay, 202)

    server.default = slow
    run = HandlerRun(server.url, batch_size=20, timeout=timeout)
    run.log(count)
    assert run.engine.flush(60), run.engine.stats()
    time.sleep(first_delay)  # the late answers land
    stats = settle(run.engine, [server], run.captured.ids, lost_answers=late_ids.__contains__)
    assert stats["delivered"] == stats["captured"] == count
    assert stats["retries"] >= 2


def test_connection_resets(server: FaultServer, scale: int) -> None:
    rng = random.Random(7)
    lock = threading.Lock()

    def resets(events: list[dict[str, Any]], size: int) -> Any:
        with lock:
            return "reset" if rng.random() < 0.3 else 202

    server.script.extend(["reset"] * 3)
    server.default = resets
    run = HandlerRun(server.url, batch_size=25)
    run.log(200 * scale)
    stats = settle(run.engine, [server], run.captured.ids)
    assert stats["delivered"] == stats["captured"] == 200 * scale
    assert server.statuses()[:3] == ["reset"] * 3


def test_server_accepts_and_never_answers(server: FaultServer, scale: int) -> None:
    server.script.extend(["hang"] * (2 * scale))
    run = HandlerRun(server.url, batch_size=25, timeout=0.3)
    run.log(100 * scale)
    stats = settle(run.engine, [server], run.captured.ids)
    assert stats["delivered"] == stats["captured"] == 100 * scale
    assert server.statuses()[: 2 * scale] == ["hang"] * (2 * scale)
    assert stats["retries"] >= 2 * scale


def test_429_storm_then_recovery(server: FaultServer, scale: int) -> None:
    storm = 200 * scale
    server.script.extend([429] * storm)
    run = HandlerRun(server.url, batch_size=50, retry_initial=0.001, max_backoff=0.005)
    run.log(100)
    # Keep logging while the storm lasts.
    deadline = time.monotonic() + 60 * scale
    chunk = 0
    while server.script and time.monotonic() < deadline:
        run.log(20, f"storm {chunk}")
        chunk += 1
        time.sleep(0.02)
    run.log(50, "after")
    stats = settle(run.engine, [server], run.captured.ids, timeout=60)
    assert server.statuses().count(429) == storm
    assert stats["retries"] >= storm
    # Only the queue's bound may have cost events (a long storm outlasts any queue).
    assert stats["delivered"] + stats["dropped"]["queue_full"] == stats["captured"]


@pytest.mark.parametrize("limit", [12_000, 600])
def test_413_for_large_requests(server: FaultServer, scale: int, limit: int) -> None:
    # The server refuses any request body (as sent, after gzip) over ``limit`` bytes.
    server.default = lambda events, size: 413 if size > limit else 202
    run = HandlerRun(server.url, batch_size=100, flush_interval=0.2)
    small: list[str] = []
    large: list[str] = []
    for index in range(40 * scale):
        if index % 8 == 0:
            blobs = {f"blob{i}": os.urandom(3000).hex() for i in range(12)}
            run.logger.warning("large %d", index, extra=blobs)
            large.append(f"large {index}")
        else:
            run.logger.info("small %d %s", index, os.urandom(50).hex())
            small.append(f"small {index}")
    stats = settle(run.engine, [server], run.captured.ids)
    # Reference ids are given on the worker: match what was logged by its message.
    by_message = {
        event["message"].rsplit(" ", 1)[0]
        if event["message"].startswith("small")
        else event["message"]: event["reference_id"]
        for event in run.captured.events
    }
    small = [by_message[text] for text in small]
    large = [by_message[text] for text in large]
    accepted = {event["reference_id"]: event for event in server.accepted}
    assert set(small) <= set(accepted)  # small events always fit once split
    assert stats["dropped"]["too_large"] == len(set(large) - set(accepted))
    assert stats["delivered"] + stats["dropped"]["too_large"] == stats["captured"]
    for ref in set(large) & set(accepted):
        assert "@trimmed" in accepted[ref]["data"]  # shrunk, and marked so
    assert all(seen.raw_size <= limit for seen in server.requests if seen.status == 202)
    if limit >= 12_000:
        assert stats["dropped"]["too_large"] == 0


def test_200_with_an_html_body_is_not_counted_as_delivered(
    server: FaultServer, scale: int, capsys: pytest.CaptureFixture[str]
) -> None:
    # A proxy's page (or a wrong URL) answering 200 is not the service: the events did not
    # arrive. They are kept and retried slowly, and stderr says once what answered.
    page = b"<!doctype html><html><body><h1>Welcome to nginx!</h1></body></html>"
    server.default = Reply(200, page, {"Content-Type": "text/html; charset=utf-8"})
    run = HandlerRun(server.url, batch_size=30)
    run.log(100 * scale)
    assert wait_until(lambda: run.engine.stats()["retries"] >= 1, 10)
    stats = run.engine.stats()
    assert stats["delivered"] == 0
    assert stats["captured"] == 100 * scale == stats["queued"] + stats["in_flight"]
    assert "HTML page" in (stats["last_error"] or "")
    err = capsys.readouterr().err
    assert err.count("not the event service's answer") == 1, err
    assert "EVENTLOG_SERVER_URL" in err


def test_server_restarts_while_a_batch_is_in_flight(scale: int) -> None:
    first = FaultServer().start()
    in_flight = threading.Event()
    hang_from_now = threading.Event()

    def then_hang(events: list[dict[str, Any]], size: int) -> Any:
        if not hang_from_now.is_set():
            return 202
        in_flight.set()
        return "hang"  # held open until the server stops: the answer never comes

    first.default = then_hang
    second: FaultServer | None = None
    try:
        # A long timeout: the answer is lost because the server goes away, not by a timeout.
        run = HandlerRun(first.url, batch_size=25, timeout=30)
        run.log(50, "before")
        assert run.engine.flush(10), run.engine.stats()
        hang_from_now.set()
        run.log(50 * scale, "during")
        assert in_flight.wait(10), first.statuses()
        run.log(50 * scale, "while down")
        first.stop()
        run.log(20, "restarting")
        time.sleep(0.2)  # a few refused retries
        second = FaultServer(port=first.port).start()
        run.log(20, "after")
        stats = settle(run.engine, [first, second], run.captured.ids)
        assert stats["delivered"] == stats["captured"]
        assert "hang" in first.statuses()
        assert len(first.accepted) >= 50
        assert len(second.accepted) >= 90 * scale
    finally:
        if second is not None:
            second.stop()
        first.stop()
