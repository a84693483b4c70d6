"""Fixtures for the local collector's tests (everything on 127.0.0.1)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from eventlog_handler.collector import Collector
from tests.collector.helpers import Client


@pytest.fixture
def collector() -> Iterator[Collector]:
    with Collector() as running:
        yield running


@pytest.fixture
def client(collector: Collector) -> Iterator[Client]:
    http = Client(collector)
    yield http
    http.close()
