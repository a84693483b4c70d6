"""A real ``celery worker`` with Celery's defaults (it takes over the root logger as it starts),
its app calling ``eventlog_handler.setup()`` at import as users do; tasks sent by another
process through Celery's filesystem transport; the worker stopped with ``SIGTERM`` (a warm
shutdown). What arrives at a loopback server is what a user sees."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.faultserver import FaultServer
from tests.support.processes import child_env
from tests.support.waits import wait_until

pytest.importorskip("celery", reason="celery is a test dependency (the dev extra)")

APP = Path(__file__).parent / "celery_app"
TASKS = ["tasks.warn", "tasks.flaky", "tasks.auto", "tasks.ignored", "tasks.rejected"]


def run_worker(
    tmp_path: Path,
    server: FaultServer,
    pool: str,
    tasks: list[str],
    until: Callable[[], bool],
    **env_extra: str,
) -> tuple[int, str]:
    """A real ``celery worker -A tasks`` (prefork with 2 children, or ``pool``) sending to
    ``server``; ``tasks`` sent by another process; stopped with ``SIGTERM`` once ``until()``
    (and a second more, in which anything reported late would come). Its exit status and
    output."""
    broker = tmp_path / "broker"
    (broker / "done").mkdir(parents=True)
    env = child_env(server.url, BROKER_DIR=str(broker), **env_extra)
    env["PYTHONPATH"] = os.pathsep.join([str(APP), env["PYTHONPATH"]])
    command = [sys.executable, "-m", "celery", "-A", "tasks", "worker", "-l", "info"]
    command += ["--pool", pool] + (["--concurrency", "2"] if pool == "prefork" else [])
    worker = subprocess.Popen(
        command,
        cwd=str(tmp_path),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        subprocess.run(
            [sys.executable, str(APP / "producer.py"), *tasks],
            env=env,
            cwd=str(tmp_path),
            check=True,
            timeout=60,
        )
        assert wait_until(until, 45)
        time.sleep(1)  # a retry or a control-flow exception reported late would show now
        worker.send_signal(signal.SIGTERM)
        output, _ = worker.communicate(timeout=60)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.communicate(timeout=10)
    return worker.returncode, output


def error_types(server: FaultServer) -> list[str]:
    return [
        event["@simple_error"]["type"] for event in server.accepted if event.get("type") == "error"
    ]


@pytest.mark.parametrize("pool", ["solo", "prefork"])
def test_a_celery_worker_with_defaults_sends_what_its_tasks_log(tmp_path: Path, pool: str) -> None:
    with FaultServer() as server:
        # The two failing tasks end (after their retries) as one error each.
        returncode, output = run_worker(
            tmp_path,
            server,
            pool,
            TASKS,
            lambda: sorted(error_types(server)) == ["KeyError", "ValueError"],
        )
        events = list(server.accepted)
    assert returncode == 0, output[-3000:]
    messages = {str(event.get("message")) for event in events}
    assert {"task warning 1", "task logger warning 1"} <= messages, messages
    warning = next(event for event in events if event.get("message") == "task warning 1")
    assert "tasks.warn" in warning["tags"]  # the task's scope
    assert sorted(e["@simple_error"]["type"] for e in events if e.get("type") == "error") == [
        "KeyError",
        "ValueError",
    ]
    # Celery's routine lines ("Task ... received", "succeeded", retries) are not events.
    assert not [e for e in events if "received" in str(e.get("message"))]
    assert not [e for e in events if "retry" in str(e.get("message")).lower()]


def test_setup_in_worker_process_init_sends_what_the_task_logger_logs(tmp_path: Path) -> None:
    """Celery sets up its task logger (which does not propagate) before a pool child runs its
    ``worker_process_init`` handlers: a ``setup()`` made there missed it, and every
    ``get_task_logger()`` record was lost without a word."""
    with FaultServer() as server:
        returncode, output = run_worker(
            tmp_path,
            server,
            "prefork",
            ["tasks.warn"],
            lambda: (
                {"task warning 1", "task logger warning 1"}
                <= {str(event.get("message")) for event in server.accepted}
            ),
            SETUP_IN="worker_process_init",
        )
    assert returncode == 0, output[-3000:]


def test_a_hard_time_limit_is_its_own_error_and_printed_lines_are_no_events(
    tmp_path: Path,
) -> None:
    """Celery's main process logs a pool child killed at its time limit with billiard's
    wrapper as the exception (every such failure, and every lost child, was one stack named
    ``ExceptionWithTraceback``); and what tasks print (structlog's ``PrintLogger``) came back
    as warnings on ``celery.redirected``, a second event for each structlog event."""
    with FaultServer() as server:
        returncode, output = run_worker(
            tmp_path,
            server,
            "prefork",
            ["tasks.printing", "tasks.hard", "tasks.export"],
            lambda: len(error_types(server)) == 2,
        )
        events = list(server.accepted)
    assert returncode == 0, output[-3000:]
    assert "printed by a task" in output  # Celery's console has it, as without the package
    errors = [event for event in events if event.get("type") == "error"]
    # Raised in billiard's code, the same frames for every task: they were one stack for all
    # the app's tasks that hit their limit ("TimeLimitExceeded in billiard.pool...").
    stacks = {e["source"]: e["data"]["@stack"] for e in errors}
    assert stacks["tasks.hard"] != stacks["tasks.export"], stacks
    assert stacks["tasks.export"]["title"] == "tasks.export: billiard.exceptions.TimeLimitExceeded"
    [error] = [event for event in errors if event["source"] == "tasks.hard"]
    assert error["@simple_error"]["type"].endswith("TimeLimitExceeded"), error["@simple_error"]
    assert not [e for e in events if "printed by a task" in str(e.get("message"))]
    # The error names its task (Celery's own line did, as a second event of its own).
    assert "tasks.hard" in error["tags"] and error["source"] == "tasks.hard", error
    assert error["data"]["@celery"]["task"] == "tasks.hard" and error["data"]["@celery"]["id"]
    assert not [e for e in events if "Hard time limit" in str(e.get("message"))], events


def test_a_task_requeued_at_its_time_limit_is_an_error_of_the_task_each_time(
    tmp_path: Path,
) -> None:
    """``acks_late`` with ``acks_on_timeout=False``: Celery requeues the task and sends no
    ``task_failure`` from its failure handler, whose line names no task: that line was the
    error, task-less, and the next incidents of the same task id were taken for the first."""
    with FaultServer() as server:
        returncode, output = run_worker(
            tmp_path,
            server,
            "prefork",
            ["tasks.hard_requeued"],
            lambda: (
                (tmp_path / "broker" / "runs").exists()
                and (tmp_path / "broker" / "runs").read_text() == "3"
            ),
        )
        events = list(server.accepted)
    assert returncode == 0, output[-3000:]
    assert output.count("Hard time limit (1s) exceeded for tasks.hard_requeued") == 2, output
    errors = [event for event in events if event.get("type") == "error"]
    assert errors and all(event["source"] == "tasks.hard_requeued" for event in errors), errors
    assert all(event["data"]["@celery"]["task"] == "tasks.hard_requeued" for event in errors)
    # Two incidents: two errors, or one rolled up with its count (one bug, one stack).
    assert sum(event.get("count", 1) for event in errors) == 2, errors


def test_the_celery_example(tmp_path: Path) -> None:
    examples = Path(__file__).resolve().parents[2] / "examples"
    broker = tmp_path / "broker"
    (broker / "done").mkdir(parents=True)
    with FaultServer() as server:
        env = child_env(server.url, CELERY_BROKER_DIR=str(broker))
        env["PYTHONPATH"] = os.pathsep.join([str(examples), env["PYTHONPATH"]])
        worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "celery_app", "worker", "--pool", "solo"],
            cwd=str(tmp_path),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            send = "import celery_app; celery_app.charge.delay(42); celery_app.report.delay()"
            subprocess.run(
                [sys.executable, "-c", send], env=env, cwd=str(tmp_path), check=True, timeout=60
            )
            assert wait_until(
                lambda: any(event.get("type") == "error" for event in server.accepted), 45
            )
            worker.send_signal(signal.SIGTERM)
            output, _ = worker.communicate(timeout=60)
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.communicate(timeout=10)
        events = list(server.accepted)
    assert worker.returncode == 0, output[-3000:]
    errors = [event for event in events if event.get("type") == "error"]
    assert [error["@simple_error"]["type"] for error in errors] == ["ConnectionError"]
    late = next(event for event in events if event.get("message") == "nightly report is late")
    assert "celery_app.report" in late["tags"] and "worker" in late["tags"]
