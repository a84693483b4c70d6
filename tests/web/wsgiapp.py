"""A plain WSGI application for the WSGI tests (in process, and under a real gunicorn).

Run under gunicorn (``gunicorn tests.web.wsgiapp:app``), the module calls
``eventlog_handler.setup()`` (``EVENTLOG_*`` from the environment) and wraps the application
in the middleware when ``WEB_TEST_MIDDLEWARE`` is ``1``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import eventlog_handler
from eventlog_handler import get_user, set_user
from eventlog_handler.wsgi import EventLogMiddleware

StartResponse = Callable[..., Any]

log = logging.getLogger("wsgiapp")


def application(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
    user = environ.get("HTTP_X_USER")
    if user:
        set_user(user)  # never reset here: the middleware's request scope ends it
    path = environ.get("PATH_INFO", "/")
    if path == "/fail":
        raise RuntimeError("the /fail handler is broken")
    if path == "/missing":
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"no such page\n"]
    if path == "/stream":
        start_response("200 OK", [("Content-Type", "text/plain")])
        return _stream(fail=environ.get("QUERY_STRING") == "fail")
    log.warning("hello from %s", get_user())
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"hello\n"]


def _stream(*, fail: bool) -> Iterator[bytes]:
    yield b"first\n"
    if fail:
        raise ValueError("the stream broke")
    yield b"second\n"


def _from_environment() -> Any:
    eventlog_handler.setup(flush_interval=0.05, error_delay=0.01)
    if os.environ.get("WEB_TEST_MIDDLEWARE") == "1":
        return EventLogMiddleware(application)
    return application


app = _from_environment() if "WEB_TEST_MIDDLEWARE" in os.environ else None
