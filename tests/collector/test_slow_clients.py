"""Hundreds of slow clients holding connections (a request begun and never finished, as a
slowloris attack does) do not keep ordinary requests out: they are served at once, and the slow
connections are the ones closed. The collector runs in a process of its own, as its users run
it."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import pytest
import requests

from tests.collector.test_cli import close
from tests.collector.test_durability import _start

SLOW_CLIENTS = 1_000
#: New slow connections per second (the collector's default allows 64 connections at once).
RATE = 500


def _closed(connection: socket.socket) -> bool:
    connection.settimeout(0.05)
    try:
        return connection.recv(1) == b""
    except TimeoutError:
        return False
    except OSError:
        return True


@pytest.fixture
def served(tmp_path) -> Iterator[tuple[str, str]]:  # type: ignore[no-untyped-def]
    process, url, key = _start(tmp_path / "collector.sqlite3")
    try:
        yield url, key
    finally:
        close(process)


def test_ordinary_requests_are_served_while_many_slow_clients_hold_connections(
    served: tuple[str, str],
) -> None:
    url, key = served
    host, port = url.removeprefix("http://").rsplit(":", 1)
    slow: list[socket.socket] = []
    stop = threading.Event()

    def open_slow_clients() -> None:
        while not stop.is_set() and len(slow) < SLOW_CLIENTS:
            with contextlib.suppress(OSError):
                connection = socket.create_connection((host, int(port)), timeout=10)
                connection.sendall(
                    f"POST /api/v2/events HTTP/1.1\r\nHost: {host}:{port}\r\n".encode()
                )
                slow.append(connection)  # never finishes its headers
            time.sleep(1 / RATE)

    opener = threading.Thread(target=open_slow_clients)
    opener.start()
    session = requests.Session()
    answers: list[tuple[int, float]] = []
    try:
        while len(slow) < SLOW_CLIENTS // 3:
            time.sleep(0.01)
        for _ in range(20):  # while the slow clients keep coming
            started = time.monotonic()
            answer = session.post(
                f"{url}/api/v2/events",
                json=[{"type": "log", "message": "an ordinary post"}],
                headers={"Authorization": f"Bearer {key}", "Connection": "close"},
                timeout=10,
            )
            answers.append((answer.status_code, time.monotonic() - started))
        opener.join(timeout=60)
        # The slow clients were the ones closed: all but the collector's 64 at most.
        closed = sum(_closed(connection) for connection in slow)
    finally:
        stop.set()
        opener.join(timeout=10)
        session.close()
        for connection in slow:
            connection.close()
    assert [status for status, _ in answers] == [202] * 20, answers
    assert max(seconds for _, seconds in answers) < 3, answers
    assert closed >= len(slow) - 64, (closed, len(slow))
