"""Fixtures of the logging integration tests: a loopback capture server and isolation.

Every test talks real HTTP to 127.0.0.1 only. The capture server records the decoded JSON body
of every ``POST /api/v2/events`` (gzip aware) and answers 202, like the service.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from eventlog_handler import EventLogHandler
from eventlog_handler import _setup as configure
from eventlog_handler.delivery import _engine as transport

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
#: A well-formed 40-character project token.
API_KEY = "Ik3vQ8mZ2pLr7VbN4cYw9ZdF1gHj6KeA0uMo5PiR"
#: Engine timings that keep the tests fast.
FAST: dict[str, Any] = {
    "flush_interval": 0.05,
    "error_delay": 0.01,
    "retry_initial": 0.01,
    "max_backoff": 0.05,
    "timeout": 5,
}


class CaptureServer:
    """A loopback HTTP server that stores the events posted to it."""

    def __init__(self) -> None:
        self._events: list[dict[str, Any]] = []
        self.requests: list[dict[str, Any]] = []
        self._changed = threading.Condition()
        capture = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                payload = json.loads(body.decode("utf-8"))
                batch = payload if isinstance(payload, list) else [payload]
                with capture._changed:
                    capture.requests.append(
                        {
                            "path": self.path,
                            "authorization": self.headers.get("Authorization"),
                            "count": len(batch),
                        }
                    )
                    capture._events.extend(batch)
                    capture._changed.notify_all()
                self.send_response(202)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def start(self) -> CaptureServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    @property
    def events(self) -> list[dict[str, Any]]:
        with self._changed:
            return list(self._events)

    def wait_for(self, count: int, timeout: float = 10.0) -> list[dict[str, Any]]:
        """The events, once at least ``count`` have arrived (or after ``timeout``)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while len(self._events) < count:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._changed.wait(remaining)
            return list(self._events)


@pytest.fixture
def server() -> Iterator[CaptureServer]:
    capture = CaptureServer().start()
    yield capture
    capture.stop()


@pytest.fixture(autouse=True)
def isolation(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Restore logging, the exception hooks and the engines after each test."""
    monkeypatch.delenv("EVENTLOG_API_KEY", raising=False)
    monkeypatch.delenv("EVENTLOG_SERVER_URL", raising=False)
    root = logging.getLogger()
    saved_handlers = list(root.handlers)
    saved_level = root.level
    watched = [logging.getLogger(name) for name in ("urllib3", "app")]
    saved_levels = [(logger, logger.level, logger.propagate) for logger in watched]
    saved_hooks = (sys.excepthook, threading.excepthook)
    transport._forget_engines_for_tests()
    yield
    current = configure._CURRENT
    if current is not None:
        current.detach()
        configure._CURRENT = None
    sys.excepthook, threading.excepthook = saved_hooks
    root.handlers[:] = saved_handlers
    root.setLevel(saved_level)
    for logger, level, propagate in saved_levels:
        logger.setLevel(level)
        logger.propagate = propagate
        logger.handlers.clear()
    if "structlog" in sys.modules:
        import structlog

        structlog.reset_defaults()
    transport._forget_engines_for_tests()


@pytest.fixture
def make_handler(
    server: CaptureServer,
) -> Callable[..., tuple[logging.Logger, EventLogHandler]]:
    """A handler to ``server`` with fast timings, on the logger ``app`` (not propagating)."""

    def make(**options: Any) -> tuple[logging.Logger, EventLogHandler]:
        merged: dict[str, Any] = {"api_key": API_KEY, "server_url": server.url, **FAST}
        merged.update(options)
        handler = EventLogHandler(**merged)
        logger = logging.getLogger("app")
        logger.handlers.clear()
        logger.propagate = False
        logger.setLevel(1)
        logger.addHandler(handler)
        return logger, handler

    return make


def deliver(handler: EventLogHandler, server: CaptureServer, count: int) -> list[dict[str, Any]]:
    """Flush ``handler``'s engine and return the ``count`` events the server got."""
    assert handler.engine.flush(5), handler.stats()
    events = server.wait_for(count, timeout=5)
    assert len(events) == count, events
    return events


def child_env(server_url: str, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["EVENTLOG_SERVER_URL"] = server_url
    env["EVENTLOG_API_KEY"] = API_KEY
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])]
    )
    env.pop("PYTHONSTARTUP", None)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def run_python(
    server_url: str, args: list[str], *, timeout: float = 30, **extra: str
) -> subprocess.CompletedProcess[str]:
    """Run ``python <args>`` with ``EVENTLOG_SERVER_URL``/``EVENTLOG_API_KEY`` set."""
    return subprocess.run(
        [sys.executable, *args],
        env=child_env(server_url, **extra),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=str(REPO),
    )


@pytest.fixture
def collector() -> Iterator[Any]:
    """The local collector (the service's API and storage) on 127.0.0.1, in memory."""
    from eventlog_handler.collector import Collector

    instance = Collector().start()
    try:
        yield instance
    finally:
        instance.close()
