"""The worker's pipeline (``delivery/_pipeline.py``) when building an event fails: a bug in the
builder must not lose the batch, nor hold the worker."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from typing import Any

import pytest

from eventlog_handler.capture._records import capture_record
from eventlog_handler.delivery import _pipeline
from eventlog_handler.delivery._buffer import Entry, entry_size
from eventlog_handler.delivery._finish import built
from eventlog_handler.delivery._ledger import Ledger
from eventlog_handler.delivery._pipeline import Pipeline
from eventlog_handler.delivery._rollup import Rollup
from eventlog_handler.delivery._server_settings import ServerSettings
from eventlog_handler.settings import MASK, Settings
from eventlog_handler.wire._scrub import Scrubber

SETTINGS = Settings(api_key="k" * 40, version="1.0")


def entries(count: int) -> list[Entry]:
    made = []
    for index in range(count):
        record = logging.LogRecord("app", logging.WARNING, __file__, 1, "job %d", (index,), None)
        made.append(capture_record(record, SETTINGS))
    return made


def pipeline() -> Pipeline:
    server = ServerSettings()
    return Pipeline(SETTINGS, Ledger(), Rollup(0), lambda: server)


def test_an_entry_whose_event_can_not_be_built_is_counted_and_the_rest_are_sent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def failing_on_job_2(taken: Iterable[Entry]) -> Iterator[tuple[Entry, dict[str, Any]]]:
        for entry, event in built(taken):
            if event["message"] == "job 2":
                raise RuntimeError("a bug")
            yield entry, event

    monkeypatch.setattr(_pipeline, "built", failing_on_job_2)
    run = pipeline()
    batch = entries(5)
    events, created, _ = run.run(batch)
    assert [event["message"] for event in events] == ["job 0", "job 1", "job 3", "job 4"]
    assert len(created) == 4 and batch == []
    assert run.ledger.dropped["rejected"] == 1
    assert run.ledger.last_error == "building events: RuntimeError: a bug"


def test_an_event_the_scrubber_fails_on_is_not_sent_but_counted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bug in the scrubber may leave a secret in the event: it stays (``rejected``)."""
    flat_event = Scrubber.flat_event

    def failing_on_job_2(self: Scrubber, event: dict[str, Any], *args: Any) -> dict[str, Any]:
        if event["message"] == "job 2":
            raise TypeError("a bug")
        return flat_event(self, event, *args)

    monkeypatch.setattr(Scrubber, "flat_event", failing_on_job_2)
    run = pipeline()
    events, created, _ = run.run(entries(4))
    assert [event["message"] for event in events] == ["job 0", "job 1", "job 3"]
    assert len(created) == 3
    assert run.ledger.dropped["rejected"] == 1
    assert run.ledger.last_error == "scrubbing: TypeError: a bug"


def test_a_builder_that_fails_before_taking_an_entry_does_not_hold_the_worker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(taken: Iterable[Entry]) -> Iterator[tuple[Entry, dict[str, Any]]]:
        raise RuntimeError("broken at the start")
        yield  # pragma: no cover - a generator

    monkeypatch.setattr(_pipeline, "built", broken)
    run = pipeline()
    batch = entries(3)
    events, _, _ = run.run(batch)  # returns: each attempt gives one entry up
    assert events == [] and batch == []
    assert run.ledger.dropped["rejected"] == 3


def messages_sent(texts: list[str], **options: Any) -> list[str]:
    settings = Settings(api_key="k" * 40, version="1.0", **options)
    batch = [
        capture_record(
            logging.LogRecord("app", logging.WARNING, __file__, 1, text, None, None), settings
        )
        for text in texts
    ]
    server = ServerSettings()
    events, _, _ = Pipeline(settings, Ledger(), Rollup(0), lambda: server).run(batch)
    return [event["message"] for event in events]


def test_a_batch_of_plain_messages_is_sent_as_logged_and_one_secret_among_them_is_masked() -> None:
    plain = [f"user ann did {index} things" for index in range(1_000, 1_400)]
    assert messages_sent(plain) == plain
    card = "paid with 4111 1111 1111 1111"
    mixed = messages_sent([*plain[:5], card, "token=hunter2 kkkk", "k" * 40])
    assert mixed[:5] == plain[:5]
    assert mixed[5:] == [f"paid with {MASK}", f"token={MASK} kkkk", MASK]


def test_a_message_cut_to_the_limit_and_a_hook_are_looked_at_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    told: list[bool] = []
    flat_event = Scrubber.flat_event

    def spy(self: Scrubber, event: dict[str, Any], plain_message: bool = False) -> Any:
        told.append(plain_message)
        return flat_event(self, event, plain_message)

    monkeypatch.setattr(Scrubber, "flat_event", spy)
    assert messages_sent(["fine", "also fine"]) == ["fine", "also fine"]
    assert told == [True, True]
    told.clear()
    long = "x" * 3_000  # nothing to mask, but cut with a mark that the batch look did not see
    sent = messages_sent(["fine", long])
    assert told == [False, False] and "truncated" in sent[1]
    told.clear()
    card = "4111 1111 1111 1111 " + "x" * 3_000
    sent = messages_sent(["fine", card])
    assert sent[1].startswith(f"{MASK} x") and "truncated" in sent[1]

    def hook(event: dict[str, Any], hint: dict[str, Any]) -> dict[str, Any]:
        event["message"] += " card 4111111111111111"
        return event

    assert messages_sent(["fine", "also fine"], before_send=hook) == [
        f"fine card {MASK}",
        f"also fine card {MASK}",
    ]


def _deep_error(depth: int) -> Entry:
    if depth:
        return _deep_error(depth - 1)
    record = logging.LogRecord("app", logging.ERROR, __file__, 1, "job failed", (), None)
    return capture_record(record, SETTINGS)


def test_an_error_counts_in_the_batch_in_flight_by_what_it_holds_once_built() -> None:
    """An error's frames get their source lines on the worker: the batch in flight was counted
    by the sizes estimated at capture. A warning's size does not change (nor is it looked at
    again)."""
    run = pipeline()
    errors = [_deep_error(15) for _ in range(3)]
    for entry in errors:
        entry.size = entry_size(entry)  # as the intake sets it
    captured = sum(entry.size for entry in errors)
    run.ledger.in_flight_bytes = captured
    run.run(errors)
    assert run.ledger.in_flight_bytes > captured
    warnings = entries(3)
    for entry in warnings:
        entry.size = entry_size(entry)
    captured = sum(entry.size for entry in warnings)
    assert captured > 0
    run.ledger.in_flight_bytes = captured
    run.run(warnings)
    assert run.ledger.in_flight_bytes == captured
