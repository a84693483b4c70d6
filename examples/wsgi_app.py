"""A WSGI app (stdlib ``wsgiref``) that sets the user per request.

The middleware reads the user from a header (a real app would take it from its session) and
holds it in a context variable for the request, so every event of the request carries it.
The example serves on 127.0.0.1 (a free port), makes a few requests to itself, and exits.
"""

from __future__ import annotations

import logging
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

import eventlog_handler

StartResponse = Callable[..., Any]
App = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]

log = logging.getLogger("examples.wsgi")


def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
    path = environ.get("PATH_INFO", "/")
    log.info("request %s %s", environ["REQUEST_METHOD"], path, extra={"path": path})
    if path == "/fail":
        raise RuntimeError("the handler of /fail is broken")
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"hello\n"]


def user_middleware(inner: App) -> App:
    def middleware(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        identity = environ.get("HTTP_X_USER")
        with eventlog_handler.user_context(identity, name=environ.get("HTTP_X_USER_NAME")):
            try:
                return list(inner(environ, start_response))
            except Exception:
                log.exception("unhandled error in %s", environ.get("PATH_INFO"))
                start_response("500 Internal Server Error", [("Content-Type", "text/plain")])
                return [b"internal error\n"]

    return middleware


class QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def main() -> None:
    eventlog_handler.setup(level="INFO", tags=["example", "wsgi"])
    server = make_server("127.0.0.1", 0, user_middleware(app), handler_class=QuietHandler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    base = f"http://127.0.0.1:{server.server_port}"
    try:
        for path, user, name in (
            ("/", "u-1", "Ann"),
            ("/orders", "u-2", "Bob"),
            ("/fail", "u-1", "Ann"),
        ):
            request = urllib.request.Request(
                base + path, headers={"X-User": user, "X-User-Name": name}
            )
            try:
                with urllib.request.urlopen(request, timeout=5) as response:
                    print(path, response.status)
            except urllib.error.HTTPError as error:
                print(path, error.code)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


if __name__ == "__main__":
    main()
