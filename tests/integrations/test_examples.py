"""Every example runs against a loopback server, exits by itself, and its events arrive."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.capture import CaptureServer
from tests.support.constants import EXAMPLES
from tests.support.processes import run_python


def run_example(server: CaptureServer, name: str, count: int, returncode: int = 0) -> Any:
    result = run_python(server.url, [str(EXAMPLES / name)])
    assert result.returncode == returncode, result.stderr
    assert "could not be sent" not in result.stderr
    events = server.wait_for(count, timeout=5)
    assert len(events) == count, events
    return result, events


def by_message(events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    found = {event.get("message", ""): event for event in events}
    assert len(found) == len(events)
    return found


#: Examples of web frameworks, run by tests/web/test_examples.py, and of Celery and RQ workers,
#: run by tests/signals/test_celery_worker.py and tests/signals/test_rq_worker.py.
WEB_EXAMPLES = {
    "flask_app.py",
    "flask_feedback.py",
    "django_app.py",
    "fastapi_app.py",
    "celery_app.py",
    "rq_app.py",
}


def test_examples_are_all_tested() -> None:
    names = {path.name for path in EXAMPLES.glob("*.py")} - WEB_EXAMPLES
    assert names == {
        "basic.py",
        "dictconfig.py",
        "structlog_app.py",
        "uncaught.py",
        "wsgi_app.py",
        "json_console.py",
    }


def test_basic(server: CaptureServer) -> None:
    _, events = run_example(server, "basic.py", 4)
    found = by_message(events)
    assert set(found) == {
        "application started",
        "disk space is low",
        "user u-42 opened the settings page",
        "could not load the profile",
    }
    data = dict(found["application started"]["data"])
    data.pop("@version", None)  # the checkout's own version, when it has one
    assert data == {"version": "1.2.3"}
    assert found["user u-42 opened the settings page"]["@user"]["identity"] == "u-42"
    assert found["could not load the profile"]["@simple_error"]["type"] == "KeyError"
    assert all(event["tags"] == ["example", "basic"] for event in events)


def test_dictconfig(server: CaptureServer) -> None:
    result, events = run_example(server, "dictconfig.py", 3)
    found = by_message(events)
    assert found["order placed"]["data"]["card_number"] == "[excluded]"
    assert found["payment failed"]["@simple_error"]["type"] == "TimeoutError"
    assert "order placed" in result.stdout  # the console handler beside it


def test_json_console(server: CaptureServer) -> None:
    result, events = run_example(server, "json_console.py", 3)
    lines = {line["message"]: line for line in map(json.loads, result.stdout.splitlines())}
    found = by_message(events)
    assert set(lines) == set(found)
    for message, event in found.items():
        line = lines[message]
        for key, value in event["data"].items():
            if not key.startswith("@"):
                assert line[key] == value
    data = dict(found["cache warmed"]["data"])
    data.pop("@version", None)  # the checkout's own version, when it has one
    assert data == {"entries": 1200, "seconds": 0.42}


def test_structlog_app(server: CaptureServer) -> None:
    pytest.importorskip("structlog")
    result, events = run_example(server, "structlog_app.py", 4)
    found = by_message(events)
    assert set(found) == {
        "job started",
        "item skipped",
        "job failed",
        "a plain logging record goes through the handler",
    }
    assert found["item skipped"]["data"]["request_id"] == "r-99"
    assert found["job failed"]["@simple_error"]["type"] == "ZeroDivisionError"
    assert found["job started"]["source"] == "examples.structlog"
    assert "job started" in result.stdout


def test_uncaught(server: CaptureServer) -> None:
    result, events = run_example(server, "uncaught.py", 3, returncode=1)
    assert "FileNotFoundError" in result.stderr
    assert "Exception in thread example-worker" in result.stderr
    methods = {
        event["data"].get("@submission_method"): event
        for event in events
        if event["type"] == "error"
    }
    fatal = methods["unhandled_exception"]
    assert fatal["@level"] == "Fatal"
    assert fatal["@simple_error"]["type"] == "FileNotFoundError"
    assert fatal["@user"] == {"identity": "ops", "name": "Operator"}
    assert methods["unhandled_thread_exception"]["@simple_error"]["type"] == "ValueError"


def test_wsgi_app(server: CaptureServer) -> None:
    result, events = run_example(server, "wsgi_app.py", 4)
    assert result.stdout.split() == ["/", "200", "/orders", "200", "/fail", "500"]
    found = by_message(events)
    assert found["request GET /"]["@user"] == {"identity": "u-1", "name": "Ann"}
    assert found["request GET /orders"]["@user"] == {"identity": "u-2", "name": "Bob"}
    failure = found["unhandled error in /fail"]
    assert failure["@user"] == {"identity": "u-1", "name": "Ann"}
    assert failure["@simple_error"]["type"] == "RuntimeError"
