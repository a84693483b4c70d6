"""``EventLogMiddleware`` around a plain WSGI application: under the standard library's server
and a real gunicorn on 127.0.0.1, and called directly for what the WSGI protocol requires."""

from __future__ import annotations

import io
import logging
import logging.config
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server
from wsgiref.util import FileWrapper, setup_testing_defaults

import pytest
import requests

from eventlog_handler import get_user
from eventlog_handler.wsgi import EventLogMiddleware
from tests.support.capture import CaptureServer
from tests.support.constants import API_KEY, FAST, REPO
from tests.support.processes import child_env

from .conftest import (
    SECRET_HEADERS,
    SECRET_PASSWORD,
    SECRET_QUERY,
    Setup,
    assert_no_secrets,
    assert_request,
    errors,
    settle,
)
from .wsgiapp import application


class QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


class Served:
    """A WSGI application served by ``wsgiref`` on 127.0.0.1, one request at a time."""

    def __init__(self, app: Any) -> None:
        self.errors = io.StringIO()
        errors_stream = self.errors

        class Handler(QuietHandler):
            def get_stderr(self) -> Any:
                return errors_stream

        self.server: WSGIServer = make_server("127.0.0.1", 0, app, handler_class=Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


@pytest.fixture
def serve() -> Iterator[Any]:
    started: list[Served] = []

    def run(app: Any) -> Served:
        started.append(Served(app))
        return started[-1]

    yield run
    for served in started:
        served.close()


def failing_request(base: str, path: str = "/fail") -> requests.Response:
    url = base.replace("http://", f"http://user:{SECRET_PASSWORD}@") + f"{path}?{SECRET_QUERY}"
    headers = {k: v for k, v in SECRET_HEADERS.items() if k != "Authorization"}
    return requests.get(url, headers=headers, timeout=10)


def test_unhandled_exception_under_wsgiref(
    setup_eventlog: Setup, server: CaptureServer, serve: Any
) -> None:
    handle = setup_eventlog()
    plain, wired = serve(application), serve(EventLogMiddleware(application))
    answers = [failing_request(s.url) for s in (plain, wired)]
    assert [(r.status_code, r.content) for r in answers[:1]] == [
        (r.status_code, r.content) for r in answers[1:]
    ]
    assert answers[0].status_code == 500
    # wsgiref printed the traceback both times, as its own error log
    for served in (plain, wired):
        assert "RuntimeError: the /fail handler is broken" in served.errors.getvalue()
    [event] = errors(settle(handle, server, 1))
    request = event["data"]["@request"]
    assert_request(request, method="GET", path="/fail")
    assert request["port"] == wired.server.server_port
    assert request["data"]["url"].startswith(f"http://127.0.0.1:{wired.server.server_port}/")
    assert_no_secrets(server.events)


def test_each_request_carries_its_own_user(
    setup_eventlog: Setup, server: CaptureServer, serve: Any
) -> None:
    """wsgiref serves every request on one thread here; the app never resets the user."""
    handle = setup_eventlog()
    served = serve(EventLogMiddleware(application))
    requests.get(served.url + "/fail", headers={"X-User": "u-1"}, timeout=10)
    requests.get(served.url + "/fail", headers={"X-User": "u-2"}, timeout=10)
    requests.get(served.url + "/fail", timeout=10)
    requests.get(served.url + "/", timeout=10)
    events = settle(handle, server, 4)
    users = [event.get("@user") for event in errors(events)]
    assert users == [{"identity": "u-1"}, {"identity": "u-2"}, None]
    assert [e["message"] for e in events if e["type"] == "log"] == ["hello from None"]


def test_error_while_streaming_is_reported_with_the_request(
    setup_eventlog: Setup, server: CaptureServer, serve: Any
) -> None:
    handle = setup_eventlog()
    served = serve(EventLogMiddleware(application))
    ok = requests.get(served.url + "/stream", timeout=10)
    assert ok.content == b"first\nsecond\n"
    broken = requests.get(served.url + "/stream?fail", headers={"X-User": "u-7"}, timeout=10)
    assert broken.content == b"first\n"  # the body ends where the application failed
    [event] = errors(settle(handle, server, 1))
    assert event["@simple_error"]["type"] == "ValueError"
    assert event["@user"] == {"identity": "u-7"}
    assert event["data"]["@request"]["path"] == "/stream"


def environ(path: str = "/", **extra: Any) -> dict[str, Any]:
    env: dict[str, Any] = {"PATH_INFO": path, **extra}
    setup_testing_defaults(env)
    return env


def test_protocol_close_is_called_once_and_the_scope_ends_there() -> None:
    closed: list[str] = []

    class Body:
        def __init__(self) -> None:
            self.items = iter([b"a", b"b"])

        def __iter__(self) -> Body:
            return self

        def __next__(self) -> bytes:
            return next(self.items)

        def close(self) -> None:
            closed.append(str(get_user()))

    def app(env: dict[str, Any], start_response: Any) -> Body:
        from eventlog_handler import set_user

        set_user("u-1")
        start_response("200 OK", [])
        return Body()

    result = EventLogMiddleware(app)(environ(), lambda *a: None)
    assert get_user() == {"identity": "u-1"}  # the request is still being answered
    assert b"".join(result) == b"ab"
    result.close()  # type: ignore[attr-defined]
    assert closed == ["{'identity': 'u-1'}"]  # the app's close ran inside the request
    assert get_user() is None


def test_lists_and_file_wrappers_are_returned_as_they_are() -> None:
    body = [b"hello"]
    file = FileWrapper(io.BytesIO(b"file body"))

    def app(env: dict[str, Any], start_response: Any) -> Any:
        from eventlog_handler import set_user

        set_user("u-2")
        start_response("200 OK", [])
        return body if env["PATH_INFO"] == "/list" else file

    middleware = EventLogMiddleware(app)
    assert middleware(environ("/list"), lambda *a: None) is body
    assert get_user() is None
    assert middleware(environ("/file", **{"wsgi.file_wrapper": FileWrapper}), print) is file
    assert get_user() is None


def test_a_dictconfig_handler_is_used_without_setup(server: CaptureServer) -> None:
    """A program configured with dictConfig only (no setup()) still gets its reports."""
    logging.config.dictConfig(
        {
            "version": 1,
            "disable_existing_loggers": False,
            "handlers": {
                "eventlog": {
                    "class": "eventlog_handler.EventLogHandler",
                    "api_key": API_KEY,
                    "server_url": server.url,
                    **FAST,
                }
            },
            "root": {"level": "INFO", "handlers": ["eventlog"]},
        }
    )
    with pytest.raises(RuntimeError):
        EventLogMiddleware(application)(environ("/fail", HTTP_X_USER="u-3"), print)
    [event] = server.wait_for(1)
    assert event["@user"] == {"identity": "u-3"}
    assert event["data"]["@request"]["path"] == "/fail"


# -- under a real gunicorn ------------------------------------------------------------------

LISTENING = re.compile(r"Listening at: http://127\.0\.0\.1:(\d+)")


def start_gunicorn(server: CaptureServer, middleware: bool) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "--bind",
            "127.0.0.1:0",
            "--workers",
            "1",
            "--graceful-timeout",
            "5",
            "tests.web.wsgiapp:app",
        ],
        env=child_env(server.url, WEB_TEST_MIDDLEWARE="1" if middleware else "0"),
        cwd=str(REPO),
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    assert process.stderr is not None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        found = LISTENING.search(line)
        if found:
            return process, f"http://127.0.0.1:{found.group(1)}"
        if not line and process.poll() is not None:
            break
    process.kill()
    raise AssertionError("gunicorn did not start")


def stop_gunicorn(process: subprocess.Popen[str]) -> str:
    process.send_signal(signal.SIGTERM)
    _, output = process.communicate(timeout=30)
    return output


@pytest.mark.parametrize("middleware", [True, False], ids=["middleware", "setup-only"])
def test_under_gunicorn(server: CaptureServer, middleware: bool) -> None:
    pytest.importorskip("gunicorn")
    process, url = start_gunicorn(server, middleware)
    try:
        response = failing_request(url)
        assert response.status_code == 500
        assert b"Internal Server Error" in response.content
        server.wait_for(1, timeout=10)
    finally:
        output = stop_gunicorn(process)
    # gunicorn logged the exception itself, with or without the middleware
    assert "Error handling request" in output
    assert "RuntimeError: the /fail handler is broken" in output
    failures = errors(server.events)
    assert len(failures) == 1, failures
    [event] = failures
    assert event["@simple_error"]["message"] == "the /fail handler is broken"
    if middleware:
        assert event["data"]["@submission_method"] == "unhandled_request_exception"
        assert_request(event["data"]["@request"], method="GET", path="/fail")
    else:  # gunicorn.error does not propagate: setup() forwards it
        assert event["source"] == "gunicorn.error"
        assert event["message"].startswith("Error handling request")
        assert "@request" not in event["data"]
    assert_no_secrets(server.events)


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("no", None),
        ("False", None),
        ("maybe", "setting 'report_not_found' must be true or false, got 'maybe'"),
    ],
)
def test_report_not_found_as_text_is_read_as_a_boolean(
    setup_eventlog: Setup,
    server: CaptureServer,
    serve: Any,
    capsys: pytest.CaptureFixture[str],
    value: str,
    said: str | None,
) -> None:
    """``report_not_found`` from an environment variable: "no" and "False" send no 404 (a
    string is not taken as true); a value that is not a boolean is said, naming the setting."""
    handle = setup_eventlog()
    served = serve(EventLogMiddleware(application, report_not_found=value))
    assert requests.get(served.url + "/missing", timeout=10).status_code == 404
    assert requests.get(served.url + "/fail", timeout=10).status_code == 500
    events = settle(handle, server, 1)
    assert [event["type"] for event in events] == ["error"]
    stderr = capsys.readouterr().err
    if said is None:
        assert "report_not_found" not in stderr
    else:
        assert f"eventlog_handler: {said}; False is used" in stderr


MIXED_UP = """
import eventlog_handler
from fastapi import FastAPI
from eventlog_handler.wsgi import EventLogMiddleware, init_flask

eventlog_handler.setup()
app = FastAPI()


@app.get("/hello")
async def hello():
    return {"hello": "world"}


init_flask(app)  # meant for Flask: said, and the app is left as it is
app.add_middleware(EventLogMiddleware)  # the WSGI class, where the ASGI one belongs
"""


def test_the_wsgi_middleware_on_an_asgi_app_says_which_class_to_use(
    server: CaptureServer, tmp_path: Any
) -> None:
    """The README's import line names both classes ``EventLogMiddleware``: the WSGI one in
    ``app.add_middleware`` failed every request with "missing 1 required positional argument:
    'send'", and ``init_flask`` on a FastAPI app stopped the server at import."""
    pytest.importorskip("fastapi")
    from .test_uvicorn import Uvicorn

    (tmp_path / "mixedapp.py").write_text(MIXED_UP)
    env = child_env(server.url)
    env["PYTHONPATH"] = f"{tmp_path}:{env['PYTHONPATH']}"
    app = Uvicorn(["-m", "uvicorn", "mixedapp:app", "--host", "127.0.0.1", "--port", "0"], env)
    try:
        assert requests.get(app.url + "/hello", timeout=10).status_code == 500
        assert requests.get(app.url + "/hello", timeout=10).status_code == 500
    finally:
        output = app.stop()
    wrong = "eventlog_handler.wsgi.EventLogMiddleware wraps a WSGI application, not an ASGI"
    assert f"{wrong} application: use eventlog_handler.asgi.EventLogMiddleware" in output
    assert output.count(f"eventlog_handler: {wrong}") == 1, output  # said once
    assert "init_flask() takes a Flask application, not FastAPI" in output
    assert "missing 1 required positional argument" not in output


def test_start_response_may_be_given_by_name() -> None:
    """The check for calls of another kind refused ``app(environ, start_response=...)``."""
    started: list[str] = []
    app = EventLogMiddleware(lambda environ, start_response: start_response("200 OK", []) or [])
    environ: dict[str, Any] = {}
    setup_testing_defaults(environ)
    assert list(app(environ, start_response=lambda status, headers: started.append(status))) == []
    assert started == ["200 OK"]
