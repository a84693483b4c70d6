"""Loopback sinks that count what arrives, run in a process of their own.

``python benchmarks/sink.py`` listens on 127.0.0.1 only and prints one line,
``READY {"http": PORT, "tcp": PORT, "hung": PORT}``, then serves until its standard input
closes (so it never outlives the process that started it):

- HTTP (``http``):
  - ``POST /api/v2/events`` answers 202 and counts the events of the JSON body (an array or one
    object, gzip-decoded when ``Content-Encoding: gzip``). Events that carry a
    ``reference_id`` are counted once per id (a retried batch does not count twice).
  - ``POST /api/<project>/envelope/`` (sentry-sdk) answers 200 and counts envelopes and their
    ``event`` items.
  - ``GET /_counts`` answers the counts as JSON.
- TCP (``tcp``): counts newline-terminated lines (python-logstash-async's JSON lines).
- A listening socket that never accepts (``hung``): a server that takes the connection and
  never answers.
"""

from __future__ import annotations

import gzip
import json
import os
import socket
import socketserver
import sys
import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HOST = "127.0.0.1"


class Counts:
    """What arrived, under one lock."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ids: set[str] = set()
        self.events_without_id = 0
        self.duplicates = 0
        self.requests = 0
        self.bytes = 0
        self.envelopes = 0
        self.sentry_events = 0
        self.lines = 0
        self.bad_requests = 0

    def snapshot(self) -> dict[str, int]:
        with self.lock:
            events = len(self.ids) + self.events_without_id
            return {
                "events": events,
                "duplicates": self.duplicates,
                "requests": self.requests,
                "bytes": self.bytes,
                "envelopes": self.envelopes,
                "sentry_events": self.sentry_events,
                "lines": self.lines,
                "bad_requests": self.bad_requests,
            }


COUNTS = Counts()


def _decode(body: bytes, encoding: str) -> bytes:
    encoding = encoding.strip().lower()
    if encoding == "gzip":
        return gzip.decompress(body)
    if encoding == "deflate":
        return zlib.decompress(body)
    if encoding == "br":
        import brotli  # type: ignore[import-not-found]  # only if the sender chose it

        return bytes(brotli.decompress(body))
    return body


def count_events(payload: Any) -> None:
    items = payload if isinstance(payload, list) else [payload]
    with COUNTS.lock:
        for item in items:
            ref = item.get("reference_id") if isinstance(item, dict) else None
            if isinstance(ref, str):
                if ref in COUNTS.ids:
                    COUNTS.duplicates += 1
                else:
                    COUNTS.ids.add(ref)
            else:
                COUNTS.events_without_id += 1


def count_envelope(body: bytes) -> None:
    """Count the ``event`` items of a sentry envelope (header line, then item header + payload)."""
    events = 0
    position = body.find(b"\n")  # the envelope header
    while 0 <= position < len(body) - 1:
        start = position + 1
        end = body.find(b"\n", start)
        if end < 0:
            end = len(body)
        line = body[start:end].strip()
        if not line:
            position = end
            continue
        try:
            header = json.loads(line)
        except ValueError:
            break
        if header.get("type") == "event":
            events += 1
        length = header.get("length")
        if isinstance(length, int):
            position = end + 1 + length  # the payload; a newline may follow it
            if position < len(body) and body[position : position + 1] != b"\n":
                position -= 1
        else:
            payload_end = body.find(b"\n", end + 1)
            position = len(body) if payload_end < 0 else payload_end
    with COUNTS.lock:
        COUNTS.envelopes += 1
        COUNTS.sentry_events += events


class HttpSink(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # no 40 ms delayed-ACK stalls between header and body

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _answer(self, status: int, body: bytes = b"", content_type: str = "") -> None:
        self.send_response(status)
        if content_type:
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body:
            self.wfile.write(body)

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            raw = b"".join(chunks)
        else:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with COUNTS.lock:
            COUNTS.requests += 1
            COUNTS.bytes += len(raw)
        return _decode(raw, self.headers.get("Content-Encoding", ""))

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        try:
            body = self._body()
            if path == "/api/v2/events":
                count_events(json.loads(body))
                self._answer(202)
            elif path.startswith("/api/") and path.rstrip("/").endswith("/envelope"):
                count_envelope(body)
                self._answer(200, b"{}", "application/json")
            else:
                self._answer(404)
        except Exception:
            with COUNTS.lock:
                COUNTS.bad_requests += 1
            self._answer(400)

    def do_GET(self) -> None:
        if self.path.split("?", 1)[0] == "/_counts":
            self._answer(200, json.dumps(COUNTS.snapshot()).encode(), "application/json")
        else:
            self._answer(404)


class TcpSink(socketserver.BaseRequestHandler):
    """Counts newline-terminated lines."""

    def handle(self) -> None:
        sock: socket.socket = self.request
        while True:
            try:
                data = sock.recv(262_144)
            except OSError:
                return
            if not data:
                return
            lines = data.count(b"\n")
            with COUNTS.lock:
                COUNTS.lines += lines
                COUNTS.bytes += len(data)


class _ThreadingTcpServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128


class _HttpServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A measured process that ends holds a keep-alive connection open: its reset is the
        # normal end of that connection, not an error worth a traceback.
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


def main() -> None:
    http_server = _HttpServer((HOST, 0), HttpSink)
    tcp_server = _ThreadingTcpServer((HOST, 0), TcpSink)
    hung = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    hung.bind((HOST, 0))
    hung.listen(1024)
    for server in (http_server, tcp_server):
        threading.Thread(target=server.serve_forever, daemon=True).start()
    ports = {
        "http": http_server.server_address[1],
        "tcp": tcp_server.server_address[1],
        "hung": hung.getsockname()[1],
    }
    sys.stdout.write("READY " + json.dumps(ports) + "\n")
    sys.stdout.flush()
    sys.stdin.read()  # until the parent closes it (or dies)
    os._exit(0)


if __name__ == "__main__":
    main()
