"""Flask with ``init_flask(app)``: unhandled exceptions once with ``@request``, responses and
Flask's own logging unchanged, and a user per request (``set_user`` in ``before_request``)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from eventlog_handler import add_tags, get_user, set_user
from eventlog_handler.wsgi import EventLogMiddleware, init_flask
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

flask = pytest.importorskip("flask")

APP_NAME = "flask_app"


class ListHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def make_app(*, wired: bool, **config: Any) -> Any:
    app = flask.Flask(APP_NAME)
    app.config.update(config)

    @app.before_request
    def identify() -> None:
        user = flask.request.headers.get("X-User")
        if user:
            set_user(user, name=flask.request.headers.get("X-User-Name"))
        if flask.request.args.get("tag"):
            add_tags(flask.request.args["tag"])

    @app.get("/fail")
    def fail() -> str:
        raise RuntimeError("the /fail view is broken")

    @app.get("/hello")
    def hello() -> str:
        logging.getLogger("flask_app.views").warning("hello from %s", get_user())
        return "hello"

    @app.get("/stream")
    def stream() -> Any:
        def body() -> Any:
            yield "first\n"
            raise ValueError("the stream broke")

        return flask.Response(flask.stream_with_context(body()))

    if wired:
        init_flask(app)
    return app


@pytest.fixture
def flask_log() -> ListHandler:
    """Records of Flask's app logger (``app.logger``), as Flask's own logging output."""
    handler = ListHandler()
    logging.getLogger(APP_NAME).addHandler(handler)
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


def test_unhandled_exception_arrives_once_with_request_and_no_secrets(
    setup_eventlog: Setup, server: CaptureServer, flask_log: ListHandler
) -> None:
    handle = setup_eventlog()
    client = make_app(wired=True).test_client()
    response = client.get(f"/fail?{SECRET_QUERY}", headers=SECRET_HEADERS)
    assert response.status_code == 500
    events = settle(handle, server, 1)
    assert len(events) == 1, events
    [event] = events
    assert event["type"] == "error"
    assert event["@simple_error"]["type"] == "RuntimeError"
    assert event["@simple_error"]["message"] == "the /fail view is broken"
    assert event["data"]["@submission_method"] == "unhandled_request_exception"
    request = event["data"]["@request"]
    assert_request(request, method="GET", path="/fail")
    assert request["host"] == "localhost"
    assert_no_secrets(events)
    # Flask logged it as always; that record was not sent a second time.
    assert logged(flask_log) == [("ERROR", "Exception on /fail [GET]", "RuntimeError")]


def test_response_and_flask_logging_are_unchanged(
    setup_eventlog: Setup, server: CaptureServer, flask_log: ListHandler
) -> None:
    setup_eventlog()
    seen = []
    for wired in (False, True):
        flask_log.records.clear()
        client = make_app(wired=wired).test_client()
        response = client.get("/fail")
        ok = client.get("/hello")
        seen.append(
            (
                response.status_code,
                response.get_data(),
                dict(response.headers),
                ok.status_code,
                ok.get_data(),
                logged(flask_log),
            )
        )
    assert seen[0] == seen[1]
    assert seen[0][0] == 500 and b"Internal Server Error" in seen[0][1]


def test_each_request_carries_its_own_user(setup_eventlog: Setup, server: CaptureServer) -> None:
    handle = setup_eventlog()
    client = make_app(wired=True).test_client()  # one thread serves every request
    client.get("/fail", headers={"X-User": "u-1", "X-User-Name": "Ann"})
    client.get("/fail?tag=beta", headers={"X-User": "u-2", "X-User-Name": "Bob"})
    client.get("/fail")  # no user: must not carry Bob
    client.get("/hello")
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
    assert "@user" not in hello
    assert get_user() is None  # nothing left behind on the test's thread


def test_without_the_middleware_the_user_leaks_into_the_next_request(
    setup_eventlog: Setup, server: CaptureServer
) -> None:
    """The failure the middleware fixes, shown on the same app without it."""
    handle = setup_eventlog()
    client = make_app(wired=False).test_client()
    client.get("/fail", headers={"X-User": "u-2", "X-User-Name": "Bob"})
    client.get("/hello")  # no user sent
    events = settle(handle, server, 2)
    [failure] = errors(events)
    assert failure["@user"] == {"identity": "u-2", "name": "Bob"}
    [hello] = [event for event in events if event["type"] == "log"]
    assert hello["message"] == "hello from {'identity': 'u-2', 'name': 'Bob'}"
    assert hello["@user"] == {"identity": "u-2", "name": "Bob"}
    set_user(None)  # the leaked user of this thread


def test_propagating_exceptions_are_reported_once(
    setup_eventlog: Setup, server: CaptureServer
) -> None:
    """With ``PROPAGATE_EXCEPTIONS`` (testing, debug) the exception reaches the middleware too."""
    handle = setup_eventlog()
    client = make_app(wired=True, PROPAGATE_EXCEPTIONS=True).test_client()
    with pytest.raises(RuntimeError, match="broken"):
        client.get("/fail", headers={"X-User": "u-3"})
    [event] = settle(handle, server, 1)
    assert event["@user"] == {"identity": "u-3"}
    assert event["data"]["@request"]["path"] == "/fail"


def test_error_in_a_streamed_body_is_reported_with_the_request(
    setup_eventlog: Setup, server: CaptureServer
) -> None:
    handle = setup_eventlog()
    client = make_app(wired=True).test_client()
    response = client.get("/stream", headers={"X-User": "u-4"})
    with pytest.raises(ValueError, match="the stream broke"):
        response.get_data()  # the body is produced while it is read
    response.close()
    [event] = settle(handle, server, 1)
    assert event["@simple_error"]["type"] == "ValueError"
    assert event["@user"] == {"identity": "u-4"}
    assert event["data"]["@request"]["path"] == "/stream"
    assert get_user() is None


def test_handled_errors_are_not_reported(setup_eventlog: Setup, server: CaptureServer) -> None:
    handle = setup_eventlog()
    app = make_app(wired=True)

    @app.errorhandler(KeyError)
    def missing(error: KeyError) -> tuple[str, int]:
        return "no such thing", 404

    @app.get("/missing")
    def lookup() -> str:
        raise KeyError("order-7")

    client = app.test_client()
    assert client.get("/missing").status_code == 404
    assert client.get("/fail").status_code == 500
    [event] = settle(handle, server, 1)
    assert event["@simple_error"]["type"] == "RuntimeError"


def test_init_flask_twice_wraps_once(setup_eventlog: Setup, server: CaptureServer) -> None:
    handle = setup_eventlog()
    app = make_app(wired=True)
    init_flask(app)
    assert isinstance(app.wsgi_app, EventLogMiddleware)
    assert not isinstance(app.wsgi_app.app, EventLogMiddleware)
    assert app.test_client().get("/fail").status_code == 500
    assert len(settle(handle, server, 1)) == 1


def test_without_setup_requests_still_work() -> None:
    client = make_app(wired=True).test_client()
    assert client.get("/fail", headers={"X-User": "u-1"}).status_code == 500
    assert client.get("/hello").get_data() == b"hello"
    assert get_user() is None
