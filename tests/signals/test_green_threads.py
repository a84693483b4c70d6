"""A program whose threads gevent's monkey-patching made greenlets of its main thread (as
``gunicorn -k gevent`` and ``celery -P gevent`` run it): ``setup()`` returns, its signals stay
the program's (``SIGTERM``, Ctrl-C, the ``SIGCHLD`` a ``subprocess.run`` waits for), and
``SIGTERM`` still sends what was logged before it. The same programs run without the package
give the exit status that is expected of them."""

from __future__ import annotations

import queue
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from tests.support.faultserver import FaultServer
from tests.support.processes import child_env, run_program, with_lines

PROGRAM = """
from gevent import monkey

monkey.patch_all()
import logging, subprocess, sys, time

if {package!r}:
    import eventlog_handler

    eventlog_handler.setup(flush_interval=60)
log = logging.getLogger("green")
log.warning("started")
started = time.monotonic()
subprocess.run(["true"], timeout=10)
print("subprocess", round(time.monotonic() - started, 2), flush=True)
print("ready", flush=True)
index = 0
while True:
    log.warning("tick %d", index)
    index += 1
    time.sleep(0.02)
"""


def run_until(server: FaultServer, signum: int, package: bool) -> tuple[int, float, str, str]:
    """The program, stopped by ``signum`` half a second after it is ready: its exit status,
    the seconds it took to end, its stdout and stderr."""
    command = [sys.executable, "-c", textwrap.dedent(PROGRAM.format(package=package))]
    process, lines = with_lines(command, child_env(server.url))
    try:
        printed = [lines.get(timeout=30), lines.get(timeout=30)]  # a hang fails here
        assert printed[1] == "ready", printed
        time.sleep(0.5)
        process.send_signal(signum)
        sent = time.monotonic()
        process.wait(timeout=20)
        took = time.monotonic() - sent
        assert process.stderr is not None
        return process.returncode, took, printed[0], process.stderr.read()
    except queue.Empty:
        process.kill()
        raise AssertionError(f"the program did not get ready: {process.communicate()}") from None
    finally:
        process.kill()


def test_sigterm_ends_a_gevent_program_as_without_the_package_and_sends_what_it_logged(
    server: FaultServer,
) -> None:
    expected, _, _, _ = run_until(server, signal.SIGTERM, package=False)
    code, took, stdout, stderr = run_until(server, signal.SIGTERM, package=True)
    assert code == expected == -signal.SIGTERM, stderr[-2000:]
    assert took < 10, stderr[-2000:]
    assert float(stdout.split()[1]) < 5  # subprocess.run came back: SIGCHLD was not blocked
    ticks = [line for line in stderr.splitlines() if line.startswith("tick ")]
    assert len(ticks) >= 5
    messages = {event["message"] for event in server.accepted}
    assert messages >= {"started", *ticks}, f"{len(messages)} arrived; {stderr[-2000:]}"
    assert "could not be sent" not in stderr and "failed" not in stderr, stderr[-2000:]


def test_ctrl_c_ends_a_gevent_program_as_without_the_package(server: FaultServer) -> None:
    expected, _, _, plain_stderr = run_until(server, signal.SIGINT, package=False)
    code, took, _, stderr = run_until(server, signal.SIGINT, package=True)
    assert code == expected, (plain_stderr[-1000:], stderr[-2000:])
    assert "KeyboardInterrupt" in stderr
    assert took < 10


GREENLET_FAILS = """
from gevent import monkey

monkey.patch_all()
import gevent
import eventlog_handler

eventlog_handler.setup()


def lookup():
    return {}["missing"]


gevent.spawn(lookup).join()
print("done", flush=True)
"""


def test_an_exception_a_greenlet_raises_is_reported_and_gevent_still_prints_it(
    server: FaultServer, tmp_path: Path
) -> None:
    status, stderr, lines = run_program(GREENLET_FAILS, server.url, tmp_path)
    assert status == 0, stderr
    assert lines == ["done"]
    assert "failed with KeyError" in stderr  # gevent's own report, as without the package
    errors = [e for e in server.accepted if e.get("type") == "error"]
    assert len(errors) == 1, server.accepted
    data = errors[0]["data"]
    assert data["@submission_method"] == "unhandled_greenlet_exception"
    assert "Greenlet" in data["@greenlet"]
    assert errors[0]["@simple_error"]["type"] == "KeyError"
    assert "in lookup" in errors[0]["@simple_error"]["stack_trace"]


SIGTERM_ON_THE_WORKER = """
from gevent import monkey

monkey.patch_all()
import logging, os, signal, time

import eventlog_handler

first = [True]


def before_send(event, hint):  # runs in the delivery worker's greenlet
    if first[0]:
        first[0] = False
        os.kill(os.getpid(), signal.SIGTERM)  # lands while this greenlet runs
        started = time.monotonic()
        while time.monotonic() - started < 0.3:  # a long computation, no switch
            pass
    return event


eventlog_handler.setup(before_send=before_send)
log = logging.getLogger("green")
for index in range(50):
    log.warning("line %d", index)
log.error("an error")  # sent within error_delay: the worker runs the hook
while True:
    time.sleep(0.05)
"""


def test_a_sigterm_that_lands_on_the_delivery_greenlet_still_sends_what_was_logged(
    server: FaultServer,
) -> None:
    """A signal handler runs in whichever greenlet is running. On the delivery worker's, the
    exit flush could not wait for the worker (itself): all 51 events were dropped at once."""
    command = [sys.executable, "-c", textwrap.dedent(SIGTERM_ON_THE_WORKER)]
    completed = subprocess.run(
        command, env=child_env(server.url), capture_output=True, text=True, timeout=60
    )
    assert completed.returncode == -signal.SIGTERM, completed.stderr
    assert "could not be sent" not in completed.stderr, completed.stderr
    assert len(server.accepted) == 51, (len(server.accepted), completed.stderr)
