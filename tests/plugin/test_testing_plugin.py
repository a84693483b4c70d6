"""The opt-in pytest plugin, used the way a user's own test suite uses it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONFTEST = 'pytest_plugins = ["eventlog_handler.testing"]\n'

USER_TESTS = """
import logging
import os

import eventlog_handler


def checkout(order):
    if order is None:
        raise ValueError("no order")


def test_events_of_my_code_arrive(eventlog):
    assert os.environ["EVENTLOG_SERVER_URL"] == eventlog.url
    eventlog_handler.setup(level="INFO")
    logging.getLogger("shop").info("order %s placed", 7, extra={"total": 3.5})
    try:
        checkout(None)
    except ValueError:
        logging.getLogger("shop").exception("checkout failed")
    [log] = eventlog.events(type="log")
    assert log["message"] == "order 7 placed"
    assert log["data"]["total"] == 3.5
    [error] = eventlog.events(type="error")
    assert error["data"]["@simple_error"]["type"] == "ValueError"
    assert eventlog.messages() == ["order 7 placed", "checkout failed"]


def test_each_test_gets_a_fresh_collector(eventlog):
    assert eventlog.events() == []
    eventlog_handler.setup(level="WARNING")
    logging.getLogger("shop").info("not sent: below the level")
    logging.getLogger("shop").warning("sent")
    assert eventlog.messages() == ["sent"]
    eventlog.clear()
    assert eventlog.events() == []


def test_a_failing_assertion_fails(eventlog):
    eventlog_handler.setup()
    logging.getLogger("x").error("real")
    assert eventlog.messages() == ["something else"]
"""


def test_plugin_gives_user_tests_a_collector_and_their_events(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_user_app.py").write_text(textwrap.dedent(USER_TESTS))
    completed = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    output = completed.stdout + completed.stderr
    # Two tests pass; the third, whose assertion is wrong on purpose, fails.
    assert "2 passed" in output and "1 failed" in output, output
    assert "test_a_failing_assertion_fails" in output
    assert "'real'" in output  # the failure shows what actually arrived


ISOLATION_TESTS = """
import logging

import eventlog_handler


def test_a_sets_a_user_tags_and_logs(eventlog):
    eventlog_handler.setup()
    eventlog_handler.set_user("u-from-test-a")
    eventlog_handler.add_tags("from-test-a")
    logging.getLogger("shop").warning("line from test a")
    assert eventlog.messages() == ["line from test a"]


def test_b_starts_without_them(eventlog):
    eventlog_handler.setup()
    try:
        raise ValueError("in test b")
    except ValueError:
        logging.getLogger("shop").exception("failed in b")
    [error] = eventlog.events(type="error")
    assert "@user" not in error, error.get("@user")
    assert "from-test-a" not in (error.get("tags") or []), error.get("tags")
    trace = error["data"].get("@trace") or []
    assert not any("test a" in line for line in trace), trace


def test_c_sends_elsewhere(eventlog):
    eventlog_handler.setup(server_url="http://127.0.0.1:9")


def test_d_finds_nothing_installed(eventlog):
    import sys
    from eventlog_handler import _setup
    assert _setup.current() is None
    # The package's hook is gone (on 3.10, the exceptiongroup backport may have its own).
    assert not getattr(sys.excepthook, "__module__", "").startswith("eventlog_handler")
"""


def test_each_test_starts_without_what_the_one_before_set(tmp_path: Path) -> None:
    """The user, tags and trace log a test left on its thread went with the next test's
    events, and a ``setup()`` that sent elsewhere stayed installed for the tests after. (With
    a proxy in the environment, which can't reach the collector: it was sent through it.)"""
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_isolation.py").write_text(textwrap.dedent(ISOLATION_TESTS))
    completed = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT), "HTTP_PROXY": "http://127.0.0.1:9"},
    )
    output = completed.stdout + completed.stderr
    assert "4 passed" in output, output


@pytest.mark.parametrize(
    ("before", "after"),
    [("", "127.0.0.1,localhost"), ("minio", "minio,127.0.0.1,localhost"), ("*", "*")],
)
def test_the_no_proxy_of_a_collector_keeps_what_was_set(
    monkeypatch: pytest.MonkeyPatch, before: str, after: str
) -> None:
    """``NO_PROXY=*`` (no proxy for any host) holds only as the whole value: with the
    collector's addresses added, every other host of the test went through the proxy."""
    from eventlog_handler.collector import Collector

    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.setenv("NO_PROXY", before)
    assert Collector.no_proxy() == after
