"""A real ``rq worker`` (each job in a forked work horse that ends with ``os._exit``) against a
real ``redis-server`` from the system's packages, its settings module calling
``eventlog_handler.setup()`` as users do; jobs enqueued by another process; the worker stopped
with ``SIGTERM`` (a warm shutdown). What arrives at a loopback server is what a user sees."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.faultserver import FaultServer
from tests.support.processes import child_env
from tests.support.waits import free_port, wait_until

pytest.importorskip("rq", reason="rq is a test dependency (the dev extra)")
redis = pytest.importorskip("redis", reason="redis-py comes with rq")

APP = Path(__file__).parent / "rq_app"


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    """A redis-server of its own on a free loopback port (Debian's package)."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (Debian: apt-get install redis-server)")
    port = free_port()
    options = ["--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    server = subprocess.Popen(
        [binary, *options, "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    client = redis.Redis(host="127.0.0.1", port=port)
    try:
        assert wait_until(lambda: _pings(client), 10), "redis-server did not start"
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        client.close()
        server.terminate()
        server.wait(timeout=10)


def _pings(client: object) -> bool:
    try:
        return bool(client.ping())  # type: ignore[attr-defined]
    except Exception:
        return False


def _env(server: FaultServer, redis_url: str) -> dict[str, str]:
    env = child_env(server.url, RQ_REDIS_URL=redis_url)
    env["PYTHONPATH"] = os.pathsep.join([str(APP), env["PYTHONPATH"]])
    return env


def _queue(redis_url: str) -> object:
    from rq import Queue

    return Queue(connection=redis.Redis.from_url(redis_url))


def _worker(env: dict[str, str], cwd: Path, *args: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "rq.cli", "worker", "-c", "jobs", "--url", env["RQ_REDIS_URL"]]
    return subprocess.Popen(
        [*command, *args],
        cwd=str(cwd),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _burst(env: dict[str, str], cwd: Path, *args: str) -> tuple[subprocess.Popen[str], str]:
    """``rq worker --burst`` run to its end (killed after 120 s); the process and its output."""
    worker = _worker(env, cwd, "--burst", *args)
    try:
        output, _ = worker.communicate(timeout=120)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.communicate(timeout=10)
    return worker, output


def test_an_rq_worker_sends_what_its_jobs_log_and_each_final_failure_once(
    tmp_path: Path, redis_url: str
) -> None:
    with FaultServer() as server:
        env = _env(server, redis_url)
        from rq import Retry

        queue: Any = _queue(redis_url)
        for number in range(5):
            queue.enqueue("jobs.warn", number)
        queue.enqueue("jobs.fail")
        queue.enqueue("jobs.flaky", retry=Retry(max=2))
        worker, output = _burst(env, tmp_path)  # works until the queue is empty, then ends
        assert wait_until(lambda: len(server.accepted) >= 7, 10), server.accepted
        time.sleep(0.5)  # a duplicate or a retry reported late would show now
        events = list(server.accepted)
    assert worker.returncode == 0, output[-3000:]
    messages = [str(event.get("message")) for event in events if event.get("type") != "error"]
    assert sorted(m for m in messages if m.startswith("job warning")) == [
        f"job warning {number}" for number in range(5)
    ]
    warning = next(event for event in events if event.get("message") == "job warning 0")
    assert {"rq", "jobs.warn", "rq-tests"} <= set(warning["tags"])  # the job's scope
    errors = [event for event in events if event.get("type") == "error"]
    # One error per failed job: the failure without retries, and the flaky one at its third try.
    assert sorted(event["@simple_error"]["type"] for event in errors) == ["KeyError", "ValueError"]
    flaky = next(event for event in errors if event["@simple_error"]["type"] == "ValueError")
    assert flaky["data"]["@rq"]["function"] == "jobs.flaky"
    assert flaky["data"]["@submission_method"] == "rq_job"
    # RQ's own failure lines and routine lines are not events; they stay on the console.
    assert not [m for m in messages if "exception raised while executing" in m or "Job OK" in m]
    assert "Job OK" in output and "exception raised while executing" in output
    assert output.count("flaky attempt") == 0  # INFO of the job: not on RQ's console either


def test_a_simple_worker_reports_failures_and_keeps_each_job_in_its_scope(
    tmp_path: Path, redis_url: str
) -> None:
    """``rq worker -w rq.worker.SimpleWorker`` runs jobs in the worker itself (no work horse;
    macOS, Windows, tests). In RQ 3 it derives from ``BaseWorker``, not ``Worker``: a failed
    job sent no event at all, and a user set in one job was on every later job's events."""
    with FaultServer() as server:
        env = _env(server, redis_url)
        queue: Any = _queue(redis_url)
        queue.enqueue("jobs.set_user_and_tag")
        queue.enqueue("jobs.warn", 1)
        queue.enqueue("jobs.fail")
        worker, output = _burst(env, tmp_path, "-w", "rq.worker.SimpleWorker")
        assert wait_until(lambda: len(server.accepted) >= 3, 10), (server.accepted, output)
        time.sleep(0.5)  # a duplicate reported late would show now
        events = list(server.accepted)
    assert worker.returncode == 0, output[-3000:]
    by_message = {event.get("message"): event for event in events if event.get("type") != "error"}
    with_user = by_message["job with a user"]
    assert with_user["@user"]["identity"] == "leaky-user"
    assert {"rq", "jobs.set_user_and_tag", "leaky-tag"} <= set(with_user["tags"])
    after = by_message["job warning 1"]
    assert "@user" not in after, after
    assert "leaky-tag" not in after["tags"] and "jobs.warn" in after["tags"]
    [error] = [event for event in events if event.get("type") == "error"]
    assert error["@simple_error"]["type"] == "KeyError"
    assert error["data"]["@rq"]["function"] == "jobs.fail"
    assert len(events) == 3, events


def test_setup_in_the_jobs_module_only_loses_nothing(tmp_path: Path, redis_url: str) -> None:
    """``rq worker`` without ``-c``: ``setup()`` runs when the work horse imports the job's
    module, inside the job, too late for the wrap around it; RQ ends the horse with
    ``os._exit``, and every event was lost without a word."""
    with FaultServer() as server:
        env = _env(server, redis_url)
        queue: Any = _queue(redis_url)
        for number in range(3):
            queue.enqueue("jobs.warn", number)
        queue.enqueue("jobs.fail")
        command = [sys.executable, "-m", "rq.cli", "worker", "--burst", "--url", redis_url]
        done = subprocess.run(
            command, env=env, cwd=str(tmp_path), capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        assert wait_until(lambda: len(server.accepted) >= 4, 10), server.accepted
        time.sleep(0.5)  # a duplicate reported late would show now
        events = list(server.accepted)
    messages = sorted(str(e.get("message")) for e in events if e.get("type") != "error")
    assert messages == [f"job warning {number}" for number in range(3)]
    [error] = [event for event in events if event.get("type") == "error"]
    assert error["@simple_error"]["type"] == "KeyError"
    assert error["data"]["@rq"]["function"] == "jobs.fail"


def test_sigterm_to_an_rq_worker_loses_nothing(tmp_path: Path, redis_url: str) -> None:
    with FaultServer() as server:
        env = _env(server, redis_url)
        worker = _worker(env, tmp_path)
        try:
            queue: Any = _queue(redis_url)
            job = queue.enqueue("jobs.slow_warning", 1.5)
            assert wait_until(lambda: job.get_status(refresh=True) == "started", 30)
            worker.send_signal(signal.SIGTERM)  # a warm shutdown: the job finishes first
            output, _ = worker.communicate(timeout=60)
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.communicate(timeout=10)
        assert wait_until(lambda: "slow job finished" in server.arrivals(), 10), output[-3000:]
    assert worker.returncode == 0, output[-3000:]
    assert "slow job started" in server.arrivals()


def test_the_rq_example_runs_as_its_docstring_says(tmp_path: Path, redis_url: str) -> None:
    examples = Path(__file__).resolve().parents[2] / "examples"
    with FaultServer() as server:
        env = child_env(server.url, RQ_REDIS_URL=redis_url)
        env["PYTHONPATH"] = os.pathsep.join([str(examples), env["PYTHONPATH"]])
        subprocess.run(
            [sys.executable, "-c", "import rq_app; rq_app.enqueue_examples()"],
            env=env,
            cwd=str(tmp_path),
            check=True,
            timeout=60,
        )
        command = [sys.executable, "-m", "rq.cli", "worker", "-c", "rq_app", "--burst"]
        done = subprocess.run(
            [*command, "--url", redis_url],
            env=env,
            cwd=str(tmp_path),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        assert wait_until(lambda: len(server.accepted) >= 2, 10), server.accepted
        events = list(server.accepted)
    assert "stock is low for sku A-1" in {event.get("message") for event in events}
    errors = [event["@simple_error"]["type"] for event in events if event.get("type") == "error"]
    assert errors == ["ConnectionError"]  # once, after two retries


def test_a_killed_work_horse_is_one_error_and_rqs_warnings_reach_the_handler(
    tmp_path: Path, redis_url: str
) -> None:
    """A work horse killed by SIGKILL (the OOM killer) failed its job with no event at all: no
    exception was raised anywhere, and RQ's warnings about it, like every line on RQ's own
    logger, never reached the package (RQ stops them going up to the root logger)."""
    with FaultServer() as server:
        env = _env(server, redis_url)
        queue: Any = _queue(redis_url)
        queue.enqueue("jobs.killed")
        queue.enqueue("jobs.killed")
        queue.enqueue("jobs.rq_lines")
        worker, output = _burst(env, tmp_path)
        assert wait_until(lambda: len(server.accepted) >= 4, 10), (server.accepted, output)
        time.sleep(0.5)  # a second report of one death would show now
        events = list(server.accepted)
    assert worker.returncode == 0, output[-3000:]
    assert output.count("Work horse killed for job") == 2  # RQ's console, as it was
    errors = [event for event in events if event.get("type") == "error"]
    assert len(errors) == 2, errors
    for error in errors:
        assert error["@simple_error"]["type"].endswith("WorkHorseTerminated")
        assert error["@simple_error"]["message"] == (
            "the work horse running the job was killed by signal 9 (SIGKILL)"
        )
        assert error["data"]["@rq"]["function"] == "jobs.killed"
        assert error["data"]["@submission_method"] == "rq_job"
        signature = error["data"]["@stack"]["signature_data"]
        assert signature["function"] == "jobs.killed", signature
        assert all(isinstance(value, str) for value in signature.values())
        # In the job's scope, as a failure in the horse is (it had only the worker's tags,
        # and a trace of the worker's lines for the jobs before it).
        assert {"rq", "jobs.killed"} <= set(error["tags"]), error["tags"]
    assert errors[0]["data"]["@stack"] == errors[1]["data"]["@stack"]  # one bug, one stack
    assert errors[0]["data"]["@rq"]["job_id"] != errors[1]["data"]["@rq"]["job_id"]
    logs = {str(event.get("message")) for event in events if event.get("type") != "error"}
    assert {"rq worker warning from a job", "rq worker error from a job"} <= logs, logs
    assert not [m for m in logs if "Work-horse terminated" in m or "Work horse killed" in m]


def test_rqs_lines_follow_the_current_setup(monkeypatch: pytest.MonkeyPatch) -> None:
    """RQ's own loggers don't let records go up, so the package's handlers were copied onto
    them as RQ set them up, and stayed: after ``setup()`` again (another server, a job's own
    ``setup()``), RQ's lines went to the old server and not the new one; after ``detach()``
    they were still sent. They now reach the handlers on the way up at the time."""
    from rq import logutils

    import eventlog_handler
    from eventlog_handler.delivery import _engine as transport

    rq_log = logging.getLogger("rq.worker")
    monkeypatch.setattr(rq_log, "handlers", [])
    monkeypatch.setattr(logging.getLogger(), "handlers", [])  # a worker's: none but ours
    monkeypatch.setattr(rq_log, "propagate", True)
    options = {"api_key": "k" * 40, "flush_interval": 0.05, "capture_exceptions": False}
    try:
        with FaultServer() as first, FaultServer() as second:
            handle = eventlog_handler.setup(server_url=first.url, **options)
            logutils.setup_loghandlers("INFO", name="rq.worker")  # as `rq worker` starts
            assert rq_log.propagate is False  # RQ's console handlers, as without the package
            rq_log.warning("rq line to the first")
            assert wait_until(lambda: len(first.accepted) == 1, 10), first.accepted
            handle = eventlog_handler.setup(server_url=second.url, **options)
            rq_log.warning("rq line to the second")
            assert wait_until(lambda: len(second.accepted) == 1, 10), second.accepted
            handle.detach()
            rq_log.warning("rq line after detach")
            transport.shutdown_all(2)
            messages = [e["message"] for e in (*first.accepted, *second.accepted)]
    finally:
        transport._forget_engines_for_tests()
    assert messages == ["rq line to the first", "rq line to the second"], messages


def test_a_line_on_rqs_logger_with_a_dict_message_is_not_lost() -> None:
    """The check for RQ's lines about a killed work horse raised ``TypeError`` on a message
    that is a dict (structlog's), and the record was lost to ``emit_errors``."""
    from eventlog_handler.integrations._rq import _FILTER

    record = logging.LogRecord("rq.worker", logging.WARNING, __file__, 1, {"event": "x"}, (), None)
    assert _FILTER.filter(record) is True
    killed = logging.LogRecord(
        "rq.worker", logging.WARNING, __file__, 1, "Work horse killed for job %s: retpid=%s, "
        "ret_val=%s", ("j", 1, 9), None,
    )  # fmt: skip
    assert _FILTER.filter(killed) is False
