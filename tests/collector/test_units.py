"""The collector's pure parts: dates, ids, filters, bodies, the event rules, signatures,
credentials and the Host check."""

from __future__ import annotations

import base64
import gzip
import zlib
from datetime import datetime, timedelta, timezone
from email.message import Message
from typing import Any

import pytest

from eventlog_handler.collector._auth import HostPolicy, read_credentials
from eventlog_handler.collector._eventstore import event_id, parse_event_id
from eventlog_handler.collector._filters import EventQuery, parse_filter, parse_sort
from eventlog_handler.collector._formats import (
    DateFormatError,
    event_date_timestamp,
    format_event_date,
    format_utc,
    new_object_id,
    new_token_key,
    parse_date,
)
from eventlog_handler.collector._ingest import Received, body_items, decode_body, read_events
from eventlog_handler.collector._normalize import FieldTypeError, NormalizedEvent, Normalizer
from eventlog_handler.collector._problems import HttpError
from eventlog_handler.collector._stacking import signature_of, stack_basis, stack_title
from eventlog_handler.collector._throttle import Throttle

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


@pytest.mark.parametrize(
    "text",
    [
        "2030-01-01T12:00:00.5000000-05:00",
        "2026-11-23T10:41:35.2605369+00:00",
        "2030-06-30T23:59:59.9999999+13:45",
    ],
)
def test_fast_date_path_agrees_with_the_parser(text: str) -> None:
    fast = event_date_timestamp(text)
    assert fast is not None
    assert abs(fast - parse_date(text).timestamp()) < 1e-6


@pytest.mark.parametrize(
    "text",
    ["2030-02-30T12:00:00.0000000-05:00", "2030-01-01T12:00:00.00000x0-05:00", "2030-01-01"],
)
def test_fast_date_path_declines_other_shapes(text: str) -> None:
    assert event_date_timestamp(text) is None


def test_ids() -> None:
    assert len({new_token_key() for _ in range(100)}) == 100
    assert all(len(new_object_id()) == 24 for _ in range(10))
    assert new_token_key().isalnum()
    made = event_id(1_800_000_000.5, 12345)
    assert len(made) == 24 and int(made, 16) > 0
    assert parse_event_id(made) == (1_800_000_000, 12345)
    for bad in ("", "x" * 24, "0" * 23, made.upper()):
        assert parse_event_id(bad) is None


def test_parse_filter() -> None:
    query = parse_filter(
        'type:error level:Warn project:abc source:"my app" tag:t stack:s1 user:u-42 '
        'reference_id:ref-12345 "two words" Free AND other:thing'
    )
    assert query.types == ["error"]
    assert query.levels == ["warn"]
    assert query.project_ids == ["abc"]
    assert query.sources == ["my app"]
    assert query.tags == ["t"]
    assert query.stack_ids == ["s1"]
    assert query.identities == ["u-42"]
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


def test_bodies_are_kept_as_sent_and_read_back() -> None:
    text = b' [ {"message": "a"} ,\n{"message": "b", "tags": ["x"]}] '
    for body, encoding in ((text, "identity"), (gzip.compress(text), "gzip")):
        events, kept = read_events(
            decode_body(body, encoding, 10_000), Received(body, encoding), Normalizer(NOW)
        )
        assert kept == Received(body, encoding)
        assert [event.index for event in events] == [0, 1]
        assert body_items(kept) == [{"message": "a"}, {"message": "b", "tags": ["x"]}]
    events, _ = read_events(b" [ ] ", Received(b" [ ] "), Normalizer(NOW))
    assert events == []  # an empty array: no events, answered 202 as the service answers it
    with pytest.raises(HttpError) as caught:
        read_events(b"  ", Received(b"  "), Normalizer(NOW))
    assert caught.value.status == 411


def _read(body: bytes) -> list[NormalizedEvent]:
    return read_events(body, Received(body), Normalizer(NOW))[0]


def test_read_events_falls_back_to_lines() -> None:
    events = _read(b"first line\r\n\n   \n  second line  ")
    assert [event.message for event in events] == ["first line", "second line"]
    assert all(event.type == "log" for event in events)
    for body in (b"{not json", b'{"message": 5}', b'[{"message": "ok"}, 3]', b'"text"'):
        (event,) = _read(body)
        assert event.message == body.decode()
        _, kept = read_events(body, Received(body), Normalizer(NOW))
        assert kept.note is not None and "Stored as text" in kept.note
    assert _read(b"\xff\xfe bytes")[0].message == "\ufffd\ufffd bytes"
    with pytest.raises(HttpError):
        _read(b"  \n ")


def _normalize(item: Any) -> NormalizedEvent | None:
    return Normalizer(NOW).event(item)


def test_normalize_defaults_and_rules() -> None:
    event = _normalize({"message": "m", "@level": "WARN", "reference_id": "r" * 8})
    assert event is not None
    assert event.type == "log"
    assert event.date == format_event_date(NOW)
    assert event.level == "warn"
    assert event.reference_id == "r" * 8
    assert event.data == {"@level": "WARN"}
    assert "m" in event.search_text


@pytest.mark.parametrize(
    "item",
    [
        {"Message": "m", "ReferenceId": "abcd-1234", "Tags": ["A", "a", "b"]},
        {"message": "m", "referenceId": "abcd-1234", "tags": ["A", "a", "b"]},
        {"MESSAGE": "m", "reference_ID": "abcd-1234", "TAGS": ["A", "B", "a"]},
    ],
)
def test_property_names_and_tags_are_case_insensitive(item: dict[str, Any]) -> None:
    event = _normalize(item)
    assert event is not None
    assert event.message == "m"
    assert event.reference_id == "abcd-1234"
    assert [tag.lower() for tag in event.tags] == ["a", "b"]
    assert event.data == {}


@pytest.mark.parametrize(
    "item",
    [
        {"date": "not-a-date"},
        {"value": "10"},
        {"type": 5},
        {"tags": "one"},
        {"tags": [1]},
        {"count": 1.5},
        {"count": True},
        {"geo": [1, 2]},
        {"data": [1]},
        {"message": {"text": "m"}},
        "a string",
    ],
)
def test_wrong_types_are_unreadable(item: Any) -> None:
    with pytest.raises(FieldTypeError):
        _normalize(item)


def test_an_error_without_a_message_takes_its_errors() -> None:
    for key in ("@simple_error", "@error"):
        event = _normalize({key: {"type": "E", "message": "from the error"}})
        assert event is not None
        assert event.type == "error"
        assert event.message == "from the error"
    kept = _normalize({"message": "own", "@simple_error": {"type": "E", "message": "x"}})
    assert kept is not None and kept.message == "own"
    log = _normalize({"type": "log", "@simple_error": {"type": "E", "message": "x"}})
    assert log is not None and log.message is None


def test_normalize_window_and_dropped_events() -> None:
    normalizer = Normalizer(NOW)
    assert normalizer.event({"date": format_event_date(NOW - timedelta(days=3, seconds=1))}) is None
    assert normalizer.event({"type": "t" * 101}) is None
    assert normalizer.dropped == 2
    assert len(normalizer.problems) == 2
    future = normalizer.event({"date": format_event_date(NOW + timedelta(hours=1, seconds=1))})
    assert future is not None and future.timestamp == NOW.timestamp()


def test_normalize_lone_surrogates_survive() -> None:
    event = _normalize({"message": "\ud800 bad", "source": "\udfff"})
    assert event is not None
    assert event.message == "\ud800 bad"


def _basis(item: dict[str, Any]) -> Any:
    event = _normalize(item)
    assert event is not None
    return event.basis


def test_signatures_follow_the_service() -> None:
    trace = 'Traceback (most recent call last):\n  File "app.py", line 1'
    error = {"type": "KeyError", "message": "a", "stack_trace": trace}
    first = _basis({"@simple_error": error})
    again = _basis({"@simple_error": {**error, "message": "another message"}})
    other_trace = _basis({"@simple_error": {**error, "stack_trace": trace + "0"}})
    other_type = _basis({"@simple_error": {**error, "type": "ValueError"}})
    assert first == again
    assert len({first, other_trace, other_type}) == 3
    hash_, info = signature_of(first)
    assert info["ExceptionType"] == "KeyError" and len(info["StackTrace"]) == 40
    assert len(hash_) == 40
    manual = {"@stack": {"title": "Payments", "signature_data": {"area": "pay"}}}
    assert _basis({**manual, "@simple_error": error}) == _basis({**manual, "message": "x"})
    assert signature_of(_basis(manual))[1] == {"area": "pay"}
    by_source = _basis({"message": "one", "source": "app.db"})
    assert by_source == _basis({"message": "two", "source": "app.db"})
    assert by_source != _basis({"message": "one", "source": "app.web"})
    assert _basis({"type": "usage", "source": "x"}) != _basis({"type": "log", "source": "x"})
    frames = [{"declaring_type": "Worker", "name": "Run"}]
    structured = _basis({"@error": {"type": "System.Exception", "stack_trace": frames}})
    assert structured[0] == "frames" and "Worker.Run" in structured


def test_stack_titles() -> None:
    assert stack_title("error", None, None, {"@simple_error": {"type": "a.B", "message": "m"}}) == (
        "B: m"
    )
    assert stack_title("log", "src", "hello", {}) == "src"  # grouped by source
    assert stack_title("log", None, "hello", {}) == "hello"
    assert stack_title("usage", None, None, {}) == "usage"
    assert stack_title("log", None, "x", {"@stack": {"title": "Manual"}}) == "Manual"
    assert stack_basis("log", None, {})[0] == "default"


def _headers(**values: str) -> Message:
    message = Message()
    for name, value in values.items():
        message[name] = value
    return message


def _basic(text: str) -> str:
    return "Basic " + base64.b64encode(text.encode()).decode()


@pytest.mark.parametrize(
    ("authorization", "query", "token", "email"),
    [
        ("Bearer k1", {}, "k1", None),
        ("bearer k1", {}, "k1", None),
        ("Token k1", {}, "k1", None),
        ("TOKEN k1", {}, "k1", None),
        (_basic("client:k1"), {}, "k1", None),
        (_basic("Client:k1"), {}, "k1", None),
        (_basic("k1:x-oauth-basic"), {}, "k1", None),
        (_basic("k1:"), {}, None, None),  # an empty password: refused (401), as the service
        (_basic("ann@example.invalid:secret"), {}, None, "ann@example.invalid"),
        (None, {"access_token": ["k1"]}, "k1", None),
        (None, {"api_key": ["k1"]}, "k1", None),
        (None, {"ApiKey": ["k1"]}, "k1", None),
        ("Bearer k1", {"access_token": ["k2"]}, "k1", None),
        ("Digest k1", {"access_token": ["k2"]}, None, None),
        (None, {}, None, None),
    ],
)
def test_credentials_forms(
    authorization: str | None, query: dict[str, list[str]], token: str | None, email: str | None
) -> None:
    headers = _headers() if authorization is None else _headers(Authorization=authorization)
    credentials = read_credentials(headers, query)
    assert credentials.token == token
    assert credentials.email == email


@pytest.mark.parametrize(
    ("host", "allowed"),
    [
        (None, True),
        ("127.0.0.1:5000", True),
        ("127.0.0.1", True),
        ("localhost:5000", True),
        ("LOCALHOST.:8080", True),
        ("[::1]:5000", True),
        ("10.0.0.7:5000", True),
        ("evil.example:5000", False),
        ("evil.example", False),
        ("127.0.0.1.nip.io:5000", False),
        ("localhost.evil.example", False),
        ("", False),
        ("a b", False),
        ("my-laptop:5000", True),
    ],
)
def test_host_policy(host: str | None, allowed: bool) -> None:
    assert HostPolicy(("my-laptop",)).allows(host) is allowed


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
