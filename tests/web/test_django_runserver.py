"""``manage.py runserver`` as a developer runs it, with a ``LOGGING`` that lets Django's request
lines (``django.server``) propagate to the root logger: the request lines are not events (a 500's
line was a second error beside the one the middleware reports), the unhandled error is one
event, and ``SIGTERM`` (``--noreload``) delivers what the process logged."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.constants import REPO
from tests.support.faultserver import FaultServer
from tests.support.processes import child_env
from tests.support.waits import free_port, http_status

pytest.importorskip("django")

SETTINGS = """
import eventlog_handler

SECRET_KEY = "tests-only-" + "x" * 40
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1"]
ROOT_URLCONF = "shop_urls"
INSTALLED_APPS = []
MIDDLEWARE = ["eventlog_handler.django.EventLogMiddleware"]
LOGGING = {
    "version": 1,
    "disable_existing_loggers": True,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"django": {"handlers": [], "level": "INFO", "propagate": True}},
    "root": {"handlers": ["console"], "level": "INFO"},
}
eventlog_handler.setup(flush_interval=30)
"""

URLS = """
import logging
from django.http import HttpResponse
from django.urls import path

def ok(request):
    logging.getLogger("shop.views").warning("order viewed")
    return HttpResponse("ok")

def boom(request):
    raise RuntimeError("the boom view is broken")

urlpatterns = [path("ok/", ok), path("boom/", boom)]
"""


def test_runserver_request_lines_are_not_events_and_sigterm_delivers(tmp_path: Path) -> None:
    (tmp_path / "shop_settings.py").write_text(SETTINGS)
    (tmp_path / "shop_urls.py").write_text(URLS)
    port = free_port()
    with FaultServer() as server:
        env = child_env(server.url, DJANGO_SETTINGS_MODULE="shop_settings")
        env["PYTHONPATH"] = f"{tmp_path}:{env['PYTHONPATH']}"
        process = subprocess.Popen(
            [sys.executable, "-m", "django", "runserver", "--noreload", f"127.0.0.1:{port}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            cwd=str(REPO),
        )
        try:
            assert http_status(port, "/ok/") == 200
            assert http_status(port, "/boom/") == 500
            time.sleep(0.5)  # the request lines are logged after the answers
            process.send_signal(signal.SIGTERM)  # flush_interval is 30 s: only the flush sends
            output, _ = process.communicate(timeout=20)
        finally:
            if process.poll() is None:
                process.kill()
                process.communicate()
        events = list(server.accepted)
    assert '"GET /ok/ HTTP/1.1" 200' in output, output  # the console still has them
    messages = sorted(str(event.get("message")) for event in events)
    assert [event for event in events if event.get("source") == "django.server"] == [], events
    errors = [event for event in events if event.get("type") == "error"]
    assert len(errors) == 1, messages
    assert errors[0]["@simple_error"]["type"] == "RuntimeError"
    assert "order viewed" in messages, messages
