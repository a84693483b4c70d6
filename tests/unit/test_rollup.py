"""The roll-up of duplicates (``delivery/_rollup.py``), with a fake clock: the first event is
sent at once, identical ones within the window are counted, and one summary with ``count``
goes out when the window ends."""

from __future__ import annotations

import datetime
import math
from typing import Any

import pytest

from eventlog_handler.delivery import _rollup
from eventlog_handler.delivery._rollup import Rollup, event_key


def event(message: str = "disk full", **fields: Any) -> dict[str, Any]:
    made: dict[str, Any] = {
        "type": "log",
        "source": "app.db",
        "message": message,
        "@level": "Error",
        "date": "2024-01-01T00:00:00Z",
        "reference_id": "r",
    }
    made.update(fields)
    return made


def test_the_first_event_is_sent_at_once() -> None:
    rollup = Rollup(window=10.0)
    assert rollup.admit(event(), now=100.0) is True
    assert rollup.held == 0
    assert rollup.due() == math.inf
    assert rollup.take_due(1_000.0) == []


def test_duplicates_within_the_window_are_counted_not_sent() -> None:
    rollup = Rollup(window=10.0)
    assert rollup.admit(event(), 100.0)
    assert [rollup.admit(event(), 100.0 + n) for n in range(1, 5)] == [False] * 4
    assert rollup.held == 4
    assert rollup.due() == 110.0  # when the first one's window ends


def test_the_summary_goes_out_when_the_window_ends_with_the_count() -> None:
    rollup = Rollup(window=10.0)
    rollup.admit(event(), 100.0)
    for n in range(1, 4):
        rollup.admit(event(date=f"d{n}", reference_id=f"r{n}"), 100.0 + n)
    assert rollup.take_due(109.9) == []
    ready = rollup.take_due(110.0)
    assert len(ready) == 1
    summary, stands_for = ready[0]
    assert stands_for == 3
    assert summary["count"] == 3
    assert summary["date"] == "d3"  # the last occurrence
    assert summary["reference_id"] == "r3"
    assert rollup.held == 0
    assert rollup.due() == math.inf
    assert rollup.take_due(200.0) == []


def test_the_summary_is_a_copy_of_the_last_event() -> None:
    rollup = Rollup(window=10.0)
    rollup.admit(event(), 100.0)
    last = event()
    rollup.admit(last, 101.0)
    [(summary, _)] = rollup.take_due(111.0)
    assert summary is not last
    assert "count" not in last


def test_counts_add_up_to_all_occurrences() -> None:
    rollup = Rollup(window=10.0)
    sent = 0
    counted = 0
    for n in range(1_000):
        now = 100.0 + n * 0.05  # 50 seconds: five windows
        if rollup.admit(event(), now):
            sent += 1
        for summary, stands_for in rollup.take_due(now):
            assert summary["count"] == stands_for
            counted += stands_for
    for _summary, stands_for in rollup.take_all():
        counted += stands_for
    assert sent + counted == 1_000
    assert sent <= 6


@pytest.mark.parametrize(
    "change",
    [
        {"message": "disk almost full"},
        {"source": "app.web"},
        {"@level": "Warn"},
        {"type": "error"},
        {"value": 3},
        {"tags": ["a"]},
        {"@user": {"identity": "bob"}},
        {"data": {"path": "/var"}},
        {"@simple_error": {"type": "OSError", "message": "x"}},
    ],
)
def test_distinct_events_are_not_merged(change: dict[str, Any]) -> None:
    rollup = Rollup(window=10.0)
    assert rollup.admit(event(), 100.0)
    assert rollup.admit(event(**change), 100.5) is True
    assert rollup.held == 0


@pytest.mark.parametrize("change", [{"geo": "1,2"}, {"custom": "x"}])
def test_other_top_level_fields_count_in_a_full_event(change: dict[str, Any]) -> None:
    many = {f"@field{n}": n for n in range(6)}  # more than 12 fields: they are compared
    rollup = Rollup(window=10.0)
    assert rollup.admit(event(**many), 100.0)
    assert rollup.admit(event(**many, **change), 100.5) is True


@pytest.mark.parametrize("change", [{"geo": "1,2"}, {"custom": "x"}])
def test_other_top_level_fields_count_in_a_usual_event(change: dict[str, Any]) -> None:
    rollup = Rollup(window=10.0)
    assert rollup.admit(event(geo="9,9", custom="y"), 100.0)
    assert rollup.admit(event(**{"geo": "9,9", "custom": "y", **change}), 100.5) is True


def test_date_reference_trace_and_environment_do_not_count() -> None:
    base = event(data={"path": "/var", "@trace": ["a"], "@environment": {"thread": 1}})
    other = event(
        date="2030-01-01T00:00:00Z",
        reference_id="other",
        data={"path": "/var", "@trace": ["b"], "@environment": {"thread": 2}},
    )
    assert event_key(base) == event_key(other)
    rollup = Rollup(window=10.0)
    assert rollup.admit(base, 100.0)
    assert rollup.admit(other, 101.0) is False


def test_nested_data_is_compared_by_value() -> None:
    rollup = Rollup(window=10.0)
    assert rollup.admit(event(data={"a": {"b": [1, 2]}}), 100.0)
    assert rollup.admit(event(data={"a": {"b": [1, 2]}}), 100.1) is False
    assert rollup.admit(event(data={"a": {"b": [1, 3]}}), 100.2) is True


@pytest.mark.parametrize("encoder", ["orjson", "json"])
def test_nested_values_compare_by_value_whichever_encoder_and_whatever_they_hold(
    encoder: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nested data, a user and an error are keyed by their JSON with sorted keys (orjson when
    installed, else the standard library's encoder); what JSON can't hold (a key that is not
    a string, an object a ``before_send`` put in) falls back to nested tuples, compared by
    value too."""
    if encoder == "json":
        monkeypatch.setattr(_rollup, "_orjson", None)
    elif _rollup._orjson is None:
        pytest.fail("the dev extra installs orjson")
    frames = [{"filename": "shop/cart.py", "lineno": 12, "pre_context": ["a", "b"]}]
    one = event(data={"@frames": frames, "order": {"b": 1, "a": [1, 2]}}, **{"@user": {"id": 1}})
    same = event(data={"order": {"a": [1, 2], "b": 1}, "@frames": [dict(frames[0])]})
    same["@user"] = {"id": 1}
    assert event_key(one) == event_key(same)
    assert event_key(one) != event_key(event(data={"@frames": frames, "order": {"a": [1, 3]}}))
    odd = {"ids": {1: "one", 2: "two"}, "when": frozenset({3})}  # not JSON
    assert event_key(event(data=odd)) == event_key(event(data=dict(odd)))
    assert event_key(event(data=odd)) != event_key(event(data={**odd, "ids": {1: "uno"}}))
    when = datetime.datetime(2024, 1, 1, 12, 0)  # not JSON: never keyed as the text it writes
    dated = event(data={"at": {"when": when}})
    assert event_key(dated) == event_key(event(data={"at": {"when": when}}))
    assert event_key(dated) != event_key(event(data={"at": {"when": when.isoformat()}}))
    rollup = Rollup(window=10.0)
    assert rollup.admit(one, 100.0, size=10_000)  # too large to keep: keyed at once
    assert rollup.admit(same, 100.5, size=10_000) is False


def test_each_distinct_event_has_its_own_roll_up() -> None:
    rollup = Rollup(window=10.0)
    a, b = event("a"), event("b")
    assert rollup.admit(a, 100.0) and rollup.admit(b, 101.0)
    assert rollup.admit(event("a"), 102.0) is False
    assert rollup.admit(event("b"), 103.0) is False
    assert rollup.admit(event("b"), 104.0) is False
    assert rollup.due() == 110.0
    [(first, count_a)] = rollup.take_due(110.0)
    assert (first["message"], count_a) == ("a", 1)
    [(second, count_b)] = rollup.take_due(111.0)
    assert (second["message"], count_b) == ("b", 2)


def test_a_duplicate_after_the_window_is_sent_and_releases_the_summary() -> None:
    rollup = Rollup(window=10.0)
    rollup.admit(event(), 100.0)
    rollup.admit(event(), 101.0)
    assert rollup.admit(event(), 115.0) is True  # a new window begins
    assert rollup.due() <= 115.0  # the summary of the first window is due
    [(summary, count)] = rollup.take_due(115.0)
    assert count == 1
    assert summary["count"] == 1


def test_duplicates_of_a_new_window_that_began_before_a_rotation_are_counted() -> None:
    rollup = Rollup(window=10.0)
    rollup.admit(event("other"), 0.0)  # generations rotate at 10, 20, ...
    assert rollup.admit(event(), 9.0)  # window until 19 (kept in the old generation at 10)
    assert rollup.admit(event(), 12.0) is False  # counted
    assert rollup.admit(event(), 19.5) is True  # its window ended: sent, a new one until 29.5
    assert rollup.admit(event(), 19.8) is False  # within 0.3 s of it: should be counted


def test_flush_sends_the_held_ones_at_once_and_the_window_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_rollup.time, "monotonic", lambda: 105.0)
    rollup = Rollup(window=10.0)
    rollup.admit(event(), 100.0)
    rollup.admit(event(), 101.0)
    rollup.admit(event(), 102.0)
    [(summary, count)] = rollup.take_all()
    assert count == 2
    assert summary["count"] == 2
    assert rollup.held == 0
    assert rollup.due() == math.inf
    # The window goes on: a duplicate that follows is counted into a new roll-up.
    assert rollup.admit(event(), 106.0) is False
    assert rollup.held == 1
    assert rollup.due() == 110.0


def test_take_all_without_pending_is_empty() -> None:
    rollup = Rollup(window=10.0)
    rollup.admit(event(), 100.0)
    assert rollup.take_all() == []


def test_a_window_of_zero_sends_everything() -> None:
    rollup = Rollup(window=0.0)
    assert all(rollup.admit(event(), 100.0) for _ in range(10))
    assert rollup.held == 0
    assert rollup.take_all() == []


def test_a_large_first_event_is_remembered_by_its_digest() -> None:
    rollup = Rollup(window=10.0)
    big = event(data={"blob": "x" * 10_000})
    assert rollup.admit(big, 100.0, size=20_000)
    assert rollup.bytes < 1_000  # not kept
    assert rollup.admit(event(data={"blob": "x" * 10_000}), 101.0, size=20_000) is False
    assert rollup.admit(event(data={"blob": "y" * 10_000}), 101.0, size=20_000) is True


def test_an_event_that_cannot_be_compared_is_sent() -> None:
    rollup = Rollup(window=10.0)
    unhashable_message = event(message=["not", "text"])  # type: ignore[arg-type]
    assert rollup.admit(unhashable_message, 100.0) is True
    assert rollup.admit(event(message=["not", "text"]), 100.1) is True  # type: ignore[arg-type]


def test_pending_roll_ups_past_half_the_bytes_go_out_early() -> None:
    rollup = Rollup(window=10.0, max_bytes=4_000)
    for name in ("a", "b", "c"):
        rollup.admit(event(name), 100.0, size=500)
        rollup.admit(event(name), 100.5, size=900)  # held: 900 bytes each
    assert rollup.held == 2  # the third pushed the oldest out: 3 x 900 > 2000
    ready = rollup.take_due(100.6)
    assert [(summary["message"], count) for summary, count in ready] == [("a", 1)]
    # Its window goes on: another "a" is counted again, not sent.
    assert rollup.admit(event("a"), 101.0, size=100) is False


def test_memory_of_distinct_events_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_rollup, "MAX_KEYS", 50)
    rollup = Rollup(window=1_000.0)
    for n in range(1_000):
        assert rollup.admit(event(f"m{n}"), 100.0 + n * 0.001)
    assert len(rollup._messages) + len(rollup._old_messages) <= 100
    # A message forgotten two generations ago is sent again as a first event.
    assert rollup.admit(event("m0"), 102.0) is True


def test_first_events_are_kept_for_the_last_few_hundred_messages_only() -> None:
    """A message's first event is kept for the last FIRSTS to 2 x FIRSTS distinct messages: a
    duplicate within them is counted from the second occurrence; one that comes after more
    distinct messages than that is sent, and its own duplicates are counted from then on."""
    first = _rollup.FIRSTS
    rollup = Rollup(window=1_000.0)
    assert rollup.admit(event("storm"), 100.0)
    for n in range(first - 1):  # within the kept ones
        assert rollup.admit(event(f"m{n}"), 100.0)
    assert rollup.admit(event("storm"), 100.1) is False
    assert rollup.admit(event("later"), 100.2)
    for n in range(2 * first):  # past them: "later"'s first event is no longer kept
        assert rollup.admit(event(f"n{n}"), 100.2)
    assert len(rollup._firsts) + len(rollup._old_firsts) <= 2 * first
    assert rollup.admit(event("later"), 100.3) is True  # compared from here on
    assert rollup.admit(event("later"), 100.4) is False
    assert rollup.admit(event("later", data={"other": 1}), 100.5) is True  # not identical
    assert rollup.held == 2
    counts = sorted(count for _, count in rollup.take_all())
    assert counts == [1, 1]


def test_a_first_event_of_a_window_that_ended_is_not_compared_with(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_rollup, "MAX_KEYS", 50)
    rollup = Rollup(window=10.0)
    assert rollup.admit(event("m", data={"v": 1}), 100.0)
    for n in range(50):  # a full generation: "m" and its first event move to the older one
        assert rollup.admit(event(f"x{n}"), 100.5)
    assert rollup.admit(event("m", data={"v": 2}), 110.2)  # its window ended: a new one
    assert rollup.admit(event("m", data={"v": 3}), 110.3)  # compared with v=2, not v=1
    assert rollup.admit(event("m", data={"v": 1}), 110.4) is True  # v=1: no window of its own
