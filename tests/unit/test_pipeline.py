"""The worker's pipeline (``delivery/_pipeline.py``) when building an event fails: a bug in the
builder must not lose the batch, nor hold the worker."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from typing import Any

import pytest

from eventlog_handler.capture._records import capture_record
from eventlog_handler.delivery import _pipeline
from eventlog_handler.delivery._buffer import Entry
from eventlog_handler.delivery._finish import built
from eventlog_handler.delivery._ledger import Ledger
from eventlog_handler.delivery._pipeline import Pipeline
from eventlog_handler.delivery._rollup import Rollup
from eventlog_handler.delivery._server_settings import ServerSettings
from eventlog_handler.settings import Settings

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
