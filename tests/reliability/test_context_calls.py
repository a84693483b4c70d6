"""Setting the user and tags sits in a request's hook or middleware, where an exception makes
every request a 500: a value of the wrong kind (``set_user(data="...")``, ``add_tags(None)``)
raised ``TypeError``/``ValueError`` from inside the package. Now it is left out, said once on
stderr, and the rest is set. A program in a process of its own, against a loopback server."""

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
    add_tags(None, "web", ["checkout", 7])
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
