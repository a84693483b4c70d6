"""The collector's pure parts: dates, ids, filters, body decoding and event rules."""

from __future__ import annotations

import gzip
import zlib
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from eventlog_handler.collector.filters import EventQuery, parse_filter, parse_sort
from eventlog_handler.collector.formats import (
    DateFormatError,
    format_event_date,
    format_utc,
    new_object_id,
    new_token_key,
    parse_date,
)
from eventlog_handler.collector.ingest import decode_body, normalize_event, parse_events
from eventlog_handler.collector.problems import HttpError
from eventlog_handler.collector.throttle import Throttle

NOW = datetime(2030, 1, 1, 12, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2030-01-01T12:00:00.0000000-05:00", datetime(2030, 1, 1, 17, 0, tzinfo=timezone.utc)),
        (
            "2030-01-01T12:00:00.1234567+00:00",
            datetime(2030, 1, 1, 12, 0, 0, 123456, tzinfo=timezone.utc),
        ),
        ("2030-01-01T12:00:00Z", datetime(2030, 1, 1, 12, tzinfo=timezone.utc)),
        ("2030-01-01 12:00", datetime(2030, 1, 1, 12, tzinfo=timezone.utc)),
        ("2030-01-01", datetime(2030, 1, 1, tzinfo=timezone.utc)),
        ("2030-01-01T12:00:00+0130", datetime(2030, 1, 1, 10, 30, tzinfo=timezone.utc)),
    ],
)
def test_parse_date(text: str, expected: datetime) -> None:
    assert parse_date(text) == expected


@pytest.mark.parametrize(
    "text",
    ["", "yesterday", "2030-13-01", "2030-01-01T25:00:00", "2030-01-01T12:00:00+24:00", "20300101"],
)
def test_parse_date_refuses(text: str) -> None:
    with pytest.raises(DateFormatError):
        parse_date(text)


def test_date_formats() -> None:
    moment = datetime(2030, 1, 1, 12, 0, 0, 500000, tzinfo=timezone(timedelta(hours=-5)))
    assert format_event_date(moment) == "2030-01-01T12:00:00.5000000-05:00"
    assert format_utc(moment) == "2030-01-01T17:00:00.5Z"
    assert format_utc(moment.replace(microsecond=0)) == "2030-01-01T17:00:00Z"
    assert parse_date(format_event_date(moment)) == moment


def test_ids() -> None:
    assert len({new_token_key() for _ in range(100)}) == 100
    assert all(len(new_object_id()) == 24 for _ in range(10))
    assert new_token_key().isalnum()


def test_parse_filter() -> None:
    query = parse_filter(
        'type:error level:Warn project:abc source:"my app" tag:t '
        'reference_id:ref-12345 "two words" Free AND other:thing'
    )
    assert query.types == ["error"]
    assert query.levels == ["warn"]
    assert query.project_ids == ["abc"]
    assert query.sources == ["my app"]
    assert query.tags == ["t"]
    assert query.reference_ids == ["ref-12345"]
    assert query.text == ["two words", "free", "other:thing"]
    assert parse_filter("", EventQuery()).text == []


def test_parse_sort() -> None:
    assert parse_sort(None) is False
    assert parse_sort("-date") is False
    assert parse_sort("date") is True
    with pytest.raises(HttpError) as caught:
        parse_sort("message")
    assert caught.value.status == 400


def test_decode_body_bounds_every_encoding() -> None:
    payload = b"x" * 1000
    assert decode_body(payload, None, 1000) == payload
    assert decode_body(gzip.compress(payload), "gzip", 1000) == payload
    assert decode_body(gzip.compress(payload), " GZIP ", 1000) == payload
    deflate = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    raw = deflate.compress(payload) + deflate.flush()
    assert decode_body(raw, "deflate", 1000) == payload
    for body, encoding in [(payload, None), (gzip.compress(payload), "gzip"), (raw, "deflate")]:
        with pytest.raises(HttpError) as caught:
            decode_body(body, encoding, 999)
        assert caught.value.status == 413
    with pytest.raises(HttpError) as caught:
        decode_body(payload, "compress", 1000)
    assert caught.value.status == 415


def test_gzip_bomb_costs_at_most_the_bound() -> None:
    bomb = gzip.compress(b"\0" * 50_000_000)
    with pytest.raises(HttpError) as caught:
        decode_body(bomb, "gzip", 2_000_000)
    assert caught.value.status == 413


def test_parse_events_shapes() -> None:
    assert parse_events(b'{"message": "m"}') == [{"message": "m"}]
    assert parse_events(b'\xef\xbb\xbf[{"a": 1}, 2]') == [{"a": 1}, 2]


def _normalize(item: Any) -> tuple[Any, dict[str, list[str]]]:
    errors: dict[str, list[str]] = {}
    return normalize_event(item, NOW, errors), errors


def test_normalize_defaults_and_rules() -> None:
    event, errors = _normalize({"message": "m", "@level": "WARN", "reference_id": "r" * 8})
    assert errors == {}
    assert event.type == "log"
    assert event.date == format_event_date(NOW)
    assert event.level == "warn"
    assert event.reference_id == "r" * 8
    assert event.data == {"@level": "WARN"}
    assert "m" in event.search_text


def test_normalize_stack_key_groups_same_error() -> None:
    first, _ = _normalize({"@simple_error": {"type": "E", "message": "a", "stack_trace": "t"}})
    again, _ = _normalize({"@simple_error": {"type": "E", "message": "b", "stack_trace": "t"}})
    other, _ = _normalize({"@simple_error": {"type": "E", "message": "a", "stack_trace": "u"}})
    assert first.stack_key == again.stack_key != other.stack_key


def test_normalize_window() -> None:
    old, errors = _normalize({"date": format_event_date(NOW - timedelta(days=3, seconds=1))})
    assert old is None and errors == {}
    future, _ = _normalize({"date": format_event_date(NOW + timedelta(hours=1, seconds=1))})
    assert future.timestamp == NOW.timestamp()


def test_normalize_lone_surrogates_survive() -> None:
    event, errors = _normalize({"message": "\ud800 bad", "source": "\udfff"})
    assert errors == {}
    assert event.message == "\ud800 bad"


def test_throttle_windows() -> None:
    now = [0.0]
    throttle = Throttle(2, clock=lambda: now[0])
    assert [throttle.hit("org").allowed for _ in range(3)] == [True, True, False]
    assert throttle.hit("other").allowed
    now[0] = 15 * 60
    result = throttle.hit("org")
    assert result.allowed and result.remaining == 1 and result.limit == 2
    unlimited = Throttle(None)
    assert all(unlimited.hit("org").allowed for _ in range(5000))
    with pytest.raises(ValueError):
        Throttle(0)
