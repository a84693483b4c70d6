"""The delivery policy for every answer of the service, over real loopback HTTP.

Each test captures events, lets the fault server answer with a fault, clears the fault, and
checks the policy's behaviour, that the retained events then arrive with each reference id
once, and that delivered + dropped (by reason) == captured.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from typing import Any

import pytest

from eventlog_handler.wire._events import error_event
from eventlog_handler.wire._logs import log_event
from tests.support.accounting import accounted_in_memory as accounted
from tests.support.faultserver import FaultServer, Reply
from tests.support.waits import wait_until


def capture(engine: Any, count: int, prefix: str = "event") -> list[str]:
    refs = []
    for index in range(count):
        event = log_event(f"{prefix} {index}", level="Info", source="tests.faults")
        refs.append(event["reference_id"])
        assert engine.enqueue(event)
    return refs


def settled(engine: Any, server: FaultServer, expected_delivered: int) -> dict[str, Any]:
    assert engine.flush(10.0), engine.stats()
    stats = engine.stats()
    assert stats["captured"] == accounted(stats)
    assert stats["queued"] == 0 and stats["in_flight"] == 0
    assert stats["delivered"] + stats["dropped_total"] == stats["captured"]
    assert stats["delivered"] == expected_delivered, stats
    assert server.duplicates == []
    return stats


@pytest.mark.parametrize("status", [500, 502, 503, 409, 429])
def test_retryable_statuses_keep_the_batch_and_retry(server, make_engine, status):
    server.script.extend([status, status, status])
    engine = make_engine()
    refs = capture(engine, 30)
    stats = settled(engine, server, 30)
    assert server.statuses()[:3] == [status] * 3
    assert sorted(server.accepted_ids()) == sorted(refs)
    assert stats["retries"] >= 3
    assert stats["dropped_total"] == 0
    assert str(status) in (stats["last_error"] or "")


def test_retry_after_header_is_honoured(server, make_engine):
    # max_backoff caps every pause in these tests; Retry-After: 0 must mean "retry at once".
    server.script.append(Reply(429, b"", {"Retry-After": "0"}))
    engine = make_engine(retry_initial=5.0, max_backoff=5.0)
    refs = capture(engine, 3)
    settled(engine, server, 3)
    assert sorted(server.accepted_ids()) == sorted(refs)


def test_402_pauses_until_the_next_usage_bucket_then_delivers(server, make_engine, monkeypatch):
    pauses: list[float] = []
    engine = make_engine()
    original = engine.delivery.pause
    monkeypatch.setattr(
        engine.delivery, "pause", lambda delay: (pauses.append(delay), original(0))[1]
    )
    server.script.append(402)
    refs = capture(engine, 5)
    settled(engine, server, 5)
    assert sorted(server.accepted_ids()) == sorted(refs)
    # The pause asked for is "until the next 5-minute bucket", capped by max_backoff (0.05 s).
    assert pauses and pauses[0] == pytest.approx(0.05)
    assert engine.policy.until_next_bucket(now=1000.0) > 0


@pytest.mark.parametrize(
    ("status", "said"),
    [
        (401, "refused the API key"),
        (403, "refused the API key"),
        # A 404 is a wrong URL (path or server), not a refused key: the line says so.
        (404, "does not lead to the event service's API"),
    ],
)
def test_refused_key_is_said_once_and_events_are_kept(server, make_engine, capsys, status, said):
    server.script.extend([status] * 4)
    engine = make_engine()
    refs = capture(engine, 20)
    stats = settled(engine, server, 20)
    err = capsys.readouterr().err
    assert err.count(said) == 1, err
    assert str(status) in err
    assert "test-api-key-0123456789abcdef" not in err  # the key is masked
    assert sorted(server.accepted_ids()) == sorted(refs)
    assert stats["retries"] >= 4
    # ... and when the service takes them again, that is said too (the refusal was the last
    # word on stderr, long after the key was enabled again).
    assert err.count("takes the events again") == 1, err
    assert err.index(said) < err.index("takes the events again")


@pytest.mark.parametrize("status", [422])
def test_bad_event_is_isolated_by_bisection(server, make_engine, status):
    # 422 is evidence of one bad event (400 is a configuration error: tests/delivery).
    def reject_bad(events: list[dict[str, Any]], size: int) -> int:
        return status if any(event.get("message") == "bad" for event in events) else 202

    server.default = reject_bad
    engine = make_engine(flush_interval=5.0)
    refs = capture(engine, 15, "good")
    bad = log_event("bad", level="Info")
    engine.enqueue(bad)
    refs += capture(engine, 16, "good2")
    stats = settled(engine, server, 31)
    assert stats["dropped"]["rejected"] == 1
    assert sorted(server.accepted_ids()) == sorted(refs)
    assert bad["reference_id"] not in server.accepted_ids()
    # Bisection: the 32-event batch was split until the bad event stood alone.
    assert server.statuses().count(status) >= 2


def test_413_splits_batches_until_they_fit(server, make_engine):
    server.default = lambda events, size: 413 if len(events) > 4 else 202
    engine = make_engine(flush_interval=5.0)
    refs = capture(engine, 40)
    stats = settled(engine, server, 40)
    assert sorted(server.accepted_ids()) == sorted(refs)
    assert stats["dropped_total"] == 0
    assert all(len(seen.events) <= 4 for seen in server.requests if seen.status == 202)


def test_413_on_a_single_event_shrinks_it_once_and_marks_it(server, make_engine):
    server.default = lambda events, size: 413 if size > 30_000 else 202
    engine = make_engine(flush_interval=5.0)
    # Random hex: it does not compress, so the request really is over the server's limit.
    big = log_event(
        "big", level="Info", data={f"field{i}": os.urandom(4000).hex() for i in range(15)}
    )
    engine.enqueue(big)
    settled(engine, server, 1)
    [arrived] = server.accepted
    assert arrived["reference_id"] == big["reference_id"]
    assert "@trimmed" in arrived["data"]


def test_413_twice_for_a_single_event_drops_it_as_too_large(server, make_engine):
    server.default = lambda events, size: 413
    engine = make_engine()
    # Random hex: the shrunk copy is smaller, so it is sent too (a copy as large as the request
    # refused is not: the next test).
    data = {f"field{i}": os.urandom(4000).hex() for i in range(5)}
    engine.enqueue(log_event("never fits", level="Info", data=data))
    stats = settled(engine, server, 0)
    assert stats["dropped"]["too_large"] == 1
    assert server.statuses() == [413, 413]


def test_connection_refused_then_server_comes_up(make_engine):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    engine = make_engine(url=f"http://127.0.0.1:{port}")
    refs = capture(engine, 25)
    assert not engine.flush(0.3)  # nobody listens: nothing can be settled yet
    stats = engine.stats()
    assert "refused" in (stats["last_error"] or "")
    assert stats["captured"] == accounted(stats) == 25
    with FaultServer(port=port) as late_server:
        settled(engine, late_server, 25)
        assert sorted(late_server.accepted_ids()) == sorted(refs)


def test_connection_reset_is_retried(server, make_engine):
    server.script.extend(["reset", "reset"])
    engine = make_engine()
    refs = capture(engine, 10)
    stats = settled(engine, server, 10)
    assert server.statuses()[:2] == ["reset", "reset"]
    assert "reset" in (stats["last_error"] or "")
    assert sorted(server.accepted_ids()) == sorted(refs)


def test_server_that_never_answers_times_out_and_retries(server, make_engine):
    server.script.append("hang")
    # Long enough that a loaded machine answers the requests after the hang within it (an
    # answer that times out is retried, and arrives twice).
    engine = make_engine(timeout=1.5)
    refs = capture(engine, 10)
    stats = settled(engine, server, 10)
    assert server.statuses()[0] == "hang"
    assert "timeout" in (stats["last_error"] or "")
    assert sorted(server.accepted_ids()) == sorted(refs)


@pytest.mark.parametrize("drip", ["drip", "drip-headers"])
def test_an_answer_that_drips_is_given_up_like_one_that_never_comes(server, make_engine, drip):
    """A read timeout restarts with every byte: without a limit on the whole answer, a server
    that drips its body held the worker (and every event) for as long as it dripped. The limit
    began only once the headers were in: a server dripping its headers held it for ever."""
    server.script.append(drip)
    engine = make_engine(timeout=1.5)
    refs = capture(engine, 10)
    stats = settled(engine, server, 10)
    assert server.statuses()[0] == drip
    assert "timeout" in (stats["last_error"] or "")
    assert sorted(server.accepted_ids()) == sorted(refs)
    assert wait_until(lambda: server.answer_bytes, 10)  # the client closed: the writes failed
    assert server.answer_bytes[0] < 100  # a few seconds of bytes, not the 1,000 of its length


def test_a_huge_answer_is_not_read_whole(server, make_engine):
    """The service answers a post with a few bytes; a 64 MB answer (something else answering)
    was read whole into memory."""
    server.script.append("huge")
    engine = make_engine()
    refs = capture(engine, 10)
    stats = settled(engine, server, 10)
    assert server.statuses()[0] == "huge"
    assert "not the service's answer" in (stats["last_error"] or ""), stats["last_error"]
    assert sorted(server.accepted_ids()) == sorted(refs)
    assert wait_until(lambda: server.answer_bytes, 10)  # the client closed: the writes failed
    assert server.answer_bytes[0] < 16 << 20


def test_lost_answer_retry_creates_no_duplicate(server, make_engine):
    # The server takes the batch but the answer is lost: the retry carries the same reference
    # ids, which the service discards as duplicates, so nothing arrives twice.
    server.script.append(Reply(202, b"", {}))
    engine = make_engine()
    first = capture(engine, 5)
    assert engine.flush(5)
    ids_first_request = [event["reference_id"] for event in server.requests[0].events]
    assert sorted(ids_first_request) == sorted(first)
    # Same batch sent again by a retry after a reset: the events keep their ids.
    server.script.append("reset")
    second = capture(engine, 5, "again")
    settled(engine, server, 10)
    reset_ids = [event["reference_id"] for event in server.requests[1].events]
    retried_ids = [event["reference_id"] for event in server.requests[2].events]
    assert sorted(reset_ids) == sorted(retried_ids) == sorted(second)


def test_errors_are_sent_promptly_and_logs_wait_for_a_batch(server, make_engine):
    engine = make_engine(flush_interval=30.0, error_delay=0.0)
    capture(engine, 3)
    try:
        raise ValueError("boom")
    except ValueError as exc:
        error = error_event(exc, message="failed")
    engine.enqueue(error)
    assert server.wait_for(1, timeout=5.0)
    first = server.requests[0].events
    # The error went at once (errors first, with the logs that were waiting).
    assert first[0]["reference_id"] == error["reference_id"]
    assert engine.flush(5)


def test_expired_events_are_dropped_and_counted(server, make_engine):
    import time

    engine = make_engine()
    engine.enqueue(log_event("old", level="Info"), created=time.time() - 4 * 24 * 3600)
    refs = capture(engine, 2)
    stats = settled(engine, server, 2)
    assert stats["dropped"]["expired"] == 1
    assert sorted(server.accepted_ids()) == sorted(refs)


def test_full_queue_evicts_logs_before_errors(make_engine):
    with socket.socket() as probe:  # a dead server: everything stays queued
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    engine = make_engine(url=f"http://127.0.0.1:{port}", queue_size=10, batch_size=1)
    errors = []
    for index in range(3):
        try:
            raise RuntimeError(index)
        except RuntimeError as exc:
            errors.append(error_event(exc))
    engine.enqueue(errors[0])
    capture(engine, 20)
    engine.enqueue(errors[1])
    engine.enqueue(errors[2])
    capture(engine, 20)
    stats = engine.stats()
    assert stats["captured"] == 43 == accounted(stats)
    assert stats["dropped"]["queue_full"] == 43 - stats["queued"] - stats["in_flight"]
    kept = {entry.event["reference_id"] for entry in engine.intake.buffer.errors}
    in_flight_or_kept = kept | {errors[0]["reference_id"]}
    assert {error["reference_id"] for error in errors} <= in_flight_or_kept


def test_enqueue_from_a_sender_thread_is_not_captured(server, make_engine):
    engine = make_engine()
    captured_on_worker: list[bool] = []

    original = engine.client

    def client_for(timeout: float | None = None) -> Any:
        client = original(timeout)
        post = client.post_payload

        def post_and_log(*args: Any, **kwargs: Any) -> Any:
            captured_on_worker.append(engine.enqueue(log_event("from the worker", level="Debug")))
            return post(*args, **kwargs)

        client.post_payload = post_and_log  # type: ignore[method-assign]
        return client

    engine.delivery.client = client_for  # the client the delivery posts with
    capture(engine, 2)
    settled(engine, server, 2)
    assert captured_on_worker and not any(captured_on_worker)
    assert engine.stats()["captured"] == 2


def test_reentrant_enqueue_during_the_critical_section_does_not_deadlock(server, make_engine):
    # What a __del__ that logs does when the garbage collector runs it in the middle of an
    # enqueue: the same thread enters enqueue again while it holds the engine's lock.
    engine = make_engine()
    nested: list[bool] = []
    entered: list[bool] = []
    start_worker = engine.intake.start_worker  # called with the lock held, on first use

    def reentering_start() -> bool:
        if not entered:
            entered.append(True)
            nested.append(engine.enqueue(log_event("from __del__", level="Info")))
        return start_worker()

    engine.intake.start_worker = reentering_start
    done = threading.Event()

    def log_once() -> None:
        engine.enqueue(log_event("outer", level="Info"))
        done.set()

    thread = threading.Thread(target=log_once, daemon=True)
    thread.start()
    assert done.wait(10), "enqueue deadlocked when re-entered"
    assert nested == [True]
    settled(engine, server, 2)


@pytest.mark.parametrize(("status", "reason"), [(413, "too_large"), (422, "rejected")])
def test_events_the_service_refuses_for_good_are_said_once_on_stderr(
    server, make_engine, capsys, status, reason
):
    # Dropped for good (413 even alone and shrunk, 422 the service's "invalid"): counted, and
    # said once with the service's answer, as a full queue or spool is.
    server.default = lambda events, size: status
    engine = make_engine()
    capture(engine, 3)
    settled(engine, server, 0)
    capture(engine, 2, "later")
    stats = settled(engine, server, 0)
    assert stats["dropped"][reason] == 5
    err = capsys.readouterr().err
    assert err.count("refused") == 1, err
    assert f"stats()['dropped']['{reason}']" in err
    assert str(status) in err
    assert "test-api-key-0123456789abcdef" not in err


def test_requests_as_large_as_one_refused_with_413_are_not_sent_again(server, make_engine, capsys):
    # Something in front of the service (a proxy with a tiny body limit) answers 413 to every
    # request: split, alone and shrunk, that was three requests an event, all for nothing.
    server.default = lambda events, size: 413 if size > 150 else 202
    engine = make_engine()
    capture(engine, 300)
    stats = settled(engine, server, 0)
    assert stats["dropped"]["too_large"] == 300
    assert len(server.requests) < 60, len(server.requests)
    assert capsys.readouterr().err.count("refused") == 1


def test_a_413_of_a_moment_drops_only_what_it_was_answered_to(server, make_engine) -> None:
    """A proxy that answers 413 five times in a row (restarting), then takes everything: the
    smallest request answered 413 was remembered for a minute, and every event logged in that
    minute was dropped as too large without being sent."""
    server.script.extend([413] * 5)
    engine = make_engine()
    refs = capture(engine, 40)
    assert engine.flush(10.0), engine.stats()
    # At most the event answered 413 alone and shrunk (the fifth answer) is dropped.
    dropped = engine.stats()["dropped"]["too_large"]
    assert dropped <= 1
    later = capture(engine, 30, prefix="later")  # logged within the minute after
    stats = settled(engine, server, 70 - dropped)
    assert stats["dropped"]["too_large"] == dropped
    assert len(set(refs) - set(server.accepted_ids())) == dropped
    assert set(later) <= set(server.accepted_ids())


@pytest.mark.parametrize("retry_initial", [0.2, 30.0])
def test_a_413_of_a_moment_during_the_exit_drops_nothing_else(server, retry_initial) -> None:
    """The exit flush dropped every event left untried after a 413 of a moment. The probe
    now comes within the exit when it can; when it would come after the deadline, what is
    left is counted as the exit counts what it could not send (``shutdown``)."""
    from eventlog_handler.delivery import _engine as transport
    from eventlog_handler.settings import Settings
    from tests.support.constants import TRANSPORT_API_KEY

    server.script.extend([413] * 5)
    options = {"shutdown_timeout": 3.0, "retry_initial": retry_initial, "flush_interval": 60}
    settings = Settings.from_options(
        {"server_url": server.url, "api_key": TRANSPORT_API_KEY, **options}, environ={}
    )
    engine = transport.Engine(settings)
    capture(engine, 40)
    started = time.monotonic()
    engine.shutdown(3.0)
    assert time.monotonic() - started < 3.5
    stats = engine.stats()
    assert stats["dropped"]["too_large"] <= 1, stats
    assert stats["captured"] == accounted(stats) == 40
    if retry_initial < 1:
        assert stats["delivered"] >= 39, stats


def test_the_exit_ends_once_its_next_try_would_come_after_its_deadline(server) -> None:
    """402 at exit: the next try is the next 5-minute usage bucket, after the exit's deadline;
    the exit waited out all of ``shutdown_timeout`` for nothing."""
    from eventlog_handler.delivery import _engine as transport
    from eventlog_handler.settings import Settings
    from tests.support.constants import TRANSPORT_API_KEY

    server.default = 402
    settings = Settings.from_options(
        {"server_url": server.url, "api_key": TRANSPORT_API_KEY, "shutdown_timeout": 5.0},
        environ={},
    )
    # Within seconds of a bucket's start, the next try does come before the deadline, and the
    # exit rightly waits for it: the test starts past that moment.
    to_bucket = 300 - time.time() % 300
    if to_bucket < 7:
        time.sleep(to_bucket + 0.1)
    engine = transport.Engine(settings)
    capture(engine, 3)
    started = time.monotonic()
    assert engine.shutdown(5.0) == 3  # not sent: counted as dropped at exit
    assert time.monotonic() - started < 2.5
    assert server.statuses() and set(server.statuses()) == {402}


def test_a_422_is_not_taken_for_a_size_limit(server, make_engine) -> None:
    """422 bisects a batch to find its bad event: that split was learned as a 413's limit, and
    a valid event as large as that batch was then shrunk without being sent as it was."""
    server.default = lambda events, size: (
        422 if any(event.get("message") == "bad" for event in events) else 202
    )
    engine = make_engine(flush_interval=5.0)
    for message in ("fine 1", "bad", "fine 2"):
        engine.enqueue(log_event(message, level="Info"))
    settled(engine, server, 2)
    blob = os.urandom(3000).hex()
    engine.enqueue(log_event("large", level="Info", data={"blob": blob}))
    settled(engine, server, 3)
    [large] = [event for event in server.accepted if event["message"] == "large"]
    assert large["data"] == {"blob": blob}  # whole, not trimmed
