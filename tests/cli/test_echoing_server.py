"""A server (or a proxy in front of it) that quotes the request in its error answer: the
``eventlog`` command, run as a process, prints the error without the token or the login
password it sent. And ``eventlog send`` masks what a script's message quotes, as the handler
masks what a program logs."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from eventlog_handler.collector import Collector
from tests.cli.conftest import Run
from tests.support.constants import REPO

PROJECT_KEY = "EchoProjectKey0123456789abcdefghijklmnop"
USER_TOKEN = "EchoUserToken0123456789abcdefghijklmnopq"
PASSWORD = 'pa"ss\\word-0123456789'


class _Echo(http.server.BaseHTTPRequestHandler):
    """Answers every request with its ``status``, a problem whose title quotes the request's
    ``Authorization`` header and body (as some gateways and debug servers do)."""

    status = 401

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode("utf-8", "replace") if length else ""
        title = f"Invalid credential: {self.headers.get('Authorization')} body={body}"
        problem = json.dumps({"title": title, "status": self.status}).encode()
        self.send_response(self.status)
        self.send_header("Content-Type", "application/problem+json")
        self.send_header("Content-Length", str(len(problem)))
        self.end_headers()
        self.wfile.write(problem)

    do_GET = do_POST = do_PUT = do_DELETE = _answer

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(params=[401, 500])
def echo_url(request: pytest.FixtureRequest) -> Iterator[str]:
    handler = type("Echo", (_Echo,), {"status": request.param})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["send", "hello"], id="send"),
        pytest.param(["projects"], id="projects"),
        pytest.param(["settings", "get", "0123456789abcdef01234567"], id="settings get"),
        pytest.param(["token", "create", "0123456789abcdef01234567"], id="token create"),
        pytest.param(["login", "--email", "ann@example.com"], id="login"),
    ],
)
def test_an_error_that_quotes_the_request_does_not_print_its_secrets(
    echo_url: str, argv: list[str]
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVENTLOG_")}
    env.update(
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")])),
        NO_PROXY="127.0.0.1",
        EVENTLOG_SERVER_URL=echo_url,
        EVENTLOG_API_KEY=PROJECT_KEY,
        EVENTLOG_USER_TOKEN=USER_TOKEN,
    )
    done = subprocess.run(
        [sys.executable, "-m", "eventlog_handler.cli", *argv],
        env=env,
        input=PASSWORD + "\n",
        capture_output=True,
        text=True,
        timeout=60,
        cwd=str(REPO),
    )
    assert done.returncode == 1, (done.stdout, done.stderr)
    # The server's words are still shown (a refused login is said in the command's own words).
    assert "Invalid credential" in done.stderr or "login refused" in done.stderr
    output = done.stdout + done.stderr
    for secret in (PROJECT_KEY, USER_TOKEN, PASSWORD, json.dumps(PASSWORD)[1:-1]):
        assert secret not in output
        assert secret[8:20] not in output
    if argv[0] != "login":
        assert "Bearer Echo…" in done.stderr  # its first 4 characters tell which token


def test_send_masks_what_the_message_quotes(run: Run, collector: Collector) -> None:
    message = (
        "backup failed: pg_dump postgres://backup:db-pw-1234@127.0.0.1/shop "
        "password=pw-5678 Authorization: Bearer bearer-abcdefgh"
    )
    result = run(
        "send", message, "--server-url", collector.url, "--api-key", collector.project_token
    )
    assert result.code == 0, result.err
    (event,) = collector.wait_for_events(1)
    assert event["message"] == (
        "backup failed: pg_dump postgres://backup:[excluded]@127.0.0.1/shop "
        "password=[excluded] Authorization: Bearer [excluded]"
    )
