"""The package and its web modules import and work where no web framework is installed."""

from __future__ import annotations

import json

from tests.support.capture import CaptureServer
from tests.support.processes import run_python

PROGRAM = r"""
import sys
for name in ("flask", "django", "fastapi", "starlette", "uvicorn", "gunicorn", "werkzeug",
             "asgiref", "httpx", "anyio"):
    sys.modules[name] = None  # "not installed": importing it raises ImportError

import asyncio
import eventlog_handler
from eventlog_handler import asgi, django, wsgi

from eventlog_handler.integrations import _request as request_info
from eventlog_handler.integrations import _server_loggers as server_loggers
handle = eventlog_handler.setup()

def app(environ, start_response):
    raise RuntimeError("wsgi without frameworks")

try:
    wsgi.EventLogMiddleware(app)({"PATH_INFO": "/w", "REQUEST_METHOD": "GET"}, None)
except RuntimeError:
    pass

async def asgi_app(scope, receive, send):
    raise RuntimeError("asgi without frameworks")

async def call():
    scope = {"type": "http", "method": "GET", "path": "/a", "headers": []}
    await asgi.EventLogMiddleware(asgi_app)(scope, None, None)

try:
    asyncio.run(call())
except RuntimeError:
    pass
loaded = sorted(n for n in ("flask", "django", "fastapi", "starlette", "uvicorn")
                if sys.modules.get(n) is not None)
print(loaded)
"""


def test_web_modules_without_frameworks(server: CaptureServer) -> None:
    result = run_python(server.url, ["-c", PROGRAM])
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
    events = server.wait_for(2)
    paths = sorted(event["data"]["@request"]["path"] for event in events)
    assert paths == ["/a", "/w"], json.dumps(events)
