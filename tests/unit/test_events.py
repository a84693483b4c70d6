"""The wire forms of events: golden shapes, dates, reference ids, tags, size limits, encoding."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import time
from typing import Any

import pytest

from eventlog_handler import settings
from eventlog_handler.wire import _events as events
from eventlog_handler.wire._dates import (
    format_date,
    is_valid_reference_id,
    new_reference_id,
    parse_date,
)
from eventlog_handler.wire._events import (
    MAX_EVENT_BYTES,
    encode,
    error_event,
    fit,
    message_event,
    normalize_tags,
)
from eventlog_handler.wire._logs import log_event

DATE_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{7}[+-]\d\d:\d\d$")
EST = dt.timezone(dt.timedelta(hours=-5))
UTC = dt.timezone.utc
#: 2030-01-01T12:00:00-05:00, the seed's date.
SEED_INSTANT = dt.datetime(2030, 1, 1, 12, tzinfo=EST)
SEED_DATE = "2030-01-01T12:00:00.0000000-05:00"


def division_error() -> ZeroDivisionError:
    try:
        1 / 0  # noqa: B018
    except ZeroDivisionError as exc:
        return exc
    raise AssertionError("unreachable")


# -- golden forms -----------------------------------------------------------------------------


def test_message_form_is_exactly_message_and_reference_id():
    event = message_event("Disk space is low")
    assert set(event) == {"message", "reference_id"}
    assert event["message"] == "Disk space is low"
    assert is_valid_reference_id(event["reference_id"])
    assert json.loads(encode(event)) == event


def test_log_form_is_exactly_the_seed_fields():
    event = log_event("User logged in", date=SEED_INSTANT, user={"identity": "u-42", "name": "Ann"})
    assert set(event) == {"type", "message", "date", "@user", "reference_id"}
    reference_id = event.pop("reference_id")
    assert is_valid_reference_id(reference_id)
    assert event == {
        "type": "log",
        "message": "User logged in",
        "date": SEED_DATE,
        "@user": {"identity": "u-42", "name": "Ann"},
    }


def test_log_form_without_user_has_no_user_key():
    event = log_event("hello", date=SEED_INSTANT)
    assert set(event) == {"type", "message", "date", "reference_id"}


def test_error_form_is_exactly_the_seed_fields():
    event = error_event(division_error(), date=SEED_INSTANT)
    assert set(event) == {"type", "date", "@simple_error", "reference_id"}
    assert event["type"] == "error"
    assert event["date"] == SEED_DATE
    error = event["@simple_error"]
    assert set(error) == {"message", "type", "stack_trace"}
    assert error["message"] == "division by zero"
    assert error["type"] == "ZeroDivisionError"
    assert error["stack_trace"].startswith("Traceback (most recent call last):")
    assert is_valid_reference_id(event["reference_id"])


def test_error_form_with_message_adds_message():
    event = error_event(division_error(), message="while computing the ratio", date=SEED_INSTANT)
    assert event["message"] == "while computing the ratio"
    assert set(event) == {"type", "date", "message", "@simple_error", "reference_id"}


def test_optional_fields_appear_when_given():
    event = log_event(
        "m",
        date=SEED_INSTANT,
        level="Warn",
        source="app.db",
        tags=["web", "db"],
        data={"order": 7},
    )
    assert event["@level"] == "Warn"
    assert event["source"] == "app.db"
    assert event["tags"] == ["web", "db"]
    assert event["data"] == {"order": 7}
    assert set(event) == {
        "type",
        "message",
        "date",
        "@level",
        "source",
        "tags",
        "data",
        "reference_id",
    }


@pytest.mark.parametrize(
    "kwargs",
    [
        {"level": None},
        {"source": None},
        {"source": ""},
        {"tags": []},
        {"tags": ["", "   ", "x" * 101]},
        {"data": None},
        {"data": {}},
        {"user": None},
        {"user": {}},
    ],
)
def test_optional_fields_absent_when_empty(kwargs):
    event = log_event("m", **kwargs)
    assert set(event) == {"type", "message", "date", "reference_id"}
    event = error_event(division_error(), **kwargs)
    assert set(event) == {"type", "date", "@simple_error", "reference_id"}


def test_given_reference_id_is_used():
    assert message_event("m", reference_id="abc-12345")["reference_id"] == "abc-12345"
    assert log_event("m", reference_id="abc-12346")["reference_id"] == "abc-12346"
    assert error_event(division_error(), reference_id="abc-12347")["reference_id"] == "abc-12347"


def test_message_and_source_are_cut_to_2000_chars():
    event = log_event("m" * 5000, source="s" * 5000)
    assert len(event["message"]) <= events.MAX_MESSAGE == 2000
    assert len(event["source"]) <= events.MAX_SOURCE == 2000
    assert event["message"].startswith("m" * 1900)
    assert "truncated" in event["message"]
    assert len(message_event("x" * 3000)["message"]) <= 2000


def test_non_string_message_is_rendered():
    class Weird:
        def __str__(self):
            raise RuntimeError("no str")

        def __repr__(self):
            return "Weird()"

    assert message_event(42)["message"] == "42"
    assert log_event(Weird())["message"] == "Weird()"


def test_user_info_builder():
    assert events.user_info() is None
    assert events.user_info("u-42") == {"identity": "u-42"}
    assert events.user_info(name="Ann") == {"name": "Ann"}
    assert events.user_info("u-42", "Ann", {"plan": "pro"}) == {
        "identity": "u-42",
        "name": "Ann",
        "data": {"plan": "pro"},
    }
    assert events.user_info(42, "x" * 5000)["identity"] == "42"
    assert len(events.user_info(42, "x" * 5000)["name"]) <= 1000


def test_data_is_snapshotted_and_excluded():
    data = {"items": [1, 2], "password": "hunter2", "when": SEED_INSTANT}
    event = log_event("m", data=data, exclusions=settings.DEFAULT_DATA_EXCLUSIONS)
    data["items"].append(3)
    assert event["data"]["items"] == [1, 2]
    assert event["data"]["password"] == settings.MASK
    assert isinstance(event["data"]["when"], str)
    assert "hunter2" not in encode(event).decode()


def test_user_data_is_excluded_like_event_data():
    event = log_event(
        "m",
        user={"identity": "u-42", "data": {"api_key": "sk-live-123456789"}},
        exclusions=settings.DEFAULT_DATA_EXCLUSIONS,
    )
    assert "sk-live-123456789" not in encode(event).decode()


# -- dates ------------------------------------------------------------------------------------


def utc_ts(*args: int) -> float:
    return dt.datetime(*args, tzinfo=UTC).timestamp()


def test_float_date_in_est_winter(set_tz):
    set_tz("EST5EDT")
    text = format_date(utc_ts(2030, 1, 1, 17, 0, 0))
    assert text == SEED_DATE
    assert DATE_RE.match(text)


def test_float_date_in_est_summer(set_tz):
    set_tz("EST5EDT")
    text = format_date(utc_ts(2030, 7, 1, 16, 0, 0) + 0.5)
    assert text == "2030-07-01T12:00:00.5000000-04:00"


def test_float_date_in_utc_and_half_hour_zone(set_tz):
    set_tz("UTC")
    assert format_date(utc_ts(2030, 2, 3, 4, 5, 6) + 0.25) == "2030-02-03T04:05:06.2500000+00:00"
    set_tz("IST-5:30")
    assert format_date(utc_ts(2030, 2, 3, 4, 5, 7)) == "2030-02-03T09:35:07.0000000+05:30"


def test_naive_datetime_is_local_time(set_tz):
    set_tz("EST5EDT")
    assert format_date(dt.datetime(2030, 1, 1, 12, 0, 0)) == SEED_DATE
    assert format_date(dt.datetime(2030, 7, 1, 12, 0, 0, 123456)) == (
        "2030-07-01T12:00:00.1234560-04:00"
    )


def test_aware_datetime_keeps_its_offset(set_tz):
    set_tz("EST5EDT")
    assert format_date(SEED_INSTANT) == SEED_DATE
    assert format_date(dt.datetime(2030, 1, 1, 12, tzinfo=UTC)) == (
        "2030-01-01T12:00:00.0000000+00:00"
    )
    kolkata = dt.timezone(dt.timedelta(hours=5, minutes=30))
    assert format_date(dt.datetime(2030, 1, 1, 12, 0, 0, 1, tzinfo=kolkata)) == (
        "2030-01-01T12:00:00.0000010+05:30"
    )
    newfoundland = dt.timezone(-dt.timedelta(hours=3, minutes=30))
    assert format_date(dt.datetime(2030, 1, 1, tzinfo=newfoundland)).endswith("-03:30")


def test_now_is_default_and_well_formed():
    before = time.time()
    text = format_date()
    after = time.time()
    assert DATE_RE.match(text)
    parsed = parse_date(text).timestamp()
    assert before - 0.001 <= parsed <= after + 0.001
    assert DATE_RE.match(log_event("m")["date"])
    assert DATE_RE.match(error_event(division_error())["date"])


@pytest.mark.parametrize(
    ("offset", "expected"),
    [
        (0.0, ".0000000"),
        (0.5, ".5000000"),
        (0.125, ".1250000"),
        (0.1234567, ".1234567"),
        (0.12345674, ".1234567"),
        (0.12345676, ".1234568"),
        (0.00000004, ".0000000"),
        (0.00000006, ".0000001"),
        (0.9999999, ".9999999"),
    ],
)
def test_float_rounded_to_seventh_digit(set_tz, offset, expected):
    set_tz("UTC")
    text = format_date(86400 * 3 + offset)
    assert text == f"1970-01-04T00:00:00{expected}+00:00"


def test_rounding_carries_into_the_next_second(set_tz):
    set_tz("UTC")
    assert format_date(86400 * 5 + 0.99999996) == "1970-01-06T00:00:01.0000000+00:00"
    assert format_date(86400 * 5 + 59.99999999) == "1970-01-06T00:01:00.0000000+00:00"


def test_many_floats_are_well_formed(set_tz):
    set_tz("EST5EDT")
    base = utc_ts(2031, 3, 9, 5, 0, 0)
    for i in range(2000):
        text = format_date(base + i * 1.37 + i / 7)
        assert DATE_RE.match(text), text


def test_time_zone_change_is_honoured_for_the_same_second(monkeypatch):
    when = utc_ts(2030, 1, 1, 17, 0, 0) + 11
    try:
        monkeypatch.setenv("TZ", "EST5EDT")
        time.tzset()
        assert format_date(when).endswith("-05:00")
        monkeypatch.setenv("TZ", "UTC")
        time.tzset()
        assert format_date(when) == "2030-01-01T17:00:11.0000000+00:00"
    finally:
        monkeypatch.undo()
        time.tzset()


def test_ancient_year_is_zero_padded():
    assert DATE_RE.match(format_date(dt.datetime(999, 1, 1, tzinfo=UTC)))


# -- parse_date -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (SEED_DATE, SEED_INSTANT),
        ("2030-01-01T12:00:00.1234567-05:00", SEED_INSTANT.replace(microsecond=123456)),
        ("2026-01-15T12:00:00Z", dt.datetime(2026, 1, 15, 12, tzinfo=UTC)),
        ("2026-01-15T12:00:00z", dt.datetime(2026, 1, 15, 12, tzinfo=UTC)),
        ("2026-01-15T12:00:00.5Z", dt.datetime(2026, 1, 15, 12, 0, 0, 500000, tzinfo=UTC)),
        ("2026-01-15T12:00:00.1234567Z", dt.datetime(2026, 1, 15, 12, 0, 0, 123456, tzinfo=UTC)),
        ("2026-01-15T12:00:00.12", dt.datetime(2026, 1, 15, 12, 0, 0, 120000, tzinfo=UTC)),
        ("2026-01-15T12:00:00", dt.datetime(2026, 1, 15, 12, tzinfo=UTC)),
        ("2026-01-15T12:00:00+02:00", dt.datetime(2026, 1, 15, 10, tzinfo=UTC)),
        (" 2026-01-15T12:00:00Z ", dt.datetime(2026, 1, 15, 12, tzinfo=UTC)),
    ],
)
def test_parse_date(text, expected):
    parsed = parse_date(text)
    assert parsed.tzinfo is not None
    assert parsed == expected


@pytest.mark.parametrize("text", ["", "yesterday", "2026-13-01T00:00:00Z", "2026-01-15T25:00"])
def test_parse_date_rejects_garbage(text):
    with pytest.raises(ValueError):
        parse_date(text)


def test_parse_date_round_trips_format_date(set_tz):
    set_tz("EST5EDT")
    zones = [UTC, EST, dt.timezone(dt.timedelta(hours=5, minutes=45))]
    for i, zone in enumerate(zones * 20):
        when = dt.datetime(2030, 1 + i % 12, 1 + i % 28, i % 24, i % 60, i % 60, i * 7919 % 10**6)
        aware = when.replace(tzinfo=zone)
        assert parse_date(format_date(aware)) == aware
        naive_back = parse_date(format_date(when))
        assert naive_back == when.astimezone()
    base = utc_ts(2030, 5, 5, 5, 5, 5)
    for i in range(200):
        stamp = base + i * 0.000123 + i
        assert abs(parse_date(format_date(stamp)).timestamp() - stamp) < 2e-6


# -- reference ids ----------------------------------------------------------------------------


def test_reference_ids_are_unique_and_valid():
    ids = [new_reference_id() for _ in range(100_000)]
    assert len(set(ids)) == len(ids)
    assert all(is_valid_reference_id(value) for value in ids)


def test_builders_draw_distinct_reference_ids():
    ids = {message_event("m")["reference_id"] for _ in range(100)}
    ids |= {log_event("m")["reference_id"] for _ in range(100)}
    assert len(ids) == 200


@pytest.mark.parametrize(
    "value", ["abcdefgh", "a" * 100, "A-1-b-2-c", "0123456789", "--------", "3f2a9c1b07d4e5f6-1"]
)
def test_valid_reference_ids(value):
    assert is_valid_reference_id(value)


@pytest.mark.parametrize(
    "value",
    [
        "abcdefg",
        "a" * 101,
        "",
        "with space",
        "under_score",
        "dot.ted.id",
        "ünïcödé1",
        "\uff11\uff12\uff13\uff14\uff15\uff16\uff17\uff18\uff19",  # fullwidth digits
        "abcdefgh\n",
        12345678,
        None,
        b"abcdefgh",
    ],
)
def test_invalid_reference_ids(value):
    assert not is_valid_reference_id(value)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_reference_ids_differ_in_a_forked_child():
    new_reference_id()  # the parent has drawn its prefix and advanced its counter
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        try:
            os.close(read_end)
            os.write(write_end, new_reference_id().encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        child_id = pipe.read().decode()
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    parent_id = new_reference_id()
    assert is_valid_reference_id(child_id)
    assert child_id != parent_id
    assert child_id.rsplit("-", 1)[0] != parent_id.rsplit("-", 1)[0]


# -- tags -------------------------------------------------------------------------------------


def test_normalize_tags_dedupes_and_strips_in_order():
    assert normalize_tags(["b", "a", "b", " a ", "", "   ", "c"]) == ["b", "a", "c"]


def test_normalize_tags_drops_long_tags():
    assert normalize_tags(["x" * 101, "y" * 100, "ok"]) == ["y" * 100, "ok"]


def test_normalize_tags_keeps_at_most_50():
    tags = [f"t{i}" for i in range(80)]
    assert normalize_tags(tags) == tags[:50]
    assert normalize_tags(["same"] * 100 + ["other"]) == ["same", "other"]


def test_normalize_tags_renders_non_strings():
    assert normalize_tags([1, 2.5, None]) == ["1", "2.5", "None"]


def test_event_tags_are_normalized():
    event = log_event("m", tags=["a", "a", "x" * 101] + [f"t{i}" for i in range(60)])
    assert event["tags"][0] == "a"
    assert len(event["tags"]) == 50
    assert all(len(tag) <= 100 for tag in event["tags"])


# -- fit and encode ---------------------------------------------------------------------------


def chained_error() -> BaseException:
    def inner(n: int) -> None:
        if n == 0:
            raise ValueError("inner " + "v" * 10_000)
        inner(n - 1)

    try:
        try:
            inner(30)
        except ValueError as exc:
            exc.payload = ["p" * 8000] * 300
            raise KeyError("outer " + "k" * 5000) from exc
    except KeyError as exc:
        exc.blob = {f"k{i}": "b" * 8000 for i in range(200)}
        return exc
    raise AssertionError("unreachable")


def test_small_event_is_unchanged_by_fit():
    event = log_event("m", data={"a": 1})
    fitted, body = fit(event)
    assert fitted is event
    assert body == encode(event)
    assert "@trimmed" not in fitted["data"]


def test_huge_event_fits_and_lists_what_was_trimmed():
    event = error_event(
        chained_error(),
        message="m" * 5000,
        data={"blob": ["q" * 8000] * 500, "more": {"a": "b" * 8000}},
        user={"identity": "u-42"},
    )
    event["@simple_error"]["stack_trace"] += "\n" + "  frame line\n" * 10_000
    original = json.loads(encode(event))
    assert len(encode(event)) > 10 * MAX_EVENT_BYTES

    fitted, body = fit(event)
    assert len(body) <= MAX_EVENT_BYTES
    assert body == encode(fitted)
    assert json.loads(body.decode("utf-8")) == fitted
    trimmed = fitted["data"]["@trimmed"]
    assert trimmed[:2] == ["data values", "inner errors"]
    assert "stack trace" in trimmed
    assert "inner" not in fitted["@simple_error"]
    assert fitted["reference_id"] == event["reference_id"]
    assert fitted["type"] == "error"
    assert fitted["@simple_error"]["type"] == "KeyError"
    # the caller's event is not modified
    assert json.loads(encode(event)) == original


def test_huge_data_only_trims_data_values():
    event = log_event("m", data={f"k{i}": "v" * 8000 for i in range(100)})
    fitted, body = fit(event)
    assert len(body) <= MAX_EVENT_BYTES
    assert fitted["data"]["@trimmed"] == ["data values"]
    assert fitted["message"] == "m"
    kept = [key for key in fitted["data"] if key.startswith("k")]
    assert kept and all(len(fitted["data"][key]) < 8000 for key in kept)


def test_fit_respects_a_smaller_limit():
    event = error_event(chained_error(), data={"x": "y" * 50_000})
    fitted, body = fit(event, max_bytes=20_000)
    assert len(body) <= 20_000
    assert "@trimmed" in fitted["data"]


def test_encode_is_compact_utf8_json():
    event = {"message": "héllo ☃ 𝄞", "n": [1, 2]}
    body = encode(event)
    assert body == '{"message":"héllo ☃ 𝄞","n":[1,2]}'.encode()
    assert json.loads(body.decode("utf-8")) == event


def test_encode_replaces_lone_surrogates():
    event = log_event("a\ud800b", data={"k\udfff": "v\ud83d", "ok": "😀"})
    body = encode(event)
    text = body.decode("utf-8")  # strict: must be valid UTF-8
    parsed = json.loads(text)
    assert parsed["message"] == "a?b"
    assert parsed["data"]["k?"] == "v?"
    assert parsed["data"]["ok"] == "😀"


def test_encode_never_writes_invalid_json_for_nan_and_builders_never_produce_it():
    # The standard library refuses NaN; orjson (the fast extra) writes null. Never "NaN".
    try:
        body = encode({"value": float("nan")})
    except ValueError:
        pass
    else:
        assert json.loads(body, parse_constant=lambda name: pytest.fail(name)) == {"value": None}
    event = log_event("m", data={"x": float("nan"), "y": float("inf")})
    assert json.loads(encode(event))["data"] == {"x": "NaN", "y": "Infinity"}


def test_environment_info_uses_service_spelling():
    info = events.environment_info()
    for key in ("machine_name", "process_id", "o_s_name", "o_s_version", "architecture"):
        assert key in info
    assert info["process_id"] == str(os.getpid())
    assert events.environment_info() is info
    thread = events.thread_info()
    assert set(thread) == {"thread_name", "thread_id"}


def test_an_encoded_event_holds_no_more_memory_than_its_length() -> None:
    """``orjson.dumps`` returns bytes that keep its encoder's whole buffer (64-128 KiB behind
    an 8 KB event); what the spool and a batch hold was counted by its length."""
    import tracemalloc

    from eventlog_handler.wire._events import encode, encode_batch

    event = {"type": "log", "message": "upload", "data": {"pad": "q" * 8_000}}
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        bodies = [encode(dict(event, date=str(i))) for i in range(50)]
        bodies.append(encode_batch([event] * 10))
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    length = sum(len(body) for body in bodies)
    assert held < 1.5 * length + 50_000, (held, length)


def test_log_event_reads_the_user_it_is_given_each_time() -> None:
    """``log_event`` is given the caller's dict, which may change between calls, and each
    event has a ``@user`` of its own (the worker's builder reuses one for a user in a row)."""
    from eventlog_handler.wire._logs import log_event

    user: dict[str, Any] = {"identity": "alice", "data": {"plan": "free"}}
    first = log_event("login", user=user)
    user["identity"], user["data"] = "bob", {"plan": "pro"}
    second = log_event("login", user=user)
    assert first["@user"] == {"identity": "alice", "data": {"plan": "free"}}
    assert second["@user"] == {"identity": "bob", "data": {"plan": "pro"}}
    third = log_event("again", user=user)
    third["@user"]["name"] = "edited"
    assert "name" not in log_event("again", user=user)["@user"]


def test_exclusion_lists_given_to_log_event_are_not_cached_without_bound() -> None:
    """Each distinct exclusion list had a cache of its own, kept for good."""
    from eventlog_handler.wire import _logs

    for index in range(200):
        _logs.log_event("m", data={"k": 1}, exclusions=[f"secret{index}"])
    assert len(_logs._EXCLUDED) <= _logs._CACHED_LISTS
