"""A password in the server's URL (``http://ci:PASSWORD@host/path``), as a user puts one in
``EVENTLOG_SERVER_URL``: the ``eventlog`` command, run as a process, never prints it nor its
first characters, on any failure nor in any line; the user and the host stay readable. So do a
:class:`Client`'s ``repr`` and the message of an API error."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from eventlog_handler.api import Client, NotFoundError
from eventlog_handler.collector import Collector
from tests.support.collector import Client as HttpClient
from tests.support.constants import REPO
from tests.support.processes import stop_with_ctrl_c, with_lines

PASSWORD = "hunter2pw"
WRONG_KEY = "Wr0ngKeyWr0ngKeyWr0ngKeyWr0ngKeyWr0ngKey"


def _env(collector: Collector, url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVENTLOG_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["NO_PROXY"] = "127.0.0.1"
    env["EVENTLOG_SERVER_URL"] = url
    env["EVENTLOG_USER_TOKEN"] = collector.user_token
    env["EVENTLOG_API_KEY"] = collector.project_token
    env.update(extra)
    return env


def _eventlog(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "eventlog_handler.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=str(REPO),
    )


def _host(collector: Collector) -> str:
    return collector.url.removeprefix("http://")


def _assert_masked(output: str, host: str) -> None:
    assert PASSWORD not in output
    assert PASSWORD[:4] not in output  # not even mask_secret's 4 characters
    assert f"http://ci:[excluded]@{host}" in output  # the user and the host stay readable


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["projects"], id="projects"),
        pytest.param(["send", "hello"], id="send"),
        pytest.param(["settings", "get"], id="settings-get"),
        pytest.param(["settings", "get", "some-project"], id="settings-get-project"),
        pytest.param(["tail", "--interval", "0.2"], id="tail"),
    ],
)
def test_a_failure_never_prints_the_urls_password(collector: Collector, argv: list[str]) -> None:
    host = _host(collector)
    done = _eventlog(_env(collector, f"http://ci:{PASSWORD}@{host}/nope"), *argv)

    assert done.returncode == 1, done.stdout + done.stderr
    output = done.stdout + done.stderr
    assert output.startswith("eventlog: error: 404"), output
    _assert_masked(output, host)


def test_a_wrong_key_on_send_never_prints_the_urls_password(collector: Collector) -> None:
    host = _host(collector)
    env = _env(collector, f"http://ci:{PASSWORD}@{host}", EVENTLOG_API_KEY=WRONG_KEY)

    done = _eventlog(env, "send", "hello")

    assert done.returncode == 1, done.stdout + done.stderr
    output = done.stdout + done.stderr
    assert "refused" in output and "401" in output, output
    _assert_masked(output, host)
    assert WRONG_KEY not in output


def test_tails_links_never_carry_a_token_in_the_url(collector: Collector) -> None:
    """``http://client:TOKEN@host`` (the token as the URL's password, which the service takes
    as Basic credentials): every line ``eventlog tail`` prints links to a stack on the server,
    and that link must not carry the token."""
    http = HttpClient(collector)
    http.post_events({"message": "Disk space is low", "source": "ops", "@level": "Warn"})
    http.close()
    token = collector.user_token
    host = _host(collector)
    env = _env(collector, f"http://client:{token}@{host}")
    process, lines = with_lines(
        [sys.executable, "-m", "eventlog_handler.cli", "tail", "--interval", "0.2"], env
    )
    try:
        line = lines.get(timeout=30)
    finally:
        _, stderr = stop_with_ctrl_c(process)
    assert "Disk space is low" in line, line + stderr
    assert f"http://client:[excluded]@{host}/stacks/" in line
    for output in (line, stderr):
        assert token not in output and token[:4] + "…" not in output


def test_a_clients_repr_and_an_api_errors_message_mask_the_password(
    collector: Collector,
) -> None:
    host = _host(collector)
    url = f"http://ci:{PASSWORD}@{host}/nope"
    client = Client(url, collector.user_token)
    try:
        assert repr(client) == f"Client('http://ci:[excluded]@{host}/nope', token='" + (
            collector.user_token[:4] + "…')"
        )
        with pytest.raises(NotFoundError) as raised:
            client.list_projects()
    finally:
        client.close()
    error = raised.value
    for shown in (str(error), repr(error), error.url):
        assert PASSWORD not in shown and PASSWORD[:4] not in shown, shown
    assert f"from http://ci:[excluded]@{host}/nope/api/v2/projects" in str(error)
