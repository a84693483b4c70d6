"""FastAPI/Starlette with ``app.add_middleware(EventLogMiddleware)``, through Starlette's
TestClient: unhandled exceptions once with ``@request``, responses unchanged, a user per
request, streaming, websockets and lifespan untouched."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import pytest

from eventlog_handler import add_tags, get_user, set_user
from eventlog_handler.asgi import EventLogMiddleware
from tests.support.capture import CaptureServer

from .conftest import (
    SECRET_HEADERS,
    SECRET_QUERY,
    Setup,
    assert_no_secrets,
    assert_request,
    errors,
    settle,
)

pytest.importorskip("fastapi")
pytest.importorskip("httpx")

from fastapi.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from .asgiapp import create_app


def client(*, wired: bool) -> TestClient:
    return TestClient(create_app(wired=wired), raise_server_exceptions=False)


def test_unhandled_exception_arrives_once_with_request_and_no_secrets(
    setup_eventlog: Setup, server: CaptureServer
) -> None:
    handle = setup_eventlog()
    with client(wired=True) as c:
        response = c.get(f"/fail?{SECRET_QUERY}", headers=SECRET_HEADERS)
    assert response.status_code == 500
    events = errors(settle(handle, server, 1))
    assert len(events) == 1, events
    [event] = events
    assert event["@simple_error"]["type"] == "RuntimeError"
    assert event["@simple_error"]["message"] == "the /fail endpoint is broken"
    assert event["data"]["@submission_method"] == "unhandled_request_exception"
    request = event["data"]["@request"]
    assert_request(request, method="GET", path="/fail")
    assert request["host"] == "testserver"
    assert request["is_secure"] is False
    assert_no_secrets(server.events)


def test_responses_are_unchanged(setup_eventlog: Setup, server: CaptureServer) -> None:
    setup_eventlog()
    seen = []
    for wired in (False, True):
        with client(wired=wired) as c:
            results = [c.get(path) for path in ("/fail", "/hello", "/stream", "/state")]
        seen.append([(r.status_code, r.content, r.headers.get("content-type")) for r in results])
    assert seen[0] == seen[1]
    assert seen[0][0][:2] == (500, b"Internal Server Error")
    assert seen[0][2][1] == b"".join(f"chunk {i}\n".encode() for i in range(5))
    assert seen[0][3][1] == b'{"started":true}'  # the lifespan ran through the middleware


def test_each_request_carries_its_own_user(setup_eventlog: Setup, server: CaptureServer) -> None:
    handle = setup_eventlog()
    with client(wired=True) as c:
        c.get("/fail", headers={"X-User": "u-1", "X-User-Name": "Ann"})
        c.get("/fail?tag=beta", headers={"X-User": "u-2", "X-User-Name": "Bob"})
        c.get("/fail")
        c.get("/hello")
    events = settle(handle, server, 4)
    failures = errors(events)
    assert [event.get("@user") for event in failures] == [
        {"identity": "u-1", "name": "Ann"},
        {"identity": "u-2", "name": "Bob"},
        None,
    ]
    assert [event.get("tags") for event in failures] == [None, ["beta"], None]
    [hello] = [event for event in events if event.get("message", "").startswith("hello")]
    assert hello["message"] == "hello from None"
    assert get_user() is None


def test_error_in_a_streamed_body_is_reported(setup_eventlog: Setup, server: CaptureServer) -> None:
    handle = setup_eventlog()
    with client(wired=True) as c:
        response = c.get("/stream-fail", headers={"X-User": "u-5"})
    assert response.status_code == 200  # the headers were sent before the body failed
    assert response.content.startswith(b"first\n")
    [event] = errors(settle(handle, server, 1))
    assert event["@simple_error"]["type"] == "ValueError"
    assert event["@user"] == {"identity": "u-5"}
    assert event["data"]["@request"]["path"] == "/stream-fail"


def test_websocket_messages_pass_through_and_errors_are_reported(
    setup_eventlog: Setup, server: CaptureServer
) -> None:
    handle = setup_eventlog()
    with client(wired=True) as c:
        with c.websocket_connect("/ws?page=2") as ws:
            ws.send_text("hi")
            assert ws.receive_text() == "echo: hi"
            ws.send_text("bye")
            with pytest.raises(WebSocketDisconnect):
                ws.receive_text()
        with pytest.raises(RuntimeError, match="websocket handler broke"):
            with c.websocket_connect("/ws", headers=SECRET_HEADERS) as ws:
                ws.send_text("boom")
                ws.receive_text()
    [event] = errors(settle(handle, server, 1))
    assert event["@simple_error"]["message"] == "the websocket handler broke"
    request = event["data"]["@request"]
    assert request["path"] == "/ws"
    assert request["http_method"] == "GET"
    assert request["data"]["url"].startswith("ws://testserver")
    assert "Sec-Websocket-Key" not in request["headers"]
    assert_no_secrets(server.events)


def test_a_bare_asgi_app_and_its_lifespan(setup_eventlog: Setup, server: CaptureServer) -> None:
    """Any ASGI 3 callable: lifespan messages reach it unchanged; errors are reported."""
    handle = setup_eventlog()
    seen: list[Any] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                seen.append(message["type"])
                await send({"type": message["type"] + ".complete"})
                if message["type"] == "lifespan.shutdown":
                    return
        seen.append(get_user())
        raise KeyError("no such route")

    with TestClient(EventLogMiddleware(app), raise_server_exceptions=False) as c:
        assert c.get("/x", headers={"Host": "example.com:8443"}).status_code == 500
    assert seen == ["lifespan.startup", None, "lifespan.shutdown"]
    [event] = errors(settle(handle, server, 1))
    request = event["data"]["@request"]
    assert (request["host"], request["port"], request["path"]) == ("example.com", 8443, "/x")


def test_cancelled_requests_are_not_reported(setup_eventlog: Setup, server: CaptureServer) -> None:
    handle = setup_eventlog()

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        raise asyncio.CancelledError

    async def call() -> None:
        scope = {"type": "http", "method": "GET", "path": "/", "headers": []}
        await EventLogMiddleware(app)(scope, None, None)

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(call())
    handle.flush(5)
    assert server.events == []


def test_a_user_set_by_an_outer_middleware_is_kept(
    setup_eventlog: Setup, server: CaptureServer
) -> None:
    """Middleware added after ``EventLogMiddleware`` runs around it: its user still counts,
    and still belongs to its own request only."""
    handle = setup_eventlog()
    app = create_app(wired=True)

    @app.middleware("http")
    async def outer(request: Any, call_next: Any) -> Any:
        if request.headers.get("x-outer-user"):
            set_user(request.headers["x-outer-user"])
            add_tags("outer")
        return await call_next(request)

    with TestClient(app, raise_server_exceptions=False) as c:
        c.get("/fail", headers={"X-Outer-User": "u-8"})
        c.get("/fail")
    failures = errors(settle(handle, server, 2))
    assert [e.get("@user") for e in failures] == [{"identity": "u-8"}, None]
    assert [e.get("tags") for e in failures] == [["outer"], None]


def test_an_exception_handler_of_the_app_shows_the_reference_of_its_error(
    setup_eventlog: Setup, server: CaptureServer
) -> None:
    """``@app.exception_handler(Exception)`` renders the error page: Starlette calls it from
    its ServerErrorMiddleware, outside the middleware that reported the error, and
    ``last_reference_id()`` was None there. It is the id of the exception being handled."""
    from fastapi.responses import PlainTextResponse

    import eventlog_handler

    handle = setup_eventlog()
    app = create_app(wired=True)

    @app.exception_handler(Exception)
    async def error_page(request: Any, exc: Exception) -> Any:
        return PlainTextResponse(f"quote {eventlog_handler.last_reference_id()}", 500)

    # An error logged before in this context: its id was quoted instead (a flaky failure of
    # the whole suite, where an earlier test left one).
    logging.getLogger("tests.asgi").error("an earlier error")
    with TestClient(app, raise_server_exceptions=False) as c:
        page = c.get("/fail")
    assert page.status_code == 500
    [event] = errors(settle(handle, server, 2))
    assert page.text == f"quote {event['reference_id']}"


def _run_lifespan(app: Any) -> list[str]:
    """Run ``app``'s lifespan startup through the middleware as a server does; what it sent."""
    sent: list[str] = []

    async def receive() -> dict[str, Any]:
        return {"type": "lifespan.startup"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message["type"])

    async def run() -> None:
        # A server takes the exception as "lifespan unsupported", or a failed startup.
        with contextlib.suppress(Exception):
            await EventLogMiddleware(app)({"type": "lifespan"}, receive, send)

    asyncio.run(run())
    return sent


def test_an_app_without_lifespan_support_reports_nothing(
    setup_eventlog: Setup, server: CaptureServer
) -> None:
    """Django's ASGI handler, or a bare app, raises at once on a lifespan scope: uvicorn's
    default (``lifespan="auto"``) goes on without it. That is not an error of the program."""
    handle = setup_eventlog()

    async def http_only(scope: Any, receive: Any, send: Any) -> None:
        raise ValueError("can only handle ASGI/HTTP connections, not lifespan")

    async def failing_startup(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        raise ConnectionError("the database is down at startup")

    assert _run_lifespan(http_only) == []
    assert _run_lifespan(failing_startup) == []
    events = settle(handle, server, 1)
    assert [(e["@simple_error"]["type"], e["data"]["@submission_method"]) for e in events] == [
        ("ConnectionError", "unhandled_lifespan_exception")
    ]
