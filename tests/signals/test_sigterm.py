"""The opt-in flush on SIGTERM: events sent, previous handler chained, exit status kept."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.constants import TRANSPORT_API_KEY as API_KEY
from tests.support.faultserver import FaultServer

ROOT = Path(__file__).resolve().parents[2]

PROGRAM = """
import logging, os, signal, sys, time
sys.path.insert(0, {root!r})
import eventlog_handler
{before}
eventlog_handler.setup(api_key={key!r}, server_url={url!r}, flush_interval=60,
                       flush_on_sigterm={flag!r}, capture_exceptions=False)
for i in range(25):
    logging.getLogger("svc").info("pending %d", i)
print("ready", flush=True)
time.sleep(60)
"""


def run_until_sigterm(server: FaultServer, flag: bool, before: str = "") -> subprocess.Popen[str]:
    code = PROGRAM.format(root=str(ROOT), key=API_KEY, url=server.url, flag=flag, before=before)
    process = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "ready"
    process.send_signal(signal.SIGTERM)
    process.wait(20)
    return process


@pytest.mark.skipif(not hasattr(signal, "SIGTERM"), reason="needs SIGTERM")
def test_sigterm_flushes_then_dies_by_the_signal(server: FaultServer) -> None:
    process = run_until_sigterm(server, flag=True)
    assert process.returncode == -signal.SIGTERM
    assert sorted(e["message"] for e in server.accepted) == sorted(
        f"pending {i}" for i in range(25)
    )


def test_without_the_option_sigterm_loses_pending_events(server: FaultServer) -> None:
    # The reason the option exists: Python's default SIGTERM skips atexit.
    process = run_until_sigterm(server, flag=False)
    assert process.returncode == -signal.SIGTERM
    assert server.accepted == []


def test_previous_python_handler_is_chained(server: FaultServer) -> None:
    before = (
        # os.write, not print: the signal may land while the main thread is still inside
        # print("ready"), and a print here would then fail as a reentrant call.
        "def previous(signum, frame):\n"
        "    os.write(1, b'previous handler ran\\n')\n"
        "    sys.exit(3)\n"
        "signal.signal(signal.SIGTERM, previous)\n"
    )
    process = run_until_sigterm(server, flag=True, before=before)
    assert process.stdout is not None
    assert "previous handler ran" in process.stdout.read()
    assert process.returncode == 3
    assert len(server.accepted) == 25


def test_close_puts_the_previous_handler_back() -> None:
    import eventlog_handler
    from eventlog_handler.delivery import _engine as transport

    previous = signal.getsignal(signal.SIGTERM)
    try:
        handle = eventlog_handler.setup(
            api_key=API_KEY,
            server_url="http://127.0.0.1:9",
            flush_on_sigterm=True,
            capture_exceptions=False,
        )
        assert handle.sigterm and signal.getsignal(signal.SIGTERM) is not previous
        handle.detach()
        assert signal.getsignal(signal.SIGTERM) is previous
    finally:
        signal.signal(signal.SIGTERM, previous)
        transport._forget_engines_for_tests()
