"""events.fit: what size trimming keeps (the stack trace that decides the error's stack) and
that it trims by a stable rule (same input, same output)."""

from __future__ import annotations

import json

import pytest

from eventlog_handler.wire import _simple_error as se
from eventlog_handler.wire._events import MAX_EVENT_BYTES, encode, error_event, fit
from eventlog_handler.wire._logs import log_event


def deep_error(depth: int = 60) -> BaseException:
    """A ``LookupError`` raised through ``depth`` distinct-looking frames (no folding)."""
    source = "\n".join(
        f"def level_{i}(n):\n"
        f"    if n == 0:\n"
        f"        raise LookupError('missing order ' + str(n))\n"
        f"    return level_{(i + 1) % 5}(n - 1)  # {'padding ' * 12}\n"
        for i in range(5)
    )
    namespace: dict = {}
    exec(compile(source, "<orders>", "exec"), namespace)
    try:
        namespace["level_0"](depth)
    except LookupError as exc:
        return exc
    raise AssertionError("did not raise")


def chained(depth: int = 60) -> BaseException:
    try:
        try:
            raise ValueError("inner cause " + "v" * 5_000)
        except ValueError as cause:
            raise deep_error(depth) from cause
    except LookupError as exc:
        return exc
    raise AssertionError("did not raise")


def test_an_event_under_the_limit_is_untouched():
    event = error_event(chained(), data={"order": 42})
    fitted, body = fit(event)
    assert fitted is event
    assert body == encode(event)


def test_big_data_is_cut_before_the_stack_trace():
    exc = chained()
    event = error_event(
        exc,
        message="m" * 5_000,
        data={"blob": ["q" * 8_000] * 60, "nested": {"k": "b" * 50_000}},
        user={"identity": "u-42"},
    )
    original = event["@simple_error"]["stack_trace"]
    assert len(encode(event)) > MAX_EVENT_BYTES
    fitted, body = fit(event)
    assert len(body) <= MAX_EVENT_BYTES
    assert fitted["@simple_error"]["stack_trace"] == original
    assert "stack trace" not in fitted["data"]["@trimmed"]
    assert event["@simple_error"]["stack_trace"] == original  # the caller's event is unchanged


@pytest.mark.parametrize("max_bytes", [2_000, 4_000, 8_000, 32_000])
def test_a_trimmed_stack_trace_depends_only_on_the_error(max_bytes):
    """Two events of the same bug, with different messages, data and users, shrunk to the
    same limit, carry the same stack trace text."""
    exc = deep_error(300)
    first = error_event(exc, message="a" * 3_000, data={"x": "y" * 90_000, "n": 1})
    second = error_event(
        exc, message="order 7 failed " * 40, data={"other": list(range(5_000))}, user={"id": 1}
    )
    texts = []
    for event in (first, second):
        fitted, body = fit(event, max_bytes)
        assert len(body) <= max_bytes
        assert json.loads(body) == fitted
        text = fitted["@simple_error"]["stack_trace"]
        assert text.startswith(se.HEADER)
        assert text.endswith("\nLookupError")
        texts.append(text)
    assert texts[0] == texts[1]
    # and it is the stack trace cut by the ladder, whole frames only
    full = first["@simple_error"]["stack_trace"]
    assert any(
        texts[0] == se.trim_stack_trace(full, limit) for limit in range(0, len(full) + 25, 25)
    )


def test_fit_is_deterministic():
    exc = chained(300)
    event = error_event(exc, message="m" * 4_000, data={"big": ["z" * 3_000] * 100})
    assert fit(event, 5_000)[1] == fit(event, 5_000)[1]
    assert fit(event)[1] == fit(dict(event))[1]


def test_keys_the_service_reads_survive_dropping_data():
    event = error_event(
        deep_error(),
        data={
            "@stack": {"title": "Order lookups", "signature_data": {"area": "orders"}},
            "@version": "2.4.1",
            "@level": "Error",
            "@submission_method": "log",
            **{f"bulk_{i}": "w" * 9_000 for i in range(100)},
        },
    )
    fitted, body = fit(event, 3_000)
    assert len(body) <= 3_000
    data = fitted["data"]
    assert not [key for key in data if key.startswith("bulk")]
    assert data["@stack"] == {"title": "Order lookups", "signature_data": {"area": "orders"}}
    assert data["@version"] == "2.4.1"
    assert data["@level"] == "Error"
    assert data["@submission_method"] == "log"
    assert data["@trimmed"][:2] == ["data values", "data"]


def test_the_stack_value_is_never_shortened_with_the_data_values():
    signature = {"key": "s" * 900}
    event = log_event(
        "m", data={"@stack": {"title": "t" * 900, "signature_data": signature}, "x": "y" * 200_000}
    )
    fitted, body = fit(event)
    assert len(body) <= MAX_EVENT_BYTES
    assert fitted["data"]["@stack"]["signature_data"] == signature
    assert fitted["data"]["@stack"]["title"] == "t" * 900


def test_an_oversized_stack_trace_is_cut_to_what_the_package_writes():
    event = error_event(deep_error(), data={"x": "y" * 300_000})
    event["@simple_error"]["stack_trace"] = (
        se.HEADER + '  File "a.py", line 1, in f\n' * 9_000 + "E"
    )
    fitted, body = fit(event)
    assert len(body) <= MAX_EVENT_BYTES
    text = fitted["@simple_error"]["stack_trace"]
    assert text == se.trim_stack_trace(event["@simple_error"]["stack_trace"], se.MAX_STACK_TRACE)
    assert "stack trace" in fitted["data"]["@trimmed"]


def test_even_the_smallest_limit_keeps_the_type_line():
    exc = chained(300)
    event = error_event(exc, message="x" * 10_000, data={"a": "b" * 10_000}, tags=["t"] * 3)
    fitted, body = fit(event, 2_000)
    assert len(body) <= 2_000
    assert fitted["@simple_error"]["type"] == "LookupError"
    assert fitted["@simple_error"]["stack_trace"].endswith("LookupError")
    assert fitted["reference_id"] == event["reference_id"]
