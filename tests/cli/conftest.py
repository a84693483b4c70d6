"""Fixtures for the ``eventlog`` command's tests: a collector on 127.0.0.1, a clean
environment and a runner that calls :func:`eventlog_handler.cli._main.main` in-process."""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Callable, Iterator, Sequence

import pytest

from eventlog_handler.cli._main import main
from eventlog_handler.collector import Collector
from tests.support.fixtures import collector as collector  # in memory, on 127.0.0.1

ENV_VARS = ("EVENTLOG_SERVER_URL", "EVENTLOG_USER_TOKEN", "EVENTLOG_API_KEY")
PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")

ERROR_PREFIX = "eventlog: error: "


@dataclasses.dataclass
class Result:
    """What one run of the command did."""

    code: int | str | None
    out: str
    err: str

    def error_message(self, *secrets: str) -> str:
        """Check the run failed with exit 1 and exactly one ``eventlog: error:`` line on
        stderr (nothing on stdout, no traceback, none of ``secrets``); return the message."""
        assert self.code == 1, (self.code, self.out, self.err)
        assert self.out == ""
        assert "Traceback" not in self.err
        lines = self.err.splitlines()
        assert len(lines) == 1, self.err
        assert lines[0].startswith(ERROR_PREFIX), lines[0]
        assert self.err.endswith("\n")
        for secret in secrets:
            assert secret not in self.err
        return lines[0][len(ERROR_PREFIX) :]


Run = Callable[..., Result]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No settings or proxies from the developer's shell leak into a test."""
    for name in (*ENV_VARS, *PROXY_VARS):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost,0.0.0.0")


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str]) -> Run:
    """``run("projects", "--json")``: call ``main`` and capture its exit code and output."""

    def runner(*argv: str | Sequence[str]) -> Result:
        args: list[str] = []
        for arg in argv:
            args.extend([arg] if isinstance(arg, str) else arg)
        capsys.readouterr()
        try:
            code: int | str | None = main(args)
        except SystemExit as exc:
            code = exc.code
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return runner


@pytest.fixture
def user_args(collector: Collector) -> list[str]:
    """``--server-url`` and ``--token`` for the collector's user token."""
    return ["--server-url", collector.url, "--token", collector.user_token]


@pytest.fixture
def closed_url() -> Iterator[str]:
    """A loopback URL nothing listens on: the port is bound (so nobody else takes it) but not
    listening, so a connection is refused at once."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
