"""Keys, timings and paths the tests share."""

from __future__ import annotations

from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"

#: A well-formed 40-character project token.
API_KEY = "Ik3vQ8mZ2pLr7VbN4cYw9ZdF1gHj6KeA0uMo5PiR"

#: Engine timings that keep the handler tests fast (integrations, web).
FAST: dict[str, Any] = {
    "flush_interval": 0.05,
    "error_delay": 0.01,
    "retry_initial": 0.01,
    "max_backoff": 0.05,
    "timeout": 5,
}

#: The key of the transport tests (any string will do for the fault server).
TRANSPORT_API_KEY = "test-api-key-0123456789abcdef"

#: Timings of the transport tests: batches every 50 ms, errors at once, retries within 50 ms.
TRANSPORT_FAST = {
    "flush_interval": 0.05,
    "error_delay": 0.0,
    "retry_initial": 0.005,
    "max_backoff": 0.05,
    "timeout": 2.0,
}
