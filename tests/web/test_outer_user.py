"""A user and tags set by code around the middleware (an auth WSGI wrapper outside
``EventLogMiddleware``, a Django middleware listed before it) under a real gunicorn whose one
thread serves every request: they belong to their request, and a later request that sets none
carries none of them."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.request
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest

from tests.support.capture import CaptureServer
from tests.support.processes import child_env
from tests.support.waits import free_port, http_status

pytest.importorskip("gunicorn")

WSGI_APP = """
import logging
import eventlog_handler
from eventlog_handler.wsgi import EventLogMiddleware

eventlog_handler.setup(flush_interval=0.05, error_delay=0.01)


def inner(environ, start_response):
    if environ["PATH_INFO"] == "/who":
        logging.getLogger("app").error("who")
    start_response("200 OK", [("Content-Type", "application/json")])
    seen = {"user": eventlog_handler.get_user(), "tags": list(eventlog_handler.get_tags())}
    return [json.dumps(seen).encode()]


wrapped = EventLogMiddleware(inner)


def app(environ, start_response):  # an auth wrapper outside the middleware, never resetting
    if environ.get("HTTP_X_USER"):
        eventlog_handler.set_user(environ["HTTP_X_USER"])
        eventlog_handler.add_tags("signed-in", "as-" + environ["HTTP_X_USER"])
    response = wrapped(environ, start_response)
    logging.getLogger("app").error("after " + environ.get("HTTP_X_USER", "nobody"))
    return response
"""

DJANGO_APP = """
import logging
import eventlog_handler
from django.conf import settings
from django.core.wsgi import get_wsgi_application
from django.http import JsonResponse
from django.urls import path


def identify(get_response):  # listed before the package's middleware, never resetting
    def middleware(request):
        if request.headers.get("X-User"):
            eventlog_handler.set_user(request.headers["X-User"])
            eventlog_handler.add_tags("signed-in", "as-" + request.headers["X-User"])
        response = get_response(request)
        logging.getLogger("app").error("after " + request.headers.get("X-User", "nobody"))
        return response

    return middleware


def who(request):
    if request.path == "/who":
        logging.getLogger("app").error("who")
    seen = {"user": eventlog_handler.get_user(), "tags": list(eventlog_handler.get_tags())}
    return JsonResponse(seen)


urlpatterns = [path("who", who), path("health", who)]
settings.configure(
    DEBUG=False,
    SECRET_KEY="tests-only-" + "x" * 40,
    ROOT_URLCONF=__name__,
    ALLOWED_HOSTS=["127.0.0.1"],
    INSTALLED_APPS=[],
    MIDDLEWARE=[f"{__name__}.identify", "eventlog_handler.django.EventLogMiddleware"],
)
eventlog_handler.setup(flush_interval=0.05, error_delay=0.01)
app = get_wsgi_application()
"""


#: gunicorn 27's control socket is one path per user by default: each server apart.
NO_CONTROL_SOCKET = ["--no-control-socket"] if int(version("gunicorn").split(".")[0]) >= 27 else []


def who(port: int, user: str | None) -> dict[str, Any]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/who", headers={"X-User": user} if user else {}
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        return dict(json.loads(answer.read()))


@pytest.mark.parametrize("source", [WSGI_APP, DJANGO_APP], ids=["wsgi-wrapper", "django-order"])
def test_a_user_set_around_the_middleware_belongs_to_its_request_only(
    tmp_path: Path, server: CaptureServer, source: str
) -> None:
    (tmp_path / "webapp.py").write_text("import json\n" + source)
    port = free_port()
    env = child_env(server.url)
    env["PYTHONPATH"] = f"{tmp_path}:{env['PYTHONPATH']}"
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "gunicorn", "webapp:app", "--bind", f"127.0.0.1:{port}"),
            *("--worker-class", "gthread", "--workers", "1", "--threads", "1"),
            *NO_CONTROL_SOCKET,
        ],
        cwd=str(tmp_path),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert http_status(port, "/health") == 200
        seen = [who(port, user) for user in ("alice", None, "bob", "carol", None)]
    finally:
        process.send_signal(signal.SIGTERM)  # its exit sends what is left
        _, stderr = process.communicate(timeout=30)
    server.wait_for(10, timeout=10)
    assert seen == [
        {"user": {"identity": "alice"}, "tags": ["signed-in", "as-alice"]},
        {"user": None, "tags": []},
        {"user": {"identity": "bob"}, "tags": ["signed-in", "as-bob"]},
        {"user": {"identity": "carol"}, "tags": ["signed-in", "as-carol"]},  # not bob's too
        {"user": None, "tags": []},
    ], stderr[-2000:]
    events = sorted(
        (e for e in server.events if e.get("message") == "who"), key=lambda e: str(e["date"])
    )
    assert [(e.get("@user"), e.get("tags")) for e in events] == [
        ({"identity": "alice"}, ["signed-in", "as-alice"]),
        (None, None),
        ({"identity": "bob"}, ["signed-in", "as-bob"]),
        ({"identity": "carol"}, ["signed-in", "as-carol"]),
        (None, None),
    ]
    assert all(e["data"]["@request"]["path"] == "/who" for e in events)
    # The code around the middleware has its user and tags back after the response (what it
    # never resets piles up in its own context, as it would without the package).
    after = {e["message"]: (e.get("@user"), e.get("tags") or []) for e in server.events}
    for name in ("alice", "bob", "carol"):
        user, tags = after[f"after {name}"]
        assert user == {"identity": name} and f"as-{name}" in tags, after
