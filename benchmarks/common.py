"""Helpers shared by the runner and the cases: the sink process, ports, memory, the machine."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import platform
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
HOST = "127.0.0.1"


class SinkProcess:
    """``sink.py`` in a process of its own; it stops when this object closes its stdin."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "sink.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("READY "):
            self.close()
            raise RuntimeError(f"the sink did not start: {line!r}")
        ports = json.loads(line[len("READY ") :])
        self.http_port: int = ports["http"]
        self.tcp_port: int = ports["tcp"]
        self.hung_port: int = ports["hung"]
        self.http_url = f"http://{HOST}:{self.http_port}"
        self._conn: http.client.HTTPConnection | None = None

    def counts(self) -> dict[str, int]:
        for _ in range(3):
            try:
                if self._conn is None:
                    self._conn = http.client.HTTPConnection(HOST, self.http_port, timeout=5)
                self._conn.request("GET", "/_counts")
                response = self._conn.getresponse()
                result: dict[str, int] = json.loads(response.read())
                return result
            except (OSError, http.client.HTTPException):
                if self._conn is not None:
                    self._conn.close()
                self._conn = None
        raise RuntimeError("the sink does not answer")

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def __enter__(self) -> SinkProcess:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def closed_port() -> int:
    """A loopback port nobody listens on (connections to it are refused)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
    return port


def rss_bytes() -> int:
    """The resident set size of this process."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import psutil  # not Linux: psutil, if it is installed

    return int(psutil.Process().memory_info().rss)


def machine() -> str:
    """CPU model, cores, Python and OS, on one line."""
    model = platform.processor() or platform.machine()
    try:
        text = Path("/proc/cpuinfo").read_text()
        found = re.search(r"^model name\s*:\s*(.+)$", text, re.MULTILINE)
        if found:
            model = found.group(1).strip()
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (
        f"{model}, {cores} cores; {platform.python_implementation()} "
        f"{platform.python_version()}; {platform.system()} {platform.release()}"
    )


def wait_for(predicate: Any, timeout: float, interval: float = 0.005) -> bool:
    """Poll ``predicate()`` until it is true or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)
