"""The caller's side of the engine (``delivery/_intake.py``): when the worker is woken, when
events are due, when a logging thread waits for the worker, and what ``give_back`` keeps.

No worker thread: the ledger's condition is replaced by a recorder, and "the worker" is
whatever the test does inside the recorder's ``wait``."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import pytest

from eventlog_handler.delivery import _intake
from eventlog_handler.delivery._buffer import Entry
from eventlog_handler.delivery._intake import BUSY, STUCK_AFTER, Intake
from eventlog_handler.delivery._ledger import Ledger
from eventlog_handler.delivery._state import RunState
from eventlog_handler.settings import Settings


class Condition:
    """Stands for ``ledger.changed``: counts wake-ups, runs ``on_wait`` instead of sleeping."""

    def __init__(self) -> None:
        self.notified = 0
        self.waits: list[float | None] = []
        self.on_wait: Callable[[], None] = lambda: None

    def notify_all(self) -> None:
        self.notified += 1

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(timeout)
        self.on_wait()
        return True


def make_intake(**options: object) -> tuple[Intake, Condition]:
    values: dict[str, object] = {
        "api_key": "k",
        "queue_size": 100,
        "batch_size": 10,
        "error_delay": 0.25,
        "flush_interval": 3.0,
    }
    values.update(options)
    settings = Settings(**values)  # type: ignore[arg-type]
    ledger = Ledger()
    changed = Condition()
    ledger.changed = changed  # type: ignore[assignment]
    intake = Intake(settings, ledger, RunState())
    intake.worker_running = True  # no thread: the test plays the worker
    return intake, changed


def entry(intake: Intake, *, error: bool = False, at: float = 100.0, text: str = "m") -> Entry:
    made = Entry(intake.settings, None, 40 if error else 20, "src", text, at, at)
    made.is_error = error
    return made


def accounted(intake: Intake) -> bool:
    ledger = intake.ledger
    return ledger.captured == (
        ledger.delivered
        + sum(ledger.dropped.values())
        + len(intake.buffer)
        + ledger.in_flight
        + ledger.spooled
    )


@pytest.fixture
def no_pushback(monkeypatch: pytest.MonkeyPatch) -> list[Intake]:
    """Record the calls of ``_wait_for_worker`` instead of waiting."""
    calls: list[Intake] = []
    monkeypatch.setattr(Intake, "_wait_for_worker", lambda self: calls.append(self))
    return calls


# -- put ------------------------------------------------------------------------------------


def test_put_counts_queues_and_sizes_the_entry() -> None:
    intake, _ = make_intake()
    item = entry(intake)
    assert intake.put(item) is True
    assert intake.ledger.captured == 1
    assert len(intake.buffer) == 1
    assert item.size > 0
    assert intake.buffer.bytes == item.size
    assert accounted(intake)


def test_put_after_finish_drops_as_shutdown() -> None:
    intake, changed = make_intake()
    intake.finished = True
    assert intake.put(entry(intake)) is False
    assert intake.ledger.dropped["shutdown"] == 1
    assert len(intake.buffer) == 0
    assert changed.notified == 0
    assert accounted(intake)


def test_put_starts_the_worker_when_none_runs() -> None:
    intake, _ = make_intake()
    started: list[bool] = []
    intake.worker_running = False
    intake.start_worker = lambda: started.append(True) or True
    intake.put(entry(intake))
    assert started == [True]
    intake.worker_running = True
    intake.put(entry(intake))
    assert started == [True]


def test_put_into_a_full_buffer_evicts_the_oldest_log_as_queue_full(no_pushback) -> None:
    intake, _ = make_intake(queue_size=3, batch_size=1)
    first = entry(intake, text="first")
    intake.put(first)
    intake.put(entry(intake, error=True))
    intake.put(entry(intake))
    assert intake.put(entry(intake, text="new")) is True
    assert intake.ledger.dropped["queue_full"] == 1
    assert first not in intake.buffer.logs
    assert accounted(intake)


def test_put_of_a_log_into_a_buffer_of_errors_reports_it_dropped(no_pushback) -> None:
    intake, _ = make_intake(queue_size=2, batch_size=1)
    intake.put(entry(intake, error=True))
    intake.put(entry(intake, error=True))
    assert intake.put(entry(intake)) is False
    assert intake.ledger.dropped["queue_full"] == 1
    assert len(intake.buffer.errors) == 2
    assert accounted(intake)


# -- waking the worker ----------------------------------------------------------------------


def test_a_busy_worker_is_never_woken() -> None:
    intake, changed = make_intake()
    assert intake.wake_at == BUSY
    for _ in range(5):
        intake.put(entry(intake, error=True))
    assert changed.notified == 0


def test_an_idle_worker_is_woken_by_the_first_event() -> None:
    intake, changed = make_intake()
    intake.wake_at = math.inf  # sleeping without a timeout
    intake.put(entry(intake))
    assert changed.notified == 1
    assert intake.wake_at == BUSY  # woken: the next put doesn't wake it again
    intake.put(entry(intake))
    assert changed.notified == 1


def test_the_worker_is_woken_when_an_error_is_due_before_it_wakes() -> None:
    intake, changed = make_intake()
    intake.wake_at = 101.0  # it wakes by itself at 101
    intake.put(entry(intake, error=True, at=100.0))  # due at 100.25
    assert changed.notified == 1
    assert intake.wake_at == BUSY


def test_the_worker_is_not_woken_when_the_event_is_due_after_it_wakes() -> None:
    intake, changed = make_intake()
    intake.wake_at = 101.0
    intake.put(entry(intake, at=100.0))  # a log: due at 103
    intake.put(entry(intake, error=True, at=100.9))  # due at 101.15
    assert changed.notified == 0
    assert intake.wake_at == 101.0


def test_due_exactly_at_the_wake_time_does_not_wake() -> None:
    intake, changed = make_intake(error_delay=1.0)
    intake.wake_at = 101.0
    intake.put(entry(intake, error=True, at=100.0))  # due at 101: the worker wakes then anyway
    assert changed.notified == 0


def test_the_worker_is_woken_when_a_batch_is_full() -> None:
    intake, changed = make_intake(batch_size=3)
    intake.wake_at = 102.0  # before the logs are due (103)
    intake.put(entry(intake, at=100.0))
    intake.put(entry(intake, at=100.0))
    assert changed.notified == 0
    intake.put(entry(intake, at=100.0))
    assert changed.notified == 1


def test_spool_all_wakes_the_worker_for_every_event() -> None:
    intake, changed = make_intake(spool_all=True)
    intake.wake_at = 1_000.0
    intake.put(entry(intake, at=100.0))
    assert changed.notified == 1


# -- due ------------------------------------------------------------------------------------


def test_nothing_is_due_when_the_buffer_is_empty() -> None:
    intake, _ = make_intake()
    assert intake.due(100.0) == math.inf
    intake.state.flushing = 1
    assert intake.due(100.0) == math.inf


def test_an_error_is_due_after_error_delay() -> None:
    intake, _ = make_intake()
    intake.put(entry(intake, error=True, at=100.0))
    assert intake.due(100.0) == pytest.approx(100.25)


def test_a_log_is_due_after_flush_interval() -> None:
    intake, _ = make_intake()
    intake.put(entry(intake, at=100.0))
    assert intake.due(100.0) == pytest.approx(103.0)


def test_due_is_the_earlier_of_the_oldest_error_and_the_oldest_log() -> None:
    intake, _ = make_intake()
    intake.put(entry(intake, at=100.0))  # 103
    intake.put(entry(intake, at=101.0))  # 104
    intake.put(entry(intake, error=True, at=102.0))  # 102.25
    assert intake.due(102.0) == pytest.approx(102.25)
    intake2, _ = make_intake()
    intake2.put(entry(intake2, at=100.0))  # 103
    intake2.put(entry(intake2, error=True, at=102.9))  # 103.15
    assert intake2.due(102.9) == pytest.approx(103.0)


@pytest.mark.parametrize("hurry", ["flushing", "closing"])
def test_everything_is_due_now_when_hurried(hurry: str) -> None:
    intake, _ = make_intake()
    intake.put(entry(intake, at=100.0))
    setattr(intake.state, hurry, 1 if hurry == "flushing" else True)
    assert intake.state.hurried
    assert intake.due(100.5) == 100.5


def test_a_full_batch_is_due_now() -> None:
    intake, _ = make_intake(batch_size=2)
    intake.put(entry(intake, at=100.0))
    assert intake.due(100.0) == pytest.approx(103.0)
    intake.put(entry(intake, at=100.0))
    assert intake.due(100.0) == 100.0


def test_with_spool_all_anything_is_due_now() -> None:
    intake, _ = make_intake(spool_all=True)
    intake.put(entry(intake, at=100.0))
    assert intake.due(100.0) == 100.0


def test_fewer_events_than_a_batch_are_due_now_past_the_byte_high_water(no_pushback) -> None:
    """Byte back-pressure wakes the worker: it must find something to take (else the logging
    thread waits out PUSHBACK_WAIT and the burst is evicted)."""
    intake, _ = make_intake(memory_budget=80_000, batch_size=10)  # high bytes 30,000
    intake.put(entry(intake, at=100.0, text="x" * 10_000))
    intake.put(entry(intake, at=100.0, text="x" * 10_000))
    assert intake.due(100.0) == pytest.approx(103.0)
    intake.put(entry(intake, at=100.0, text="x" * 10_000))
    assert len(intake.buffer) < 10
    assert intake.due(100.0) == 100.0


# -- back-pressure --------------------------------------------------------------------------


def test_water_marks() -> None:
    intake, _ = make_intake(queue_size=100, batch_size=10)
    assert (intake.high_water, intake.low_water) == (75, 65)
    small, _ = make_intake(queue_size=8, batch_size=10)
    assert (small.high_water, small.low_water) == (10, 0)


def test_put_pushes_back_past_high_water_only_while_the_service_accepts(no_pushback) -> None:
    intake, _ = make_intake(queue_size=8, batch_size=2)  # high water 6
    for _ in range(6):
        intake.put(entry(intake))
    assert no_pushback == []
    intake.put(entry(intake))
    assert no_pushback == [intake]
    intake.retrying = True  # the service fails: nobody waits for it
    intake.put(entry(intake))
    assert len(no_pushback) == 1
    intake.spilling = lambda: True  # ... unless the worker writes them to disk
    intake.put(entry(intake))
    assert len(no_pushback) == 2


def test_put_pushes_back_past_the_byte_high_water(no_pushback) -> None:
    intake, _ = make_intake(memory_budget=80_000)  # high bytes 30,000
    intake.put(entry(intake, text="x" * 10_000))
    intake.put(entry(intake, text="x" * 10_000))
    assert no_pushback == []
    intake.put(entry(intake, text="x" * 10_000))
    assert no_pushback == [intake]


def fill(intake: Intake, count: int) -> None:
    buffer = intake.buffer
    for _ in range(count):
        buffer.put(entry(intake), False, intake.room())


def test_the_wait_ends_when_the_worker_takes_the_buffer_below_low_water() -> None:
    intake, changed = make_intake(queue_size=100, batch_size=10)  # low water 65
    fill(intake, 80)
    changed.on_wait = lambda: intake.buffer.take(10)  # the worker takes a batch per wait
    intake._wait_for_worker()
    assert len(intake.buffer) == 60
    assert len(changed.waits) == 2
    assert intake.waiting == 0


def test_the_wait_wakes_a_sleeping_worker_first() -> None:
    intake, changed = make_intake()
    fill(intake, 80)
    intake.wake_at = 500.0
    changed.on_wait = lambda: intake.buffer.take(100)
    intake._wait_for_worker()
    assert changed.notified == 1
    assert intake.wake_at == BUSY


def test_no_wait_without_a_worker() -> None:
    intake, changed = make_intake()
    fill(intake, 80)
    intake.worker_running = False
    intake._wait_for_worker()
    assert changed.waits == []


def test_the_wait_returns_when_the_worker_posts_longer_than_stuck_after() -> None:
    intake, changed = make_intake()
    fill(intake, 80)
    intake.posting_since = time.monotonic() - STUCK_AFTER - 0.1
    intake.waited = STUCK_AFTER + 0.1  # logging threads waited that long for it
    intake._wait_for_worker()
    assert changed.waits == []
    assert len(intake.buffer) == 80


def test_the_wait_goes_on_while_a_request_is_young_and_the_buffer_nearly_full() -> None:
    intake, changed = make_intake()  # full water: 90 (a batch short of the capacity)
    fill(intake, 95)
    intake.posting_since = time.monotonic()  # just sent: its answer is being read
    changed.on_wait = lambda: intake.buffer.take(100)
    intake._wait_for_worker()
    assert len(changed.waits) == 1


def test_while_a_request_is_on_the_wire_logging_goes_on_below_full_water() -> None:
    """The worker waits for the network, not the interpreter: a logging thread that waited
    for it would only leave both threads idle."""
    intake, changed = make_intake()
    fill(intake, 80)  # past high water (75), below full water (90)
    intake.posting_since = time.monotonic()
    intake._wait_for_worker()
    assert changed.waits == []
    assert len(intake.buffer) == 80


def test_below_full_water_a_put_during_a_young_post_goes_on_without_the_wait(
    no_pushback: list[Intake],
) -> None:
    """What the wait would decide at once (the worker is on the network) is decided in the
    put itself, under the lock it holds: no second look under the lock per call."""
    intake, _ = make_intake()
    fill(intake, 80)  # past high water (75), below full water (90)
    intake.posting_since = time.monotonic()
    intake.put(entry(intake))
    assert no_pushback == []
    fill(intake, 10)  # full water: the post no longer lets it go on
    intake.put(entry(intake))
    assert no_pushback == [intake]
    intake.posting_since = time.monotonic() - 1.0  # on the wire past STUCK_AFTER
    intake.waited = 1.0  # and waited for
    intake.put(entry(intake))
    assert no_pushback == [intake]
    assert len(intake.buffer) == 93


def test_a_young_post_does_not_turn_back_pressure_into_eviction() -> None:
    """The batch on the wire holds part of the budget: the room left for the buffer is less
    than full_bytes. Logging threads wait for the worker before the room is reached, rather
    than go on until their logs are evicted."""
    intake, changed = make_intake(memory_budget=1_000_000, queue_size=10_000, batch_size=500)
    ledger = intake.ledger
    ledger.in_flight_bytes = 450_000  # room() is 550,000: below full_bytes (625,000)
    intake.posting_since = time.monotonic()  # just sent; the service answers in a moment
    assert intake.full_room() == 550_000 - intake.headroom

    def post_answered_and_next_batch_taken() -> None:  # what the worker does meanwhile
        intake.posting_since = None
        ledger.delivered += ledger.in_flight
        batch = intake.buffer.take(500)
        ledger.in_flight = len(batch)
        ledger.in_flight_bytes = sum(e.size for e in batch)

    changed.on_wait = post_answered_and_next_batch_taken
    for _ in range(800):  # 800 logs of about 1 KB: less than the budget
        intake.put(entry(intake, text="x" * 400))
    assert ledger.dropped["queue_full"] == 0
    assert changed.waits  # the logging thread waited for the worker at least once
    assert accounted(intake)


def test_a_request_that_becomes_stuck_ends_the_wait() -> None:
    intake, changed = make_intake()
    fill(intake, 95)
    intake.posting_since = time.monotonic()

    def stuck() -> None:
        intake.posting_since = time.monotonic() - STUCK_AFTER - 0.1
        intake.waited = STUCK_AFTER + 0.1

    changed.on_wait = stuck
    intake._wait_for_worker()
    assert len(changed.waits) == 1
    assert len(intake.buffer) == 95


def test_the_wait_returns_while_retrying() -> None:
    intake, changed = make_intake()
    fill(intake, 80)
    intake.retrying = True
    intake._wait_for_worker()
    assert changed.waits == []


def test_the_wait_goes_on_while_retrying_if_the_worker_spills_to_disk() -> None:
    intake, changed = make_intake()
    fill(intake, 80)
    intake.retrying = True
    intake.spilling = lambda: True
    changed.on_wait = lambda: intake.buffer.take(100)
    intake._wait_for_worker()
    assert len(changed.waits) == 1


@pytest.mark.parametrize(
    ("attribute", "value"),
    [("finished", True), ("worker_running", False)],
    ids=["finishes", "worker stops"],
)
def test_the_wait_ends_when_the_engine_finishes_or_its_worker_stops(
    attribute: str, value: bool
) -> None:
    intake, changed = make_intake()
    fill(intake, 95)
    changed.on_wait = lambda: setattr(intake, attribute, value)
    intake._wait_for_worker()
    assert len(changed.waits) == 1  # not PUSHBACK_WAIT's worth of 0.05 s polls
    assert intake.waiting == 0


def test_a_wait_without_progress_gives_up_and_pauses_pushback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_intake, "PUSHBACK_WAIT", 0.0)
    intake, changed = make_intake()
    fill(intake, 80)
    clock = iter([1_000.0, 1_000.0, 1_000.5, 1_000.6, 1_002.0])
    monkeypatch.setattr(_intake.time, "monotonic", lambda: next(clock))
    intake._wait_for_worker()  # start 1000, first look 1000 (not past), waits, 1000.5: gives up
    assert len(changed.waits) == 1
    assert intake._pushback_off_until == pytest.approx(1_000.5 + _intake.PUSHBACK_PAUSE)
    intake._wait_for_worker()  # at 1000.6: paused, nobody waits
    assert len(changed.waits) == 1


# -- taken and give_back --------------------------------------------------------------------


def test_taken_releases_waiting_threads_only_below_low_water() -> None:
    intake, changed = make_intake()
    fill(intake, 80)
    intake.waiting = 1
    intake.taken()
    assert changed.notified == 0
    intake.buffer.take(20)
    intake.taken()
    assert changed.notified == 1
    intake.waiting = 0
    intake.taken()
    assert changed.notified == 1


def take_in_flight(intake: Intake, count: int) -> list[Entry]:
    """What the worker does when it takes a batch."""
    batch = intake.buffer.take(count)
    intake.ledger.in_flight += len(batch)
    return batch


def test_give_back_returns_entries_to_the_front_in_order() -> None:
    intake, _ = make_intake()
    for n in range(5):
        intake.put(entry(intake, text=f"l{n}"))
    batch = take_in_flight(intake, 3)
    intake.put(entry(intake, text="new"))
    intake.give_back(batch)
    assert [item.message for item in intake.buffer.take(10)] == [
        "l0",
        "l1",
        "l2",
        "l3",
        "l4",
        "new",
    ]


def test_give_back_settles_in_flight_and_keeps_the_books() -> None:
    intake, _ = make_intake()
    for _ in range(5):
        intake.put(entry(intake))
    batch = take_in_flight(intake, 5)
    assert intake.ledger.in_flight == 5
    intake.give_back(batch)
    assert intake.ledger.in_flight == 0
    assert len(intake.buffer) == 5
    assert intake.ledger.dropped["queue_full"] == 0
    assert accounted(intake)


def test_give_back_drops_what_does_not_fit_and_counts_it(no_pushback) -> None:
    intake, _ = make_intake(queue_size=5, batch_size=5)
    for n in range(5):
        intake.put(entry(intake, text=f"old{n}"))
    batch = take_in_flight(intake, 5)
    for n in range(3):
        intake.put(entry(intake, text=f"new{n}"))
    intake.give_back(batch)
    assert len(intake.buffer) == 5
    assert intake.ledger.dropped["queue_full"] == 3
    assert intake.ledger.in_flight == 0
    assert accounted(intake)
    # The newest of the returned entries are kept (they go back to the front).
    assert [item.message for item in intake.buffer.take(10)] == [
        "old3",
        "old4",
        "new0",
        "new1",
        "new2",
    ]


def test_give_back_respects_the_byte_room() -> None:
    intake, _ = make_intake(memory_budget=10_000)
    batch = [entry(intake) for _ in range(3)]
    for item in batch:
        item.size = 4_000
    intake.ledger.captured += 3
    intake.ledger.in_flight += 3
    intake.give_back(batch)
    assert len(intake.buffer) == 2
    assert intake.ledger.dropped["queue_full"] == 1
    assert accounted(intake)


def test_give_back_keeps_errors_rather_than_logs(no_pushback) -> None:
    intake, _ = make_intake(queue_size=3, batch_size=3)
    intake.put(entry(intake, error=True, text="err"))
    intake.put(entry(intake, text="log0"))
    batch = take_in_flight(intake, 2)  # [err, log0]
    intake.put(entry(intake, text="log1"))
    intake.put(entry(intake, text="log2"))
    intake.give_back(batch)  # room for one: the error should be the one kept
    assert [item.message for item in intake.buffer.errors] == ["err"]
    assert intake.ledger.dropped["queue_full"] == 1


def test_give_back_of_the_batch_in_flight_fits_where_it_came_from() -> None:
    intake, _ = make_intake(memory_budget=10_000)
    for _ in range(2):
        item = entry(intake)
        intake.put(item)
        item.size = 4_000  # big entries, together within the budget
    intake.buffer.bytes = 8_000
    batch = take_in_flight(intake, 2)
    intake.ledger.in_flight_bytes = sum(item.size for item in batch)  # as the worker does
    intake.give_back(batch)
    assert len(intake.buffer) == 2
    assert intake.ledger.dropped["queue_full"] == 0


def test_a_stall_of_the_whole_process_is_not_time_on_the_wire(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A poll that comes back late says the process stood still (a long collection, a busy
    machine): that is not time waited for the request on the wire, and the wait goes on."""
    intake, changed = make_intake()
    fill(intake, 95)  # past full water: the logging thread waits while the request is young
    intake.posting_since = 1_000.0
    clock = iter([1_000.1, 1_000.1, 1_000.9, 1_001.0])
    monkeypatch.setattr(_intake.time, "monotonic", lambda: next(clock))
    changed.on_wait = lambda: None if len(changed.waits) < 3 else intake.buffer.take(100)
    intake._wait_for_worker()
    # Looks at 1000.1, then 1000.9 (0.75 s late: stood still; 0.15 s counted as waited),
    # then 1001.0 (0.25 s waited); then the worker took the buffer down.
    assert len(changed.waits) == 3
    assert intake.waited == pytest.approx(0.25)
    assert intake._pushback_off_until == 0.0


def test_time_waited_by_several_threads_at_once_counts_once() -> None:
    intake, _ = make_intake()
    intake.posting_since = 1_000.0
    assert intake._count_wait(999.9, 1_000.05) == pytest.approx(0.15)  # from the post on
    assert intake.waited == pytest.approx(0.05)
    assert intake._count_wait(1_000.02, 1_000.07) == pytest.approx(0.05)  # another thread
    assert intake.waited == pytest.approx(0.07)  # 1000.0 to 1000.07, once
    intake.posting_since = None  # no request on the wire: nothing to count for it
    intake._count_wait(1_002.0, 1_002.05)
    assert intake.waited == pytest.approx(0.07)


def test_polls_that_come_back_on_time_leave_a_slow_request_stuck(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    intake, changed = make_intake()
    fill(intake, 95)
    intake.posting_since = 1_000.0
    ticks = iter(1_000.0 + 0.05 * step for step in range(100))
    monkeypatch.setattr(_intake.time, "monotonic", lambda: next(ticks))
    intake._wait_for_worker()
    assert intake.waited > STUCK_AFTER
    left_at = next(ticks) - 0.05  # the last look
    assert STUCK_AFTER < left_at - 1_000.0 < STUCK_AFTER + 0.1  # 0.5 s on the wire, not later
    assert len(changed.waits) >= 9
    assert len(intake.buffer) == 95


def test_time_between_log_calls_is_not_time_waited(no_pushback: list[Intake]) -> None:
    """A request out for 2 s that nobody waited for (the logging thread was busy, or the
    process stood still, between two log calls): the thread that finds the buffer at full
    water waits for the worker, as it would for a young request."""
    intake, _ = make_intake()
    fill(intake, 95)
    intake.posting_since = time.monotonic() - 2.0
    intake.put(entry(intake))
    assert no_pushback == [intake]
    intake.waited = STUCK_AFTER + 0.05  # then it has waited: logging goes on
    intake.put(entry(intake))
    assert no_pushback == [intake]
