"""``SIGHUP``: a closed terminal, a dropped ssh or tmux session, systemd's ``SendSIGHUP=yes``.
Python's default ends the program at once, without ``atexit``: everything it had logged in its
last ``flush_interval`` was lost, and nothing said so. Where ``SIGHUP`` still has that default,
the exit flush runs first, and the program ends by ``SIGHUP`` as before; a program that ignores
it (``nohup``) or handles it (a reload) keeps what it has.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time
from collections.abc import Iterator

import pytest

from tests.signals.test_sigterm import (
    API_KEY,
    NEEDS_PID_NAMESPACE,
    ROOT,
    _terminate_process_one,
    start_program,
)
from tests.support.faultserver import Delay, FaultServer

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="needs SIGHUP")

PENDING = sorted(f"pending {i}" for i in range(25))
#: A program in a terminal has SIGHUP's default action; the test run may not (``nohup``, a CI
#: runner), and a child inherits what it ignores.
TERMINAL = "signal.signal(signal.SIGHUP, signal.SIG_DFL)\n"


#: What the program does once ready: wait for the signals (a minute at most).
LOOP = "for _ in range(1200):\n    time.sleep(0.05)"


@contextlib.contextmanager
def _ready(
    server: FaultServer, flag: bool | None = None, before: str = TERMINAL
) -> Iterator[subprocess.Popen[str]]:
    """The program (``flush_on_sigterm=flag``, ``before`` ahead of its ``setup()``), once it
    has logged; killed after the block if it still runs."""
    process = start_program(server, flag, before, LOOP)
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "ready"
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(20)


def _hang_up(server: FaultServer, flag: bool | None) -> int:
    """The program, sent SIGHUP once ready; its exit status."""
    with _ready(server, flag) as process:
        process.send_signal(signal.SIGHUP)
        return process.wait(20)


def test_sighup_flushes_then_ends_the_program_by_sighup(server: FaultServer) -> None:
    assert _hang_up(server, None) == -signal.SIGHUP
    assert sorted(e["message"] for e in server.accepted) == PENDING


def test_flush_on_sigterm_false_leaves_sighup_as_it_was(server: FaultServer) -> None:
    assert _hang_up(server, False) == -signal.SIGHUP
    assert server.accepted == []


def test_an_ignored_sighup_stays_ignored(server: FaultServer) -> None:
    """Under ``nohup`` the program outlives the hang-up, as without the package."""
    with _ready(server, before="signal.signal(signal.SIGHUP, signal.SIG_IGN)") as process:
        process.send_signal(signal.SIGHUP)
        time.sleep(1.0)
        assert process.poll() is None  # still running
        assert server.accepted == []  # and nothing was flushed for it
        process.send_signal(signal.SIGTERM)
        assert process.wait(20) == -signal.SIGTERM
    assert sorted(e["message"] for e in server.accepted) == PENDING


def test_a_programs_own_sighup_handler_is_kept(server: FaultServer) -> None:
    """A reload on SIGHUP (a daemon's convention) stays the program's."""
    before = TERMINAL + (
        "def reload(signum, frame):\n"
        "    os.write(1, b'reloaded\\n')\n"
        "signal.signal(signal.SIGHUP, reload)\n"
    )
    with _ready(server, before=before) as process:
        assert process.stdout is not None
        process.send_signal(signal.SIGHUP)
        assert process.stdout.readline().strip() == "reloaded"
        assert process.poll() is None
        process.send_signal(signal.SIGTERM)
        assert process.wait(20) == -signal.SIGTERM


def test_detach_puts_sighups_default_back() -> None:
    import eventlog_handler
    from eventlog_handler.delivery import _engine as transport

    previous = signal.getsignal(signal.SIGHUP)
    try:
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        handle = eventlog_handler.setup(
            api_key="k" * 40, server_url="http://127.0.0.1:9", capture_exceptions=False
        )
        assert callable(signal.getsignal(signal.SIGHUP))
        handle.detach()
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGHUP, previous)
        transport._forget_engines_for_tests()


def test_a_program_with_its_own_sigterm_handler_still_gets_the_sighup_flush(
    server: FaultServer,
) -> None:
    """The SIGHUP flush came only with the SIGTERM one, which a program's own SIGTERM
    handler keeps out."""
    before = TERMINAL + "signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(3))\n"
    with _ready(server, before=before) as process:
        process.send_signal(signal.SIGHUP)
        assert process.wait(20) == -signal.SIGHUP
    assert sorted(e["message"] for e in server.accepted) == PENDING


def test_a_sighup_during_the_sigterm_flush_changes_nothing(server: FaultServer) -> None:
    """systemd with ``SendSIGHUP=yes`` sends SIGHUP right after SIGTERM: the second signal
    started a flush of its own (with a deadline of its own) and the process ended by SIGHUP."""
    server.default = Delay(1.5, 202)  # the SIGTERM flush takes a while
    with _ready(server) as process:
        process.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        process.send_signal(signal.SIGHUP)
        assert process.wait(20) == -signal.SIGTERM
    assert sorted(e["message"] for e in server.accepted) == PENDING


PROCESS_ONE = """
import logging, os, signal, sys, time
sys.path.insert(0, {root!r})
signal.signal(signal.SIGHUP, signal.SIG_DFL)
import eventlog_handler
handle = eventlog_handler.setup(api_key={key!r}, server_url={url!r}, flush_interval=60)
log = logging.getLogger("init")
for i in range(5):
    log.warning("before %d", i)
print("ready", os.getpid(), flush=True)
time.sleep(4)  # SIGHUP arrives here, and its default is ignored: this is process 1
for i in range(5):
    log.warning("after %d", i)
print("done", handle.flush(10), flush=True)
"""


@NEEDS_PID_NAMESPACE
def test_process_one_runs_on_after_sighup_and_so_does_delivery(server: FaultServer) -> None:
    """The kernel ignores SIGHUP's default action for process 1 (a container without an init):
    the flush had finished the engine, and what the program logged afterwards was never sent,
    with ``flush()`` saying all was well. stderr says, as after ``SIGTERM``, that the signal
    did not end it and what its flush did (it said nothing)."""
    code = PROCESS_ONE.format(root=str(ROOT), key=API_KEY, url=server.url)
    returncode, stdout, stderr = _terminate_process_one(code, signal.SIGHUP)
    assert returncode == 0, stderr
    assert stdout.strip() == "done True", (stdout, stderr)
    assert stderr.count("SIGHUP did not end this process: it is process 1") == 1, stderr
    assert "The events it logged so far were sent, and sending goes on." in stderr, stderr
    messages = sorted(e["message"] for e in server.accepted)
    assert messages == sorted(
        [*(f"before {i}" for i in range(5)), *(f"after {i}" for i in range(5))]
    )


def test_a_child_forked_during_the_sighup_flush_is_ended_by_sighup(server: FaultServer) -> None:
    """A child forked while the parent's SIGHUP flush runs (a pool replacing a worker) took the
    flush's "under way" mark with it, and ignored every SIGHUP from then on."""
    server.default = "hang"  # the parent's flush takes its whole shutdown_timeout
    # Started before "ready", after which SIGHUP comes: the fork lands in the flush.
    forker = """
import threading
def forker():
    time.sleep(0.6)
    pid = os.fork()
    if pid == 0:
        os.kill(os.getpid(), signal.SIGHUP)
        time.sleep(3)
        os._exit(7)  # still here: SIGHUP did not end it
    _, status = os.waitpid(pid, 0)
    ended = os.WTERMSIG(status) if os.WIFSIGNALED(status) else -os.WEXITSTATUS(status)
    os.write(1, f"child ended by {ended}\\n".encode())
threading.Thread(target=forker, daemon=True).start()
"""
    with _ready(server, before=TERMINAL + forker) as process:
        assert process.stdout is not None
        process.send_signal(signal.SIGHUP)
        assert process.wait(20) == -signal.SIGHUP
        stdout = process.stdout.read()
    assert f"child ended by {signal.SIGHUP.value}" in stdout, stdout
