"""Event references (``data["@ref:session"]``, ``@ref:parent``) reach the service as given: the
data exclusions (which mask keys naming a session, a token...) never mask them, while a key
that merely contains the word still is."""

from __future__ import annotations

import logging

from eventlog_handler import EventLogHandler
from tests.support.constants import API_KEY, FAST
from tests.support.faultserver import FaultServer
from tests.support.waits import wait_until


def test_ref_keys_are_sent_as_given() -> None:
    with FaultServer() as server:
        handler = EventLogHandler(API_KEY, server.url, **FAST)
        logger = logging.getLogger("refs")
        logger.handlers[:] = [handler]
        logger.propagate = False
        logger.setLevel(logging.INFO)
        try:
            extra = {"@ref:session": "sess-42", "@ref:parent": "abc123def4", "session": "s3cr3t"}
            logger.warning("in a session", extra=extra)
            assert wait_until(lambda: len(server.accepted) == 1, 10)
        finally:
            logger.handlers.clear()
            handler.close()
    data = server.accepted[0]["data"]
    assert data["@ref:session"] == "sess-42"
    assert data["@ref:parent"] == "abc123def4"
    assert data["session"] == "[excluded]"  # the exclusions still apply to other keys
