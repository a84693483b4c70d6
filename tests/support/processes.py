"""Python programs in interpreters of their own, configured through the environment."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

from tests.support.constants import API_KEY, REPO


def child_env(server_url: str, **extra: str) -> dict[str, str]:
    """This environment, plus the server URL, the key, the repository on ``PYTHONPATH``,
    unbuffered output, and ``extra``."""
    env = dict(os.environ)
    env["EVENTLOG_SERVER_URL"] = server_url
    env["EVENTLOG_API_KEY"] = API_KEY
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])]
    )
    env.pop("PYTHONSTARTUP", None)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def run_python(
    server_url: str, args: list[str], *, timeout: float = 30, **extra: str
) -> subprocess.CompletedProcess[str]:
    """Run ``python <args>`` with ``EVENTLOG_SERVER_URL``/``EVENTLOG_API_KEY`` set."""
    return subprocess.run(
        [sys.executable, *args],
        env=child_env(server_url, **extra),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=str(REPO),
    )


def run_script(
    source: str, server_url: str, tmp_path: Path, *args: str, timeout: float = 30, **extra: str
) -> subprocess.CompletedProcess[str]:
    """Write ``source`` to ``program.py`` in ``tmp_path`` and run it with ``args`` (see
    :func:`run_python`)."""
    script = tmp_path / "program.py"
    script.write_text(source)
    return run_python(server_url, [str(script), *args], timeout=timeout, **extra)


class Program:
    """A Python program in a process of its own, logging through ``setup()``."""

    def __init__(self, source: str, url: str, tmp_path: Path, **env: str) -> None:
        self.path = tmp_path / "program.py"
        self.path.write_text(textwrap.dedent(source))
        self.url = url
        self.env = env
        self.process: subprocess.Popen[str] | None = None

    def start(self) -> Program:
        self.process = subprocess.Popen(
            [sys.executable, str(self.path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=child_env(self.url, **self.env),
            cwd=str(REPO),
        )
        return self


def run_program(
    source: str, url: str, tmp_path: Path, *, timeout: float = 60, **env: str
) -> tuple[int, str, list[str]]:
    """Run a program to its end (killed after ``timeout`` s: a hang fails the test, it does not
    hang the suite): exit status, stderr, stdout lines."""
    process = Program(source, url, tmp_path, **env).start().process
    assert process is not None
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        stdout, stderr = process.communicate()
        raise AssertionError(
            f"the program did not end in {timeout} s: {stdout[-2000:]} {stderr[-2000:]}"
        ) from None
    return process.returncode, stderr, stdout.splitlines()


def marks(lines: list[str]) -> dict[str, Any]:
    """``MARK name {json}`` lines a program printed, by name."""
    found: dict[str, Any] = {}
    for line in lines:
        if line.startswith("MARK "):
            _, name, text = line.split(" ", 2)
            found[name] = json.loads(text)
    return found


def with_lines(command: list[str], env: dict[str, str]) -> tuple[subprocess.Popen[str], Any]:
    """Start ``command``; its stdout lines (without the newline) arrive in the returned queue
    as it prints them (a command that runs until stopped: ``eventlog tail``)."""
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line.rstrip("\n"))

    threading.Thread(target=pump, daemon=True).start()
    return process, lines


def stop_with_ctrl_c(process: subprocess.Popen[str]) -> tuple[int, str]:
    """Stop ``process`` as Ctrl-C does (killed if it does not end within 15 s); its exit
    status and stderr."""
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=15)
    finally:
        if process.poll() is None:
            process.kill()
    stderr = process.stderr.read() if process.stderr else ""
    return process.returncode, stderr


def run_to_end(
    source: str, url: str, *args: str | Path, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """Run a program (``python -c``, with ``args``) that sends to ``url`` to its end; it must
    succeed. Its output is returned."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(source), *map(str, args)],
        env=child_env(url),
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr
    return done
