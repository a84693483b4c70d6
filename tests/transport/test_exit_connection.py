"""The exit flush keeps the connection the program already has, and closes what it opens.

urllib3 closes a pool's connections with :class:`weakref.finalize`, whose ``atexit`` hook closes
every pool's idle connections at once and then stops all finalizers for good. Run before the
package's own exit flush, it would make that flush open a new connection (a TLS handshake to a
remote service, at exit), and leave a connection opened during the flush to be garbage
collected open (``ResourceWarning: unclosed <socket...>`` under ``python -X dev``).
"""

from __future__ import annotations

from pathlib import Path

from tests.support.capture import CaptureServer
from tests.support.processes import run_program

PROGRAM = """
import logging
import eventlog_handler

handle = eventlog_handler.setup()
log = logging.getLogger("app")
log.warning("before the flush")
assert handle.flush(10)
log.warning("left for the exit flush")
"""


def test_the_exit_flush_posts_on_the_programs_open_connection(tmp_path: Path) -> None:
    server = CaptureServer().start()
    try:
        code, stderr, _ = run_program(PROGRAM, server.url, tmp_path, PYTHONDEVMODE="1")
        server.wait_for(2)
    finally:
        server.stop()
    assert code == 0, stderr
    posts = [request for request in server.requests if request["path"] == "/api/v2/events"]
    assert [event["message"] for event in server.events] == [
        "before the flush",
        "left for the exit flush",
    ]
    assert len(posts) == 2
    assert posts[0]["client_port"] == posts[1]["client_port"], posts  # one connection
    assert "ResourceWarning" not in stderr, stderr
