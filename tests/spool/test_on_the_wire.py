"""A batch on the wire when a program with a spool is stopped, to a server that never answers
(a firewall that drops packets, a server stuck behind a proxy): its outcome is unknown, and
the process ends before it is known. It was neither delivered nor kept: a whole batch lost,
spool or not. A copy now goes to disk, sent again at the next start; the service stores an
event once by its ``reference_id``, so a copy of what it did store is not stored twice.

The program is a real process stopped with ``SIGTERM``; the service a loopback server.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

from tests.support.faultserver import Delay, FaultServer
from tests.support.processes import child_env
from tests.support.waits import wait_until

PROGRAM = textwrap.dedent(
    """
    import logging, sys, time
    import eventlog_handler

    eventlog_handler.setup(spool_path=sys.argv[1], flush_interval=0.05, server_settings=False)
    log = logging.getLogger("shop")
    for index in range(50):
        log.warning("on the wire %d", index)
    print("logged", flush=True)
    time.sleep(60)
    """
)

NEXT_START = textwrap.dedent(
    """
    import sys
    import eventlog_handler

    handle = eventlog_handler.setup(spool_path=sys.argv[1], server_settings=False)
    print("flushed", handle.flush(20), flush=True)
    """
)


def _answering(server: FaultServer, answer: Any) -> threading.Event:
    """Have ``server`` answer every post with ``answer``; the event is set once a post's
    body has arrived (the server's record of it comes only with its answer)."""
    arrived = threading.Event()

    def action(events: list[Any], size: int) -> Any:
        arrived.set()
        return answer

    server.default = action
    return arrived


def _stopped_while_posting(server: FaultServer, spool: Path, posted: threading.Event) -> str:
    """Run :data:`PROGRAM` until its batch is on the wire, stop it with SIGTERM; its stderr."""
    process = subprocess.Popen(
        [sys.executable, "-c", PROGRAM, str(spool)],
        env=child_env(server.url),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "logged"
        assert posted.wait(10), "nothing was posted"
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    return stderr


def _next_start(port: int, spool: Path, ids: set[str]) -> FaultServer:
    """The program's next start with ``spool``, the service up again on ``port`` (and
    remembering the reference ids in ``ids``, as the service does)."""
    server = FaultServer(port=port, ids=ids).start()
    try:
        done = subprocess.run(
            [sys.executable, "-c", NEXT_START, str(spool)],
            env=child_env(server.url),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0 and "flushed True" in done.stdout, done
    finally:
        server.stop()
    return server


def test_a_batch_a_server_never_answers_at_exit_is_kept_for_the_next_start(
    tmp_path: Path,
) -> None:
    spool = tmp_path / "spool"
    with FaultServer() as hung:
        port = hung.port
        stderr = _stopped_while_posting(hung, spool, _answering(hung, "hang"))
    assert "event(s) were on their way" in stderr, stderr
    assert "a copy is kept in the spool" in stderr, stderr
    assert not hung.accepted
    again = _next_start(port, spool, set())
    messages = sorted(str(event["message"]) for event in again.accepted)
    assert messages == sorted(f"on the wire {index}" for index in range(50)), messages
    assert again.duplicates == []


def test_a_batch_stored_after_the_exit_is_not_stored_twice(tmp_path: Path) -> None:
    """The slow server did store the batch, after the program had ended: the copy sent at the
    next start is discarded by its reference ids, as the service discards it."""
    spool = tmp_path / "spool"
    ids: set[str] = set()
    with FaultServer(ids=ids) as slow:
        port = slow.port
        stderr = _stopped_while_posting(slow, spool, _answering(slow, Delay(4.0, 202)))
        assert "a copy is kept in the spool" in stderr, stderr
        assert wait_until(lambda: len(slow.accepted) == 50, 10), len(slow.accepted)
    again = _next_start(port, spool, ids)
    assert sorted(again.duplicates) == sorted(str(event["reference_id"]) for event in slow.accepted)
    assert again.accepted == []  # nothing stored twice


CROWDED = textwrap.dedent(
    """
    import logging, sys, time
    import eventlog_handler

    eventlog_handler.setup(spool_path=sys.argv[1], flush_interval=0.05, server_settings=False,
                           spool_max_bytes=100_000, batch_size=50)
    log = logging.getLogger("shop")
    pad = "x" * 900
    for index in range(50):
        log.warning("on the wire %d %s", index, pad)
    time.sleep(0.5)  # those are on the wire
    for index in range(40):
        log.warning("never sent %d %s", index, pad)
    print("logged", flush=True)
    time.sleep(60)
    """
)


def test_the_copy_never_takes_the_place_of_events_never_sent(tmp_path: Path) -> None:
    """A small spool: the copy of the batch on the wire went through the same bound as the
    rest, and evicted the events that were certainly never sent to make room for events the
    service may have stored (40 never sent, 0 kept; 28 copies kept)."""
    spool = tmp_path / "spool"
    errors = tmp_path / "stderr"  # a file: its console lines would fill a pipe
    with FaultServer() as hung, errors.open("w") as stream:
        port = hung.port
        posted = _answering(hung, "hang")
        process = subprocess.Popen(
            [sys.executable, "-c", CROWDED, str(spool)],
            env=child_env(hung.url),
            stdout=subprocess.PIPE,
            stderr=stream,
            text=True,
        )
        try:
            assert process.stdout is not None
            assert process.stdout.readline().strip() == "logged"
            assert posted.wait(10)
            process.send_signal(signal.SIGTERM)
            process.communicate(timeout=30)
        finally:
            if process.poll() is None:
                process.kill()
                process.communicate()
    stderr = errors.read_text()
    kept = [line for line in stderr.splitlines() if "kept in the spool" in line]
    assert kept, stderr
    kept_count = int(kept[0].split("eventlog_handler: ")[1].split()[0])
    again = _next_start(port, spool, set())
    messages = [str(event["message"]) for event in again.accepted]
    never_sent = [message for message in messages if message.startswith("never sent")]
    copies = [message for message in messages if message.startswith("on the wire")]
    assert len(never_sent) == kept_count >= 20, (kept_count, len(never_sent), stderr)
    assert len(never_sent) + len(copies) == len(messages)
    if "a copy" not in stderr:
        assert copies == []
