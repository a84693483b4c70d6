"""The command's failures: one ``eventlog: error:`` line on stderr, exit 1, no traceback, and
never the token; usage errors exit 2."""

from __future__ import annotations

import http.server
import threading

import pytest

from eventlog_handler._version import __version__
from eventlog_handler.collector import Collector
from tests.cli.conftest import Run

RANDOM_TOKEN = "Zq3xR7vLk2pW9mT4nB8cY1dF6gH0jK5sA2eU7iO3"

# -- settings ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        (["projects"], ("--token", "EVENTLOG_USER_TOKEN")),
        (["projects", "--json"], ("--token", "EVENTLOG_USER_TOKEN")),
        (["token", "create", "abc"], ("--token", "EVENTLOG_USER_TOKEN")),
        (["send", "hi"], ("--api-key", "EVENTLOG_API_KEY")),
    ],
)
def test_missing_token(run: Run, collector: Collector, argv: list[str], names: tuple) -> None:
    result = run(argv, "--server-url", collector.url)

    message = result.error_message()
    assert message.startswith("no token")
    for name in names:
        assert name in message
    assert collector.requests == []


def test_empty_token_env_is_missing(
    run: Run, collector: Collector, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVENTLOG_USER_TOKEN", "")

    message = run("projects", "--server-url", collector.url).error_message()

    assert message.startswith("no token")


@pytest.mark.parametrize(
    "url",
    ["not-a-url", "ftp://x", "http://", "http://127.0.0.1:99999", "http://[::1", "http://h/?q=1"],
)
def test_bad_server_url(run: Run, url: str) -> None:
    result = run("projects", "--server-url", url, "--token", RANDOM_TOKEN)

    message = result.error_message(RANDOM_TOKEN)
    assert "server_url" in message
    assert not message.startswith("eventlog_handler:")


def test_bad_server_url_from_env(run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVENTLOG_SERVER_URL", "ftp://x")
    monkeypatch.setenv("EVENTLOG_API_KEY", RANDOM_TOKEN)

    message = run("send", "hi").error_message(RANDOM_TOKEN)

    assert "ftp://x" in message


@pytest.mark.parametrize("token", ["short", "has a space in it 0123456789", "tab\there-0123456789"])
def test_malformed_token(run: Run, collector: Collector, token: str) -> None:
    result = run("projects", "--server-url", collector.url, "--token", token)

    message = result.error_message(token)
    assert "token" in message
    assert collector.requests == []


def test_a_malformed_api_key_names_the_flag_it_came_from(run: Run, collector: Collector) -> None:
    """``send --api-key short`` named a setting 'token', which ``send`` has no flag for."""
    message = run("send", "hi", "--server-url", collector.url, "--api-key", "short").error_message()

    assert "--api-key or EVENTLOG_API_KEY" in message and "setting 'token'" not in message


class _Answering(http.server.BaseHTTPRequestHandler):
    """Answers every request with ``status`` and ``headers``."""

    status = 301
    headers_sent: dict[str, str] = {}

    def do_GET(self) -> None:
        self.send_response(self.status)
        for name, value in self.headers_sent.items():
            self.send_header(name, value)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.mark.parametrize(
    ("status", "headers", "said"),
    [
        (301, {"Location": "http://127.0.0.1:9/moved"}, "redirected to http://127.0.0.1:9/moved"),
        (429, {"Retry-After": "7"}, "try again in 7 s"),
        (503, {"Retry-After": "120"}, "try again in 2 minutes"),
    ],
)
def test_a_redirect_and_a_retry_after_are_said(
    run: Run, status: int, headers: dict[str, str], said: str
) -> None:
    """The command said ``301 Moved Permanently from ...`` without where to, and ``429``
    without when to try again, where the handler says both."""
    handler = type("Handler", (_Answering,), {"status": status, "headers_sent": headers})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        message = run("projects", "--server-url", url, "--token", RANDOM_TOKEN).error_message(
            RANDOM_TOKEN
        )
    finally:
        server.shutdown()
        server.server_close()
    assert str(status) in message and said in message, message


# -- the server's refusals --------------------------------------------------------------------


def test_unknown_token_is_refused(run: Run, collector: Collector) -> None:
    result = run("projects", "--server-url", collector.url, "--token", RANDOM_TOKEN)

    message = result.error_message(RANDOM_TOKEN)
    assert "refused" in message
    assert "401" in message


def test_disabled_token_is_refused(run: Run, collector: Collector, user_args) -> None:
    collector.disable_token(collector.user_token)

    message = run("projects", user_args).error_message(collector.user_token)

    assert "refused" in message


def test_unknown_api_key_is_refused_by_send(run: Run, collector: Collector) -> None:
    result = run("send", "hi", "--server-url", collector.url, "--api-key", RANDOM_TOKEN)

    assert "refused" in result.error_message(RANDOM_TOKEN)
    assert collector.events() == []


def test_project_token_cannot_list_projects(run: Run, collector: Collector) -> None:
    token = collector.project_token

    message = run("projects", "--server-url", collector.url, "--token", token).error_message(token)

    assert "403" in message
    assert "scope" in message
    assert "user-scoped token" in message


def test_project_token_cannot_create_tokens(run: Run, collector: Collector) -> None:
    token = collector.project_token
    result = run(
        "token", "create", collector.project_id, "--server-url", collector.url, "--token", token
    )

    assert "scope" in result.error_message(token)


def test_token_create_for_unknown_project(run: Run, collector: Collector, user_args) -> None:
    missing = "0123456789abcdef01234567"

    message = run("token", "create", missing, user_args).error_message(collector.user_token)

    assert "404" in message
    assert missing in message


def test_token_create_for_another_organizations_project(
    run: Run, collector: Collector, user_args
) -> None:
    foreign = collector.create_project("Foreign", collector.create_organization("Other Org"))

    message = run("token", "create", foreign["id"], user_args).error_message(collector.user_token)

    assert "404" in message


@pytest.mark.parametrize("project_id", ["a/b", "..", "x?y", "  "])
def test_token_create_with_a_malformed_project_id(
    run: Run, collector: Collector, user_args, project_id: str
) -> None:
    message = run("token", "create", project_id, user_args).error_message(collector.user_token)

    assert "project id" in message
    assert collector.requests == []


def test_send_with_a_user_token_bound_to_no_project(run: Run, collector: Collector) -> None:
    token = collector.user_token

    result = run("send", "hi", "--server-url", collector.url, "--api-key", token)

    message = result.error_message(token)
    assert "400" in message
    # The service's own words for what is wrong (its problem body's detail), not "Bad Request"
    # alone.
    assert "not bound to a project" in message and "project token" in message, message
    assert collector.events() == []


def test_unreachable_server(run: Run, closed_url: str) -> None:
    result = run("projects", "--server-url", closed_url, "--token", RANDOM_TOKEN)

    message = result.error_message(RANDOM_TOKEN)
    assert "refused" in message or "unreachable" in message
    assert "is the server running?" in message
    assert closed_url.removeprefix("http://") in message


def test_unreachable_server_for_send(run: Run, closed_url: str) -> None:
    result = run("send", "hi", "--server-url", closed_url, "--api-key", RANDOM_TOKEN)

    assert "refused" in result.error_message(RANDOM_TOKEN)


def test_stopped_collector(run: Run, collector: Collector, user_args) -> None:
    collector.stop()

    message = run("projects", user_args).error_message(collector.user_token)

    assert "refused" in message


# -- send -------------------------------------------------------------------------------------


@pytest.mark.parametrize("level", ["bogus", "", "warnings", "Information"])
def test_send_unknown_level(run: Run, collector: Collector, level: str) -> None:
    token = collector.project_token
    result = run("send", "hi", "--level", level, "--server-url", collector.url, "--api-key", token)

    message = result.error_message(token)
    assert message.startswith(f"unknown level {level!r}")
    assert "Trace, Debug, Info, Warn, Error, Fatal" in message
    assert collector.requests == []


@pytest.mark.parametrize("text", ["", "   "])
def test_send_an_empty_message_is_named_and_nothing_is_sent(
    run: Run, collector: Collector, text: str
) -> None:
    """``eventlog send ""`` (a variable that was not set, in a script) sent an empty event."""
    token = collector.project_token
    result = run("send", text, "--server-url", collector.url, "--api-key", token)

    assert result.error_message(token).startswith("the message is empty")
    assert collector.requests == []


# -- options ----------------------------------------------------------------------------------


@pytest.mark.parametrize("timeout", ["0", "-1", "nan", "inf", "1e300", "soon"])
def test_bad_timeout(run: Run, collector: Collector, user_args, timeout: str) -> None:
    result = run("projects", user_args, f"--timeout={timeout}")

    # An out-of-range timeout is a usage error, said by argparse before any request.
    assert result.code == 2
    assert result.out == ""
    assert "Traceback" not in result.err
    assert "argument --timeout" in result.err.splitlines()[-1]
    assert collector.user_token not in result.err


# -- usage ------------------------------------------------------------------------------------


def test_no_command_prints_usage(run: Run) -> None:
    result = run()

    assert result.code == 2
    assert result.out == ""
    assert result.err.startswith("usage: eventlog")
    for command in ("projects", "token", "send", "serve", "demo"):
        assert command in result.err


@pytest.mark.parametrize(
    ("command", "actions"), [("token", ("create",)), ("settings", ("get", "set", "delete"))]
)
def test_a_command_without_its_action_is_a_usage_error_naming_the_actions(
    run: Run, command: str, actions: tuple[str, ...]
) -> None:
    """``eventlog token`` printed the top-level help, which names none of its actions."""
    result = run(command)

    assert result.code == 2
    assert result.out == ""
    assert result.err.startswith(f"usage: eventlog {command}"), result.err
    assert f"required: {{{','.join(actions)}}}" in result.err, result.err


@pytest.mark.parametrize(
    "argv",
    [
        ["nope"],
        ["token", "create"],
        ["token", "create", "abc", "--scope", "admin"],
        ["token", "delete", "abc"],
        ["send"],
        ["projects", "--timeout", "soon"],
        ["projects", "--bogus"],
    ],
)
def test_usage_errors(run: Run, argv: list[str]) -> None:
    result = run(argv)

    assert result.code == 2
    assert result.out == ""
    assert "Traceback" not in result.err
    assert result.err.splitlines()[-1].startswith("eventlog")
    assert ": error: " in result.err.splitlines()[-1]


def test_usage_error_does_not_echo_the_token(run: Run) -> None:
    result = run("projects", "--token", RANDOM_TOKEN, "--bogus")

    assert result.code == 2
    assert RANDOM_TOKEN not in result.err


def test_version(run: Run) -> None:
    result = run("--version")

    assert result.code == 0
    assert result.out == f"eventlog {__version__}\n"
    assert result.err == ""


def test_serve_on_a_busy_port_says_so_and_leaves_no_database(
    tmp_path, collector: Collector
) -> None:
    import subprocess
    import sys
    from urllib.parse import urlsplit

    database = tmp_path / "other.sqlite3"
    port = str(urlsplit(collector.url).port)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "eventlog_handler.cli",
            "serve",
            "--db",
            str(database),
            "--port",
            port,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr
    assert list(tmp_path.iterdir()) == []  # a database was made for nothing


def test_the_demo_on_a_port_in_use_says_so_in_one_line(run: Run) -> None:
    """``eventlog demo --port N`` with the port taken printed a traceback."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run("demo", "--port", str(port))
    assert result.code == 1, result
    assert f"cannot start the collector on port {port}" in result.err, result.err
