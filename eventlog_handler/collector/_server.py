"""HTTP plumbing of the collector: a threading HTTP/1.1 server and its request handler.

The handler turns each request into a :class:`~eventlog_handler.collector._messages.Request`,
lets :class:`~eventlog_handler.collector._endpoints.Api` answer it, writes the answer and records
it. It never lets an exception escape (a bug answers 500, a closed store 503), logs nothing to
stderr unless asked to, and takes care of request bodies it did not read: the connection is
then closed after the answer, and a body of reasonable size is drained first so the client can
read the answer instead of a connection reset.

Limits, so that no client can hold the collector:

- at most ``max_connections`` connections are open at once (each has a thread); one more
  takes the place of the connection that has waited longest for its client (idle between
  requests, or sending a request or body slowly), which is closed, so many slow clients never
  keep a prompt one out; only when every connection is busy serving a request is the new one
  answered 503 and closed;
- a connection waits at most ``idle_timeout`` seconds for a request; once a request's first byte
  has arrived, its request line and headers must be complete within ``header_timeout`` seconds
  and its body within ``body_timeout`` seconds, however slowly the bytes trickle in; otherwise
  the connection is closed;
- a request whose ``Host`` is not a name of this collector (:class:`~._auth.HostPolicy`) is
  answered 421 without being looked at further.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import re
import socket
import socketserver
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NamedTuple
from urllib.parse import parse_qs, unquote, urlsplit

from eventlog_handler.collector._auth import HostPolicy
from eventlog_handler.collector._endpoints import Api
from eventlog_handler.collector._http_helpers import CORS, preflight, read_chunked
from eventlog_handler.collector._messages import Request, Response, problem_response
from eventlog_handler.collector._problems import HttpError, problem_body
from eventlog_handler.collector._storage import StorageClosed

__all__ = [
    "CollectorHTTPServer",
    "CollectorRequestHandler",
    "DeadlineReader",
    "Limits",
    "RequestInfo",
    "RequestRecord",
]

logger = logging.getLogger("eventlog_handler.collector")

_DRAIN_LIMIT = 32 * 1024 * 1024
_DRAIN_TIMEOUT = 2.0
_WRITE_TIMEOUT = 30.0
_REFUSE_TIMEOUT = 0.2
_HOST_RE = re.compile(r"^(?:[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?$")


class RequestRecord(NamedTuple):
    """One request the collector answered: ``("POST", "/api/v2/events", 202)``."""

    method: str
    path: str
    status: int


@dataclass(frozen=True)
class RequestInfo:
    """One request in detail. Header names are lowercased; ``events_accepted`` and
    ``events_discarded`` count a post's events read (stored right after the answer) and dropped
    by the service's rules."""

    method: str
    path: str
    query: str
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body_bytes: int = 0
    events_accepted: int = 0
    events_discarded: int = 0
    time: float = 0.0

    @property
    def record(self) -> RequestRecord:
        """The ``(method, path, status)`` summary."""
        return RequestRecord(self.method, self.path, self.status)


class _ClientGone(Exception):
    """The client hung up or stalled while sending its body."""


@dataclass(frozen=True)
class Limits:
    """How many connections, and how long a client may take (seconds)."""

    max_connections: int = 64
    idle_timeout: float = 30.0
    header_timeout: float = 10.0
    body_timeout: float = 30.0


class DeadlineReader(io.RawIOBase):
    """A socket's reading side that gives up at a deadline, however slowly bytes trickle in
    (a socket timeout alone restarts with every byte)."""

    def __init__(self, sock: socket.socket) -> None:
        super().__init__()
        self._sock = sock
        self.deadline: float | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        deadline = self.deadline
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("the client took too long")
            self._sock.settimeout(remaining)
        return self._sock.recv_into(buffer)


def _head_arrived(connection: socket.socket) -> bool:
    """Whether a request line and headers are waiting, complete, on a connection just accepted
    (looked at without reading them or waiting: it is still in blocking mode, without the
    timeout a handler gives it, so ``MSG_DONTWAIT`` holds)."""
    try:
        head = connection.recv(65536, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except OSError:
        return False
    return b"\r\n\r\n" in head


def _refusal() -> bytes:
    body = json.dumps(
        problem_body(503, "/", detail="Too many connections; try again shortly.")
    ).encode()
    head = (
        "HTTP/1.1 503 Service Unavailable\r\n"
        "Content-Type: application/problem+json; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


class CollectorHTTPServer(ThreadingHTTPServer):
    """A ``ThreadingHTTPServer`` with daemon threads that can close its open connections."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(
        self,
        address: tuple[str, int],
        api: Api,
        *,
        record: Callable[[RequestInfo], None],
        verbose: bool = False,
        family: socket.AddressFamily = socket.AF_INET,
        limits: Limits | None = None,
        host_names: tuple[str, ...] = (),
    ) -> None:
        self.address_family = family
        self.api = api
        self.record = record
        self.verbose = verbose
        self.limits = limits or Limits()
        self.url = ""
        self.refused_connections = 0
        #: Connections closed to make room (the one that waited longest for its client).
        self.evicted_connections = 0
        #: Each open connection, and since when it waits for its client (None: being served).
        self._connections: dict[socket.socket, float | None] = {}
        self._connections_lock = threading.Lock()
        super().__init__(address, CollectorRequestHandler)
        host, port = self.server_address[:2]
        host = host.decode() if isinstance(host, bytes) else str(host)
        shown = f"[{host}]" if ":" in host else host
        self.url = f"http://{shown}:{port}"
        self.host_policy = HostPolicy(host_names)

    def server_bind(self) -> None:
        """Bind without ``HTTPServer``'s reverse DNS lookup of the host name."""
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = int(port)

    @property
    def open_connections(self) -> int:
        """How many connections are being served."""
        with self._connections_lock:
            return len(self._connections)

    def note_waiting(self, connection: socket.socket) -> None:
        """The connection waits for its client (a request, or the rest of a body)."""
        with self._connections_lock:
            if connection in self._connections:
                self._connections[connection] = time.monotonic()

    def note_busy(self, connection: socket.socket) -> None:
        """The connection's request is being served."""
        with self._connections_lock:
            if connection in self._connections:
                self._connections[connection] = None

    def process_request(self, request: Any, client_address: Any) -> None:
        """Track the connection, then serve it in a daemon thread. At the limit, the connection
        that has waited longest for its client (idle, or sending its request slowly) is closed
        to make room, so slow clients never keep a prompt one out; only when every connection
        is being served is the new one answered 503 and closed."""
        victim: socket.socket | None = None
        with self._connections_lock:
            full = len(self._connections) >= self.limits.max_connections
            if full:
                waiting = [
                    (since, id(sock), sock)
                    for sock, since in self._connections.items()
                    if since is not None
                ]
                if waiting:
                    victim = min(waiting)[2]
                    del self._connections[victim]
                    full = False
            if not full:
                # A request whose head has arrived whole is as good as being served.
                self._connections[request] = None if _head_arrived(request) else time.monotonic()
        if victim is not None:
            self.evicted_connections += 1
            with contextlib.suppress(OSError):
                victim.shutdown(socket.SHUT_RDWR)
        if full:
            self.refused_connections += 1
            self._refuse(request)
            return
        super().process_request(request, client_address)

    @staticmethod
    def _refuse(request: socket.socket) -> None:
        try:
            request.settimeout(_REFUSE_TIMEOUT)
            request.sendall(_refusal())
            request.shutdown(socket.SHUT_WR)
            with contextlib.suppress(OSError):
                request.recv(65536)  # what the client already sent, so close() does not reset
        except OSError:
            pass
        finally:
            request.close()

    def shutdown_request(self, request: Any) -> None:
        """Forget the connection and close it."""
        with self._connections_lock:
            self._connections.pop(request, None)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        """Shut down every open connection, so idle keep-alive threads end at once."""
        with self._connections_lock:
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Log connection errors at debug level instead of printing tracebacks on stderr."""
        logger.debug("error on a connection from %s", client_address, exc_info=True)


class CollectorRequestHandler(BaseHTTPRequestHandler):
    """Answers one connection's requests with the server's :class:`Api`."""

    protocol_version = "HTTP/1.1"
    default_request_version = "HTTP/1.0"  # never answer in HTTP/0.9 style (no status line)
    server_version = "eventlog-collector"
    sys_version = ""
    timeout = 30
    disable_nagle_algorithm = True  # headers and body are separate writes
    server: CollectorHTTPServer

    _body_read = 0
    _expect_refused = False
    #: A chunked body, read whole and de-chunked before the request is served.
    _dechunked: io.BytesIO | None = None
    _reader: DeadlineReader | None = None

    def version_string(self) -> str:
        """The ``Server`` header."""
        return self.server_version

    def setup(self) -> None:
        """Read through a :class:`DeadlineReader`."""
        super().setup()
        self._reader = DeadlineReader(self.connection)
        self.rfile = io.BufferedReader(self._reader, 65536)

    def _deadline(self, seconds: float | None) -> None:
        if self._reader is not None:
            self._reader.deadline = None if seconds is None else time.monotonic() + seconds

    def handle_one_request(self) -> None:
        """Wait for a request at most ``idle_timeout``; then give its request line and headers
        ``header_timeout``."""
        limits = self.server.limits
        self.server.note_waiting(self.connection)
        self._deadline(limits.idle_timeout)
        try:
            waiting = self.rfile.peek(1)  # type: ignore[attr-defined]
        except OSError:
            waiting = b""
        if not waiting:
            self.close_connection = True
            return
        self._deadline(limits.header_timeout)
        super().handle_one_request()

    def parse_request(self) -> bool:
        """The request line and headers are in: the connection is being served."""
        parsed = super().parse_request()
        if parsed:
            self.server.note_busy(self.connection)
        return parsed

    # -- entry points ------------------------------------------------------------------------

    def do_GET(self) -> None:
        self._serve()

    def do_HEAD(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def do_PUT(self) -> None:
        self._serve()

    def do_PATCH(self) -> None:
        self._serve()

    def do_DELETE(self) -> None:
        self._serve()

    def do_OPTIONS(self) -> None:
        self._serve()

    def handle_expect_100(self) -> bool:
        """Refuse a too-large body before the client sends it; otherwise say continue."""
        length = self.headers.get("Content-Length", "").strip()
        if length.isascii() and length.isdigit() and int(length) > self.server.api.max_body_bytes:
            self._expect_refused = True
            return True
        return super().handle_expect_100()

    def log_message(self, format: str, *args: Any) -> None:
        """Per-request logging goes to stderr only when the server is verbose."""
        if self.server.verbose:
            sys.stderr.write(f"{self.address_string()} - {format % args}\n")

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """Errors raised by ``http.server`` itself (bad request line...), as problem bodies."""
        try:
            self.log_error("code %d, message %s", code, message)
            body = json.dumps(
                problem_body(code, getattr(self, "path", "") or "", detail=message or explain)
            ).encode("ascii")
            self.send_response(code, message)
            self.send_header("Content-Type", "application/problem+json; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            if getattr(self, "command", None) != "HEAD" and code >= 200 and code not in (204, 304):
                self.wfile.write(body)
        except OSError:
            self.close_connection = True

    # -- one request -------------------------------------------------------------------------

    def _declared_length(self) -> int | None:
        raw = (self.headers.get("Content-Length") or "").strip()
        return int(raw) if raw.isascii() and raw.isdigit() else None

    def _read_body(self, size: int) -> bytes:
        if self._dechunked is not None:
            data = self._dechunked.read(size)
            self._body_read += len(data)
            return data
        if self._body_read == 0:
            self._deadline(self.server.limits.body_timeout)
        self.server.note_waiting(self.connection)  # the client's turn: it may be evicted
        try:
            data = self.rfile.read(size)
        except OSError as exc:
            raise _ClientGone() from exc
        finally:
            self.server.note_busy(self.connection)
        self._body_read += len(data)
        if len(data) < size:
            raise _ClientGone()
        return data

    def _base_url(self) -> str:
        host = (self.headers.get("Host") or "").strip()
        return f"http://{host}" if _HOST_RE.match(host) else self.server.url

    def _check_host(self, path: str) -> Response | None:
        hosts = self.headers.get_all("Host") or []
        if len(hosts) > 1:
            return problem_response(HttpError(400, "Send one Host header."), path)
        if not self.server.host_policy.allows(hosts[0] if hosts else None):
            detail = (
                f"This collector serves {self.server.url}; a request addressed to "
                f"{(hosts[0] if hosts else '')[:100]!r} is refused (DNS rebinding protection)."
            )
            return problem_response(HttpError(421, detail), path)
        return None

    def _dechunk(self) -> Response | None:
        """Read a chunked body whole (the service reads them: ``requests`` sends one for a
        generator) and serve it as if it had a ``Content-Length``; a problem response for a
        body too large, malformed or coded otherwise (:func:`read_chunked`)."""
        codings = [part.strip().lower() for part in self.headers.get_all("Transfer-Encoding", [])]
        self._deadline(self.server.limits.body_timeout)
        self.server.note_waiting(self.connection)  # the client's turn: it may be evicted
        try:
            if ",".join(codings) != "chunked" or self.headers.get("Content-Length") is not None:
                detail = "Send a body with a Content-Length, or chunked alone (no other coding)."
                raise HttpError(400, detail)
            body = read_chunked(self.rfile, self.server.api.max_body_bytes)
        except HttpError as error:
            self.close_connection = True
            return problem_response(error, self.path)
        except (EOFError, OSError) as exc:
            raise _ClientGone() from exc
        finally:
            self.server.note_busy(self.connection)
        del self.headers["Transfer-Encoding"]
        self.headers["Content-Length"] = str(len(body))
        self._dechunked = io.BytesIO(body)
        return None

    def _serve(self) -> None:
        self._body_read = 0
        self._dechunked = None
        started = time.time()
        split = urlsplit(self.path)
        path = unquote(split.path) or "/"
        request = Request(
            method=self.command,
            path=path,
            query=parse_qs(split.query, keep_blank_values=True),
            headers=self.headers,
            read_body=self._read_body,
            base_url=self._base_url(),
            client=str(self.client_address[0]) if self.client_address else "",
        )
        cors = path.startswith("/api/") and bool(self.headers.get("Origin"))
        chunked = self.headers.get("Transfer-Encoding") is not None
        try:
            response = self._check_host(path)
            if response is None and chunked:
                response = self._dechunk()
            if response is None and cors and self.command == "OPTIONS":
                response = preflight(self.headers.get("Access-Control-Request-Headers"))
            elif response is None:
                response = self.server.api.handle(request)
        except _ClientGone:
            self.close_connection = True
            return
        except StorageClosed:
            response = problem_response(HttpError(503, "The collector is stopping."), path)
        except Exception:
            logger.exception("the collector failed on %s %s", self.command, path[:200])
            response = problem_response(HttpError(500, "The collector failed; see its log."), path)
        if cors:  # a browser app on another origin (the JavaScript client) reads the answer
            response.headers.update(CORS)
        unread = self._unread_body()
        # Recorded before the answer is written, so a client that has its answer finds the
        # request in the log.
        self.server.record(
            RequestInfo(
                method=self.command,
                path=path,
                query=split.query,
                status=response.status,
                headers={k.lower(): v for k, v in self.headers.items()},
                body_bytes=self._body_read,
                events_accepted=int(response.headers.get("X-Events-Accepted", 0)),
                events_discarded=int(response.headers.get("X-Events-Discarded", 0)),
                time=started,
            )
        )
        self._deadline(None)
        try:
            self.connection.settimeout(_WRITE_TIMEOUT)
            # The client asked to close (Connection: close, HTTP/1.0): say it in the answer too,
            # so that its connection pool does not reuse a connection closed here.
            close = unread or response.status == 421 or self.close_connection
            self._write(response, close=close)
        except OSError:
            self.close_connection = True
        else:
            if unread:
                self._drain()
        if response.after is not None:  # queued on the service; stored here, after answering
            try:
                response.after()
            except Exception:
                logger.exception("the collector failed after answering %s", path[:200])

    def _unread_body(self) -> bool:
        if self._dechunked is not None:
            return False  # read whole from the connection
        if self.headers.get("Transfer-Encoding"):
            return True
        raw = self.headers.get("Content-Length")
        if raw is None:
            return False
        declared = self._declared_length()
        return declared is None or self._body_read < declared

    def _write(self, response: Response, *, close: bool) -> None:
        body = response.body
        sent = b"" if self.command == "HEAD" or response.status in (204, 304) else body
        self.send_response(response.status)
        if response.content_type and response.status not in (204, 304):
            self.send_header("Content-Type", response.content_type)
        if response.status not in (204, 304):
            self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Content-Type-Options", "nosniff")
        for name, value in response.headers.items():
            self.send_header(name, value)
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if sent:
            self.wfile.write(sent)
        self.wfile.flush()

    def _drain(self) -> None:
        """Read and drop what is left of a body the answer did not need (bounded)."""
        declared = self._declared_length()
        if self._expect_refused or declared is None or self.headers.get("Transfer-Encoding"):
            return
        remaining = declared - self._body_read
        if remaining > _DRAIN_LIMIT:
            return
        try:
            self._deadline(_DRAIN_TIMEOUT)
            while remaining > 0:
                chunk = self.rfile.read1(min(remaining, 65536))
                if not chunk:
                    break
                remaining -= len(chunk)
        except OSError:
            pass
