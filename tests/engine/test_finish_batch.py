"""The worker's batch builder gives exactly the events the one-by-one builder gives."""

from __future__ import annotations

import logging
from typing import Any

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from eventlog_handler.capture._context import add_tags, set_user
from eventlog_handler.capture._records import capture_record
from eventlog_handler.delivery._finish import built as build_events
from eventlog_handler.delivery._finish import finish
from eventlog_handler.settings import Settings

SETTINGS = Settings(api_key="k" * 40)
TAGGED = Settings(api_key="k" * 40, tags=("web",))


def finish_batch(entries: list[Any]) -> list[dict[str, Any]]:
    """The worker's builder over a batch."""
    return [event for _, event in build_events(entries)]


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.just("x" * 9000),
)
names = st.one_of(
    st.sampled_from(["a", "b", "password", "api_key", "tags", "@level", "stack", "message"]),
    st.text(min_size=1, max_size=12, alphabet="abcdefghij_"),
)
records = st.tuples(
    st.sampled_from([logging.DEBUG, logging.INFO, logging.WARNING, 25, 5]),
    st.sampled_from(["plain", "user %s did %d", "%d%%", "%s", "{}"]),
    st.lists(scalars, max_size=3),
    st.dictionaries(names, scalars, max_size=4),
    st.sampled_from(["app", "", "x" * 2100]),
    st.floats(min_value=1.5e9, max_value=2.0e9),
)


def record_of(spec: tuple[Any, ...]) -> logging.LogRecord:
    level, template, args, extras, name, created = spec
    record = logging.LogRecord(name, level, "f.py", 1, template, tuple(args), None)
    record.created = created
    for key, value in extras.items():
        record.__dict__[key] = value
    return record


def without_ids(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in event.items() if k != "reference_id"} for event in events]


@settings(max_examples=300, deadline=None)
@given(st.lists(records, min_size=1, max_size=8), st.booleans(), st.booleans())
def test_batch_and_one_by_one_agree(specs: list[Any], with_context: bool, tagged: bool) -> None:
    chosen = TAGGED if tagged else SETTINGS
    scopes = [set_user("u-1", name="Ann"), add_tags("t1")] if with_context else []
    try:
        first = [capture_record(record_of(spec), chosen) for spec in specs]
        second = [capture_record(record_of(spec), chosen) for spec in specs]
    finally:
        for scope in reversed(scopes):
            scope.reset()
    batch = finish_batch(first)
    alone = [finish(entry) for entry in second]
    assert without_ids(batch) == without_ids(alone)
    assert len({event["reference_id"] for event in batch}) == len(batch)


def test_the_standard_library_encoder_gives_the_same_json(monkeypatch: Any) -> None:
    import json

    from eventlog_handler.wire import _events as events

    batch = [
        {"message": 'é \u2028 \\ "q"', "value": 1.5, "data": {"n": 2**40, "list": [None, True]}},
        {"message": "lone \ud800 surrogate"},  # orjson refuses it: the fallback's job
    ]
    fast = events.encode_batch(batch)
    monkeypatch.setattr(events, "_orjson", None)
    slow = events.encode_batch(batch)
    assert json.loads(fast) == json.loads(slow)
    assert json.loads(slow)[1]["message"] == "lone ? surrogate"


@settings(max_examples=300, deadline=None)
@given(st.lists(records, min_size=1, max_size=8), st.booleans(), st.booleans())
def test_the_fast_path_builds_what_the_general_builder_builds(
    specs: list[Any], with_context: bool, tagged: bool
) -> None:
    """:func:`finish_batch` makes an entry's data safe the fast way (flat data of plain values,
    :func:`~eventlog_handler.wire._logs.flat_data`) or the general way
    (:func:`~eventlog_handler.wire._logs.general_data`, what
    :func:`~eventlog_handler.wire._logs.log_event` uses): both give the same event for the
    same record."""
    from eventlog_handler.wire import _logs

    chosen = TAGGED if tagged else SETTINGS
    scopes = [set_user("u-1", name="Ann"), add_tags("t1")] if with_context else []
    try:
        pairs = []
        for spec in specs:
            pairs.append([])
            for _ in range(2):
                record = record_of(spec)
                record.__dict__["order"] = 7  # data never empty: every entry takes a builder
                pairs[-1].append(capture_record(record, chosen))
    finally:
        for scope in reversed(scopes):
            scope.reset()
    # A message that does not fit its arguments is said in data at capture, which makes the
    # data JSON-safe there (with a ``stack`` extra): such an entry takes neither builder.
    assume(all(pair[0].data_ready != _logs.JSON_READY for pair in pairs))
    fast = finish_batch([pair[0] for pair in pairs])
    real = (_logs.flat_data, _logs.JSON_READY, _logs.general_data)
    built: list[Any] = []

    def general_data(*args: Any) -> Any:
        built.append(args)
        return real[2](*args)

    try:  # every entry the general way: nothing is flat, nothing is ready
        _logs.flat_data = lambda data, exclusions: None  # type: ignore[assignment]
        _logs.JSON_READY = object()  # type: ignore[assignment,misc]
        _logs.general_data = general_data
        general = finish_batch([pair[1] for pair in pairs])
    finally:
        _logs.flat_data, _logs.JSON_READY, _logs.general_data = real  # type: ignore[misc]
    assert len(built) == len(specs)  # the general way made every event's data
    assert without_ids(fast) == without_ids(general)


@settings(max_examples=200, deadline=None)
@given(records, st.booleans())
def test_an_entry_is_the_event_log_event_builds(spec: Any, nested: bool) -> None:
    """The wire form of a log event is :func:`~eventlog_handler.wire._logs.log_event`'s: the
    worker's builder gives that event for a record, with flat data or nested data."""
    from eventlog_handler.wire._extras import sort_extras
    from eventlog_handler.wire._levels import level_name
    from eventlog_handler.wire._logs import log_event

    level, template, args, extras, name, created = spec
    record = record_of(spec)
    record.__dict__["order"] = {"id": 7, "lines": [1, 2]} if nested else 7
    (built,) = finish_batch([capture_record(record, TAGGED)])
    data, user, tags, stack = sort_extras({**extras, "order": record.__dict__["order"]})
    try:
        message = template % tuple(args)
    except Exception:
        return  # a message that does not format: data of its own (tested elsewhere)
    expected = log_event(
        message,
        date=created,
        user=user,
        level=level_name(level),
        source=name,
        tags=(*TAGGED.tags, *tags),
        data=data,
        exclusions=TAGGED.data_exclusions,
    )
    if stack is not None:
        expected.setdefault("data", {})["@stack"] = stack
    assert without_ids([built]) == without_ids([expected])
