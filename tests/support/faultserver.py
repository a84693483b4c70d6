"""A scriptable loopback HTTP server that plays the service's events endpoint, with faults.

Each ``POST /api/v2/events`` takes the next action from :attr:`FaultServer.script` (or the
:attr:`FaultServer.default` action when the script is empty):

- an ``int`` status (202 by default): answer it, with a problem+json body for errors;
- ``Reply(status, body, headers)``: answer exactly that;
- ``"reset"``: read the request, then close the socket with an RST, answering nothing;
- ``"hang"``: read the request and never answer (until the server stops);
- ``Delay(seconds, then)``: wait, then carry out ``then``;
- a callable: called with the request's events and raw size, returns one of the above.

Every request is recorded (:attr:`requests`); the events of 2xx answers are :attr:`accepted`,
decoded from gzip when sent so. A reference id accepted twice is in :attr:`duplicates`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import json
import socket
import ssl
import struct
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclasses.dataclass
class Reply:
    status: int
    body: bytes = b""
    headers: dict[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Delay:
    seconds: float
    then: Any = 202


@dataclasses.dataclass
class Seen:
    status: int | str
    events: list[dict[str, Any]]
    headers: dict[str, str]
    raw_size: int
    #: When the request's body had been read (POSIX time).
    at: float = dataclasses.field(default_factory=time.time)


class FaultServer:
    def __init__(
        self,
        port: int = 0,
        keep_events: bool = True,
        tls: tuple[str, str] | None = None,
        ids: set[str] | None = None,
    ) -> None:
        #: ``False``: remember accepted reference ids only, and requests without their events
        #: (long runs such as the benchmarks' soak: bounded memory).
        self.keep_events = keep_events
        self.script: deque[Any] = deque()
        self.default: Any = 202
        self.requests: list[Seen] = []
        self.accepted: list[dict[str, Any]] = []
        self.duplicates: list[str] = []
        #: ``GET /api/v2/projects/config``: the answer (a dict, sent as JSON with 200, or 304
        #: when the client's ``v`` is its version), or a status / "hang" to fail with; a
        #: ``Delay`` answers after its seconds.
        self.config: Any = {"version": 0, "settings": {}}
        #: The ``v`` parameter of every settings request and the thread that made it.
        self.config_requests: list[str | None] = []
        #: Bytes of each "drip" or "huge" answer written before the client closed.
        self.answer_bytes: list[int] = []
        #: ``X-Exceptionless-ConfigVersion`` sent with accepted posts (None: not sent).
        self.config_version: int | None = None
        #: Session heartbeats: ``(id, close, time received)``.
        self.heartbeats: list[tuple[str, bool, float]] = []
        #: User descriptions: ``(reference id, body, headers)``.
        self.descriptions: list[tuple[str, dict[str, Any], dict[str, str]]] = []
        #: Statuses for the next heartbeat or user-description requests (then 200/202).
        self.side_script: deque[int] = deque()
        #: Seconds every heartbeat or user-description request waits for its answer, and how
        #: many such requests came (counted as they come, before any answer).
        self.side_delay = 0.0
        self.side_requests = 0
        #: Events a roll-up (an event with ``count``) stood for beyond itself.
        self.rolled_up = 0
        #: Accepted reference ids; servers that replace each other (a restart) may share one
        #: set, as the service remembers ids across its restarts.
        self.ids: set[str] = set() if ids is None else ids
        self._ids = self.ids
        self._lock = threading.Lock()
        self._connections: set[socket.socket] = set()
        self._stopping = threading.Event()
        self._server = _Server(("127.0.0.1", port), _Handler)
        self._server.owner = self
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        if tls is not None:  # (certificate file, key file): answer https:// instead
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
            self.url = f"https://127.0.0.1:{self.port}"
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

    def __enter__(self) -> FaultServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def next_action(self) -> Any:
        with self._lock:
            return self.script.popleft() if self.script else self.default

    def record(self, seen: Seen, stored: bool = True) -> None:
        """Note a request; a 2xx answer that is the service's (``stored``) accepts its events."""
        with self._lock:
            events = seen.events
            if not self.keep_events:
                seen = dataclasses.replace(seen, events=[])
            self.requests.append(seen)
            if stored and isinstance(seen.status, int) and 200 <= seen.status < 300:
                for event in events:
                    ref = event.get("reference_id")
                    if ref in self._ids:
                        self.duplicates.append(ref)
                        continue
                    if ref:
                        self._ids.add(ref)
                    count = event.get("count", 1)
                    if type(count) is int and count > 1:
                        self.rolled_up += count - 1
                    if self.keep_events:
                        self.accepted.append(event)

    def arrivals(self) -> dict[str, float]:
        """Each accepted event's message and when its request arrived (the first time)."""
        found: dict[str, float] = {}
        with self._lock:
            for seen in self.requests:
                if isinstance(seen.status, int) and 200 <= seen.status < 300:
                    for event in seen.events:
                        found.setdefault(str(event.get("message")), seen.at)
        return found

    def accepted_count(self) -> int:
        """How many distinct reference ids were accepted (also with ``keep_events=False``)."""
        with self._lock:
            return len(self._ids)

    def accepted_ids(self) -> list[str]:
        with self._lock:
            return [event.get("reference_id", "") for event in self.accepted]

    def statuses(self) -> list[int | str]:
        with self._lock:
            return [seen.status for seen in self.requests]

    def wait_for(self, count: int, timeout: float = 10.0) -> bool:
        """Wait until ``count`` events were accepted."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            with self._lock:
                if len(self.accepted) >= count:
                    return True
            time.sleep(0.005)
        return False


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

    def _side_status(self, default: int) -> int:
        owner = self.server.owner
        with owner._lock:
            owner.side_requests += 1
            status = owner.side_script.popleft() if owner.side_script else default
        if owner.side_delay:
            owner._stopping.wait(owner.side_delay)
        return status

    def do_GET(self) -> None:
        owner = self.server.owner
        path, _, query = self.path.partition("?")
        if path == "/api/v2/events/session/heartbeat":
            params = dict(pair.partition("=")[::2] for pair in query.split("&") if pair)
            status = self._side_status(200)
            if status == 200:
                with owner._lock:
                    owner.heartbeats.append(
                        (params.get("id", ""), params.get("close") == "true", time.time())
                    )
            self._answer(Reply(status))
            return
        if path != "/api/v2/projects/config":
            self._answer(Reply(404))
            return
        version = None
        for pair in query.split("&"):
            name, _, value = pair.partition("=")
            if name == "v":
                version = value
        with owner._lock:
            owner.config_requests.append(version)
            config = owner.config
        while isinstance(config, Delay):  # a slow answer
            if owner._stopping.wait(config.seconds):
                return
            config = config.then
        if config == "hang":
            owner._stopping.wait()
            self.close_connection = True
            return
        if isinstance(config, int):
            self._answer(Reply(config))
            return
        if version is not None and str(config.get("version")) == version:
            self._answer(Reply(304))
            return
        body = json.dumps(config).encode()
        self._answer(Reply(200, body, {"Content-Type": "application/json"}))

    def _answer(self, reply: Reply) -> None:
        if reply.status >= 400 and not reply.body:
            reply = Reply(reply.status, b'{"title": "fault"}', {"Content-Type": "application/json"})
        self.send_response(reply.status)
        for key, value in reply.headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(reply.body)))
        self.end_headers()
        self.wfile.write(reply.body)

    def _answer_slowly(self, length: int, drip: bool) -> None:
        owner = self.server.owner
        self.close_connection = True
        sent = 0
        try:
            self.send_response(202)
            self.send_header("Content-Length", str(length))
            self.end_headers()
            self.wfile.flush()
            chunk = b"x" if drip else b"x" * 65_536
            while sent < length and not owner._stopping.is_set():
                self.wfile.write(chunk)
                self.wfile.flush()
                sent += len(chunk)
                if drip:
                    owner._stopping.wait(0.3)
        except OSError:  # the client closed the connection: what it took is recorded
            pass
        with owner._lock:
            owner.answer_bytes.append(sent)

    def _drip_headers(self) -> None:
        owner = self.server.owner
        self.close_connection = True
        line = b"X-Slow: " + b"x" * 20 + b"\r\n"
        sent = 0
        try:
            self.wfile.write(b"HTTP/1.1 202 Accepted\r\n")
            self.wfile.flush()
            while not owner._stopping.is_set():
                self.wfile.write(line[sent % len(line) : sent % len(line) + 1])
                self.wfile.flush()
                sent += 1
                owner._stopping.wait(0.3)
        except OSError:  # the client closed the connection
            pass
        with owner._lock:
            owner.answer_bytes.append(sent)

    def do_POST(self) -> None:
        owner = self.server.owner
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if self.path.startswith("/api/v2/events/by-ref/"):
            reference = self.path.split("/")[5]
            status = self._side_status(202)
            if status == 202:
                headers = {key.lower(): value for key, value in self.headers.items()}
                with owner._lock:
                    owner.descriptions.append((reference, json.loads(raw), headers))
            self._answer(Reply(status))
            return
        received = time.time()
        body = gzip.decompress(raw) if self.headers.get("Content-Encoding") == "gzip" else raw
        parsed = json.loads(body.decode("utf-8")) if body else []
        events = parsed if isinstance(parsed, list) else [parsed]
        headers = {key.lower(): value for key, value in self.headers.items()}
        action = owner.next_action()
        if callable(action):
            action = action(events, len(raw))
        while isinstance(action, Delay):
            if owner._stopping.wait(action.seconds):
                return
            action = action.then
        if action == "reset":
            owner.record(Seen("reset", events, headers, len(raw), received))
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
            self.close_connection = True
            return
        if action == "hang":
            owner.record(Seen("hang", events, headers, len(raw), received))
            owner._stopping.wait()
            self.close_connection = True
            return
        if action in ("drip", "huge", "drip-headers"):
            # "drip": a 202 whose body comes a byte at a time, three a second; "huge": a 202
            # with a 64 MB body; "drip-headers": a 202 whose header lines come a byte at a
            # time, three a second, for ever. Nothing is stored; the bytes the client took are
            # recorded.
            owner.record(Seen(action, events, headers, len(raw), received), stored=False)
            if action == "drip-headers":
                self._drip_headers()
            else:
                self._answer_slowly(1_000 if action == "drip" else 64 << 20, action == "drip")
            return
        reply = action if isinstance(action, Reply) else Reply(int(action))
        if reply.status >= 400 and not reply.body:
            problem = {
                "type": "about:blank",
                "title": f"fault {reply.status}",
                "status": reply.status,
            }
            reply = Reply(
                reply.status,
                json.dumps(problem).encode(),
                {"Content-Type": "application/problem+json", **reply.headers},
            )
        # An HTML page answering 200 (a proxy's login page, a wrong URL) stored nothing.
        page = bool(reply.body) and "html" in reply.headers.get("Content-Type", "")
        owner.record(Seen(reply.status, events, headers, len(raw), received), stored=not page)
        if 200 <= reply.status < 300 and owner.config_version is not None:
            reply.headers = {
                **reply.headers,
                "X-Exceptionless-ConfigVersion": str(owner.config_version),
            }
        self.send_response(reply.status)
        for key, value in reply.headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(reply.body)))
        self.end_headers()
        self.wfile.write(reply.body)
