"""A FastAPI application under a real uvicorn server on 127.0.0.1, requested with ``requests``.

Each test starts uvicorn in a subprocess (as a user runs it), sends real HTTP requests, then
stops the server with SIGINT (a graceful shutdown, whose exit flush sends what is pending) and
counts what the capture server received.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from tests.support.capture import CaptureServer
from tests.support.constants import REPO
from tests.support.processes import child_env

from .conftest import (
    SECRET_HEADERS,
    SECRET_PASSWORD,
    SECRET_QUERY,
    assert_no_secrets,
    assert_request,
    errors,
)

pytest.importorskip("uvicorn")
pytest.importorskip("fastapi")

RUNNING = re.compile(r"Uvicorn running on http://127\.0\.0\.1:(\d+)")


class Uvicorn:
    """uvicorn in a subprocess; its combined output is collected line by line."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self.process = subprocess.Popen(
            [sys.executable, *args],
            env=env,
            cwd=str(REPO),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.url = f"http://127.0.0.1:{self._port()}"

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()

    def _port(self, timeout: float = 30.0) -> int:
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for line in self.lines:
                    found = RUNNING.search(line)
                    if found:
                        return int(found.group(1))
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self.process.poll() is not None:
                    self.process.kill()
                    raise AssertionError("uvicorn did not start:\n" + "\n".join(self.lines))
                self._changed.wait(min(remaining, 0.5))

    def stop(self, timeout: float = 30.0) -> str:
        """Stop gracefully (SIGINT, as Ctrl+C); return everything it printed."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)
            raise AssertionError("uvicorn did not stop:\n" + "\n".join(self.lines)) from None
        self._reader.join(5)
        return "\n".join(self.lines)


@pytest.fixture
def run_uvicorn(server: CaptureServer) -> Iterator[Any]:
    started: list[Uvicorn] = []

    def run(args: list[str], **env: str) -> Uvicorn:
        instance = Uvicorn(args, child_env(server.url, **env))
        started.append(instance)
        return instance

    yield run
    for instance in started:
        if instance.process.poll() is None:
            instance.process.kill()
            instance.process.wait(5)


CLI = ["-m", "uvicorn", "tests.web.asgiapp:app", "--host", "127.0.0.1", "--port", "0"]


def failing_request(base: str) -> requests.Response:
    """``GET /fail`` with a user:password URL, an API key header, a cookie and a query token."""
    url = base.replace("http://", f"http://user:{SECRET_PASSWORD}@") + f"/fail?{SECRET_QUERY}"
    headers = {k: v for k, v in SECRET_HEADERS.items() if k != "Authorization"}
    return requests.get(url, headers=headers, timeout=10)


def test_unhandled_exception_arrives_once_with_request(
    run_uvicorn: Any, server: CaptureServer
) -> None:
    app = run_uvicorn(CLI, WEB_TEST_SETUP="1", WEB_TEST_MIDDLEWARE="1")
    response = failing_request(app.url)
    assert (response.status_code, response.text) == (500, "Internal Server Error")
    assert requests.get(app.url + "/hello", headers={"X-User": "u-1"}, timeout=10).ok
    output = app.stop()
    assert app.process.returncode == 0, output
    server.wait_for(1, timeout=10)
    events = server.events
    failures = errors(events)
    assert len(failures) == 1, failures
    [event] = failures
    assert event["@simple_error"]["message"] == "the /fail endpoint is broken"
    assert event["data"]["@submission_method"] == "unhandled_request_exception"
    request = event["data"]["@request"]
    assert_request(request, method="GET", path="/fail")
    assert (request["host"], request["client_ip_address"]) == ("127.0.0.1", "127.0.0.1")
    assert request["port"] == int(app.url.rsplit(":", 1)[1])
    assert "@user" not in event
    assert_no_secrets(events)
    # uvicorn still logged it, as it does without the middleware
    assert "Exception in ASGI application" in output
    assert "RuntimeError: the /fail endpoint is broken" in output
    hello = [e for e in events if e.get("message") == "hello from {'identity': 'u-1'}"]
    assert len(hello) == 1 and hello[0]["@user"] == {"identity": "u-1"}


def test_each_unhandled_error_carries_the_lines_its_request_logged(
    run_uvicorn: Any, server: CaptureServer
) -> None:
    """The trace log of a request (``@trace``) under an ``@app.middleware("http")``, as the
    README suggests for ``set_user``, and for a sync endpoint (FastAPI runs it in a thread
    pool): the ring made on the request's first line lived in a copy of its context only
    (the middleware's child task, the pool's thread), and the error arrived with no trace."""
    app = run_uvicorn(CLI, WEB_TEST_SETUP="1", WEB_TEST_MIDDLEWARE="1")
    for path, order in (("/fail-after-work", "A-1"), ("/sync-fail-after-work", "S-2")):
        assert requests.get(f"{app.url}{path}?order={order}", timeout=10).status_code == 500
    output = app.stop()
    assert app.process.returncode == 0, output
    server.wait_for(2, timeout=10)
    failures = {e["@simple_error"]["message"]: e for e in errors(server.events)}
    for order in ("A-1", "S-2"):
        trace = failures[f"order {order} could not be charged"]["data"]["@trace"]
        own = [line.split(": ", 1)[1] for line in trace]
        assert own == [f"loading order {order}", f"charging order {order}"], trace


def test_without_middleware_setup_alone_reports_uvicorns_error_log(
    run_uvicorn: Any, server: CaptureServer
) -> None:
    """uvicorn.error does not propagate to the root logger: setup() forwards it."""
    app = run_uvicorn(CLI, WEB_TEST_SETUP="1", WEB_TEST_MIDDLEWARE="0")
    response = failing_request(app.url)
    assert (response.status_code, response.text) == (500, "Internal Server Error")
    output = app.stop()
    server.wait_for(1, timeout=10)
    [event] = errors(server.events)
    assert event["source"] == "uvicorn.error"
    assert event["message"].strip() == "Exception in ASGI application"
    assert event["@simple_error"]["message"] == "the /fail endpoint is broken"
    assert "@request" not in event.get("data", {})
    assert "RuntimeError: the /fail endpoint is broken" in output
    assert_no_secrets(server.events)


def test_streaming_does_not_block_other_requests(run_uvicorn: Any, server: CaptureServer) -> None:
    """A response that streams until another request arrives: both are served at once, and
    each chunk arrives when it is sent (nothing is buffered by the middleware)."""
    app = run_uvicorn(CLI, WEB_TEST_SETUP="1", WEB_TEST_MIDDLEWARE="1")
    with requests.get(app.url + "/wait", stream=True, timeout=10) as waiting:
        lines = waiting.iter_lines()
        assert next(lines) == b"waiting"
        assert requests.get(app.url + "/release", timeout=10).text == "ok"
        assert next(lines) == b"released"
    stream = requests.get(app.url + "/stream", timeout=10)
    assert stream.text == "".join(f"chunk {i}\n" for i in range(5))
    app.stop()
    assert errors(server.events) == []


def test_uvicorn_run_after_setup_keeps_forwarding_its_error_log(
    run_uvicorn: Any, server: CaptureServer
) -> None:
    """``setup(); uvicorn.run(app)``: uvicorn's logging configuration removes the handlers of
    its loggers after setup() ran; the middleware puts the forwarding back."""
    app = run_uvicorn(["-m", "tests.web.asgiapp"])
    assert requests.get(app.url + "/log-server-error", timeout=10).text == "ok"
    assert failing_request(app.url).status_code == 500
    app.stop()
    server.wait_for(2, timeout=10)
    found = errors(server.events) + [
        e for e in server.events if e.get("message") == "logged on uvicorn.error"
    ]
    messages = sorted(e.get("message") or e["@simple_error"]["message"] for e in found)
    assert messages == ["logged on uvicorn.error", "the /fail endpoint is broken"]


def test_uvicorn_without_log_config_sends_each_record_once(
    run_uvicorn: Any, server: CaptureServer
) -> None:
    """``log_config=None``: uvicorn's loggers propagate to the root, where the handler is; the
    forwarder must not send their records a second time."""
    app = run_uvicorn(["-m", "tests.web.asgiapp"], WEB_TEST_LOG_CONFIG="none")
    assert requests.get(app.url + "/log-server-error", timeout=10).text == "ok"
    assert failing_request(app.url).status_code == 500
    app.stop()
    server.wait_for(2, timeout=10)
    logged = [e for e in server.events if e.get("message") == "logged on uvicorn.error"]
    assert len(logged) == 1
    assert len(errors(server.events)) == 1


def test_a_startup_that_fails_arrives_as_an_error(server: CaptureServer) -> None:
    """uvicorn logs a failed lifespan startup as its traceback's text and ends the exception
    there: it arrived as log lines only, with no exception type to group by."""
    env = child_env(server.url, WEB_TEST_SETUP="1", WEB_TEST_MIDDLEWARE="1")
    done = subprocess.run(
        [sys.executable, *CLI],
        env={**env, "WEB_TEST_STARTUP_FAILS": "1"},
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 3, done.stderr  # uvicorn's exit for a failed startup, as before
    assert "the database is down at startup" in done.stderr  # its console is unchanged
    server.wait_for(1, timeout=10)
    [failure] = errors(server.events)
    assert failure["@simple_error"]["type"] == "ConnectionError"
    assert failure["@simple_error"]["message"] == "the database is down at startup"
    assert failure["data"]["@submission_method"] == "unhandled_lifespan_exception"
    assert [line.split(" ", 2)[2] for line in failure["data"]["@trace"]] == [
        "asgiapp: connecting to the database"
    ]
    # uvicorn logs the traceback's text too: the failure arrived a second time, as a log event
    # of its own stack.
    assert not [e for e in server.events if "Traceback" in str(e.get("message"))]
