"""A delivery failure that lasts is said on stderr while it lasts (naming the server, the key
masked), once, and so is the recovery; an outage is never silent until exit."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from eventlog_handler.delivery import _engine as transport
from eventlog_handler.settings import DEFAULT_SERVER_URL, Settings
from tests.support.constants import API_KEY, REPO
from tests.support.faultserver import FaultServer
from tests.support.processes import child_env
from tests.support.waits import dead_port, free_port, wait_until

PROGRAM = """
import logging, time
import eventlog_handler

handle = eventlog_handler.setup(max_backoff=1.0, outage_notice=3.0)
log = logging.getLogger("app.outage")
for index in range(8):
    try:
        raise RuntimeError(f"failure {index}")
    except RuntimeError:
        log.exception("job %d failed", index)
    time.sleep(1.0)
print("MARK outage-over", flush=True)
deadline = time.monotonic() + 20
while time.monotonic() < deadline and handle.stats()["delivered"] < 8:
    time.sleep(0.1)
print("MARK delivered", handle.stats()["delivered"], flush=True)
"""


def test_an_outage_and_its_end_are_said_while_the_program_runs(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    script = tmp_path / "program.py"
    script.write_text(PROGRAM)
    process = subprocess.Popen(
        [sys.executable, str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # one stream: the order of the lines is the order of events
        text=True,
        env=child_env(url),
        cwd=str(REPO),
    )
    lines: list[str] = []
    server: FaultServer | None = None
    assert process.stdout is not None
    try:
        for line in process.stdout:
            lines.append(line.rstrip("\n"))
            if line.startswith("MARK outage-over"):
                server = FaultServer(port=port).start()  # the service comes back
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
        if server is not None:
            server.stop()
    text = "\n".join(lines)
    over = lines.index("MARK outage-over")
    said = [index for index, line in enumerate(lines) if "cannot deliver events" in line]
    assert len(said) == 1, text
    assert said[0] < over, text  # during the outage, not at exit
    assert url in lines[said[0]] and "refused" in lines[said[0]]
    assert API_KEY not in text
    recovered = [index for index, line in enumerate(lines) if "recovered" in line]
    assert len(recovered) == 1 and recovered[0] > over, text
    assert lines[-1] == "MARK delivered 8", text


def engine_at_the_default_server(**options: Any) -> transport.Engine:
    """An engine whose settings keep the default URL, its client going to a closed port."""
    port = free_port()
    settings = Settings.from_options({"api_key": API_KEY, **options}, environ={})
    assert settings.server_url == DEFAULT_SERVER_URL

    def client(settings: Settings, timeout: float | None) -> transport.Client:
        return transport.Client(f"http://127.0.0.1:{port}", API_KEY, timeout=2)

    return transport.Engine(settings, client_factory=client)


def test_the_default_server_is_named_as_such(monkeypatch: pytest.MonkeyPatch) -> None:
    # A deploy that forgot EVENTLOG_SERVER_URL sends to the local collector's address: the
    # line says so.
    lines: list[str] = []
    monkeypatch.setattr("eventlog_handler.delivery._delivery.say", lines.append)
    engine = engine_at_the_default_server(outage_notice=0.2, retry_initial=0.05, max_backoff=0.1)
    engine.enqueue({"type": "log", "message": "x", "reference_id": "abcdef0123456789-1"})
    wait_until(lambda: bool(lines), 10, step=0.05)
    engine.shutdown(0.1)
    assert lines, "nothing was said about the outage"
    assert "EVENTLOG_SERVER_URL" in lines[0] and DEFAULT_SERVER_URL in lines[0]
    assert "in memory, 64 MB)" in lines[0]  # the README's unit: the default budget is 64 MiB


def test_the_exit_line_names_the_default_server_as_such(monkeypatch: pytest.MonkeyPatch) -> None:
    # A short script never reaches the outage notice: its exit line carries the hint.
    lines: list[str] = []
    monkeypatch.setattr("eventlog_handler.delivery._lifecycle.say", lines.append)
    engine = engine_at_the_default_server()
    engine.enqueue({"type": "log", "message": "x", "reference_id": "abcdef0123456789-2"})
    assert engine.shutdown(0.3) == 1
    [line] = [line for line in lines if "could not be sent" in line]
    assert "the default" in line and "EVENTLOG_SERVER_URL" in line, line
    assert DEFAULT_SERVER_URL in line, line


def test_the_exception_hooks_wait_ends_at_the_first_failed_attempt() -> None:
    """Before a thread or the program ends, the exception hooks wait for the error to be sent
    (``flush(until_failure=True)``): against a closed port that wait ends at the first failed
    attempt, where a plain ``flush`` waits through the retries until its deadline (the worker
    and the exit flush retry anyway)."""
    engine = engine_at_the_default_server(retry_initial=0.5, max_backoff=0.5)
    try:
        engine.enqueue({"type": "error", "message": "x", "reference_id": "abcdef0123456789-3"})
        started = time.monotonic()
        assert not engine.flush(8, until_failure=True)
        hooks_wait = time.monotonic() - started
        started = time.monotonic()
        assert not engine.flush(3)
        plain_wait = time.monotonic() - started
    finally:
        engine.shutdown(0.1)
    assert hooks_wait < 2.5, hooks_wait
    assert plain_wait > 2.5, plain_wait


EXIT_PROGRAM = """
import logging, eventlog_handler
eventlog_handler.setup(shutdown_timeout=30)
logging.getLogger("job").error("the job failed")
print("EXITING", flush=True)
"""


def test_a_program_whose_server_is_not_running_exits_within_a_second_of_retries(
    tmp_path: Path,
) -> None:
    """No server listens at the URL (the collector not started): once a connection is
    refused, the exit flush retries for about a second, not for ``shutdown_timeout`` (30 s
    here), and says what could not be sent."""
    url = f"http://127.0.0.1:{dead_port()}"
    program = tmp_path / "program.py"
    program.write_text(EXIT_PROGRAM)
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(program)],
        capture_output=True,
        text=True,
        env=child_env(url),
        cwd=str(REPO),
        timeout=90,
    )
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    assert took < 10, f"the exit took {took:.1f} s: {done.stderr}"
    assert "1 event(s) could not be sent" in done.stderr, done.stderr
    assert "refused" in done.stderr, done.stderr


def test_a_server_that_starts_during_the_exit_still_gets_the_events(tmp_path: Path) -> None:
    """The collector starts while the program ends (started with it, or restarting): the
    connection is refused at first, and the exit's retries deliver the error once it
    listens, 0.4 s later."""
    port = free_port()
    program = tmp_path / "program.py"
    program.write_text(EXIT_PROGRAM)
    process = subprocess.Popen(
        [sys.executable, str(program)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(f"http://127.0.0.1:{port}"),
        cwd=str(REPO),
    )
    server = None
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "EXITING"
        time.sleep(0.4)
        server = FaultServer(port=port).start()
        _, stderr = process.communicate(timeout=60)
        assert process.returncode == 0, stderr
        assert server.wait_for(1, timeout=5), stderr
        assert [event["message"] for event in server.accepted] == ["the job failed"]
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
        if server is not None:
            server.stop()


HUNG = """
import logging, time
import eventlog_handler

eventlog_handler.setup(timeout=3.0, outage_notice=2.5, retry_initial=1.0, max_backoff=1.0,
                       flush_interval=0.05, server_settings=False)
logging.getLogger("app.hung").warning("into the void")
time.sleep(60)
"""


def test_a_server_that_never_answers_is_said_when_its_first_request_times_out() -> None:
    """A server that takes requests and never answers fails each one only at ``timeout``: the
    outage was counted from that failure, so the line came ``outage_notice`` after it (and
    with a long ``timeout``, after minutes of silence, ``last_error`` unset). It is counted
    from when the request was sent: said as soon as the first request times out, before the
    retry."""
    arrivals: list[float] = []

    def hang(events: list[Any], size: int) -> str:
        arrivals.append(time.monotonic())
        return "hang"

    with FaultServer() as server:
        server.default = hang
        process = subprocess.Popen(
            [sys.executable, "-c", HUNG],
            stderr=subprocess.PIPE,
            text=True,
            env=child_env(server.url),
            cwd=str(REPO),
        )
        said_at = None
        try:
            assert process.stderr is not None
            for line in process.stderr:
                if "cannot deliver events" in line:
                    said_at = time.monotonic()
                    break
        finally:
            process.kill()
            process.wait(20)
    assert said_at is not None
    assert arrivals and said_at - arrivals[0] >= 2.5  # not before its notice time
    later = [at for at in arrivals if at > arrivals[0]]
    assert not later or said_at < later[0], (said_at, arrivals)  # before the first retry
