"""Real servers stopped the way process managers stop them: what was logged just before the
signal arrives, and the exit status is what the server gives without the package.

Each app calls ``eventlog_handler.setup()`` at import, as a user's app does, and logs one
warning per request. The test sends 50 requests, then ``SIGTERM`` (or ``SIGINT``) to the
server's main process at once, and counts what a loopback server received.

The signal goes out once every worker has imported the app, that is, has put its own signal
handlers in place: gunicorn's workers install theirs after they fork (the gevent worker only
after ``monkey.patch_all()``, a second or more on a busy machine), and a ``SIGTERM`` that
reaches a worker before that runs the master's handler, which only queues it in the worker's
copy of the master's queue: the worker would then serve on until gunicorn kills it after its
graceful timeout, with or without this package.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from importlib.metadata import version
from pathlib import Path

import pytest

from tests.support.faultserver import FaultServer
from tests.support.processes import child_env

ASGI_APP = """
import logging
import os
import eventlog_handler

if USE_PACKAGE:
    eventlog_handler.setup()
log = logging.getLogger("app")
open(f"booted-{os.getpid()}", "w").close()  # this worker's signal handlers are in place


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    log.warning("request %s", scope["path"])
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})
"""

WSGI_APP = """
import logging
import os
import eventlog_handler

if USE_PACKAGE:
    eventlog_handler.setup()
log = logging.getLogger("app")
open(f"booted-{os.getpid()}", "w").close()  # this worker's signal handlers are in place


def app(environ, start_response):
    log.warning("request %s", environ["PATH_INFO"])
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"ok"]
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def serve(
    command: list[str], app: str, tmp_path: Path, url: str, *, package: bool = True
) -> tuple[subprocess.Popen[str], int]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "webapp.py").write_text(app.replace("USE_PACKAGE", repr(package)))
    port = free_port()
    env = child_env(url)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env["PYTHONPATH"]])
    process = subprocess.Popen(
        [part.replace("PORT", str(port)) for part in command],
        cwd=str(tmp_path),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    workers = int(command[command.index("--workers") + 1]) if "--workers" in command else 1
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if len(list(tmp_path.glob("booted-*"))) >= workers:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                    return process, port
        except OSError:
            pass
        if process.poll() is not None:
            break
        time.sleep(0.1)
    process.kill()
    _, stderr = process.communicate(timeout=10)
    raise AssertionError(f"the server did not start: {stderr[-2000:]}")


def requests_then_signal(
    process: subprocess.Popen[str], port: int, signum: int = signal.SIGTERM
) -> tuple[int, str]:
    for index in range(50):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/r{index}", timeout=10) as answer:
            assert answer.status == 200
    process.send_signal(signum)
    sent = time.monotonic()
    try:
        # Within gunicorn's graceful timeout (30 s), after which it kills its workers.
        _, stderr = process.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        left = _processes_left(process.pid)
        os.killpg(process.pid, signal.SIGKILL)
        _, stderr = process.communicate(timeout=10)
        raise AssertionError(
            f"the server did not stop in {time.monotonic() - sent:.0f} s ({left}): {stderr[-2000:]}"
        ) from None
    return process.returncode, stderr


def _processes_left(pid: int) -> str:
    """What the server's processes are waiting in, and which signals they block (Linux)."""
    found = []
    for task in Path("/proc").glob("[0-9]*"):
        try:
            status = (task / "status").read_text()
            if f"PPid:\t{pid}\n" not in status and task.name != str(pid):
                continue
            blocked = next(line for line in status.splitlines() if line.startswith("SigBlk"))
            found.append(f"{task.name}: {(task / 'wchan').read_text()} {blocked}")
        except (OSError, StopIteration):
            continue
    return "; ".join(found)


UVICORN = [sys.executable, "-m", "uvicorn", "webapp:app", "--host", "127.0.0.1", "--port", "PORT"]
GUNICORN = [sys.executable, "-m", "gunicorn", "webapp:app", "--bind", "127.0.0.1:PORT"]
if version("gunicorn").split(".")[0].isdigit() and int(version("gunicorn").split(".")[0]) >= 27:
    # Each server apart: gunicorn 27's control socket is one path per user by default.
    GUNICORN.append("--no-control-socket")

CASES = {
    "uvicorn": (UVICORN, ASGI_APP, signal.SIGTERM),
    "uvicorn-sigint": (UVICORN, ASGI_APP, signal.SIGINT),
    "uvicorn-workers-2": ([*UVICORN, "--workers", "2"], ASGI_APP, signal.SIGTERM),
    "gunicorn-sync": ([*GUNICORN, "--workers", "2"], WSGI_APP, signal.SIGTERM),
    "gunicorn-gthread": (
        [*GUNICORN, "--workers", "2", "--threads", "4", "--worker-class", "gthread"],
        WSGI_APP,
        signal.SIGTERM,
    ),
    # gevent's monkey-patching makes the package's threads greenlets of the main thread.
    "gunicorn-gevent": (
        [*GUNICORN, "--workers", "2", "--worker-class", "gevent"],
        WSGI_APP,
        signal.SIGTERM,
    ),
    "gunicorn-uvicorn-worker": (
        [*GUNICORN, "--workers", "2", "--worker-class", "uvicorn.workers.UvicornWorker"],
        ASGI_APP,
        signal.SIGTERM,
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_what_was_logged_before_the_signal_arrives(tmp_path: Path, case: str) -> None:
    command, app, signum = CASES[case]
    with FaultServer() as server:
        # The same server without the package: its exit status is what ours must be.
        plain, port = serve(command, app, tmp_path / "plain", server.url, package=False)
        expected, _ = requests_then_signal(plain, port, signum)
        process, port = serve(command, app, tmp_path / "with", server.url)
        code, stderr = requests_then_signal(process, port, signum)
        warnings = {
            event["message"]
            for event in server.accepted
            if str(event.get("message", "")).startswith("request /r")
        }
    assert code == expected, stderr[-2000:]
    assert warnings == {f"request /r{index}" for index in range(50)}, (
        f"{len(warnings)} of 50 arrived; {stderr[-2000:]}"
    )
    assert "could not be sent" not in stderr
    # The servers' routine lines are not events (their warnings and errors still are).
    routine = [
        event["message"]
        for event in server.accepted
        if event.get("source", "").startswith(("uvicorn", "gunicorn"))
        and event.get("@level") in ("Trace", "Debug", "Info")
    ]
    assert routine == [], routine[:5]


def _can_make_pid_namespaces() -> bool:
    done = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True, timeout=30
    )
    return done.returncode == 0


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or not _can_make_pid_namespaces(),
    reason="needs unshare(1) and the right to make a PID namespace (root)",
)
def test_uvicorn_as_process_one_ends_on_sigterm_and_is_not_told_otherwise(
    tmp_path: Path,
) -> None:
    """``docker run`` without ``--init``: uvicorn is process 1. It shuts down on ``SIGTERM`` and
    sends the signal to itself again, which process 1 ignores, and then returns and ends: the
    package's notice for a process 1 that runs on after ``SIGTERM`` was said all the same."""
    command = ["unshare", "--pid", "--fork", "--mount-proc", *UVICORN]
    with FaultServer() as server:
        process, port = serve(command, ASGI_APP, tmp_path, server.url)
        try:
            for index in range(20):
                url = f"http://127.0.0.1:{port}/r{index}"
                with urllib.request.urlopen(url, timeout=10) as answer:
                    assert answer.status == 200
            children = Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text()
            os.kill(int(children.split()[0]), signal.SIGTERM)  # as docker stop sends it
            _, stderr = process.communicate(timeout=20)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.communicate(timeout=10)
        warnings = {e["message"] for e in server.accepted if e["message"].startswith("request /r")}
    assert process.returncode == 0, stderr[-2000:]
    assert "Finished server process [1]" in stderr  # it was process 1
    assert warnings == {f"request /r{index}" for index in range(20)}
    assert "SIGTERM did not end this process" not in stderr, stderr[-2000:]
