"""A program as its user runs it, in a process of its own: the console it had before
``setup()``, uncaught exceptions under a dictConfig alone, and a machine without an API key."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.constants import REPO
from tests.support.faultserver import FaultServer
from tests.support.processes import child_env
from tests.support.waits import wait_until


def run(source: str, env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "program.py"
    path.write_text(textwrap.dedent(source))
    return subprocess.run(
        [sys.executable, str(path)],
        env=env,
        cwd=str(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_warning_is_on_the_console_and_delivered(tmp_path: Path) -> None:
    with FaultServer() as server:
        done = run(
            """
            import logging
            import eventlog_handler
            eventlog_handler.setup()
            logging.getLogger("app").warning("disk space is low")
            logging.getLogger("app").info("not on the console (Python prints WARNING and up)")
            """,
            child_env(server.url),
            tmp_path,
        )
        assert done.returncode == 0, done.stderr
        # Python's last resort prints the bare message, as without the package.
        assert done.stderr.splitlines() == ["disk space is low"]
        assert wait_until(lambda: "disk space is low" in server.arrivals(), 10)


DICTCONFIG = """
import logging.config, threading
logging.config.dictConfig({
    "version": 1,
    "handlers": {"eventlog": {"class": "eventlog_handler.EventLogHandler", "tags": ["dc"]}},
    "root": {"level": "INFO", "handlers": ["eventlog"]},
})

def work():
    raise KeyError("in a thread")

thread = threading.Thread(target=work, name="worker")
thread.start()
thread.join()
raise ValueError("in the main thread")
"""


def test_dictconfig_alone_reports_uncaught_exceptions(tmp_path: Path) -> None:
    with FaultServer() as server:
        plain_env = child_env(server.url)
        done = run(DICTCONFIG, plain_env, tmp_path)
        assert wait_until(lambda: len(server.accepted) >= 2, 10), server.accepted
        errors = {
            event["@simple_error"]["type"]: event
            for event in server.accepted
            if "@simple_error" in event
        }
    assert set(errors) == {"KeyError", "ValueError"}
    assert all("dc" in event["tags"] for event in errors.values())  # the handler's settings
    # Python's own output and exit status are unchanged.
    assert done.returncode == 1
    assert "ValueError: in the main thread" in done.stderr
    assert "KeyError: 'in a thread'" in done.stderr


@pytest.mark.parametrize("off", ["False", '"false"'])  # "false": from a file (it raised)
def test_dictconfig_hooks_false_installs_nothing(tmp_path: Path, off: str) -> None:
    with FaultServer() as server:
        source = DICTCONFIG.replace('"tags": ["dc"]}', f'"tags": ["dc"], "hooks": {off}}}')
        done = run(source, child_env(server.url), tmp_path)
        assert done.returncode == 1
        assert "Unable to configure handler" not in done.stderr, done.stderr
        assert not wait_until(lambda: len(server.accepted) > 0, 2)


def test_no_api_key_runs_on_and_says_so_once(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("EVENTLOG_")}
    env["PYTHONPATH"] = str(REPO)
    env["EVENTLOG_SERVER_URL"] = "http://127.0.0.1:9"  # never reached: nothing may be sent
    done = run(
        """
        import logging
        import eventlog_handler
        handle = eventlog_handler.setup()
        log = logging.getLogger("app")
        log.addHandler(logging.NullHandler())  # the app's own console choice: silent
        for i in range(10):
            log.warning("event %d", i)
        assert handle.stats()["dropped"]["unconfigured"] == 10, handle.stats()
        assert "unconfigured" in repr(handle) and "active" not in repr(handle), repr(handle)
        """,
        env,
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert "EVENTLOG_API_KEY" in lines[0] and "Traceback" not in done.stderr


TRACE_PROGRAM = """
import logging
{before}
import eventlog_handler
eventlog_handler.setup()
log = logging.getLogger("shop.cart")
log.debug("loaded cart 42")
log.info("added sku A-1")
logging.getLogger("urllib3.connectionpool").debug("a library's debug line")
try:
    1 / 0
except ZeroDivisionError:
    log.exception("checkout failed")
"""


def _trace_of_error(before: str, tmp_path: Path) -> tuple[list[str], str]:
    with FaultServer() as server:
        done = run(TRACE_PROGRAM.format(before=before), child_env(server.url), tmp_path)
        assert done.returncode == 0, done.stderr
        assert wait_until(lambda: any("@simple_error" in e for e in server.accepted), 10)
        error = next(event for event in server.accepted if "@simple_error" in event)
        sent = [event["message"] for event in server.accepted]
    assert "loaded cart 42" not in sent  # a trace line, never an event
    return error["data"]["@trace"], done.stderr


def test_the_trace_log_keeps_debug_lines_and_the_console_stays_as_it_was(tmp_path: Path) -> None:
    trace, stderr = _trace_of_error("", tmp_path)
    assert any(line.endswith("Debug shop.cart: loaded cart 42") for line in trace), trace
    assert any(line.endswith("Info shop.cart: added sku A-1") for line in trace), trace
    assert not any("a library's debug line" in line for line in trace), trace
    # Python's last resort prints WARNING and up, as without the package: no DEBUG, no INFO.
    assert "loaded cart 42" not in stderr and "added sku A-1" not in stderr
    assert "checkout failed" in stderr


def test_a_console_the_program_configured_does_not_start_printing_debug(tmp_path: Path) -> None:
    before = "logging.basicConfig(level=logging.INFO, format='%(levelname)s %(message)s')"
    trace, stderr = _trace_of_error(before, tmp_path)
    assert "loaded cart 42" not in stderr  # the program's own console: INFO and up, as before
    assert "INFO added sku A-1" in stderr
    assert not any("loaded cart 42" in line for line in trace), trace
    assert any("added sku A-1" in line for line in trace), trace
