"""A scriptable loopback server playing the service's events endpoint, with faults (stdlib only).

Used by ``soak.py`` and ``outage.py``. Each ``POST /api/v2/events`` takes the next action of
:attr:`FaultServer.script`, or :attr:`FaultServer.default` when the script is empty:

- an ``int`` status: answer it (an error with a problem+json body);
- ``Reply(status, body, headers)``: answer exactly that;
- ``"reset"``: read the request, then close the socket with an RST, answering nothing;
- ``"hang"``: read the request and never answer (until the server stops);
- a callable: called with the request's events and raw size, returns one of the above.

The events of 2xx answers are accepted once per ``reference_id``; an id accepted again is
counted in :attr:`duplicates`. ``ids`` may be shared by servers that replace each other (a
restart), as the service remembers ids across its restarts. ``GET /api/v2/projects/config``
answers empty settings.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import json
import socket
import struct
import threading
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclasses.dataclass
class Reply:
    status: int
    body: bytes = b""
    headers: dict[str, str] = dataclasses.field(default_factory=dict)


class FaultServer:
    def __init__(self, port: int = 0, ids: set[str] | None = None) -> None:
        self.script: deque[Any] = deque()
        self.default: Any = 202
        self.ids: set[str] = set() if ids is None else ids
        self.duplicates = 0
        #: Events a roll-up (an event with ``count``) stood for beyond itself.
        self.rolled_up = 0
        self.requests = 0
        self._lock = threading.Lock()
        self._connections: set[socket.socket] = set()
        self._stopping = threading.Event()
        self._server = _Server(("127.0.0.1", port), _Handler)
        self._server.owner = self
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    def start(self) -> FaultServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop like a process that ends: the listening socket and every open connection."""
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)

    def next_action(self) -> Any:
        with self._lock:
            return self.script.popleft() if self.script else self.default

    def accept(self, events: list[Any]) -> None:
        with self._lock:
            for event in events:
                ref = event.get("reference_id") if isinstance(event, dict) else None
                if ref in self.ids:
                    self.duplicates += 1
                    continue
                if ref:
                    self.ids.add(ref)
                count = event.get("count", 1) if isinstance(event, dict) else 1
                self.rolled_up += max(0, int(count) - 1) if isinstance(count, int) else 0


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: FaultServer


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        with self.server.owner._lock:
            self.server.owner._connections.add(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            with self.server.owner._lock:
                self.server.owner._connections.discard(self.connection)

    def _answer(self, reply: Reply) -> None:
        if reply.status >= 400 and not reply.body:
            problem = {"type": "about:blank", "title": f"fault {reply.status}"}
            reply = Reply(
                reply.status,
                json.dumps({**problem, "status": reply.status}).encode(),
                {"Content-Type": "application/problem+json", **reply.headers},
            )
        self.send_response(reply.status)
        for key, value in reply.headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(reply.body)))
        self.end_headers()
        self.wfile.write(reply.body)

    def do_GET(self) -> None:
        if self.path.split("?", 1)[0] == "/api/v2/projects/config":
            body = json.dumps({"version": 0, "settings": {}}).encode()
            self._answer(Reply(200, body, {"Content-Type": "application/json"}))
        else:
            self._answer(Reply(404))

    def do_POST(self) -> None:
        owner = self.server.owner
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with owner._lock:
            owner.requests += 1
        if self.path.split("?", 1)[0] != "/api/v2/events":
            self._answer(Reply(404))
            return
        try:
            body = gzip.decompress(raw) if self.headers.get("Content-Encoding") == "gzip" else raw
            parsed = json.loads(body.decode("utf-8")) if body else []
        except ValueError:
            self._answer(Reply(400))
            return
        events = parsed if isinstance(parsed, list) else [parsed]
        action = owner.next_action()
        if callable(action):
            action = action(events, len(raw))
        if action == "reset":
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
            self.close_connection = True
            return
        if action == "hang":
            owner._stopping.wait()
            self.close_connection = True
            return
        reply = action if isinstance(action, Reply) else Reply(int(action))
        if 200 <= reply.status < 300 and not (
            reply.body and "html" in reply.headers.get("Content-Type", "")
        ):
            owner.accept(events)
        self._answer(reply)
