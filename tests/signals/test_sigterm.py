"""The opt-in flush on SIGTERM: events sent, previous handler chained, exit status kept."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.support.constants import TRANSPORT_API_KEY as API_KEY
from tests.support.faultserver import Delay, FaultServer
from tests.support.waits import wait_until

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
{wait}
"""


def start_program(
    server: FaultServer,
    flag: bool | None,
    before: str = "",
    wait: str = "time.sleep(60)",
    program: str = PROGRAM,
) -> subprocess.Popen[str]:
    """PROGRAM in a subprocess: ``before`` runs ahead of setup(), ``wait`` after "ready"."""
    code = program.format(
        root=str(ROOT), key=API_KEY, url=server.url, flag=flag, before=before, wait=wait
    )
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run_to_end(
    server: FaultServer,
    before: str = "",
    wait: str = "",
    timeout: float = 20.0,
    program: str = PROGRAM,
) -> tuple[int, str, str]:
    """PROGRAM with the default options, to its end: its exit status, stdout and stderr."""
    process = start_program(server, None, before, wait, program)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    finally:
        process.kill()
    return process.returncode, stdout, stderr


def sigterm_to_a_child(child: str) -> str:
    """A ``wait`` for PROGRAM: fork a child that runs ``child`` (with ``log``, a logger) and then
    waits; the parent ends it with SIGTERM, as a process manager would, and prints how it
    ended ("child ended by <signal>")."""
    body = textwrap.indent(textwrap.dedent(child).strip(), "    ")
    return (
        "r, w = os.pipe()\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        '    log = logging.getLogger("svc")\n'
        f"{body}\n"
        '    os.write(w, b"x")\n'
        "    time.sleep(60)\n"
        "    os._exit(0)\n"
        "os.read(r, 1)\n"
        "os.kill(pid, signal.SIGTERM)\n"
        "_, status = os.waitpid(pid, 0)\n"
        'print("child ended by", os.WTERMSIG(status) if os.WIFSIGNALED(status) else None)\n'
    )


#: A thread that takes SIGTERM itself half a second after it starts (``take_it``), while the
#: main thread is inside a blocking C call.
TAKE_IT = (
    "import threading\n"
    "def take_it():\n"
    "    time.sleep(0.5)\n"
    "    signal.pthread_kill(threading.get_ident(), signal.SIGTERM)\n"
    "    time.sleep(60)\n"
)


def run_until_sigterm(
    server: FaultServer, flag: bool, before: str = "", wait: str = "time.sleep(60)"
) -> subprocess.Popen[str]:
    process = start_program(server, flag, before, wait)
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


@pytest.mark.skipif(not hasattr(signal, "SIGTERM"), reason="needs SIGTERM")
def test_a_slow_settings_answer_holds_back_nothing_at_sigterm(server: FaultServer) -> None:
    """The worker fetched the service's settings before its first batch, and waited up to 3 s
    for them: a SIGTERM in that time lost every event (the exit flush's 2 s ran out)."""
    server.config = Delay(10.0, then={"version": 1, "settings": {}})
    process = run_until_sigterm(server, flag=True)
    assert process.returncode == -signal.SIGTERM
    assert sorted(e["message"] for e in server.accepted) == sorted(
        f"pending {i}" for i in range(25)
    )
    assert server.config_requests  # the fetch was asked for


def test_a_slow_settings_answer_delays_an_error_a_second_at_most(server: FaultServer) -> None:
    server.config = Delay(10.0, then={"version": 1, "settings": {}})
    wait = (
        "logged = time.time()\n"
        'logging.getLogger("svc").error("failed")\n'
        "print(logged, flush=True)\n"
        "time.sleep(60)\n"
    )
    process = start_program(server, True, wait=wait)
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "ready"
        logged = float(process.stdout.readline())
        assert wait_until(lambda: "failed" in server.arrivals(), 10)
    finally:
        process.kill()
        process.communicate()
    # At most FIRST_SETTINGS_WAIT (1 s) plus the machine's delays; the fetch waited 3 s or more.
    assert server.arrivals()["failed"] - logged < 2.8


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
    # The program's own handler runs like any Python handler: between two bytecodes of the main
    # thread. A SIGTERM that lands just before time.sleep(60) enters C would wait out the sleep,
    # with or without this package, so this program sleeps in short steps.
    wait = "for _ in range(1200):\n    time.sleep(0.05)"
    process = run_until_sigterm(server, flag=True, before=before, wait=wait)
    assert process.stdout is not None
    assert "previous handler ran" in process.stdout.read()
    assert process.returncode == 3
    assert len(server.accepted) == 25


def wakeup_fd(set_wakeup_fd: Any) -> int:
    """The signal wakeup descriptor now set (read by setting it, then put back)."""
    fd: int = set_wakeup_fd(-1)
    if fd != -1:
        set_wakeup_fd(fd)
    return fd


def test_close_puts_the_previous_handler_back() -> None:
    import eventlog_handler
    from eventlog_handler.delivery import _engine as transport
    from eventlog_handler.delivery import _sigterm

    previous = signal.getsignal(signal.SIGTERM)
    try:
        handle = eventlog_handler.setup(
            api_key=API_KEY,
            server_url="http://127.0.0.1:9",
            flush_on_sigterm=True,
            capture_exceptions=False,
        )
        assert handle.sigterm and signal.getsignal(signal.SIGTERM) is not previous
        # The flush watches the signal wakeup descriptor, out of sight of a library that sets
        # its own (trio warns when it finds one set), and takes it back when that one is gone.
        watched = wakeup_fd(_sigterm._original_set_wakeup_fd)
        assert watched != -1
        reader, writer = os.pipe()
        os.set_blocking(writer, False)
        assert signal.set_wakeup_fd(writer) == -1
        assert signal.set_wakeup_fd(watched) == writer  # as a library puts back what it found
        os.close(reader)
        os.close(writer)
        handle.detach()
        assert signal.getsignal(signal.SIGTERM) is previous
        # Removed, the flush gives the descriptor back too.
        assert wakeup_fd(_sigterm._original_set_wakeup_fd) == -1
    finally:
        signal.signal(signal.SIGTERM, previous)
        transport._forget_engines_for_tests()


@pytest.mark.skipif(not hasattr(signal, "pthread_kill"), reason="needs pthread_kill")
def test_sigterm_caught_while_the_main_thread_is_blocked_in_c_still_flushes_and_ends(
    server: FaultServer,
) -> None:
    # The kernel may hand SIGTERM to any thread, and a SIGTERM that lands just before the main
    # thread enters a blocking C call does not interrupt it: either way the Python handler waits
    # for the main thread. Python's default would have ended the process at once; with the
    # flush installed in its place the process must still end, not sleep out its 60 seconds.
    # Here a thread takes the signal itself while the main thread is inside time.sleep(60).
    wait = "threading.Thread(target=take_it, daemon=True).start()\ntime.sleep(60)"
    returncode, _, _ = run_to_end(server, TAKE_IT, wait)
    assert returncode == -signal.SIGTERM
    assert sorted(e["message"] for e in server.accepted) == sorted(
        f"pending {i}" for i in range(25)
    )


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_ended_by_sigterm_leaves_its_parent_running(server: FaultServer) -> None:
    # The flush of the parent watches the signal wakeup descriptor; a forked child inherits
    # the descriptor, and a SIGTERM caught there must not be taken for the parent's own.
    wait = textwrap.dedent(
        """
        pid = os.fork()
        if pid == 0:
            logging.getLogger("svc").info("child logged")
            time.sleep(60)
            os._exit(0)
        time.sleep(0.5)
        os.kill(pid, signal.SIGTERM)
        _, status = os.waitpid(pid, 0)
        time.sleep(1.0)
        print("child ended by", os.waitstatus_to_exitcode(status), flush=True)
        logging.getLogger("svc").info("parent still running")
        """
    )
    returncode, stdout, stderr = run_to_end(server, wait=wait)
    assert returncode == 0, stderr
    assert f"child ended by {-signal.SIGTERM}" in stdout
    messages = [e["message"] for e in server.accepted]
    assert "parent still running" in messages
    assert "child logged" in messages
    assert sorted(m for m in messages if m.startswith("pending")) == sorted(
        f"pending {i}" for i in range(25)
    )


@pytest.mark.skipif(not hasattr(signal, "pthread_kill"), reason="needs pthread_kill")
def test_the_watch_goes_on_after_an_event_loop_used_the_wakeup_descriptor(
    server: FaultServer,
) -> None:
    # asyncio takes the wakeup descriptor for its signal handlers and sets it to -1 when the
    # loop closes; the flush's watcher must be watching again afterwards.
    wait = textwrap.dedent(
        """
        loop = asyncio.new_event_loop()
        loop.add_signal_handler(signal.SIGUSR1, lambda: None)
        loop.close()
        threading.Thread(target=take_it, daemon=True).start()
        time.sleep(60)
        """
    )
    returncode, _, _ = run_to_end(server, "import asyncio\n" + TAKE_IT, wait)
    assert returncode == -signal.SIGTERM
    assert len(server.accepted) == 25


@pytest.mark.skipif(not hasattr(signal, "sigwait"), reason="needs sigwait")
def test_a_program_that_sigwaits_for_sigterm_gets_it(server: FaultServer) -> None:
    # A program may block SIGTERM and take it with sigwait. The package's threads (the worker,
    # the watcher) started before the program blocked it: they must not take it instead.
    wait = textwrap.dedent(
        """
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        import threading
        threading.Thread(
            target=lambda: (time.sleep(0.3), os.kill(os.getpid(), signal.SIGTERM)), daemon=True
        ).start()
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            pass  # busy with other work when SIGTERM comes
        print("sigwait got", int(signal.sigwait({signal.SIGTERM})), flush=True)
        logging.getLogger("svc").warning("stopping")
        """
    )
    returncode, stdout, stderr = run_to_end(server, wait=wait)
    assert returncode == 0, stderr
    assert f"sigwait got {signal.SIGTERM.value}" in stdout
    assert sorted(e["message"] for e in server.accepted) == sorted(
        [*(f"pending {i}" for i in range(25)), "stopping"]
    )


def _can_make_pid_namespaces() -> bool:
    unshare = shutil.which("unshare")
    if unshare is None:
        return False
    done = subprocess.run(
        [unshare, "--pid", "--fork", "--mount-proc", "true"], capture_output=True, timeout=30
    )
    return done.returncode == 0


NEEDS_PID_NAMESPACE = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not _can_make_pid_namespaces(),
    reason="needs unshare(1) and the right to make a PID namespace (root)",
)


def _terminate_process_one(code: str, signum: int = signal.SIGTERM) -> tuple[int, str, str]:
    """Run ``code`` as process 1 of a new PID namespace; once it prints ``ready 1``, send it
    ``signum`` from outside, as ``docker stop`` does ``SIGTERM``. Its exit status, stdout and
    stderr."""
    process = subprocess.Popen(
        ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().split() == ["ready", "1"]
        (child,) = Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()
        os.kill(int(child), signum)
        stdout, stderr = process.communicate(timeout=30)
    finally:
        process.kill()
    return process.returncode, stdout, stderr


PROCESS_ONE = """
import logging, os, sys, time
sys.path.insert(0, {root!r})
import eventlog_handler
eventlog_handler.setup(api_key={key!r}, server_url={url!r}, flush_interval=60)
log = logging.getLogger("init")
for i in range(5):
    log.warning("before %d", i)
print("ready", os.getpid(), flush=True)
time.sleep(4)  # SIGTERM arrives here, and is ignored: this is process 1
for i in range(5):
    log.warning("after %d", i)
print("done", flush=True)
"""


@NEEDS_PID_NAMESPACE
def test_process_one_of_a_container_runs_on_after_sigterm_and_so_does_delivery(
    server: FaultServer,
) -> None:
    """``docker run`` without ``--init`` makes the program process 1 of its PID namespace,
    for which the kernel ignores ``SIGTERM`` without a handler (``docker stop``). The flush
    sends what was logged, the program runs on as it does without the package, and what it
    logs afterwards is sent too, not dropped as after an exit; stderr says why, once."""
    code = PROCESS_ONE.format(root=str(ROOT), key=API_KEY, url=server.url)
    returncode, stdout, stderr = _terminate_process_one(code)
    assert returncode == 0, stderr
    assert stdout.strip() == "done"
    messages = sorted(e["message"] for e in server.accepted)
    assert messages == sorted(
        [*(f"before {i}" for i in range(5)), *(f"after {i}" for i in range(5))]
    )
    assert stderr.count("SIGTERM did not end this process") == 1, stderr
    assert "docker run --init" in stderr


PROCESS_ONE_HANGING = """
import json, logging, os, sys, time
sys.path.insert(0, {root!r})
import eventlog_handler
handle = eventlog_handler.setup(api_key={key!r}, server_url={url!r}, flush_interval=0.05,
                                timeout=3.0, retry_initial=0.2, shutdown_timeout=1.0)
log = logging.getLogger("init")
for i in range(50):
    log.warning("before %d", i)
time.sleep(0.5)  # their request is on the wire, and the service does not answer it
print("ready", os.getpid(), flush=True)
time.sleep(2)  # SIGTERM arrives here, and is ignored: this is process 1
end = time.monotonic() + 20
while handle.stats()["delivered"] < 50 and time.monotonic() < end:
    time.sleep(0.05)
print("done", json.dumps(handle.stats()), flush=True)
"""


@NEEDS_PID_NAMESPACE
def test_process_one_says_what_its_sigterm_flush_did_with_a_service_that_hangs(
    server: FaultServer,
) -> None:
    """Process 1 gets ``SIGTERM`` while its request hangs (the service answers it only after
    the client's timeout, the retry). stderr said that 50 events were on their way "at the
    exit deadline", of an exit that did not come, and then that the events "were sent", which
    they were not; and they never were: the flush had ended delivery as an exit does. Now it
    says that they could not be sent within the flush's time and are kept, and they arrive."""
    server.script.append("hang")
    code = PROCESS_ONE_HANGING.format(root=str(ROOT), key=API_KEY, url=server.url)
    returncode, stdout, stderr = _terminate_process_one(code)
    assert returncode == 0, stderr
    done, _, stats = stdout.strip().partition(" ")
    assert done == "done", (stdout, stderr)
    assert stderr.count("SIGTERM did not end this process") == 1, stderr
    assert "exit deadline" not in stderr, stderr
    assert "were sent" not in stderr, stderr
    waited = r"50 event\(s\) it logged could not be sent in the [01]\.\d s it waited"
    assert re.search(waited, stderr), stderr
    assert "they are kept, and sending goes on" in stderr, stderr
    assert sorted(e["message"] for e in server.accepted) == sorted(f"before {i}" for i in range(50))
    counts = json.loads(stats)
    assert counts["delivered"] == 50 and counts["dropped_total"] == 0, counts


PROCESS_ONE_BUILDING = """
import logging, os, sys, time
sys.path.insert(0, {root!r})
import eventlog_handler
from eventlog_handler.delivery import _engine
eventlog_handler.setup(api_key={key!r}, server_url={url!r}, flush_interval=60)
logging.getLogger("init").warning("before")
with _engine._REGISTRY_LOCK:  # as get_engine() holds it while it builds an engine
    print("ready", os.getpid(), flush=True)
    time.sleep(3)  # SIGTERM arrives here
logging.getLogger("init").warning("after")
print("done", flush=True)
"""


@NEEDS_PID_NAMESPACE
def test_process_one_outlives_a_sigterm_that_lands_while_an_engine_is_built(
    server: FaultServer,
) -> None:
    """Process 1 runs on after ``SIGTERM``, and the handler forgets the engines it flushed,
    under the lock that ``get_engine`` holds while it builds one. A signal that landed then
    waited for that lock on the thread that held it: the program hung for ever."""
    code = PROCESS_ONE_BUILDING.format(root=str(ROOT), key=API_KEY, url=server.url)
    returncode, stdout, stderr = _terminate_process_one(code)
    assert returncode == 0, stderr
    assert stdout.strip() == "done"
    assert sorted(e["message"] for e in server.accepted) == ["after", "before"]


POOL_BLOCKS = """
import faulthandler, logging, multiprocessing, sys
sys.path.insert(0, {root!r})
import eventlog_handler
eventlog_handler.setup(api_key={key!r}, server_url={url!r})

if __name__ == "__main__":
    for n in range(300):
        faulthandler.dump_traceback_later(15, exit=True)  # a block that hangs
        with multiprocessing.get_context("fork").Pool(4) as pool:
            pool.map(abs, range(4))
        print("block", n, flush=True)
    faulthandler.cancel_dump_traceback_later()
    logging.getLogger("app").warning("blocks done")
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_pool_blocks_end_their_workers_however_their_sigterm_lands(
    server: FaultServer, tmp_path: Path
) -> None:
    # Pool.__exit__ ends its workers with SIGTERM; a program that set the package up must get
    # through block after block as it does without it. Two faults hung or ended it before:
    # - a forked worker inherited the parent's flush but not its watcher, and a SIGTERM that
    #   landed just before the worker blocked waiting for its next task was caught, its handler
    #   never ran, and the block waited for the worker for ever (the default action would have
    #   ended it at once; a worker that has logged nothing now ends so again);
    # - a worker the pool had just started in place of a finished one, ended before its Python
    #   code ran again, wrote its SIGTERM to the parent's wakeup pipe: the parent's watcher took
    #   it for the parent's own and nudged the parent into its flush and its end.
    script = tmp_path / "pools.py"  # a file: the pool's children look for __main__ there
    script.write_text(POOL_BLOCKS.format(root=str(ROOT), key=API_KEY, url=server.url))
    process = subprocess.Popen(
        [sys.executable, str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a hung worker outlives its parent: ended with the group
    )
    try:
        process.wait(timeout=120)
    except subprocess.TimeoutExpired:
        pass
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # the pipes close: communicate() returns
    stdout, stderr = process.communicate()
    blocks = stdout.count("block ")
    assert process.returncode == 0, (process.returncode, blocks, stderr[-3000:])
    assert blocks == 300
    assert [e["message"] for e in server.accepted] == ["blocks done"]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_has_the_default_until_it_logs_and_nothing_stays_blocked(
    server: FaultServer,
) -> None:
    # The deterministic side of the pool test above: in a child, SIGTERM has its default
    # action (and is not blocked) until the child logs; then the flush is its handler again.
    # The parent's mask is as it was.
    wait = textwrap.dedent(
        """
        def blocked():
            return signal.SIGTERM in signal.pthread_sigmask(signal.SIG_BLOCK, [])
        pid = os.fork()
        if pid == 0:
            default = signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
            print("child before logging:", default, blocked(), flush=True)
            logging.getLogger("svc").info("child logged")
            default = signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
            print("child after logging:", default, blocked(), flush=True)
            os._exit(0)
        os.waitpid(pid, 0)
        print("parent:", signal.getsignal(signal.SIGTERM) is signal.SIG_DFL, blocked(), flush=True)
        """
    )
    returncode, stdout, stderr = run_to_end(server, wait=wait)
    assert returncode == 0, stderr
    assert "child before logging: True False" in stdout
    assert "child after logging: False False" in stdout
    assert "parent: False False" in stdout


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_threads_forking_at_once_leave_no_mask_and_no_child_blocked(server: FaultServer) -> None:
    # SIGTERM is blocked in a forking thread while it forks. The mask it had is the thread's
    # own: when two threads fork at once, each must get its own back, and so must each child.
    # concurrent.futures, imported first, does not serialise the forks around the package's
    # hooks (imported after, its fork lock would).
    wait = textwrap.dedent(
        """
        import threading
        def blocked():
            return signal.SIGTERM in signal.pthread_sigmask(signal.SIG_BLOCK, [])
        born_blocked, left = [], {}
        def forker(name):
            for _ in range(200):
                r, w = os.pipe()
                pid = os.fork()
                if pid == 0:
                    os.write(w, b"1" if blocked() else b"0")
                    os._exit(0)
                os.close(w)
                if os.read(r, 1) == b"1":
                    born_blocked.append(name)
                os.close(r)
                os.waitpid(pid, 0)
            left[name] = blocked()
        threads = [threading.Thread(target=forker, args=(name,)) for name in "AB"]
        for thread in threads:
            thread.start()
        forker("main")
        for thread in threads:
            thread.join()
        print("born blocked:", len(born_blocked), flush=True)
        print("left blocked:", sorted(name for name, mask in left.items() if mask), flush=True)
        """
    )
    first = "from concurrent.futures import ThreadPoolExecutor\nimport eventlog_handler\n"
    program = PROGRAM.replace("import eventlog_handler\n", first, 1)
    returncode, stdout, stderr = run_to_end(server, wait=wait, timeout=60, program=program)
    assert returncode == 0, stderr
    assert "born blocked: 0\n" in stdout, stdout
    assert "left blocked: []\n" in stdout, stdout
    assert len(server.accepted) == 25  # the program's own, once


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_child_that_logs_first_from_a_thread_flushes_once_its_main_thread_logs(
    server: FaultServer,
) -> None:
    # Only the main thread may set a signal handler: a forked child whose first log comes from
    # another thread gets the flush on SIGTERM when its main thread logs.
    wait = sigterm_to_a_child(
        """
        import threading
        thread = threading.Thread(target=log.info, args=("child, from a thread",))
        thread.start()
        thread.join()
        log.info("child, from its main thread")
        """
    )
    returncode, stdout, stderr = run_to_end(server, wait=wait)
    assert returncode == 0, stderr
    assert f"child ended by {int(signal.SIGTERM)}" in stdout, (stdout, stderr)
    messages = [e["message"] for e in server.accepted]
    assert sorted(m for m in messages if m.startswith("child")) == [
        "child, from a thread",
        "child, from its main thread",
    ]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_setup_in_a_child_that_logged_keeps_the_flush_and_its_watcher(server: FaultServer) -> None:
    # A forked child that logs gets the flush from its engine; setup() called in it afterwards
    # (a post_fork hook) must replace it with its own, watcher included: a flush without a
    # watcher would hang the child where SIGTERM reaches it just before it blocks in C.
    wait = sigterm_to_a_child(
        f"""
        from eventlog_handler.delivery import _sigterm
        log.info("child, before its setup()")
        eventlog_handler.setup(api_key={API_KEY!r}, server_url={server.url!r},
                               flush_interval=60, capture_exceptions=False)
        log.info("child, after its setup()")
        flush = getattr(signal.getsignal(signal.SIGTERM), _sigterm.FLUSH_MARK, None)
        print("child flush:", flush is not None, "watcher:", _sigterm._pipe is not None,
              flush=True)
        """
    )
    returncode, stdout, stderr = run_to_end(server, wait=wait)
    assert returncode == 0, stderr
    assert "child flush: True watcher: True" in stdout, (stdout, stderr)
    assert f"child ended by {int(signal.SIGTERM)}" in stdout, (stdout, stderr)
    messages = [e["message"] for e in server.accepted]
    assert sorted(m for m in messages if m.startswith("child")) == [
        "child, after its setup()",
        "child, before its setup()",
    ]


EARLY_SIGTERM = """
import logging, os, signal, sys, time
sys.path.insert(0, {root!r})
# A library's after-fork hook, registered before the package's, that takes a moment: a SIGTERM
# sent to the child meanwhile is held back while the package's own hooks run.
os.register_at_fork(after_in_child=lambda: time.sleep(0.5))
import eventlog_handler

def on_term(signum, frame):
    print("own handler in", "child" if os.getpid() != parent else "parent", flush=True)
    os._exit(0)

parent = os.getpid()
signal.signal(signal.SIGTERM, on_term)
eventlog_handler.setup(api_key={key!r}, server_url={url!r}, flush_interval=60,
                       flush_on_sigterm=True, capture_exceptions=False)
logging.getLogger("app").warning("queued in the parent at the fork")
pid = os.fork()
if pid == 0:
    time.sleep(5)
    os._exit(3)
os.kill(pid, signal.SIGTERM)
_, status = os.waitpid(pid, 0)
print("child exit status", os.WEXITSTATUS(status), flush=True)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_sigterm_held_back_at_the_fork_finds_the_child_on_its_own(server: FaultServer) -> None:
    # The SIGTERM acts once the package's after-fork hooks are all done: the flush it runs is
    # the child's (nothing queued), not the parent's state copied into the child, whose worker
    # the child does not have.
    code = EARLY_SIGTERM.format(root=str(ROOT), key=API_KEY, url=server.url)
    process = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30
    )
    assert process.returncode == 0, process.stderr
    assert "own handler in child" in process.stdout, process.stdout
    assert "child exit status 0" in process.stdout, process.stdout
    assert "could not be sent" not in process.stderr, process.stderr
    assert [e["message"] for e in server.accepted] == ["queued in the parent at the fork"]


NESTED_FORK = """
import os, signal, sys
sys.path.insert(0, {root!r})
forked_in_hook = []


def start_helper():
    # A library that starts a helper process from each forked child, in its after-fork hook
    # (registered before the package's, so it runs while SIGTERM is still blocked).
    if not forked_in_hook:
        forked_in_hook.append(True)
        pid = os.fork()
        if pid == 0:
            forked_in_hook.append("helper")
            return
        os.waitpid(pid, 0)


os.register_at_fork(after_in_child=start_helper)
import eventlog_handler

eventlog_handler.setup(api_key={key!r}, server_url={url!r}, capture_exceptions=False)


def blocked():
    return signal.SIGTERM in signal.pthread_sigmask(signal.SIG_BLOCK, [])


pid = os.fork()
if pid == 0:
    print("helper" if forked_in_hook[-1] == "helper" else "child", "blocked:", blocked(), flush=True)
    os._exit(0)
os.waitpid(pid, 0)
print("parent blocked:", blocked(), flush=True)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_fork_made_by_an_after_fork_hook_leaves_nothing_blocked(server: FaultServer) -> None:
    code = NESTED_FORK.format(root=str(ROOT), key=API_KEY, url=server.url)
    process = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30
    )
    assert process.returncode == 0, process.stderr
    lines = sorted(process.stdout.splitlines())
    assert lines == ["child blocked: False", "helper blocked: False", "parent blocked: False"]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_the_childs_own_setup_keeps_its_flush_when_the_main_thread_logs(
    server: FaultServer,
) -> None:
    # A forked child whose thread logs first waits for its main thread to put the flush in
    # place; when that thread calls setup() first (as the README says to), setup()'s flush is
    # the child's, and the main thread's next log must not replace it.
    wait = sigterm_to_a_child(
        f"""
        import threading
        from eventlog_handler.integrations import _signals
        thread = threading.Thread(target=log.info, args=("child, from a thread",))
        thread.start()
        thread.join()
        eventlog_handler.setup(api_key={API_KEY!r}, server_url={server.url!r},
                               flush_interval=60, capture_exceptions=False)
        log.info("child, from its main thread")
        print("setup's flush kept:", signal.getsignal(signal.SIGTERM) is _signals._installed,
              flush=True)
        """
    )
    returncode, stdout, stderr = run_to_end(server, wait=wait)
    assert returncode == 0, stderr
    assert "setup's flush kept: True" in stdout, (stdout, stderr)
    messages = [e["message"] for e in server.accepted]
    assert sorted(m for m in messages if m.startswith("child")) == [
        "child, from a thread",
        "child, from its main thread",
    ]


DECLINED = """
import logging, multiprocessing, signal, sys
sys.path.insert(0, {root!r})
import eventlog_handler

eventlog_handler.setup(api_key={key!r}, server_url={url!r}, flush_on_sigterm=False)


def work(method):
    logging.getLogger("app").warning("from a %s child", method)
    default = signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    print(method, "child has the default:", default, flush=True)


if __name__ == "__main__":
    print("parent has the default:", signal.getsignal(signal.SIGTERM) is signal.SIG_DFL)
    for method in ("fork", "spawn"):
        process = multiprocessing.get_context(method).Process(target=work, args=(method,))
        process.start()
        process.join()
"""


def test_flush_on_sigterm_false_holds_in_children_too(server: FaultServer, tmp_path: Path) -> None:
    # "flush_on_sigterm=False installs nothing": neither in the program nor in the
    # multiprocessing children that log (which otherwise flush when SIGTERM ends them).
    script = tmp_path / "declined.py"  # a file: spawned children import it as __mp_main__
    script.write_text(DECLINED.format(root=str(ROOT), key=API_KEY, url=server.url))
    process = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60
    )
    assert process.returncode == 0, process.stderr
    assert "parent has the default: True" in process.stdout
    assert "fork child has the default: True" in process.stdout, process.stdout
    assert "spawn child has the default: True" in process.stdout, process.stdout
    assert sorted(e["message"] for e in server.accepted) == [
        "from a fork child",
        "from a spawn child",
    ]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_child_forked_from_a_thread_ends_with_that_thread(server: FaultServer) -> None:
    # The child of a thread's fork has that thread only; when it ends, no interpreter exit
    # follows, and the process ends with its last thread: the package's threads must not keep
    # it alive (they block SIGTERM too: only SIGKILL ended it), and what it logged is sent.
    wait = textwrap.dedent(
        """
        import threading
        children = []
        def fork_and_return():
            pid = os.fork()
            if pid == 0:
                logging.getLogger("svc").warning("from the child of a thread")
                return  # the thread ends: the child's only one
            children.append(pid)
        thread = threading.Thread(target=fork_and_return)
        thread.start()
        thread.join()
        (pid,) = children
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                print("child exit status", os.waitstatus_to_exitcode(status), flush=True)
                break
            time.sleep(0.05)
        else:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            print("child hung", flush=True)
        """
    )
    returncode, stdout, stderr = run_to_end(server, wait=wait, timeout=40)
    assert returncode == 0, stderr
    assert "child exit status 0" in stdout, (stdout, stderr)
    messages = [e["message"] for e in server.accepted]
    assert messages.count("from the child of a thread") == 1, messages
