"""Calls a program makes where an exception hurts most: setting the user and tags sits in a
request's hook or middleware (an exception makes every request a 500), ``capture_exception``
in an ``except`` block (an exception takes the place of the one being handled). A value of the
wrong kind raised from inside the package. Now it is left out, said once on stderr, and the
rest is done. Programs in processes of their own, against a loopback server."""

from __future__ import annotations

from pathlib import Path

from tests.support.faultserver import FaultServer
from tests.support.processes import run_program

PROGRAM = """
import logging
import eventlog_handler
from eventlog_handler import add_tags, set_user, user_context

handle = eventlog_handler.setup()
log = logging.getLogger("app")
for request in range(3):  # a hook runs per request: said once, not three times
    set_user(f"u-{request}", data='{"plan": "pro"}')  # JSON text, not a dict
    add_tags(None, "web", ["checkout", 7, None, b"raw"])  # None and bytes: no tags
    log.warning("request %d", request)
with user_context("u-9", data=5):
    log.warning("in a block")
handle.flush(5)
print("done")
"""


def test_a_wrong_kind_of_user_data_or_tag_is_left_out_and_said_once(
    server: FaultServer, tmp_path: Path
) -> None:
    status, stderr, stdout = run_program(PROGRAM, server.url, tmp_path)

    assert status == 0, stderr
    assert stdout[-1] == "done"
    events = {event["message"]: event for event in server.accepted}
    assert [events[f"request {n}"]["@user"] for n in range(3)] == [
        {"identity": f"u-{n}"} for n in range(3)
    ]
    assert events["request 2"]["tags"] == ["web", "checkout", "7"]
    assert events["in a block"]["@user"] == {"identity": "u-9"}
    said = [line for line in stderr.splitlines() if line.startswith("eventlog_handler:")]
    assert said == [
        "eventlog_handler: set_user()'s data must be a mapping (a dict), got a str; the user "
        "is set without it",
        "eventlog_handler: add_tags() takes strings, or lists of strings; a NoneType was left out",
    ], stderr


CAPTURE_PROGRAM = """
import logging
import eventlog_handler
from eventlog_handler import capture_exception

print(capture_exception(ValueError("before setup")))
handle = eventlog_handler.setup()
for n in range(2):
    try:
        raise KeyError(f"sku-{n}")
    except KeyError as exc:
        capture_exception(exc, lvl="Warn", level="warning", data="not a dict")
        capture_exception(KeyError)  # the class, not the exception
try:
    raise OSError("disk")
except OSError as exc:
    capture_exception(exc, level="chatty")
handle.flush(5)
print("done")
"""


def test_capture_exception_with_wrong_arguments_reports_what_it_can_and_says_why(
    server: FaultServer, tmp_path: Path
) -> None:
    status, stderr, stdout = run_program(CAPTURE_PROGRAM, server.url, tmp_path)

    assert status == 0, stderr
    assert stdout == ["False", "done"], stdout
    levels = {event["@simple_error"]["message"]: event["@level"] for event in server.accepted}
    assert levels == {"'sku-0'": "Warn", "'sku-1'": "Warn", "disk": "Error"}, server.accepted
    said = [line for line in stderr.splitlines() if line.startswith("eventlog_handler:")]
    assert said == [
        "eventlog_handler: capture_exception() was called before setup(): nothing is sent.",
        "eventlog_handler: capture_exception() has no option 'lvl' (it takes level, source and "
        "data); ignored.",
        "eventlog_handler: capture_exception() takes data as a dict, got str; left out.",
        "eventlog_handler: capture_exception() takes an exception (an instance), got the class "
        "KeyError; nothing is sent.",
        "eventlog_handler: capture_exception() has no level 'chatty'; Error is used.",
    ], stderr
