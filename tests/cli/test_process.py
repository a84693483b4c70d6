"""The command run as a real process: ``python -m eventlog_handler.cli`` (and the installed
``eventlog`` script of this interpreter's environment, when there is one)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from eventlog_handler._version import __version__
from eventlog_handler.collector import Collector
from tests.cli.conftest import Run

ROOT = Path(__file__).resolve().parents[2]
RANDOM_TOKEN = "Zq3xR7vLk2pW9mT4nB8cY1dF6gH0jK5sA2eU7iO3"

_COMMANDS = [pytest.param([sys.executable, "-m", "eventlog_handler.cli"], id="python-m")]
_SCRIPT = shutil.which("eventlog", path=str(Path(sys.executable).parent))
if _SCRIPT:
    _COMMANDS.append(pytest.param([_SCRIPT], id="console-script"))


def _run(
    command: list[str], *args: str, env: dict[str, str] | None = None, cwd: Path
) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    environ["PYTHONPATH"] = os.pathsep.join(
        part for part in (str(ROOT), environ.get("PYTHONPATH")) if part
    )
    environ.update(env or {})
    return subprocess.run(
        [*command, *args],
        env=environ,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


@pytest.mark.parametrize("command", _COMMANDS)
def test_send_from_env_in_a_process(command: list[str], collector: Collector, tmp_path) -> None:
    env = {"EVENTLOG_SERVER_URL": collector.url, "EVENTLOG_API_KEY": collector.project_token}

    done = _run(
        command, "send", "from a process", "--level", "error", "--tag", "p", env=env, cwd=tmp_path
    )

    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    (event,) = collector.wait_for_events(1)
    assert event["message"] == "from a process"
    assert event["data"]["@level"] == "Error"
    assert event["tags"] == ["p"]
    assert done.stdout == f"sent log event {event['reference_id']}\n"


@pytest.mark.parametrize("command", _COMMANDS)
def test_refused_token_in_a_process(command: list[str], collector: Collector, tmp_path) -> None:
    done = _run(
        command, "projects", "--server-url", collector.url, "--token", RANDOM_TOKEN, cwd=tmp_path
    )

    assert done.returncode == 1
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("eventlog: error: the token was refused")
    assert RANDOM_TOKEN not in done.stderr


def test_usage_and_version_in_a_process(tmp_path) -> None:
    command = [sys.executable, "-m", "eventlog_handler.cli"]

    bare = _run(command, cwd=tmp_path)
    version = _run(command, "--version", cwd=tmp_path)

    assert bare.returncode == 2
    assert bare.stderr.startswith("usage: eventlog")
    assert version.returncode == 0
    assert version.stdout == f"eventlog {__version__}\n"


def test_plain_http_to_a_remote_host_warns_in_one_line(
    run: Run, closed_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The request stays on 127.0.0.1; the URL is treated as remote to trigger the warning.
    monkeypatch.setattr("eventlog_handler.api._client.is_loopback_url", lambda url: False)

    result = run("projects", "--server-url", closed_url, "--token", RANDOM_TOKEN)

    assert result.code == 1
    lines = result.err.splitlines()
    assert len(lines) == 2, result.err
    assert lines[0].startswith("eventlog: warning: the token would be sent over plain http://")
    assert lines[1].startswith("eventlog: error:") and "refused" in lines[1]
    assert RANDOM_TOKEN not in result.err
