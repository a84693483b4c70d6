"""The engine's books (``delivery/_ledger.py``): every captured event has one outcome, so
``captured == delivered + dropped + queued + in_flight + spooled`` at every step."""

from __future__ import annotations

import threading

import pytest

from eventlog_handler.delivery._buffer import Entry
from eventlog_handler.delivery._intake import Intake
from eventlog_handler.delivery._ledger import DROP_REASONS, Ledger
from eventlog_handler.delivery._state import RunState
from eventlog_handler.settings import Settings


def identity(ledger: Ledger, queued: int) -> bool:
    snap = ledger.snapshot(queued)
    return snap["captured"] == (
        snap["delivered"]
        + snap["dropped_total"]
        + snap["queued"]
        + snap["in_flight"]
        + snap["spooled"]
    )


def test_a_new_ledger_is_all_zero() -> None:
    ledger = Ledger()
    snap = ledger.snapshot(0)
    assert snap["captured"] == snap["delivered"] == snap["dropped_total"] == 0
    assert snap["dropped"] == dict.fromkeys(DROP_REASONS, 0)
    assert snap["last_error"] is None
    assert identity(ledger, 0)


def test_the_lock_is_reentrant_and_shared_with_the_condition() -> None:
    ledger = Ledger()
    with ledger.lock, ledger.lock:  # a log call from __del__ on a thread that holds it
        with ledger.changed:
            ledger.changed.notify_all()


def test_settle_delivered() -> None:
    ledger = Ledger()
    ledger.captured = ledger.in_flight = 5
    ledger.settle(5, None)
    assert (ledger.delivered, ledger.in_flight) == (5, 0)
    assert identity(ledger, 0)


@pytest.mark.parametrize("reason", DROP_REASONS)
def test_settle_dropped_for_each_reason(reason: str) -> None:
    ledger = Ledger()
    ledger.captured = ledger.in_flight = 3
    ledger.settle(2, reason)
    assert ledger.dropped[reason] == 2
    assert ledger.in_flight == 1
    assert ledger.delivered == 0
    assert identity(ledger, 0)


def test_settle_unknown_reason_is_an_error() -> None:
    ledger = Ledger()
    ledger.in_flight = 1
    with pytest.raises(KeyError):
        ledger.settle(1, "lost")


def test_in_flight_never_goes_negative() -> None:
    ledger = Ledger()
    ledger.in_flight = 1
    ledger.settle(3, None)
    assert ledger.in_flight == 0


def test_settle_wakes_waiters_when_nothing_is_in_flight() -> None:
    ledger = Ledger()
    ledger.in_flight = 2
    woken: list[bool] = []

    class Recorder:
        def notify_all(self) -> None:
            woken.append(True)

    ledger.changed = Recorder()  # type: ignore[assignment]
    ledger.settle(1, None)
    assert woken == []
    ledger.settle(1, "rejected")
    assert woken == [True]


def test_snapshot_is_a_copy() -> None:
    ledger = Ledger()
    snap = ledger.snapshot(0)
    snap["dropped"]["rejected"] = 99
    snap["replayed"]["delivered"] = 99
    assert ledger.dropped["rejected"] == 0
    assert ledger.replayed["delivered"] == 0


def test_snapshot_sums_the_drops() -> None:
    ledger = Ledger()
    ledger.dropped["queue_full"] = 3
    ledger.dropped["expired"] = 4
    assert ledger.snapshot(7)["dropped_total"] == 7
    assert ledger.snapshot(7)["queued"] == 7


def test_identity_through_the_life_of_events() -> None:
    """Intake, worker and delivery as the engine moves events: the books balance at each step."""
    settings = Settings(api_key="k", queue_size=4, batch_size=4)
    ledger = Ledger()
    intake = Intake(settings, ledger, RunState())
    intake.worker_running = True
    intake._wait_for_worker = lambda: None  # type: ignore[method-assign]
    buffer = intake.buffer

    def check() -> None:
        with ledger.lock:
            assert identity(ledger, len(buffer)), ledger.snapshot(len(buffer))

    def put(error: bool = False) -> None:
        intake.put(Entry(settings, None, 20, "s", "m", 1.0, 1.0, is_error=error))
        check()

    for n in range(6):  # two over capacity: evicted as queue_full
        put(error=n == 0)
    assert ledger.dropped["queue_full"] == 2
    batch = buffer.take(3)  # the worker takes a batch
    ledger.in_flight += len(batch)
    check()
    ledger.settle(2, None)  # two delivered
    check()
    ledger.settle(1, "rejected")  # one rejected
    check()
    batch = buffer.take(1)
    ledger.in_flight += 1
    intake.give_back(batch)  # back to the buffer
    check()
    batch = buffer.take(1)
    ledger.in_flight += 1
    with ledger.lock:  # spilled to disk: no longer in flight, spooled
        ledger.in_flight -= 1
        ledger.spooled += 1
    check()
    intake.finished = True
    put()  # after shutdown: dropped at once
    assert ledger.dropped["shutdown"] == 1
    ledger.dropped["shutdown"] += buffer.clear()
    check()
    assert ledger.snapshot(0)["captured"] == 7


def test_concurrent_settles_keep_the_identity() -> None:
    ledger = Ledger()
    ledger.captured = ledger.in_flight = 4_000

    def settle(reason: str | None) -> None:
        for _ in range(1_000):
            ledger.settle(1, reason)

    threads = [
        threading.Thread(target=settle, args=(r,)) for r in (None, None, "rejected", "expired")
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert ledger.delivered == 2_000
    assert ledger.dropped["rejected"] == ledger.dropped["expired"] == 1_000
    assert ledger.in_flight == 0
    assert identity(ledger, 0)


def test_events_the_exit_wrote_off_are_not_counted_again_by_the_thread_that_held_them() -> None:
    """The exit counted 2 events the worker held as ``shutdown`` (``in_flight`` 1 left: on the
    wire). The worker's later outcome for them is not counted again; another thread's (an
    event sent after the exit flush) is, and so is an answer to a request."""
    ledger = Ledger()
    ledger.captured = 4
    ledger.dropped["shutdown"] = 2
    ledger.in_flight = 2  # one on the wire, one an event logged after the flush
    ledger.written_off, ledger.written_off_by = 2, threading.get_ident()
    ledger.settle(1, "filtered", held=True)
    assert ledger.dropped["filtered"] == 0 and ledger.in_flight == 2 and ledger.written_off == 1
    other = threading.Thread(target=ledger.settle, args=(1, "filtered"), kwargs={"held": True})
    other.start()
    other.join()
    assert ledger.dropped["filtered"] == 1 and ledger.in_flight == 1 and ledger.written_off == 1
    ledger.settle(1, None)  # the request's answer
    assert ledger.delivered == 1 and ledger.in_flight == 0
    ledger.settle(2, "expired", held=True)  # one more than is left written off: counted
    assert ledger.written_off == 0 and ledger.dropped["expired"] == 1
