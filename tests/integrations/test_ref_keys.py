"""Event references (``data["@ref:session"]``, ``@ref:parent``) reach the service as given: the
data exclusions (which mask keys naming a session, a token...) never mask them, while a key
that merely contains the word still is. A value that is not a reference id (8 to 100 letters,
digits or ``-``) travels as ``_@ref:<name>``, as the service's other keys given as data do (plain
data then, the exclusions applied), and is said once on stderr."""

from __future__ import annotations

import logging
from pathlib import Path

from eventlog_handler import EventLogHandler
from tests.support.constants import API_KEY, FAST
from tests.support.faultserver import FaultServer
from tests.support.processes import run_program
from tests.support.waits import wait_until


def test_ref_keys_are_sent_as_given() -> None:
    with FaultServer() as server:
        handler = EventLogHandler(API_KEY, server.url, **FAST)
        logger = logging.getLogger("refs")
        logger.handlers[:] = [handler]
        logger.propagate = False
        logger.setLevel(logging.INFO)
        try:
            extra = {"@ref:session": "sess-0042", "@ref:parent": "abc123def4", "session": "s3cr3t"}
            logger.warning("in a session", extra=extra)
            assert wait_until(lambda: len(server.accepted) == 1, 10)
        finally:
            logger.handlers.clear()
            handler.close()
    data = server.accepted[0]["data"]
    assert data["@ref:session"] == "sess-0042"
    assert data["@ref:parent"] == "abc123def4"
    assert data["session"] == "[excluded]"  # the exclusions still apply to other keys


BAD_REFS = """
import logging
import eventlog_handler
eventlog_handler.setup(sessions=True)
log = logging.getLogger("refs")
log.warning("first", extra={"@ref:session": "bad id!", "@ref:parent": "abc123def4"})
log.warning("second", extra={"@ref:session": "bad id!"})
log.warning("third", extra={"@ref:order": 42})
log.warning("fourth", extra={"@ref:order": "bad id!", "_@ref:order": "mine", "@level": "x"})
"""


def test_a_ref_that_is_not_a_reference_id_is_renamed_and_said_once(tmp_path: Path) -> None:
    with FaultServer() as server:
        status, stderr, _ = run_program(BAD_REFS, server.url, tmp_path)
        assert status == 0, stderr
        assert server.wait_for(4), stderr
    logs = {event.get("message"): event["data"] for event in server.accepted}
    for message in ("first", "second"):
        data = logs[message]
        assert data["_@ref:session"] == "[excluded]"  # plain data now: "session" is excluded
        # the reference the service reads is the session's own id, not the bad one
        assert data.get("@ref:session", "") != "bad id!"
    assert logs["first"]["@ref:parent"] == "abc123def4"  # a good one is sent as given
    assert logs["third"]["_@ref:order"] == 42 and "@ref:order" not in logs["third"]
    # set aside into a free name: the program's own "_@ref:order" was overwritten
    assert logs["fourth"]["_@ref:order"] == "mine", logs["fourth"]
    assert logs["fourth"]["__@ref:order"] == "bad id!", logs["fourth"]
    assert logs["fourth"]["_@level"] == "x", logs["fourth"]
    lines = [line for line in stderr.splitlines() if "not a reference id" in line]
    assert len(lines) == 2, stderr  # once per name
    assert "'@ref:session'" in lines[0] and "'_@ref:session'" in lines[0]
    assert "a str of 7 characters" in lines[0] and "bad id!" not in stderr
    assert "'@ref:order'" in lines[1] and "a value of type int" in lines[1]
