"""Waiting for a condition, and loopback ports."""

from __future__ import annotations

import socket
import time
from typing import Any


def wait_until(condition: Any, timeout: float, step: float = 0.02) -> bool:
    """Poll ``condition()`` every ``step`` s until it is true or ``timeout`` s passed; its
    last value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(step)
    return bool(condition())


def free_port() -> int:
    """A loopback port nobody listens on (at the time of asking)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port
