"""The program's console and its own logging configuration around ``setup()``, observed the way
a user observes them: the program's stderr, and the events a loopback server receives."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.constants import REPO
from tests.support.faultserver import FaultServer
from tests.support.processes import child_env, run_program
from tests.support.waits import free_port, http_status


def sent_messages(server: FaultServer, count: int) -> list[str]:
    assert server.wait_for(count, timeout=10), server.statuses()
    return sorted(str(event.get("message")) for event in server.accepted)


def test_basicconfig_without_a_level_after_setup_prints_what_it_would_without_the_package(
    tmp_path: Path,
) -> None:
    """``basicConfig(format=...)`` after ``setup()`` leaves the root logger's level alone:
    without the package it is Python's WARNING, and the console prints warnings only. With it,
    the root logger is at setup's level (DEBUG for the trace log): the console must not print
    every library's DEBUG and INFO lines."""
    program = """
        import logging, eventlog_handler
        eventlog_handler.setup()
        logging.basicConfig(format="CONSOLE %(levelname)s %(name)s %(message)s")
        for name in ("app", "some.library"):
            logging.getLogger(name).debug("debug line")
            logging.getLogger(name).info("info line")
        logging.getLogger("app").warning("warning line")
    """
    with FaultServer() as server:
        status, stderr, _ = run_program(program, server.url, tmp_path)
        assert status == 0, stderr
        assert [line for line in stderr.splitlines() if line.startswith("CONSOLE")] == [
            "CONSOLE WARNING app warning line"
        ], stderr
        assert sent_messages(server, 3) == ["info line", "info line", "warning line"]


def test_dictconfig_imported_by_name_before_setup_does_not_stop_the_events(
    tmp_path: Path,
) -> None:
    """gunicorn's logging does ``from logging.config import dictConfig`` at import, before the
    application's ``setup()``: a configuration through that name took the handler off the root
    logger, and no event arrived after it."""
    program = """
        import logging, time
        from logging.config import dictConfig
        import eventlog_handler
        eventlog_handler.setup()
        dictConfig({
            "version": 1,
            "disable_existing_loggers": False,
            "handlers": {"console": {"class": "logging.StreamHandler"}},
            "root": {"level": "INFO", "handlers": ["console"]},
        })
        time.sleep(0.5)  # the setup takes its place back on a thread of its own
        logging.getLogger("shop").error("payment failed")
        dictConfig({  # a reload configures again: the setup comes back again
            "version": 1,
            "disable_existing_loggers": False,
            "handlers": {"console": {"class": "logging.StreamHandler"}},
            "root": {"level": "INFO", "handlers": ["console"]},
        })
        time.sleep(0.5)
        logging.getLogger("shop").error("refund failed")
    """
    with FaultServer() as server:
        status, stderr, _ = run_program(program, server.url, tmp_path)
        assert status == 0, stderr
        assert "payment failed" in stderr  # the program's console
        assert sent_messages(server, 2) == ["payment failed", "refund failed"]


def test_basicconfig_after_setup_configures_the_console_and_events_keep_flowing(
    tmp_path: Path,
) -> None:
    """``basicConfig`` does nothing when the root logger has a handler: after ``setup()`` the
    program's format and level were ignored and its INFO lines never printed."""
    program = """
        import logging, eventlog_handler
        eventlog_handler.setup()
        logging.basicConfig(level=logging.INFO, format="CONSOLE %(levelname)s %(message)s")
        logging.getLogger("app").info("an info line")
        logging.getLogger("app").warning("a warning line")
    """
    with FaultServer() as server:
        status, stderr, _ = run_program(program, server.url, tmp_path)
        assert status == 0, stderr
        assert "CONSOLE INFO an info line" in stderr
        assert "CONSOLE WARNING a warning line" in stderr
        assert sent_messages(server, 2) == ["a warning line", "an info line"]


def test_a_console_configured_before_setup_prints_what_it_printed_before(tmp_path: Path) -> None:
    """``basicConfig(level=WARNING)``, then ``setup()``: the root logger goes down to INFO so
    INFO records become events, and the console handler, which takes its level from the root
    logger, would have started printing them. It prints what it printed before (and a logger
    the program turns up to DEBUG still prints its lines), and after ``close()`` the same."""
    program = """
        import logging, eventlog_handler
        logging.basicConfig(level=logging.WARNING, format="CONSOLE %(levelname)s %(message)s")
        handle = eventlog_handler.setup()
        logging.getLogger("app").info("info: an event, not a console line")
        logging.getLogger("app").warning("warning: both")
        logging.getLogger("debugged").setLevel(logging.DEBUG)
        logging.getLogger("debugged").debug("debug of a logger the program turned up")
        logging.getLogger().handlers[0].setLevel(logging.INFO)  # the program's own choice
        logging.getLogger("app").info("info once the console asks for it")
        logging.getLogger().handlers[0].setLevel(logging.NOTSET)
        handle.close(5)
        logging.getLogger("app").info("info after close: neither")
    """
    with FaultServer() as server:
        status, stderr, _ = run_program(program, server.url, tmp_path)
        assert status == 0, stderr
        assert "CONSOLE WARNING warning: both" in stderr
        assert "CONSOLE DEBUG debug of a logger the program turned up" in stderr
        assert "CONSOLE INFO info once the console asks for it" in stderr
        assert "an event, not a console line" not in stderr, stderr
        assert "after close" not in stderr, stderr
        assert sent_messages(server, 3) == [
            "info once the console asks for it",
            "info: an event, not a console line",
            "warning: both",
        ]


def test_a_debug_console_shows_the_programs_requests_not_the_packages(tmp_path: Path) -> None:
    """``basicConfig(level=DEBUG)`` before ``setup()``: the console printed urllib3's lines of
    the package's own requests ("Starting new HTTP connection", ``"POST /api/v2/events HTTP/1.1"
    202``), one pair per batch. The program's own requests keep their lines."""
    program = """
        import logging, os, requests, eventlog_handler
        logging.basicConfig(level=logging.DEBUG, format="CONSOLE %(name)s %(message)s")
        handle = eventlog_handler.setup(flush_interval=0.05)
        logging.getLogger("app").warning("hello")
        assert handle.flush(10)
        requests.get(os.environ["EVENTLOG_SERVER_URL"] + "/mine")  # the program's own
        handle.close(5)
    """
    with FaultServer() as server:
        status, stderr, _ = run_program(program, server.url, tmp_path)
        assert status == 0, stderr
        assert sent_messages(server, 1) == ["hello"]
    assert "CONSOLE app hello" in stderr, stderr
    assert '"GET /mine HTTP/1.1"' in stderr, stderr  # urllib3's line of the program's request
    assert "/api/v2/events" not in stderr, stderr
    assert "/api/v2/projects/config" not in stderr, stderr


def test_dictconfig_with_a_root_section_after_setup_does_not_stop_the_events(
    tmp_path: Path,
) -> None:
    """A ``LOGGING`` dict applied after ``setup()`` (as Django applies its settings) replaces
    the root logger's handlers: every event stopped, silently. The setup takes its place back;
    the program's console and root level apply to the console."""
    program = """
        import logging, logging.config, eventlog_handler
        eventlog_handler.setup()
        logging.config.dictConfig({
            "version": 1,
            "disable_existing_loggers": False,
            "formatters": {"plain": {"format": "CONSOLE %(levelname)s %(message)s"}},
            "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
            "root": {"level": "WARNING", "handlers": ["console"]},
        })
        logging.getLogger("shop").info("order placed")
        logging.getLogger("shop").warning("stock low")
    """
    with FaultServer() as server:
        status, stderr, _ = run_program(program, server.url, tmp_path)
        assert status == 0, stderr
        assert "CONSOLE WARNING stock low" in stderr
        assert "order placed" not in stderr  # the program's root level governs its console
        assert sent_messages(server, 2) == ["order placed", "stock low"]


def test_flask_run_prints_its_lines_with_setup(tmp_path: Path) -> None:
    """``flask run``: werkzeug prints ``* Running on ...`` and one line per request only when
    no handler would; the package's handlers on the root logger made it print nothing."""
    pytest.importorskip("flask")
    (tmp_path / "shop.py").write_text(
        "import logging, eventlog_handler\n"
        "from flask import Flask\n"
        "eventlog_handler.setup()\n"
        "app = Flask(__name__)\n"
        "@app.get('/')\n"
        "def index():\n"
        "    logging.getLogger('shop').warning('index served')\n"
        "    return 'ok'\n"
    )
    port = free_port()
    with FaultServer() as server:
        env = child_env(server.url)
        env["PYTHONPATH"] = f"{tmp_path}:{env['PYTHONPATH']}"
        process = subprocess.Popen(
            [sys.executable, "-m", "flask", "--app", "shop", "run", "--port", str(port)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            cwd=str(REPO),
        )
        try:
            assert http_status(port) == 200
            assert server.wait_for(1, timeout=10)
        finally:
            process.terminate()
            output, _ = process.communicate(timeout=20)
    assert f"Running on http://127.0.0.1:{port}" in output, output
    assert '"GET / HTTP/1.1" 200' in output, output
    assert [event["message"] for event in server.accepted] == ["index served"]


def test_a_flask_app_run_by_python_prints_its_lines_when_flask_comes_after_setup(
    tmp_path: Path,
) -> None:
    """``python app.py`` with ``setup()`` at the top and Flask imported after it: werkzeug
    decides at its first line, seeing the package's handlers, to print nothing; its lines are
    printed as without the package."""
    pytest.importorskip("flask")
    port = free_port()
    program = tmp_path / "app.py"
    program.write_text(
        "import eventlog_handler\n"
        "eventlog_handler.setup()\n"
        "from flask import Flask\n"
        "app = Flask(__name__)\n"
        "@app.get('/')\n"
        "def index():\n"
        "    return 'ok'\n"
        f"app.run(port={port})\n"
    )
    with FaultServer() as server:
        process = subprocess.Popen(
            [sys.executable, str(program)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=child_env(server.url),
            cwd=str(REPO),
        )
        try:
            assert http_status(port) == 200
        finally:
            process.terminate()
            output, _ = process.communicate(timeout=20)
    assert f"Running on http://127.0.0.1:{port}" in output, output
    assert '"GET / HTTP/1.1" 200' in output, output


def test_a_dictconfig_building_the_handler_leaves_asyncios_and_futures_loggers_on(
    tmp_path: Path,
) -> None:
    """The README's dictConfig, with ``disable_existing_loggers`` at its default: importing the
    handler's class created ``asyncio``'s and ``concurrent.futures``' loggers, and the
    configuration then disabled them as loggers that were there before it. A task's
    "Task exception was never retrieved" no longer printed, and the exception of a future's
    callback was neither printed nor sent."""
    program = """
        import logging.config
        logging.config.dictConfig({
            "version": 1,
            "handlers": {
                "console": {"class": "logging.StreamHandler"},
                "eventlog": {"class": "eventlog_handler.EventLogHandler", "level": "INFO"},
            },
            "root": {"level": "INFO", "handlers": ["console", "eventlog"]},
        })

        import asyncio, gc
        from concurrent.futures import ThreadPoolExecutor

        def callback(future):
            raise KeyError("callback failed")

        with ThreadPoolExecutor(1) as pool:
            pool.submit(int, "1").add_done_callback(callback)

        async def fails():
            raise RuntimeError("task failed")

        async def main():
            task = asyncio.get_running_loop().create_task(fails())
            await asyncio.sleep(0.1)
            del task
            gc.collect()

        asyncio.run(main())
        logging.getLogger("shop").warning("the last record")
        logging.shutdown()
    """
    with FaultServer() as server:
        status, stderr, _ = run_program(program, server.url, tmp_path)
        assert status == 0, stderr
        assert "Task exception was never retrieved" in stderr
        assert "exception calling callback for" in stderr
        assert server.wait_for(3, timeout=10), server.accepted
        messages = [str(event.get("message")) for event in server.accepted]
    assert any(m.startswith("exception calling callback for") for m in messages), messages
    assert "the last record" in messages
    errors = [event for event in server.accepted if event.get("type") == "error"]
    assert {e["@simple_error"]["type"] for e in errors} >= {"KeyError", "RuntimeError"}
