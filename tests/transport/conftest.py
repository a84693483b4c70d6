from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from eventlog_handler.delivery import _engine as transport
from eventlog_handler.settings import Settings
from tests.transport.faultserver import FaultServer

API_KEY = "test-api-key-0123456789abcdef"

#: Timings that keep tests fast: batches every 50 ms, errors at once, retries within 50 ms.
FAST = {
    "flush_interval": 0.05,
    "error_delay": 0.0,
    "retry_initial": 0.005,
    "max_backoff": 0.05,
    "timeout": 2.0,
}


@pytest.fixture
def server() -> Iterator[FaultServer]:
    with FaultServer() as fault_server:
        yield fault_server


@pytest.fixture
def make_engine(server: FaultServer) -> Iterator[Any]:
    made: list[transport.Engine] = []

    def make(url: str | None = None, **options: Any) -> transport.Engine:
        values = {**FAST, **options}
        settings = Settings.from_options(
            {"server_url": url or server.url, "api_key": API_KEY, **values}, environ={}
        )
        engine = transport.Engine(settings)
        made.append(engine)
        return engine

    yield make
    for engine in made:
        engine.shutdown(0.5)


def accounted(stats: dict[str, Any]) -> int:
    """Events with an outcome or still pending: must equal ``captured``."""
    return stats["delivered"] + stats["dropped_total"] + stats["queued"] + stats["in_flight"]
