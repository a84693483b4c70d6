"""Waiting for a condition, for a server to answer, and loopback ports."""

from __future__ import annotations

import http.client
import socket
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def wait_until(condition: Any, timeout: float, step: float = 0.02) -> bool:
    """Poll ``condition()`` every ``step`` s until it is true or ``timeout`` s passed; its
    last value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(step)
    return bool(condition())


def poll_until(
    fetch: Callable[[], T], ready: Callable[[T], Any], timeout: float, step: float = 0.02
) -> T:
    """Call ``fetch()`` every ``step`` s until ``ready`` is true of its value or ``timeout`` s
    passed; the last value fetched (ready or not: the caller checks it)."""
    deadline = time.monotonic() + timeout
    while True:
        value = fetch()
        if ready(value) or time.monotonic() >= deadline:
            return value
        time.sleep(step)


#: The sockets that hold :func:`dead_port`'s ports for the rest of the test run.
_HELD: list[socket.socket] = []


def dead_port() -> int:
    """A loopback port where every connection is refused, for the rest of the test run: a
    socket stays bound there without listening. A port that was merely closed may be handed
    to another test's server meanwhile (tests run in parallel), and a program still retrying
    would then deliver its events there, to both tests' confusion."""
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    _HELD.append(holder)
    port: int = holder.getsockname()[1]
    return port


def free_port() -> int:
    """A loopback port nobody listens on (at the time of asking)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def http_status(port: int, path: str = "/", timeout: float = 30) -> int:
    """The status of ``GET path`` on 127.0.0.1:``port``, its answer read to the end as a
    browser reads it, waiting up to ``timeout`` s for the server to start listening."""
    deadline = time.monotonic() + timeout
    while True:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        try:
            connection.request("GET", path)
            answer = connection.getresponse()
            answer.read()
            return answer.status
        except OSError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.2)
        finally:
            connection.close()
