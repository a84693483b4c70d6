"""Django with ``eventlog_handler.django.EventLogMiddleware``: unhandled exceptions once with
``@request`` (sync and async), responses and Django's own logging unchanged, a user per
request."""

from __future__ import annotations

import asyncio
import io
import logging
from typing import Any

import pytest

from eventlog_handler import get_user, set_user
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

pytest.importorskip("django")

from . import djangoapp

djangoapp.configure()

from django.test import AsyncClient, Client, override_settings  # noqa: E402

WIRED = [djangoapp.OURS, djangoapp.IDENTIFY]
UNWIRED = [djangoapp.IDENTIFY]


class ListHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def django_log() -> ListHandler:
    """Records of ``django.request`` (Django's 500 and 404 logging)."""
    handler = ListHandler()
    logging.getLogger("django.request").addHandler(handler)
    return handler


def logged(handler: ListHandler) -> list[tuple[str, str, str | None]]:
    return [
        (
            record.levelname,
            record.getMessage(),
            type(record.exc_info[1]).__name__ if record.exc_info and record.exc_info[1] else None,
        )
        for record in handler.records
    ]


def client() -> Client:
    return Client(raise_request_exception=False)


def test_unhandled_exception_arrives_once_with_request_and_no_secrets(
    setup_eventlog: Setup, server: CaptureServer, django_log: ListHandler
) -> None:
    handle = setup_eventlog()
    with override_settings(MIDDLEWARE=WIRED):
        response = client().get(f"/fail?{SECRET_QUERY}", headers=SECRET_HEADERS)
    assert response.status_code == 500
    events = settle(handle, server, 1)
    assert len(events) == 1, events
    [event] = events
    assert event["@simple_error"]["type"] == "RuntimeError"
    assert event["data"]["@submission_method"] == "unhandled_request_exception"
    request = event["data"]["@request"]
    assert_request(request, method="GET", path="/fail")
    assert request["host"] == "testserver"
    assert request["port"] == 80
    assert request["client_ip_address"] == "127.0.0.1"
    assert_no_secrets(events)
    # Django logged it as always; that record was not sent a second time.
    assert logged(django_log) == [("ERROR", "Internal Server Error: /fail", "RuntimeError")]


def test_response_and_django_logging_are_unchanged(
    setup_eventlog: Setup, server: CaptureServer, django_log: ListHandler
) -> None:
    setup_eventlog()
    seen = []
    for middleware in (UNWIRED, WIRED):
        django_log.records.clear()
        with override_settings(MIDDLEWARE=middleware):
            c = client()
            failure = c.get("/fail")
            missing = c.get("/missing")
            ok = c.get("/hello")
        seen.append(
            (
                failure.status_code,
                failure.content,
                failure.headers.get("Content-Type"),
                missing.status_code,
                missing.content,
                ok.status_code,
                ok.content,
                logged(django_log),
            )
        )
    assert seen[0] == seen[1]
    assert seen[0][0] == 500 and seen[0][3] == 404


def test_each_request_carries_its_own_user(setup_eventlog: Setup, server: CaptureServer) -> None:
    handle = setup_eventlog()
    with override_settings(MIDDLEWARE=WIRED):
        c = client()  # one thread serves every request
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
    [hello] = [event for event in events if event["type"] == "log"]
    assert hello["message"] == "hello from None"
    assert get_user() is None


def test_a_streamed_body_logs_and_fails_in_its_own_request(
    setup_eventlog: Setup, server: CaptureServer
) -> None:
    """The body of a ``StreamingHttpResponse`` is made after the middleware returned: its
    lines went to the thread's trace log, shared by every request the thread served, and its
    failure (reported by the server) carried no user nor ``@request``, but the lines of the
    requests before it."""
    handle = setup_eventlog()
    with override_settings(MIDDLEWARE=WIRED):
        c = client()  # one thread serves every request
        c.get("/missing", headers={"X-User": "alice"})
        fine = c.get("/stream", headers={"X-User": "bob"})
        assert b"".join(fine.streaming_content) == b"first partlast part"
        fine.close()
        broken = c.get("/stream?fail=1", headers={"X-User": "carol"})
        with pytest.raises(RuntimeError, match="the stream broke"):
            b"".join(broken.streaming_content)
        broken.close()
    assert get_user() is None  # every scope was closed
    events = settle(handle, server, 4)
    [failure] = errors(events)
    assert failure["@simple_error"]["message"] == "the stream broke"
    assert failure["@user"] == {"identity": "carol"}
    request = failure["data"]["@request"]
    assert (request["http_method"], request["path"], request["query_string"]) == (
        "GET",
        "/stream",
        {"fail": "1"},
    )
    trace = [line.split(" ", 2)[2] for line in failure["data"]["@trace"]]
    assert trace == ["djangoapp.views: streaming for {'identity': 'carol'}"], trace
    logs = [event["message"] for event in events if event["type"] == "log"]
    assert logs == [
        "Not Found: /missing",
        "streaming for {'identity': 'bob'}",
        "streaming for {'identity': 'carol'}",
    ]


def test_a_streamed_body_never_made_leaves_no_scope_open(
    setup_eventlog: Setup, server: CaptureServer
) -> None:
    """A HEAD request gets no body: Django drops the streamed one unread, and the request's
    user stayed on the thread, on every event logged after it outside a request."""
    setup_eventlog()
    with override_settings(MIDDLEWARE=WIRED):
        response = client().head("/stream", headers={"X-User": "alice"})
        response.close()
    assert get_user() is None


def test_a_streamed_body_dropped_by_an_outer_middleware_leaves_no_scope_open(
    setup_eventlog: Setup, server: CaptureServer
) -> None:
    """``ConditionalGetMiddleware`` listed before this one answers 304 to a matching
    ``If-None-Match`` with a new response, and never closes the streamed one it drops: the
    request's user stayed on the thread for every request after it."""
    setup_eventlog()
    outer = ["django.middleware.http.ConditionalGetMiddleware", *WIRED]
    with override_settings(MIDDLEWARE=outer):
        response = client().get("/stream", headers={"X-User": "alice", "If-None-Match": '"v1"'})
        assert response.status_code == 304
    assert get_user() is None


def test_a_file_is_still_sent_by_the_servers_file_wrapper(setup_eventlog: Setup) -> None:
    """``FileResponse`` under WSGI goes out through ``wsgi.file_wrapper`` (``sendfile``), not
    chunk by chunk through Python."""
    from wsgiref.util import FileWrapper

    from django.core.handlers.wsgi import WSGIHandler

    setup_eventlog()
    environ = {
        "REQUEST_METHOD": "GET",
        "PATH_INFO": "/download",
        "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "80",
        "wsgi.input": io.BytesIO(),
        "wsgi.url_scheme": "http",
        "wsgi.errors": io.StringIO(),
        "wsgi.file_wrapper": FileWrapper,
    }
    with override_settings(MIDDLEWARE=WIRED):
        result = WSGIHandler()(environ, lambda status, headers, exc_info=None: None)
        try:
            assert type(result) is FileWrapper
        finally:
            result.close()
    assert get_user() is None


def test_without_the_middleware_the_user_leaks(
    setup_eventlog: Setup, server: CaptureServer
) -> None:
    """The failure the middleware fixes, on the same project without it."""
    handle = setup_eventlog()
    with override_settings(MIDDLEWARE=UNWIRED):
        c = client()
        c.get("/fail", headers={"X-User": "u-2"})
        c.get("/hello")  # no user sent
    events = settle(handle, server, 2)
    [failure] = errors(events)
    assert failure["@user"] == {"identity": "u-2"}
    assert "@request" not in failure["data"]
    [hello] = [event for event in events if event["type"] == "log"]
    assert hello["message"] == "hello from {'identity': 'u-2'}"
    set_user(None)


def test_async_view_under_asgi(setup_eventlog: Setup, server: CaptureServer) -> None:
    handle = setup_eventlog()

    async def run() -> list[Any]:
        c = AsyncClient(raise_request_exception=False)
        first = await c.get(f"/async-fail?{SECRET_QUERY}", headers=SECRET_HEADERS)
        second = await c.get("/fail", headers={"X-User": "u-9"})
        return [first.status_code, second.status_code]

    with override_settings(MIDDLEWARE=WIRED):
        assert asyncio.run(run()) == [500, 500]
    events = settle(handle, server, 2)
    assert len(events) == 2, events
    first, second = events
    assert first["@simple_error"]["message"] == "the async view is broken"
    assert_request(first["data"]["@request"], method="GET", path="/async-fail")
    assert "@user" not in first
    assert second["@user"] == {"identity": "u-9"}
    assert second["data"]["@request"]["path"] == "/fail"
    assert_no_secrets(events)


def test_not_found_is_not_reported(setup_eventlog: Setup, server: CaptureServer) -> None:
    handle = setup_eventlog()
    with override_settings(MIDDLEWARE=WIRED):
        c = client()
        assert c.get("/missing").status_code == 404
        assert c.get("/fail").status_code == 500
    events = settle(handle, server, 2)
    [event] = errors(events)
    assert event["@simple_error"]["type"] == "RuntimeError"
    # Django's "Not Found" warning is an ordinary log record, sent as a log event.
    [warning] = [event for event in events if event["type"] == "log"]
    assert warning["message"] == "Not Found: /missing"


def test_permission_denied_is_a_log_line_not_an_error(
    setup_eventlog: Setup, server: CaptureServer, django_log: ListHandler
) -> None:
    # Django handles PermissionDenied (a 403) and logs it on django.request at WARNING with
    # the exception: that was sent as an error, one stack for every refused request.
    handle = setup_eventlog()
    with override_settings(MIDDLEWARE=WIRED):
        assert client().get("/denied").status_code == 403
    [event] = settle(handle, server, 1)
    assert event["type"] == "log" and "@simple_error" not in event, event
    assert event["message"] == "Forbidden (Permission denied): /denied"
    assert event["@level"] == "Warn" and event["source"] == "django.request"
    # Django's own record is as it was, exception included, for its other handlers.
    assert logged(django_log) == [
        ("WARNING", "Forbidden (Permission denied): /denied", "PermissionDenied")
    ]


def test_not_found_is_reported_when_asked(setup_eventlog: Setup, server: CaptureServer) -> None:
    handle = setup_eventlog()
    with override_settings(MIDDLEWARE=WIRED, EVENTLOG_REPORT_NOT_FOUND=True):
        c = client()
        assert c.get("/missing?page=2", HTTP_USER_AGENT="Firefox/128").status_code == 404
        assert c.get("/hello").status_code == 200
    events = settle(handle, server, 2)
    [event] = [event for event in events if event["type"] == "404"]
    assert event["source"] == "/missing"
    request = event["data"]["@request"]
    assert (request["http_method"], request["path"]) == ("GET", "/missing")
    assert request["query_string"] == {"page": "2"}
    assert request["user_agent"] == "Firefox/128"


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("False", None),
        ("maybe", "setting 'EVENTLOG_REPORT_NOT_FOUND' must be true or false, got 'maybe'"),
    ],
)
def test_not_found_setting_from_an_environment_variable(
    setup_eventlog: Setup,
    server: CaptureServer,
    capsys: pytest.CaptureFixture[str],
    value: str,
    said: str | None,
) -> None:
    """``EVENTLOG_REPORT_NOT_FOUND = os.environ.get(...)``: "False" sends no 404; a value that
    is not a boolean is said, naming the setting, and sends none either."""
    handle = setup_eventlog()
    with override_settings(MIDDLEWARE=WIRED, EVENTLOG_REPORT_NOT_FOUND=value):
        c = client()
        assert c.get("/missing").status_code == 404
        assert c.get("/fail").status_code == 500
    events = settle(handle, server, 2)
    assert sorted(event["type"] for event in events) == ["error", "log"]  # the log: Not Found
    stderr = capsys.readouterr().err
    if said is None:
        assert "EVENTLOG_REPORT_NOT_FOUND" not in stderr
    else:
        assert f"eventlog_handler: {said}; False is used" in stderr
