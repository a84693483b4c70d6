"""A forwarding HTTP proxy on 127.0.0.1 for the tests of proxies taken from the environment.

Plain ``http://`` requests arrive in absolute form and are forwarded; ``https://`` arrives as
``CONNECT host:port`` and is tunnelled byte for byte. Every request line and its
``Proxy-Authorization`` header are recorded. Targets other than 127.0.0.1 are refused (403).
"""

from __future__ import annotations

import http.client
import select
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit


class Proxy:
    def __init__(self, *, tunnel_status: int | None = None) -> None:
        self.seen: list[tuple[str, str, str | None]] = []  # (method, target, Proxy-Authorization)
        #: Answer every ``CONNECT`` with this status (407: the credentials are refused; 502:
        #: the server behind it can't be reached) instead of opening the tunnel.
        self.tunnel_status = tunnel_status
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._server.daemon_threads = True
        self._server.owner = self  # type: ignore[attr-defined]
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> Proxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _note(self) -> None:
        owner: Proxy = self.server.owner  # type: ignore[attr-defined]
        owner.seen.append((self.command, self.path, self.headers.get("Proxy-Authorization")))

    def do_CONNECT(self) -> None:
        self._note()
        status = self.server.owner.tunnel_status  # type: ignore[attr-defined]
        if status is not None:
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        host, _, port = self.path.rpartition(":")
        if host != "127.0.0.1":
            self.send_error(403)
            return
        upstream = socket.create_connection((host, int(port)), timeout=10)
        self.send_response(200, "Connection established")
        self.end_headers()
        sockets = [self.connection, upstream]
        try:
            while True:
                ready, _, _ = select.select(sockets, [], [], 10)
                if not ready:
                    return
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        return
                    (upstream if sock is self.connection else self.connection).sendall(data)
        except OSError:
            return
        finally:
            upstream.close()
            self.close_connection = True

    def _forward(self) -> None:
        self._note()
        target = urlsplit(self.path)
        if target.hostname != "127.0.0.1":
            self.send_error(403)
            return
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        headers = {
            key: value
            for key, value in self.headers.items()
            if key.lower() not in ("proxy-authorization", "proxy-connection", "connection")
        }
        upstream = http.client.HTTPConnection(target.hostname, target.port, timeout=10)
        try:
            path = target.path + (f"?{target.query}" if target.query else "")
            upstream.request(self.command, path, body=body or None, headers=headers)
            answer = upstream.getresponse()
            data = answer.read()
        finally:
            upstream.close()
        self.send_response(answer.status)
        for key, value in answer.getheaders():
            if key.lower() not in ("content-length", "connection", "transfer-encoding"):
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = _forward
