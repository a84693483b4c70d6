"""A WSGI app under a real uWSGI (``pyuwsgi``), with a master that forks two workers from the
app it loaded: uWSGI forks without Python's fork hooks."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest

from tests.support.faultserver import FaultServer
from tests.support.processes import child_env
from tests.support.waits import free_port, wait_until

UWSGI = shutil.which("uwsgi", path=str(Path(sys.executable).parent))

APP = """
import logging, os
import eventlog_handler
{hook}
eventlog_handler.setup(flush_interval=0.2)
log = logging.getLogger("app")


def application(environ, start_response):
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("failed in %d", os.getpid())
    reference = eventlog_handler.last_reference_id()
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [f"{os.getpid()} {reference}".encode()]
"""


#: A post-fork hook of the program's own, set after the package was imported.
HOOKS = {
    "no hook of its own": "",
    "uwsgidecorators.postfork": (
        "import uwsgidecorators\n\n@uwsgidecorators.postfork\ndef reconnect():\n    pass\n"
    ),
    "uwsgi.post_fork_hook": "import uwsgi\nuwsgi.post_fork_hook = lambda: None\n",
}


@pytest.mark.skipif(
    UWSGI is None, reason="needs pyuwsgi (a test dependency: pip install -e '.[dev]')"
)
@pytest.mark.parametrize("hook", list(HOOKS))
def test_workers_forked_by_the_uwsgi_master_send_their_own_events(
    tmp_path: Path, hook: str
) -> None:
    """The workers went on with the master's reference ids: two workers gave their events
    the same ids, the service keeps one of each (25 of 40 errors arrived), and an error page
    quoted another request's id. The master also says to run uWSGI with --lazy-apps. A hook
    the program sets after importing the package (uwsgidecorators sets one) replaced the
    package's."""
    assert UWSGI is not None
    with FaultServer() as server:
        output, answers = _serve_forty_requests(server, tmp_path, HOOKS[hook], MASTER)
        accepted = list(server.accepted)
    references = [answer.split()[1] for answer in answers]
    assert len({answer.split()[0] for answer in answers}) == 2, answers  # both workers served
    assert len(set(references)) == 40, answers
    assert sorted(event["reference_id"] for event in accepted) == sorted(references)
    assert "--lazy-apps" in output, output


MASTER = ["--master", "--processes", "2"]


@pytest.mark.skipif(
    UWSGI is None, reason="needs pyuwsgi (a test dependency: pip install -e '.[dev]')"
)
def test_a_single_uwsgi_process_that_forks_nothing_is_not_given_the_masters_advice(
    tmp_path: Path,
) -> None:
    with FaultServer() as server:
        output, answers = _serve_forty_requests(server, tmp_path, "", ["--processes", "1"])
        accepted = list(server.accepted)
    assert len(accepted) == 40 == len({answer.split()[1] for answer in answers})
    assert "--lazy-apps" not in output, output


def _serve_forty_requests(
    server: FaultServer, tmp_path: Path, hook: str, options: list[str]
) -> tuple[str, list[str]]:
    """40 requests to the app under uWSGI; its output (stopped by SIGINT) and the answers."""
    assert UWSGI is not None
    (tmp_path / "app.py").write_text(textwrap.dedent(APP).replace("{hook}", hook))
    port = free_port()
    command = [UWSGI, "--http-socket", f"127.0.0.1:{port}", "--wsgi-file", "app.py"]
    command += [*options, "--need-app", "--disable-logging"]
    process = subprocess.Popen(
        command,
        cwd=tmp_path,
        env=child_env(server.url),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    answers: list[str] = []
    try:
        for _ in range(40):
            deadline = time.monotonic() + 10
            while True:
                try:
                    url = f"http://127.0.0.1:{port}/"
                    answers.append(urllib.request.urlopen(url, timeout=5).read().decode())
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
        assert wait_until(lambda: len(server.accepted) >= 40, 10), len(server.accepted)
    finally:
        process.send_signal(signal.SIGINT)
        try:
            output, _ = process.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            output, _ = process.communicate()
    return output, answers
