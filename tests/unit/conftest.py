"""Fixtures of the unit tests of the foundation modules."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
import responses

from eventlog_handler.api import _client as api

SERVER = "http://127.0.0.1:5000"
#: A realistic 40-character project token; tests check it never leaks.
TOKEN = "Tk7sQ2mX9pLr4VbN8cYw1ZdF6gHj3KeA5uMo0PiR"


@pytest.fixture
def set_tz(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], None]]:
    """Set the process time zone (``TZ`` + ``time.tzset()``); restored after the test."""

    def _set(name: str) -> None:
        monkeypatch.setenv("TZ", name)
        time.tzset()

    yield _set
    monkeypatch.undo()
    time.tzset()


@pytest.fixture
def mocked() -> Iterator[responses.RequestsMock]:
    """Every HTTP request of the test goes to ``responses``; unregistered URLs fail."""
    with responses.RequestsMock(assert_all_requests_are_fired=False) as rsps:
        yield rsps


@pytest.fixture
def client() -> Iterator[api.Client]:
    c = api.Client(SERVER, TOKEN, timeout=2.0)
    yield c
    c.close()
