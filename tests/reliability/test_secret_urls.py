"""A password in ``server_url`` (``http://ci:PASSWORD@host/path``) is masked whole, ``[excluded]``,
in the line a program's stderr gets and in ``stats()["last_error"]`` when the server refuses the
events (401, 404): not its first 4 characters, as the API key keeps (``Ik3v…``), since a
password's first characters are a good part of it. A program in a process of its own, logging
through ``eventlog_handler.setup()``, against a loopback server."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from tests.support.constants import API_KEY
from tests.support.faultserver import FaultServer, Reply
from tests.support.processes import run_program

PASSWORD = "hunter2pw"

PROGRAM = """
import json, logging
import eventlog_handler
handle = eventlog_handler.setup(outage_notice=0, shutdown_timeout=1, retry_initial=0.05)
log = logging.getLogger("app")
for i in range(3):
    log.warning("event %d", i)
handle.flush(2)
print(json.dumps(handle.stats()))
"""


def _echo(url: str) -> Reply:
    """A 401 whose problem body quotes the request's URL and its credentials, as a proxy in
    front of the service may."""
    title = f"credentials ci:{PASSWORD} refused for {url}/api/v2/events"
    body = json.dumps({"title": title, "status": 401}).encode()
    return Reply(401, body, {"Content-Type": "application/problem+json"})


@pytest.mark.parametrize("answer", [404, 401, "echo"])
def test_the_urls_password_is_masked_whole_in_stderr_and_stats(
    server: FaultServer, tmp_path: Path, answer: int | str
) -> None:
    host = server.url.removeprefix("http://")
    url = f"http://ci:{PASSWORD}@{host}/wrong"
    server.default = _echo(url) if answer == "echo" else answer

    status, stderr, stdout = run_program(PROGRAM, url, tmp_path)

    assert status == 0, stderr
    stats = json.loads(stdout[-1])
    last_error = str(stats["last_error"])
    assert str(401 if answer == "echo" else answer) in last_error, last_error
    refused = [line for line in stderr.splitlines() if " refused " in line or " answered " in line]
    assert refused, stderr
    shown = f"http://ci:[excluded]@{host}/wrong/api/v2/events"
    assert shown in refused[0] and shown in last_error, (refused[0], last_error)
    for text in (stderr, json.dumps(stats)):
        assert PASSWORD not in text
        assert PASSWORD[:4] not in text  # not "ci:hunt…@": the password is masked whole
        assert API_KEY not in text
    if answer == 401:  # the API key keeps its prefix, to tell two keys apart
        assert f"refused the API key {API_KEY[:4]}…" in stderr


@pytest.mark.parametrize(
    "mistyped", ["{auth}@{host}", "https//{auth}@{host}", "http:/{auth}@{host}"]
)
def test_a_mistyped_urls_password_is_never_printed(
    server: FaultServer, tmp_path: Path, mistyped: str
) -> None:
    """A server URL without its scheme, or with a mistyped one, from the environment: the
    program runs on, stderr says the URL is malformed, and the password in it is masked."""
    host = server.url.removeprefix("http://")
    url = mistyped.format(auth=f"ci:{PASSWORD}", host=host)

    status, stderr, stdout = run_program(PROGRAM, url, tmp_path)

    assert status == 0, stderr
    assert "must be an http:// or https:// URL" in stderr, stderr
    assert "ci:[excluded]@" in stderr or ":[excluded]@" in stderr, stderr
    assert PASSWORD not in stderr and PASSWORD[:4] not in stderr, stderr
    assert PASSWORD not in stdout[-1]
    assert server.accepted == []


BYTES_PROGRAM = """
import logging
import structlog
import eventlog_handler
from eventlog_handler.structlog import EventLogProcessor

handle = eventlog_handler.setup()
structlog.configure(processors=[EventLogProcessor(), structlog.processors.JSONRenderer()])
logging.getLogger("app").warning("upload failed", extra={
    "body": b"grant_type=password&password=hunter2pw",
    "dsn": bytearray(b"postgres://admin:hunter2pw@db/app"),
    "chunks": [b"Authorization: Bearer hunter2pwhunter2pw"],
})
structlog.get_logger("app").warning("token refresh", request_body=b"password=hunter2pw")
handle.flush(5)
"""


def test_secrets_in_bytes_values_are_masked_as_in_text(server: FaultServer, tmp_path: Path) -> None:
    """``bytes`` in ``extra`` or a structlog key went out base64-encoded: the masking rules
    never read them, and anyone could decode them."""
    status, stderr, _ = run_program(BYTES_PROGRAM, server.url, tmp_path)

    assert status == 0, stderr
    wire = json.dumps(server.accepted)
    assert PASSWORD not in wire
    assert base64.b64encode(b"password=hunter2pw").decode()[:12] not in wire
    by_message = {event["message"]: event["data"] for event in server.accepted}
    upload = by_message["upload failed"]
    assert upload["body"] == "b'grant_type=password&password=[excluded]'"
    assert upload["dsn"] == "b'postgres://admin:[excluded]@db/app'"
    assert upload["chunks"] == ["b'Authorization: Bearer [excluded]'"]
    assert by_message["token refresh"]["request_body"] == "b'password=[excluded]'"


MISPLACED_PROGRAM = """
import logging, os
import eventlog_handler
url, key = os.environ["EVENTLOG_SERVER_URL"], os.environ["EVENTLOG_API_KEY"]
PASSWORD = {password!r}
handle = eventlog_handler.setup({call}, shutdown_timeout=1)
logging.getLogger("app").warning("lost")
print(repr(handle))
"""


@pytest.mark.parametrize(
    "call",
    [
        "url, key",  # the order of Client(server_url, token), given to setup(api_key, server_url)
        "server_url=key",  # a swapped line in an env file
        "server_url=url.replace('//', f'//ci:{PASSWORD}@').encode()",  # a config's bytes
        "server_url=[url.replace('//', f'//ci:{PASSWORD}@')]",  # a YAML list
    ],
)
def test_a_key_or_password_in_the_wrong_place_is_never_printed(
    server: FaultServer, tmp_path: Path, call: str
) -> None:
    """The API key given as the server URL was printed whole in the message that the URL is
    not one ('got 'mfE4BSrv…'' in stderr and the handler's repr), and so was a URL's password
    given as bytes or in a list. The program runs on, stderr names the setting and the cause."""
    status, stderr, stdout = run_program(
        MISPLACED_PROGRAM.format(call=call, password=PASSWORD), server.url, tmp_path
    )

    assert status == 0, stderr
    for text in (stderr, stdout[-1]):
        assert API_KEY not in text and API_KEY[4:12] not in text, text
        assert PASSWORD not in text, text
    assert "setting 'server_url'" in stderr or "setting 'api_key'" in stderr, stderr
    if call.startswith(("url", "server_url=key")):
        assert "swapped" in stderr, stderr
    else:
        assert "must be a URL (a str), got a " in stderr, stderr
    assert server.accepted == []
