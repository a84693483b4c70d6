"""The web examples run against a loopback capture server, serve on 127.0.0.1, exit by
themselves, and their events arrive: the failure once, with ``@request``, no secrets, and
each request's own user."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.capture import CaptureServer
from tests.support.constants import EXAMPLES
from tests.support.processes import run_python

from .conftest import errors

WEB_EXAMPLES = {
    "flask_app.py": "flask",
    "django_app.py": "django",
    "fastapi_app.py": "fastapi",
}


@pytest.mark.parametrize("name", sorted(WEB_EXAMPLES))
def test_web_example(server: CaptureServer, name: str) -> None:
    pytest.importorskip(WEB_EXAMPLES[name])
    result = run_python(server.url, [str(EXAMPLES / name)], timeout=60)
    assert result.returncode == 0, result.stderr
    assert "could not be sent" not in result.stderr
    printed = [line for line in result.stdout.splitlines() if line.startswith("/")]
    assert printed == ["/ 200", "/orders/7 200", "/checkout 500", "/orders/8 200"]
    events = server.wait_for(3, timeout=10)  # the exit flush sent everything
    mine = [e for e in events if "example" in e.get("tags", [])]
    views = {e["message"]: e for e in mine if e.get("message", "").startswith("order ")}
    assert set(views) == {"order 7 viewed", "order 8 viewed"}
    assert views["order 7 viewed"]["@user"] == {"identity": "u-2", "name": "Bob"}
    assert views["order 7 viewed"]["data"]["order_id"] == 7
    assert "@user" not in views["order 8 viewed"]  # no user left over from earlier requests
    [failure] = errors(events)
    assert failure["@simple_error"]["message"] == "the payment service is unreachable"
    assert failure["@user"] == {"identity": "u-1", "name": "Ann"}
    assert failure["data"]["@submission_method"] == "unhandled_request_exception"
    request: dict[str, Any] = failure["data"]["@request"]
    assert request["path"] == "/checkout"
    assert request["query_string"] == {"token": "[excluded]", "step": "2"}
    assert request["host"] == "127.0.0.1"
    text = json.dumps(events)
    assert "s3cr3t" not in text and "example-secret" not in text


def test_flask_feedback_example_attaches_the_users_words_to_the_error() -> None:
    pytest.importorskip("flask")
    from tests.support.faultserver import FaultServer

    with FaultServer() as server:
        result = run_python(server.url, [str(EXAMPLES / "flask_feedback.py")], timeout=60)
        assert result.returncode == 0, result.stderr
        lines = result.stdout.splitlines()
        [checkout] = [line for line in lines if line.startswith("/checkout")]
        _, status, _, reference = checkout.split()
        assert status == "500"
        assert [line for line in lines if line.startswith("/feedback")] == [
            "/feedback 200 Thank you!"
        ]
        [failure] = [event for event in server.accepted if event.get("type") == "error"]
        assert failure["reference_id"] == reference
        [(route_id, body, _)] = server.descriptions
        assert route_id == reference
        assert body == {
            "email_address": "ann@example.com",
            "description": "I pressed Pay and got this page.",
        }
