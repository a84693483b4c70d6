"""``python -m eventlog_handler.collector`` / ``eventlog serve`` in a subprocess."""

from __future__ import annotations

import argparse
import os
import queue
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from eventlog_handler.collector._cli import DEFAULT_DB, DEFAULT_PORT, add_serve_arguments

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT = 20


def _spawn(*args: str) -> subprocess.Popen[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return subprocess.Popen(
        [sys.executable, "-m", "eventlog_handler.collector", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _read_banner(process: subprocess.Popen[str]) -> str:
    """The output up to "Press Ctrl-C", read without risking a hang."""
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    banner: list[str] = []
    while True:
        line = lines.get(timeout=START_TIMEOUT)
        assert line is not None, "".join(banner) + (process.stderr.read() if process.stderr else "")
        banner.append(line)
        if line.startswith("Press Ctrl-C"):
            return "".join(banner)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    process = _spawn("--port", "0", "--db", str(tmp_path / "cli.sqlite3"), "--print-env")
    try:
        yield process, _read_banner(process)
    finally:
        close(process)


def close(process: subprocess.Popen[str]) -> None:
    """Kill ``process`` if it still runs, wait for it, close its pipes."""
    if process.poll() is None:
        process.kill()
    process.wait(timeout=10)
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            stream.close()


def _value(banner: str, pattern: str) -> str:
    match = re.search(pattern, banner, flags=re.MULTILINE)
    assert match is not None, (pattern, banner)
    return match.group(1)


@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM])
def test_serve_prints_tokens_serves_and_stops_cleanly(
    served: tuple[subprocess.Popen[str], str], stop_signal: signal.Signals
) -> None:
    process, banner = served
    url = _value(banner, r"serving at (http://127\.0\.0\.1:\d+)$")
    assert not url.endswith(":0")
    project_id = _value(banner, r"project id:\s+([0-9a-f]{24})$")
    project_token = _value(banner, r"project token:\s+([A-Za-z0-9]{40})\b")
    user_token = _value(banner, r"user token:\s+([A-Za-z0-9]{40})\b")
    assert f"export EVENTLOG_SERVER_URL={url}\n" in banner
    assert f"export EVENTLOG_API_KEY={project_token}\n" in banner
    assert f"export EVENTLOG_USER_TOKEN={user_token}\n" in banner
    password = _value(banner, r"login:\s+admin@localhost / (\S+)")
    assert f"# login: admin@localhost {password}\n" in banner

    session = requests.Session()
    session.trust_env = False
    response = session.post(
        url + "/api/v2/events",
        json={"message": "from the cli test"},
        headers={"Authorization": f"Bearer {project_token}"},
        timeout=10,
    )
    assert response.status_code == 202
    projects = session.get(
        url + "/api/v2/projects", headers={"Authorization": f"Bearer {user_token}"}, timeout=10
    )
    assert [p["id"] for p in projects.json()] == [project_id]
    login = session.post(
        url + "/api/v2/auth/login",
        json={"email": "admin@localhost", "password": password},
        timeout=10,
    )
    assert login.status_code == 200
    session.close()

    process.send_signal(stop_signal)
    assert process.wait(timeout=10) == 0
    assert process.stderr is not None
    assert "Traceback" not in process.stderr.read()


def test_serve_refuses_a_non_loopback_host(tmp_path: Path) -> None:
    process = _spawn("--host", "0.0.0.0", "--port", "0", "--db", ":memory:")
    out, err = process.communicate(timeout=20)
    assert process.returncode == 2
    assert "--allow-remote" in err
    assert out == ""
    assert not (tmp_path / DEFAULT_DB).exists()


def test_serve_on_a_file_that_is_not_a_database_says_so_in_one_line(tmp_path: Path) -> None:
    """``--db`` naming a log file by mistake: a traceback (``sqlite3.DatabaseError``) where
    every other failure of ``serve`` is one line; the file is left as it was."""
    mistaken = tmp_path / "app.log"
    mistaken.write_text("12:00:01 INFO started\n")
    process = _spawn("--port", "0", "--db", str(mistaken))
    _, err = process.communicate(timeout=20)
    assert process.returncode == 1, err
    assert "Traceback" not in err, err
    said = f"eventlog serve: cannot use {mistaken} as the collector's database"
    assert err.strip() == f"{said}: file is not a database", err
    assert mistaken.read_text() == "12:00:01 INFO started\n"


def test_serve_arguments_and_defaults() -> None:
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    args = parser.parse_args([])
    assert (args.host, args.port, args.db, args.throttle) == (
        "127.0.0.1",
        DEFAULT_PORT,
        DEFAULT_DB,
        None,
    )
    assert not args.print_env
    assert not args.allow_remote
    assert (args.max_connections, args.header_timeout, args.host_name) == (64, 10.0, [])
    args = parser.parse_args(["--port", "0", "--throttle", "10", "--print-env", "--db", "x.db"])
    assert (args.port, args.throttle, args.print_env, args.db) == (0, 10, True, "x.db")
    args = parser.parse_args(["--max-connections", "5", "--host-name", "box", "--host-name", "b2"])
    assert (args.max_connections, args.host_name) == (5, ["box", "b2"])


def test_demo_shows_the_stacks_and_how_to_reopen_its_dashboard(tmp_path: Path) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["TMPDIR"] = str(tmp_path)
    env.pop("EVENTLOG_API_KEY", None)
    env.pop("EVENTLOG_SERVER_URL", None)
    done = subprocess.run(
        [sys.executable, "-c", "from eventlog_handler.cli import main; raise SystemExit(main())",
         "demo"],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    # 6: the log.error without an exception is a stack of its own (grouped by its call site)
    assert "grouped them into 6 stacks" in out
    # An error's stack is titled by its type and the application function it came from.
    assert re.search(
        r"^3\s+3\s+error\s+open\s+KeyError in eventlog_handler\.cli\._demo\._reserve$",
        out,
        re.MULTILINE,
    ), out
    assert "The 10 event(s) it received" in out
    command = _value(out, r"^\s+(eventlog serve --db \S+ --port 5000)$")
    database = Path(command.split("--db ")[1].split(" --port")[0])
    assert database.exists() and database.parent.parent == tmp_path
    reopened = _spawn("--db", str(database), "--port", "0")
    try:
        banner = _read_banner(reopened)
        url = _value(banner, r"serving at (http://127\.0\.0\.1:\d+)$")
        token = _value(banner, r"user token:\s+([A-Za-z0-9]{40})\b")
        session = requests.Session()
        session.trust_env = False
        listed = session.get(
            url + "/api/v2/events", headers={"Authorization": f"Bearer {token}"}, timeout=10
        )
        assert listed.headers["X-Result-Count"] == "10"
        assert (
            "KeyError in eventlog_handler.cli._demo._reserve"
            in session.get(url + "/", timeout=10).text
        )
        session.close()
    finally:
        reopened.kill()
        reopened.wait(timeout=10)
        for stream in (reopened.stdout, reopened.stderr):
            if stream is not None:
                stream.close()
