"""Fixtures of the delivery tests: a fault-injecting loopback server and programs in their own
interpreter, observed the way a user observes them (what arrives, when, and what stderr says)."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integrations.conftest import REPO, child_env
from tests.transport.faultserver import FaultServer

API_KEY = "Ik3vQ8mZ2pLr7VbN4cYw9ZdF1gHj6KeA0uMo5PiR"


@pytest.fixture
def server() -> Iterator[FaultServer]:
    with FaultServer() as fault_server:
        yield fault_server


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


def wait_until(condition: Any, timeout: float, step: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(step)
    return bool(condition())


def accounted(stats: dict[str, Any]) -> int:
    """What the accounting identity adds up: must equal ``captured``."""
    return (
        stats["delivered"]
        + sum(stats["dropped"].values())
        + stats["queued"]
        + stats["in_flight"]
        + stats["spooled"]
    )


@pytest.fixture(autouse=True)
def restore_loggers() -> Iterator[None]:
    """Loggers come out of a test as they went in (new ones: no handlers, propagating)."""
    manager = logging.root.manager
    before = {
        name: (list(logger.handlers), logger.propagate, logger.level)
        for name, logger in manager.loggerDict.items()
        if isinstance(logger, logging.Logger)
    }
    yield
    for name, logger in list(manager.loggerDict.items()):
        if not isinstance(logger, logging.Logger):
            continue
        handlers, propagate, level = before.get(name, ([], True, logging.NOTSET))
        logger.handlers[:] = handlers
        logger.propagate = propagate
        logger.setLevel(level)
