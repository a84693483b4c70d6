"""The bounded buffer (``delivery/_buffer.py``): eviction order, byte bound, take order."""

from __future__ import annotations

import pytest

from eventlog_handler.delivery._buffer import Entry, EventBuffer, entry_size, estimate
from eventlog_handler.settings import Settings

SETTINGS = Settings(api_key="k")
ROOM = 1 << 40  # no byte bound unless a test sets one


def entry(name: str, *, error: bool = False, size: int = 0, at: float = 0.0) -> Entry:
    made = Entry(SETTINGS, None, 40 if error else 20, name, name, at, at, is_error=error)
    made.size = size
    return made


def log(name: str, size: int = 0) -> Entry:
    return entry(name, size=size)


def err(name: str, size: int = 0) -> Entry:
    return entry(name, error=True, size=size)


def names(entries: list[Entry]) -> list[str]:
    return [item.source for item in entries]  # type: ignore[misc]


def fill(buffer: EventBuffer, *items: Entry, room: int = ROOM) -> list[Entry]:
    evicted: list[Entry] = []
    for item in items:
        evicted += buffer.put(item, item.is_error, room)
    return evicted


def test_capacity_must_be_positive() -> None:
    with pytest.raises(ValueError):
        EventBuffer(0)
    assert len(EventBuffer(1)) == 0
    assert not EventBuffer(1)


def test_put_within_capacity_evicts_nothing() -> None:
    buffer = EventBuffer(3)
    assert fill(buffer, log("l1"), err("e1"), log("l2")) == []
    assert len(buffer) == 3
    assert buffer


def test_the_oldest_log_goes_first() -> None:
    buffer = EventBuffer(3)
    fill(buffer, log("l1"), log("l2"), log("l3"))
    assert names(buffer.put(log("l4"), False, ROOM)) == ["l1"]
    assert names(buffer.put(log("l5"), False, ROOM)) == ["l2"]
    assert names(buffer.take(10)) == ["l3", "l4", "l5"]


def test_errors_are_kept_while_logs_are_evicted() -> None:
    buffer = EventBuffer(3)
    fill(buffer, err("e1"), log("l1"), err("e2"))
    # A new log pushes out the oldest log, not the older error.
    assert names(buffer.put(log("l2"), False, ROOM)) == ["l1"]
    # A new error also pushes out a log first.
    assert names(buffer.put(err("e3"), True, ROOM)) == ["l2"]
    assert names(buffer.take(10)) == ["e1", "e2", "e3"]


def test_a_flood_of_logs_never_pushes_out_an_error() -> None:
    buffer = EventBuffer(5)
    fill(buffer, err("e1"), err("e2"))
    evicted = fill(buffer, *(log(f"l{n}") for n in range(100)))
    assert len(evicted) == 97
    assert names(buffer.take(10)) == ["e1", "e2", "l97", "l98", "l99"]


def test_when_all_errors_a_new_log_is_refused() -> None:
    buffer = EventBuffer(2)
    fill(buffer, err("e1"), err("e2"))
    new = log("l1")
    assert buffer.put(new, False, ROOM) == [new]
    assert names(buffer.take(10)) == ["e1", "e2"]


def test_when_all_errors_a_new_error_evicts_the_oldest_error() -> None:
    buffer = EventBuffer(2)
    fill(buffer, err("e1"), err("e2"))
    assert names(buffer.put(err("e3"), True, ROOM)) == ["e1"]
    assert names(buffer.take(10)) == ["e2", "e3"]


def test_take_returns_errors_first_then_logs_oldest_first() -> None:
    buffer = EventBuffer(10)
    fill(buffer, log("l1"), err("e1"), log("l2"), err("e2"), log("l3"))
    assert names(buffer.take(3)) == ["e1", "e2", "l1"]
    assert names(buffer.take(3)) == ["l2", "l3"]
    assert buffer.take(3) == []


def test_take_stops_once_it_reaches_a_size() -> None:
    """A part the worker builds and encodes beside the budget: taken until it reaches the
    size asked."""
    buffer = EventBuffer(10)
    fill(buffer, log("l1", 400), log("l2", 400), log("l3", 400), log("l4", 5000))
    assert names(buffer.take(10, 700)) == ["l1", "l2"]  # 800: the one that passed 700 is in
    assert buffer.bytes == 5400
    assert names(buffer.take(10, 100)) == ["l3"]
    assert names(buffer.take(10, 100)) == ["l4"]  # larger than the size: taken alone
    assert buffer.bytes == 0 and buffer.take(10, 100) == []


def test_oldest_gives_the_oldest_error_and_log() -> None:
    buffer = EventBuffer(10)
    assert buffer.oldest() == (None, None)
    fill(buffer, log("l1"), err("e1"), log("l2"))
    oldest_error, oldest_log = buffer.oldest()
    assert (oldest_error.source, oldest_log.source) == ("e1", "l1")  # type: ignore[union-attr]
    assert len(buffer) == 3  # nothing removed


def test_put_front_restores_the_order_of_taken_entries() -> None:
    buffer = EventBuffer(10)
    fill(buffer, log("l1"), log("l2"), log("l3"), err("e1"))
    taken = buffer.take(2)
    assert names(taken) == ["e1", "l1"]
    for item in reversed(taken):
        buffer.put_front(item)
    assert names(buffer.take(10)) == ["e1", "l1", "l2", "l3"]


def test_clear_counts_what_was_dropped() -> None:
    buffer = EventBuffer(10)
    fill(buffer, log("l1", 100), err("e1", 50))
    assert buffer.clear() == 2
    assert len(buffer) == 0
    assert buffer.bytes == 0


# -- bytes ----------------------------------------------------------------------------------


def test_bytes_follow_put_take_and_put_front() -> None:
    buffer = EventBuffer(10)
    fill(buffer, log("l1", 100), err("e1", 30), log("l2", 7))
    assert buffer.bytes == 137
    taken = buffer.take(2)
    assert buffer.bytes == 7
    buffer.put_front(taken[1])
    assert buffer.bytes == 107
    buffer.take(10)
    assert buffer.bytes == 0


def test_an_entry_larger_than_the_room_is_refused_alone() -> None:
    buffer = EventBuffer(10)
    fill(buffer, log("l1", 10), room=100)
    big = err("big", 101)
    assert buffer.put(big, True, 100) == [big]
    assert names(buffer.take(10)) == ["l1"]


def test_the_byte_bound_evicts_the_oldest_logs_first() -> None:
    buffer = EventBuffer(100)
    fill(buffer, log("l1", 40), err("e1", 40), log("l2", 40), room=200)
    evicted = buffer.put(log("l3", 100), False, 200)
    assert names(evicted) == ["l1"]
    assert buffer.bytes == 180
    evicted = buffer.put(err("e2", 100), True, 200)
    assert names(evicted) == ["l2", "l3"]
    assert names(buffer.take(10)) == ["e1", "e2"]


def test_the_byte_bound_with_only_errors_left_refuses_a_log_and_keeps_the_logs_it_tried() -> None:
    buffer = EventBuffer(100)
    fill(buffer, err("e1", 60), log("l1", 20), err("e2", 60), room=150)
    new = log("l2", 50)
    # Evicting l1 is not enough and errors can't go for a log: nothing changes.
    assert buffer.put(new, False, 150) == [new]
    assert names(buffer.take(10)) == ["e1", "e2", "l1"]


def test_the_byte_bound_lets_a_new_error_evict_old_errors() -> None:
    buffer = EventBuffer(100)
    fill(buffer, err("e1", 60), err("e2", 60), room=150)
    assert names(buffer.put(err("e3", 60), True, 150)) == ["e1"]
    assert buffer.bytes == 120


# -- size estimates -------------------------------------------------------------------------


def test_estimate_counts_text_by_length_and_is_bounded() -> None:
    assert estimate("x" * 1000) - estimate("") == 1000
    assert estimate({"a": "x" * 1000}) > 1000
    assert estimate(12) == estimate(None) == 32
    huge = list(range(100_000))
    assert estimate(huge) > 100_000 * 8  # extrapolated, not zero


def test_entry_size_grows_with_what_the_entry_carries() -> None:
    small = entry("a")
    big = entry("a")
    big.message = "m" * 10_000
    big.data = {"blob": "d" * 5_000, "n": 1}
    assert entry_size(big) - entry_size(small) >= 15_000
    event = Entry(SETTINGS, {"message": "x" * 2_000}, 40, None, None, 0, 0, is_error=True)
    assert entry_size(event) > 2_000


def test_estimate_counts_what_non_ascii_text_and_many_small_containers_hold() -> None:
    import sys

    wide = "\U0001f600" * 100_000
    assert estimate(wide) >= sys.getsizeof(wide) > 400_000
    rows = {f"k{j}": [[j, k, f"v{k}"] for k in range(20)] for j in range(500)}
    assert estimate(rows) > 1_000_000  # every one of the 10,500 lists counted, not 2,000
    loop: dict[str, object] = {}
    loop["self"] = loop  # never made by the package; the walk still ends
    assert estimate(loop) > 0


def test_a_queued_exception_is_a_copy_without_its_traceback() -> None:
    from eventlog_handler.delivery._buffer import detached

    class Slotted(Exception):
        __slots__ = ("code",)

    def fail() -> None:
        try:
            raise KeyError("inner")
        except KeyError as inner:
            error = Slotted("outer")
            error.code = 7
            raise error from inner

    try:
        fail()
    except Slotted as caught:
        original = caught
    copy = detached(original)
    assert type(copy) is Slotted and copy.args == ("outer",) and copy.code == 7
    assert copy.__traceback__ is None and original.__traceback__ is not None
    assert type(copy.__cause__) is KeyError and copy.__cause__.__traceback__ is None
    missing = FileNotFoundError(2, "No such file or directory", "/nowhere")
    assert str(detached(missing)) == str(missing)
    assert detached(ModuleNotFoundError("no", name="shop")).name == "shop"


def test_exceptions_that_refuse_attributes_are_copied_and_not_kept_alive() -> None:
    import dataclasses
    import gc
    import weakref

    from eventlog_handler.capture._admit import mark_reported, was_reported
    from eventlog_handler.delivery._buffer import detached

    @dataclasses.dataclass(frozen=True)
    class Frozen(Exception):
        code: int

    def fail() -> None:
        raise Frozen(3)

    try:
        fail()
    except Frozen as caught:
        original = caught
    original.__dict__["extra"] = {"inner": KeyError("x"), "tb": original.__traceback__}
    copy = detached(original)
    assert type(copy) is Frozen and copy.code == 3 and copy is not original
    assert copy.__traceback__ is None and copy.extra["tb"] is None
    assert (
        type(copy.extra["inner"]) is KeyError and copy.extra["inner"] is not original.extra["inner"]
    )
    mark_reported(original)  # a frozen dataclass refuses the mark: remembered weakly
    assert was_reported(original)
    held = weakref.ref(original)
    del original, copy
    gc.collect()
    assert held() is None  # the package did not keep it (nor its frames) alive


def test_what_an_exception_holds_is_counted_once_and_cheaply() -> None:
    """``held_by`` (an error's copy for a ``before_send`` hint shares what the exception
    holds): a body on the exception or on an object it holds counts; a structure that holds
    itself is counted once (walked as JSON-safe data it took 1 to 7 s per call and made 316
    MB of one error); a lazy object is not asked what it is (evaluated, it raised, and the
    error was lost)."""
    import time

    from eventlog_handler.delivery._buffer import held_by

    class Response:
        def __init__(self) -> None:
            self.content = bytes(1_000_000)

    error = RuntimeError("upstream failed")
    error.response = Response()  # type: ignore[attr-defined]
    assert 1_000_000 < held_by(error) < 1_100_000

    tree: dict[str, object] = {}
    for index in range(20):
        tree[f"child{index}"] = {"parent": tree, "name": "x" * 100}
    tree["self"] = tree
    looping: list[object] = []
    looping.extend([looping] * 50)
    cyclic = ValueError("state", tree, looping)
    started = time.perf_counter()
    size = held_by(cyclic)
    assert time.perf_counter() - started < 2.0  # it takes about a millisecond
    assert size < 50_000, size

    class Lazy:
        """A proxy that loads on any question (Django's SimpleLazyObject)."""

        def __getattribute__(self, name: str) -> object:
            raise RuntimeError(f"not configured ({name})")

    lazy = KeyError("user")
    lazy.user = Lazy()  # type: ignore[attr-defined]
    assert held_by(lazy) > 0


@pytest.mark.parametrize(
    "args, extra",
    [
        ((), None),
        (("ann", 3), {"a": 1, "b": "two"}),
        (("é",), {"text": "naïve ☃", "f": 1.5, "yes": True, "none": None, "big": 2**80}),
        ((1,), {"ascii": "x" * 5_000, "wide": "☃" * 300}),
    ],
)
def test_a_log_record_is_sized_at_capture_as_entry_size_sizes_it(
    args: tuple[object, ...], extra: dict[str, object] | None
) -> None:
    """The capture of a log record counts its entry's size in its look at the extras (no
    second walk in the intake): what :func:`entry_size` would give."""
    import logging

    from eventlog_handler.capture._records import capture_record

    template = "plain" if not args else "m" + " %s" * len(args)
    record = logging.getLogger("t").makeRecord(
        "t", logging.WARNING, __file__, 1, template, args, None, extra=extra
    )
    captured = capture_record(record, SETTINGS)
    assert captured.event is None and captured.size > 0
    assert captured.size == entry_size(captured)
