"""Fixtures of the web framework tests: a loopback capture server, ``setup()`` pointed at it,
and isolation of logging between tests.

Events are observed as the service sees them: decoded from the HTTP posts the capture server
receives on 127.0.0.1. Tests wait for them with generous deadlines, then use the public
``flush()`` of what ``setup()`` returned to be sure nothing else was on its way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

import eventlog_handler
from eventlog_handler import EventLogSetup
from eventlog_handler.delivery import _engine as transport
from tests.support.capture import CaptureServer
from tests.support.constants import API_KEY, FAST
from tests.support.fixtures import capture_server as capture_server  # the fixture ``server``
from tests.support.fixtures import isolation as isolation  # autouse

__all__ = ["API_KEY", "FAST", "CaptureServer", "Setup", "settle"]

Setup = Callable[..., EventLogSetup]


@pytest.fixture
def setup_eventlog(server: CaptureServer) -> Iterator[Setup]:
    """``eventlog_handler.setup()`` sending to ``server`` (fast timings)."""

    def make(**options: Any) -> EventLogSetup:
        merged: dict[str, Any] = {"api_key": API_KEY, "server_url": server.url, **FAST}
        merged.update(options)
        return eventlog_handler.setup(**merged)

    yield make
    transport.remove_engines(server.url)


def settle(
    handle: EventLogSetup, server: CaptureServer, count: int, timeout: float = 10.0
) -> list[dict[str, Any]]:
    """The events ``server`` received once ``count`` arrived and nothing else is pending, in
    the order they happened (their ``date``; errors may be sent ahead of logs)."""
    server.wait_for(count, timeout=timeout)
    assert handle.flush(timeout), handle.stats()
    return sorted(server.events, key=lambda event: str(event.get("date")))


def errors(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [event for event in events if event.get("type") == "error"]


#: Secrets a test sends with its requests; none may appear in any event.
SECRET_BEARER = "Bearer s3cr3t-bearer-value"
SECRET_COOKIE = "sessionid=c00kie-value-123"
SECRET_TOKEN = "t0ken-value-456"
SECRET_API_KEY = "api-key-value-789"
SECRET_PASSWORD = "pa55word-xyz"
#: What a request carries: an ``Authorization`` header, a cookie, an API key header and a token
#: in the query (beside an ordinary ``page``).
SECRET_HEADERS = {
    "Authorization": SECRET_BEARER,
    "Cookie": SECRET_COOKIE,
    "X-Api-Key": SECRET_API_KEY,
    "User-Agent": "web-tests/1.0",
    "X-Request-Id": "req-1",
}
SECRET_QUERY = f"token={SECRET_TOKEN}&page=2"


def assert_no_secrets(events: list[dict[str, Any]]) -> None:
    """No planted secret appears anywhere in ``events`` (as JSON)."""
    import base64
    import json

    text = json.dumps(events)
    basic = base64.b64encode(f"user:{SECRET_PASSWORD}".encode()).decode()
    for secret in (
        "s3cr3t-bearer-value",
        "c00kie-value-123",
        SECRET_TOKEN,
        SECRET_API_KEY,
        SECRET_PASSWORD,
        basic,
    ):
        assert secret not in text, secret


def assert_request(request: dict[str, Any], *, method: str, path: str) -> None:
    """``@request`` has the service's shape, the request's facts and no secret headers."""
    assert request["http_method"] == method
    assert request["path"] == path
    assert isinstance(request["is_secure"], bool)
    assert isinstance(request["host"], str) and request["host"]
    assert isinstance(request["port"], int)
    assert request["query_string"] == {"token": "[excluded]", "page": "2"}
    assert request["data"]["url"].endswith(f"{path}?token=[excluded]&page=2")
    headers = request["headers"]
    assert all(isinstance(v, list) and all(isinstance(i, str) for i in v) for v in headers.values())
    lowered = {name.lower() for name in headers}
    assert not lowered & {"authorization", "cookie", "x-api-key", "proxy-authorization"}
    assert headers["X-Request-Id"] == ["req-1"]
    assert request["user_agent"] == "web-tests/1.0"
    assert "cookies" not in request and "post_data" not in request
