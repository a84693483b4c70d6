"""Each failure is named for its real cause, and nothing printed carries a secret: a program in
its own process against a loopback server that answers wrongly, observed on its stderr."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.support.faultserver import FaultServer, Reply
from tests.support.processes import run_program
from tests.support.waits import dead_port

PROGRAM = """
import json, logging
import eventlog_handler
handle = eventlog_handler.setup(outage_notice=0, shutdown_timeout=1, retry_initial=0.05)
log = logging.getLogger("app")
for i in range(5):
    log.warning("event %d", i)
handle.flush(2)
print(json.dumps(handle.stats()))
"""


def stats_of(stdout: list[str]) -> dict[str, object]:
    stats: dict[str, object] = json.loads(stdout[-1])
    return stats


def test_a_redirect_names_its_target_and_is_not_followed(
    server: FaultServer, tmp_path: Path
) -> None:
    server.default = Reply(308, b"", {"Location": "https://events.example.invalid/api/v2/events"})
    status, stderr, stdout = run_program(PROGRAM, server.url, tmp_path)
    assert status == 0, stderr
    assert "redirected the events to https://events.example.invalid" in stderr
    assert "not followed" in stderr and "refused the API key" not in stderr
    assert stats_of(stdout)["delivered"] == 0
    assert all(seen.status == 308 for seen in server.requests)  # nothing went anywhere else


def test_a_redirect_with_a_query_is_shown_masked_once(server: FaultServer, tmp_path: Path) -> None:
    """A target whose query was masked already was masked again: ``api_key=[excluded]]``."""
    target = "https://events.example.invalid/api/v2/events?api_key=S3cret-in-the-query#frag"
    server.default = Reply(302, b"", {"Location": target})
    status, stderr, _ = run_program(PROGRAM, server.url, tmp_path)
    assert status == 0, stderr
    shown = "https://events.example.invalid/api/v2/events?api_key=[excluded]#[excluded] (302)"
    assert f"redirected the events to {shown}" in stderr, stderr
    assert "S3cret-in-the-query" not in stderr


def test_a_404_names_the_url(server: FaultServer, tmp_path: Path) -> None:
    server.default = 404
    status, stderr, _ = run_program(PROGRAM, server.url, tmp_path)
    assert status == 0, stderr
    assert f"answered 404 to POST {server.url}/api/v2/events" in stderr
    assert "EVENTLOG_SERVER_URL" in stderr and "refused the API key" not in stderr


def test_a_password_in_the_server_url_is_never_printed(tmp_path: Path) -> None:
    host = f"127.0.0.1:{dead_port()}"
    url = f"http://ci-user:Pa55-w0rd-secret@{host}"
    status, stderr, stdout = run_program(PROGRAM, url, tmp_path)
    assert status == 0, stderr
    assert "cannot deliver events to http://ci-user:[excluded]@" in stderr
    assert "could not be sent" in stderr
    assert "Pa55-w0rd-secret" not in stderr
    assert "Pa55-w0rd-secret" not in json.dumps(stats_of(stdout))


def test_a_token_as_the_server_urls_user_is_never_printed(tmp_path: Path) -> None:
    """``https://TOKEN@host`` (a DSN's form): the user is a secret, masked like a password."""
    host = f"127.0.0.1:{dead_port()}"
    status, stderr, stdout = run_program(PROGRAM, f"http://Us3r-t0ken-s3cret@{host}", tmp_path)
    assert status == 0, stderr
    assert "cannot deliver events to http://[excluded]@" in stderr
    assert "could not be sent" in stderr
    assert "Us3r-t0ken-s3cret" not in stderr
    assert "Us3r-t0ken-s3cret" not in json.dumps(stats_of(stdout))


@pytest.mark.parametrize(
    "url_tail", ["/?api_key=Qu3ry-s3cret-value", "/?token=Qu3ry-s3cret-value#Qu3ry-s3cret-value"]
)
def test_a_secret_in_the_server_urls_query_is_never_printed(tmp_path: Path, url_tail: str) -> None:
    """A URL copied with its key in the query (as some tools take it) is refused, naming the
    variable, with the query's values masked; the program runs on."""
    url = f"http://127.0.0.1:{dead_port()}" + url_tail
    status, stderr, stdout = run_program(PROGRAM, url, tmp_path)
    assert status == 0, stderr
    said = [line for line in stderr.splitlines() if line.startswith("eventlog_handler")]
    assert len(said) == 1, said
    assert "EVENTLOG_SERVER_URL" in said[0] and "query" in said[0], said
    assert "[excluded]" in said[0], said
    assert "Qu3ry-s3cret-value" not in stderr
    assert "Qu3ry-s3cret-value" not in json.dumps(stats_of(stdout))


def test_events_whose_connection_was_reset_after_sending_are_of_unknown_outcome(
    server: FaultServer, tmp_path: Path
) -> None:
    # The request is read whole, then the connection is reset: the service may have stored
    # the events. At the exit deadline they are not reported as lost.
    server.default = "reset"
    status, stderr, _ = run_program(PROGRAM, server.url, tmp_path)
    assert status == 0, stderr
    assert any(seen.status == "reset" for seen in server.requests)
    assert "5 event(s) were on their way" in stderr, stderr
    assert "could not be sent" not in stderr, stderr


#: A script that logs a few lines and ends, with a long exit deadline.
QUICK_SCRIPT = """
import logging
import eventlog_handler
eventlog_handler.setup(shutdown_timeout=30)
log = logging.getLogger("app")
for i in range(5):
    log.warning("event %d", i)
"""


@pytest.mark.parametrize("status", [401, 404])
def test_a_refused_key_or_url_does_not_hold_the_exit(
    server: FaultServer, tmp_path: Path, status: int
) -> None:
    """A script run with a wrong key (or URL) ends at once: no retry within the exit's
    deadline can be accepted (it retried until ``shutdown_timeout``, 30 s here). Stderr names
    the cause and counts what was not sent, without promising a retry the ended process
    won't make."""
    server.default = status
    started = time.monotonic()
    code, stderr, _ = run_program(QUICK_SCRIPT, server.url, tmp_path)
    took = time.monotonic() - started
    assert code == 0, stderr
    said = [line for line in stderr.splitlines() if line.startswith("eventlog_handler")]
    assert len(said) == 2, said
    assert f"({status})" in said[0] or f"answered {status}" in said[0], said
    assert "retried" not in said[0], said
    assert "5 event(s) could not be sent" in said[1], said
    assert took < 15, f"the script took {took:.1f} s to end (shutdown_timeout=30)"


def test_a_proxy_refusing_its_credentials_is_named_and_not_the_key(
    server: FaultServer, tmp_path: Path
) -> None:
    """``HTTP_PROXY`` with a wrong password: the proxy answers 407. The line said "check
    EVENTLOG_API_KEY", and named neither the proxy nor its setting."""
    server.default = 407  # the proxy: every request through it is answered 407
    proxy = server.url.replace("http://", "http://someone:pr0xy-pass@")
    target = f"http://127.0.0.1:{dead_port()}"
    status, stderr, _ = run_program(PROGRAM, target, tmp_path, HTTP_PROXY=proxy, NO_PROXY="")
    assert status == 0, stderr
    assert server.requests, "the events went through the proxy"
    assert "the proxy refused its own credentials (407)" in stderr, stderr
    assert "HTTP_PROXY / HTTPS_PROXY" in stderr
    assert "EVENTLOG_API_KEY" not in stderr
    assert "pr0xy-pass" not in stderr


EXITING = """
import logging
import eventlog_handler
eventlog_handler.setup(flush_interval=30)
logging.getLogger("app").warning("sent at exit")
"""


def test_a_redirect_met_at_exit_says_what_to_set(server: FaultServer, tmp_path: Path) -> None:
    server.default = Reply(301, b"", {"Location": "https://events.example.invalid/"})
    status, stderr, _ = run_program(EXITING, server.url, tmp_path)
    assert status == 0, stderr
    assert "Set EVENTLOG_SERVER_URL / server_url to the address the service is at." in stderr


def test_a_tunnel_the_proxy_refuses_and_a_proxy_not_running_are_the_proxys(
    server: FaultServer, tmp_path: Path
) -> None:
    """An HTTPS proxy's 407 to CONNECT said "cannot reach <server>: ProxyError", and a proxy
    that isn't running was "connection to <the server> refused" while the server was up."""
    from tests.support.proxy import Proxy

    with Proxy(tunnel_status=407) as proxy:
        credentials = proxy.url.replace("http://", "http://someone:pr0xy-pass@")
        target = f"https://127.0.0.1:{server.port}"
        status, stderr, _ = run_program(
            PROGRAM, target, tmp_path, HTTPS_PROXY=credentials, NO_PROXY=""
        )
        assert proxy.seen, "the tunnel was asked for"
    assert status == 0, stderr
    said = "through the proxy of HTTPS_PROXY / HTTP_PROXY, which refused its own credentials (407)"
    assert f"cannot reach 127.0.0.1:{server.port} {said}" in stderr, stderr
    assert "pr0xy-pass" not in stderr

    dead = f"http://someone:pr0xy-pass@127.0.0.1:{dead_port()}"
    status, stderr, _ = run_program(PROGRAM, server.url, tmp_path, HTTP_PROXY=dead, NO_PROXY="")
    assert status == 0, stderr
    assert "through the proxy of HTTPS_PROXY / HTTP_PROXY, which refused the connection" in stderr
    assert f"connection to 127.0.0.1:{server.port} refused" not in stderr
    assert "pr0xy-pass" not in stderr
    assert server.requests == []  # the server was up, and never reached

    with Proxy(tunnel_status=502) as proxy:  # the proxy can't reach the server behind it
        status, stderr, _ = run_program(PROGRAM, target, tmp_path, HTTPS_PROXY=proxy.url)
    assert status == 0, stderr
    assert "which answered 502 Bad Gateway to the tunnel (the server behind it?)" in stderr
