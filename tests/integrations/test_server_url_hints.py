"""What stderr says of a server URL as users get it wrong: without its scheme (the scheme is
named, not a blank it also has), pasted with the API's ``/api/v2`` (every post would be a 404
on ``/api/v2/api/v2/events``: refused, with the base URL to use), and the local collector's
address given on purpose (not called "the default")."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from eventlog_handler._values import validate_server_url
from eventlog_handler.delivery._stderr import shown_server
from eventlog_handler.settings import DEFAULT_SERVER_URL, Settings
from tests.support.constants import API_KEY
from tests.support.faultserver import FaultServer
from tests.support.processes import run_program

PROGRAM = """
import logging
import eventlog_handler
eventlog_handler.setup(shutdown_timeout=1)
logging.getLogger("app").warning("hello")
"""


@pytest.mark.parametrize(
    "url", ["not a url", "my host:5000", "127.0.0.1:5000", "eventlog-collector-service"]
)
def test_a_url_without_a_scheme_is_named_as_such(url: str) -> None:
    with pytest.raises(ValueError, match="no scheme: write http:// or https://") as info:
        validate_server_url("server_url", url)
    assert "blanks" not in str(info.value)
    assert "swapped" not in str(info.value)  # a long host name is no API key


@pytest.mark.parametrize(
    ("url", "base"),
    [
        ("http://host:5000/api/v2", "http://host:5000"),
        ("http://host:5000/api/v2/", "http://host:5000"),
        ("https://host/exceptionless/api/v2/events", "https://host/exceptionless"),
        ("https://ci:s3cr3t-pw@host/API/V2", "https://ci:[excluded]@host"),
    ],
)
def test_a_url_ending_in_the_api_path_is_refused_with_the_base_to_use(url: str, base: str) -> None:
    with pytest.raises(ValueError, match="without '/api/v2'") as info:
        validate_server_url("server_url", url)
    assert f"use {base!r}" in str(info.value)
    assert "s3cr3t" not in str(info.value)
    assert validate_server_url("server_url", "http://host/api/v20") == "http://host/api/v20"
    # a gateway whose own path holds /api/v2: a base path, not the API's
    gateway = "https://gw.example/api/v2/exceptionless"
    assert validate_server_url("server_url", gateway) == gateway


def test_the_default_server_is_called_the_default_only_when_it_is() -> None:
    default = Settings.from_options({"api_key": API_KEY}, environ={})
    assert "(the default" in shown_server(default)
    for options, environ in (
        ({"api_key": API_KEY, "server_url": DEFAULT_SERVER_URL}, {}),
        ({"api_key": API_KEY}, {"EVENTLOG_SERVER_URL": DEFAULT_SERVER_URL}),
    ):
        given = Settings.from_options(options, environ=environ)
        assert given.server_url == DEFAULT_SERVER_URL
        assert shown_server(given) == DEFAULT_SERVER_URL


def test_a_pasted_api_url_is_said_and_nothing_goes_to_the_doubled_path(tmp_path: Path) -> None:
    with FaultServer() as server:
        status, stderr, _ = run_program(PROGRAM, server.url + "/api/v2", tmp_path)
        assert status == 0, stderr
    assert "without '/api/v2'" in stderr and f"use {server.url!r}" in stderr, stderr
    assert server.accepted == [] and server.requests == []


def test_a_url_without_a_scheme_says_so_on_stderr(tmp_path: Path) -> None:
    status, stderr, _ = run_program(PROGRAM, "not a url", tmp_path)
    assert status == 0, stderr
    assert "EVENTLOG_SERVER_URL" in stderr and "no scheme" in stderr, stderr
    assert "blanks" not in stderr


@pytest.mark.parametrize("quote", ['"', "'"])
def test_a_url_with_the_quotes_of_an_env_file_says_so_on_stderr(tmp_path: Path, quote: str) -> None:
    """``EVENTLOG_SERVER_URL="https://host"`` copied from an env file with its quotes (docker's
    ``--env-file`` keeps them): the message named the URL, not the quotes around it."""
    with FaultServer() as server:
        status, stderr, _ = run_program(PROGRAM, f"{quote}{server.url}{quote}", tmp_path)
        assert status == 0, stderr
    assert "EVENTLOG_SERVER_URL" in stderr and "(a quote copied with it?)" in stderr, stderr
    assert server.requests == []


def test_the_collectors_address_given_on_purpose_is_not_called_the_default(
    tmp_path: Path,
) -> None:
    with socket.socket() as probe:
        if probe.connect_ex(("127.0.0.1", 5000)) == 0:
            pytest.skip("something listens on 127.0.0.1:5000")
    status, stderr, _ = run_program(PROGRAM, DEFAULT_SERVER_URL, tmp_path)
    assert status == 0, stderr
    [line] = [line for line in stderr.splitlines() if "could not be sent" in line]
    assert DEFAULT_SERVER_URL in line and "(the default" not in line, line
