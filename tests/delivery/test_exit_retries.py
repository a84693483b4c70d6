"""What the exit flush does with events the service just refused or asked to wait for.

A job logs three warnings, flushes, and ends. When the service refused the key or the URL
(400, 401, 403, 404, 415, 426, a redirect), no try at exit can mend it: the exit posts nothing
more, and counts the events (or keeps them in the spool). When it asked to wait (402 until the
next usage bucket, 429 with or without ``Retry-After``, 503 with one), the exit tries again
when the wait ends if that is before its deadline, and not at all if it is after. A failure
that may have ended by now (a 500 without ``Retry-After``) gets one more try at once, as
before.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.faultserver import FaultServer, Reply
from tests.support.processes import marks, run_program

PROGRAM = """
import atexit, json, logging, time

def report():  # registered before the import: runs after the package's exit flush
    import eventlog_handler.delivery._engine as transport
    [engine] = transport.engines()
    print("MARK stats", json.dumps(engine.stats()), flush=True)

atexit.register(report)

import eventlog_handler

handle = eventlog_handler.setup(capture_exceptions=False, OPTIONS)
log = logging.getLogger("job")
for index in range(3):
    log.warning("warning %d", index)
sent = handle.flush(FLUSH)
print("MARK flush " + json.dumps({"sent": sent, "at": time.time()}), flush=True)
"""


def run_job(
    server: FaultServer, tmp_path: Path, options: str = "", flush: float = 8
) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """Run the job; its stderr, the flush's mark and the stats after the exit flush."""
    program = PROGRAM.replace("OPTIONS", options or "retry_initial=1.0").replace(
        "FLUSH", repr(flush)
    )
    code, stderr, lines = run_program(program, server.url, tmp_path)
    assert code == 0, stderr
    found = marks(lines)
    return stderr, found["flush"], found["stats"]


REDIRECT = Reply(302, b"", {"Location": "http://127.0.0.1:9/elsewhere"})


@pytest.mark.parametrize(
    ("answer", "options"),
    [
        pytest.param(401, "", id="401"),
        pytest.param(403, "", id="403"),
        pytest.param(400, "", id="400"),
        pytest.param(404, "", id="404"),
        pytest.param(415, "", id="415"),
        pytest.param(426, "", id="426"),
        pytest.param(REDIRECT, "", id="302"),
        pytest.param(402, "", id="402"),
        pytest.param(Reply(429, b"", {"Retry-After": "30"}), "", id="429-retry-after"),
        pytest.param(Reply(503, b"", {"Retry-After": "30"}), "", id="503-retry-after"),
        # Without Retry-After, a throttle's backoff (15 to 30 s here) is the wait.
        pytest.param(429, "retry_initial=30.0", id="429-backoff"),
    ],
)
def test_the_exit_does_not_post_again_what_was_refused_or_must_wait(
    server: FaultServer, tmp_path: Path, answer: Any, options: str
) -> None:
    """The exit posted the three events again, milliseconds after the refusal (or the 429,
    or the 402), whose next try was a minute or more away."""
    server.default = answer
    stderr, flush, stats = run_job(server, tmp_path, options)
    assert flush["sent"] is False
    assert len(server.requests) == 1, [
        (seen.status, seen.at - flush["at"]) for seen in server.requests
    ]
    assert stats["captured"] == 3 and stats["delivered"] == 0
    assert stats["dropped"]["shutdown"] == 3, stats  # counted, with the cause said
    assert "3 event(s) could not be sent" in stderr, stderr
    assert "last error:" in stderr, stderr


def test_with_a_spool_what_was_refused_is_kept_for_the_next_start(
    server: FaultServer, tmp_path: Path
) -> None:
    server.default = 401
    spool = tmp_path / "spool"
    stderr, flush, stats = run_job(server, tmp_path, f"spool_path={str(spool)!r}")
    assert flush["sent"] is False
    assert len(server.requests) == 1
    assert stats["spooled"] == 3 and stats["dropped_total"] == 0, stats
    assert "3 event(s) kept in the spool" in stderr, stderr


def test_a_wait_the_service_asked_for_that_ends_before_the_deadline_is_kept(
    server: FaultServer, tmp_path: Path
) -> None:
    """A 429 with ``Retry-After: 1``, then the exit (``shutdown_timeout`` 2 s): the events are
    posted again when the second has passed, not at once, and arrive."""
    server.script.append(Reply(429, b"", {"Retry-After": "1"}))
    stderr, flush, stats = run_job(server, tmp_path, flush=0.2)
    assert flush["sent"] is False  # the retry comes after the flush's deadline
    assert len(server.requests) == 2, server.statuses()
    first, second = server.requests
    assert second.at - first.at >= 0.9, second.at - first.at
    assert sorted(event["message"] for event in server.accepted) == [
        f"warning {index}" for index in range(3)
    ]
    assert stats["delivered"] == 3 and stats["dropped_total"] == 0, stats
    assert "could not be sent" not in stderr, stderr


def test_a_failure_that_may_have_ended_still_gets_one_more_try_at_exit(
    server: FaultServer, tmp_path: Path
) -> None:
    """A 500 without ``Retry-After``, whose backoff (15 to 30 s) runs past the exit: the exit
    tries once more at once, as before, and the events arrive."""
    server.script.append(500)
    stderr, flush, stats = run_job(server, tmp_path, "retry_initial=30.0", flush=0.5)
    assert flush["sent"] is False
    assert server.statuses() == [500, 202]
    assert server.requests[1].at - flush["at"] < 1.5  # at the exit, not after the backoff
    assert stats["delivered"] == 3, stats
    assert "could not be sent" not in stderr, stderr
