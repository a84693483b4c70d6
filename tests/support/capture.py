"""A loopback HTTP server that records the events posted to it.

Every test talks real HTTP to 127.0.0.1 only. The capture server records the decoded JSON body
of every ``POST /api/v2/events`` (gzip aware) and answers 202, like the service.
"""

from __future__ import annotations

import gzip
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from eventlog_handler import EventLogHandler


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
                            "client_port": self.client_address[1],  # one per connection
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


def deliver(handler: EventLogHandler, server: CaptureServer, count: int) -> list[dict[str, Any]]:
    """Flush ``handler``'s engine and return the ``count`` events the server got."""
    assert handler.engine.flush(5), handler.stats()
    events = server.wait_for(count, timeout=5)
    assert len(events) == count, events
    return events
