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


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_a_body_trickling_in_does_not_keep_a_prompt_client_out(framing: str) -> None:
    """Two uploads that stop mid-body hold both connections a collector allows: a prompt
    client is served, a stalled upload evicted. A chunked one was counted as being served and
    never evicted: the prompt client got 503."""
    from eventlog_handler.collector import Collector

    with Collector(max_connections=2, body_timeout=20) as collector:
        host, port = collector.url.removeprefix("http://").split(":")
        framings = {
            "content-length": b"Content-Length: 16\r\n\r\n",
            "chunked": b"Transfer-Encoding: chunked\r\n\r\n10\r\n",
        }
        stalled = []
        for _ in range(2):
            connection = socket.create_connection((host, int(port)), timeout=10)
            connection.sendall(
                f"POST /api/v2/events HTTP/1.1\r\nHost: {host}:{port}\r\n"
                f"Authorization: Bearer {collector.project_token}\r\n"
                "Content-Type: application/json\r\n".encode()
                + framings[framing]
                + b'{"mes'
            )
            stalled.append(connection)
        try:
            time.sleep(0.5)
            answer = requests.get(
                f"{collector.url}/api/v2/projects",
                headers={"Authorization": f"Bearer {collector.user_token}"},
                timeout=10,
            )
            assert answer.status_code == 200, answer.text
        finally:
            for connection in stalled:
                connection.close()
