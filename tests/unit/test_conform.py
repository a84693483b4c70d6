"""``conform``: what a ``before_send`` hook returns, made an event the service reads."""

from __future__ import annotations

import datetime as dt
import decimal
import fractions
import math
from typing import Any

import pytest

from eventlog_handler.wire._conform import before_hook, conform

BEFORE = {
    "type": "log",
    "date": "2030-01-01T12:00:00.0000000+00:00",
    "reference_id": "0123456789abcdef-1",
    "tags": ["a"],
}


def conformed(**fields: Any) -> tuple[dict[str, Any], list[str]]:
    event = {**BEFORE, **fields}
    restored = conform(event, before_hook(BEFORE))
    return event, restored


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (decimal.Decimal("19.90"), 19.9),
        (fractions.Fraction(1, 4), 0.25),
        (7, 7),
        (2.5, 2.5),
    ],
)
def test_a_number_of_another_kind_becomes_a_number(value: Any, expected: float) -> None:
    event, restored = conformed(value=value)
    assert event["value"] == expected and type(event["value"]) in (int, float)
    assert restored == []


@pytest.mark.parametrize(
    "value", ["12", True, math.nan, decimal.Decimal("NaN"), 10**400, [1], {"v": 1}]
)
def test_what_is_no_number_is_not_sent_as_the_value(value: Any) -> None:
    event, restored = conformed(value=value)
    assert "value" not in event and restored == ["value"]


@pytest.mark.parametrize(
    "value",
    [
        dt.datetime.min,  # naive: in a zone west of UTC it is before year 1 (ValueError)
        -(10**12),  # a POSIX time 29,000 years before year 1
        math.nan,
        "not a date",
        b"2030-01-01",
    ],
)
def test_a_date_that_cannot_be_one_is_given_back_and_nothing_raises(value: Any) -> None:
    event, restored = conformed(date=value)
    assert event["date"] == BEFORE["date"] and restored == ["date"]


def test_dates_in_other_forms_are_written_in_the_services() -> None:
    aware = dt.datetime(2030, 1, 1, 12, 0, tzinfo=dt.timezone.utc)
    event, restored = conformed(date=aware)
    assert event["date"] == "2030-01-01T12:00:00.0000000+00:00" and restored == []
    event, _ = conformed(date="2030-01-01T12:00:00Z")
    assert event["date"] == "2030-01-01T12:00:00.0000000+00:00"


def test_tags_texts_and_odd_fields_given_back() -> None:
    event, restored = conformed(
        tags=["x", 3, None, "y" * 101],
        type="",
        data=["a"],
        reference_id="my id!",
        count=-1,
        message=b"hi",
        **{"@user": "bob"},
    )
    assert event["tags"] == ["x", "3", "None"]
    assert event["type"] == "log" and "data" not in event and "count" not in event
    assert event["reference_id"] == BEFORE["reference_id"] and "@user" not in event
    assert event["message"] == "b'hi'"
    assert sorted(restored) == ["@user", "count", "data", "reference_id", "type"]


def test_the_earliest_naive_datetime_west_of_utc_is_given_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``datetime.min`` (naive: local time) is before year 1 in UTC when the machine's zone
    is west of it: the conversion raised, the worker stopped and its batch was lost."""
    import time

    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        event, restored = conformed(date=dt.datetime.min)
    finally:
        monkeypatch.undo()
        time.tzset()
    assert event["date"] == BEFORE["date"] and restored == ["date"]
