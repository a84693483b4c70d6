"""At exit every event has exactly one outcome or is honestly pending: a batch that the service
stores just after the exit deadline is reported as of unknown outcome, never as lost, and the
counts add up (checked after the exit flush, from an ``atexit`` function that runs after it)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.support.faultserver import Delay, FaultServer
from tests.support.processes import marks, run_program
from tests.support.waits import wait_until

PROGRAM = """
import atexit, json, logging

def report():  # registered first, so it runs after the package's exit flush
    import eventlog_handler.delivery._engine as transport
    [engine] = transport.engines()
    print("MARK stats", json.dumps(engine.stats()), flush=True)

atexit.register(report)

import eventlog_handler

eventlog_handler.setup(shutdown_timeout=1.0, flush_interval=5.0)
log = logging.getLogger("app.exit")
for index in range(50):
    log.info("pending %d", index)
"""


def test_a_batch_stored_after_the_deadline_is_not_reported_as_lost(
    server: FaultServer, tmp_path: Path
) -> None:
    server.default = Delay(1.6, 202)  # the answer comes 0.6 s after the exit deadline
    code, stderr, lines = run_program(PROGRAM, server.url, tmp_path)
    assert code == 0, stderr
    assert "could not be sent" not in stderr, stderr
    assert "50 event(s) were on their way" in stderr and "outcome is unknown" in stderr, stderr
    stats = marks(lines)["stats"]
    assert stats["captured"] == 50
    assert stats["in_flight"] == 50 and stats["delivered"] == 0
    assert stats["dropped_total"] == 0 and stats["queued"] == 0
    # ... and the service did store them.
    assert wait_until(lambda: len(server.accepted) == 50, 5)


def test_what_never_left_is_counted_as_dropped_at_exit(server: FaultServer, tmp_path: Path) -> None:
    server.default = "hang"
    program = PROGRAM.replace("flush_interval=5.0", "flush_interval=0.05").replace(
        'log.info("pending %d", index)',
        'log.info("pending %d", index)\nimport time; time.sleep(0.3)\n'
        'for index in range(30):\n    log.info("behind %d", index)',
    )
    code, stderr, lines = run_program(program, server.url, tmp_path)
    assert code == 0, stderr
    stats = marks(lines)["stats"]
    assert stats["captured"] == 80
    assert stats["in_flight"] == 50  # on the wire: unknown
    assert stats["dropped"]["shutdown"] == 30  # never sent
    assert "30 event(s) could not be sent" in stderr, stderr
    assert "50 event(s) were on their way" in stderr, stderr


LATE = """
import atexit, json, logging, sys

log = logging.getLogger("app.cleanup")

def report():  # registered first: runs last
    import eventlog_handler.delivery._engine as transport
    [engine] = transport.engines()
    print("MARK stats", json.dumps(engine.stats()), flush=True)

def cleanup():  # the program's own shutdown hook: runs after the package's exit flush
    log.warning("cleanup: closing connections")
    try:
        1 / 0
    except ZeroDivisionError:
        log.exception("cleanup failed")

atexit.register(report)
atexit.register(cleanup)

import eventlog_handler

eventlog_handler.setup(shutdown_timeout=1.0)
log.warning("running")
"""


def test_what_an_earlier_atexit_handler_logs_after_the_exit_flush_is_sent(
    server: FaultServer, tmp_path: Path
) -> None:
    """``atexit`` runs the handler registered last first: one the program registered before
    it imported the package runs after the exit flush. What it logged (a warning, an error
    with its traceback) was dropped as ``shutdown``, and nothing was said. The main thread now
    sends it, within what the flush left of ``shutdown_timeout``."""
    code, stderr, lines = run_program(LATE, server.url, tmp_path)
    assert code == 0, stderr
    assert wait_until(lambda: len(server.accepted) == 3, 5), (server.accepted, stderr)
    by_message = {event["message"]: event for event in server.accepted}
    assert set(by_message) == {"running", "cleanup: closing connections", "cleanup failed"}
    assert by_message["cleanup failed"]["@simple_error"]["type"] == "ZeroDivisionError"
    stats = marks(lines)["stats"]
    assert stats["captured"] == 3 == stats["delivered"], stats
    assert "eventlog_handler" not in stderr, stderr


def test_what_is_logged_after_the_exit_flush_and_cannot_be_sent_is_said(tmp_path: Path) -> None:
    """The exit flush and what is logged after it share ``shutdown_timeout``: the exit stays
    bounded however the server fails."""
    with FaultServer() as gone:
        url = gone.url  # nothing listens there any more
    code, stderr, lines = run_program(LATE, url, tmp_path)
    assert code == 0, stderr
    stats = marks(lines)["stats"]
    assert stats["captured"] == 3 and stats["dropped"]["shutdown"] == 3, stats
    assert stats["in_flight"] == 0 == stats["queued"], stats
    assert "1 event(s) could not be sent" in stderr, stderr  # the exit flush's own
    # The flush spent shutdown_timeout on a server that refuses: none is left for them.
    assert "events logged after the exit flush past shutdown_timeout are not sent" in stderr
    assert "(counted as dropped: shutdown)" in stderr, stderr


def test_what_other_threads_log_after_the_exit_flush_is_said_and_the_exit_stays_bounded(
    server: FaultServer, tmp_path: Path
) -> None:
    """A daemon thread that logs on through the exit: what it logs after the flush is dropped
    (``shutdown``), and said; the exit does not wait for it."""
    server.default = "hang"
    program = """
        import atexit, logging, threading, time

        log = logging.getLogger("app.poller")
        def cleanup():  # after the exit flush: the poller logs on meanwhile
            time.sleep(0.3)
            log.warning("late from atexit")

        atexit.register(cleanup)

        import eventlog_handler

        eventlog_handler.setup(shutdown_timeout=1.0)

        def poll():
            while True:
                log.info("polling")
                time.sleep(0.001)

        threading.Thread(target=poll, daemon=True).start()
        time.sleep(0.3)
    """
    started = time.monotonic()
    code, stderr, _ = run_program(program, server.url, tmp_path)
    took = time.monotonic() - started
    assert code == 0, stderr
    assert took < 1.0 + 4.0, (took, stderr)  # shutdown_timeout, and start-up with margin
    assert "events logged after the exit flush by a thread still running are not sent" in stderr
    assert "events logged after the exit flush past shutdown_timeout are not sent" in stderr


def test_an_event_a_slow_hook_holds_at_the_deadline_is_counted_once(
    server: FaultServer, tmp_path: Path
) -> None:
    """The exit's deadline counts an event that the worker still holds (in a ``before_send``
    hook slower than ``shutdown_timeout``) as dropped (``shutdown``). When the hook then
    drops it, that outcome was counted too: ``dropped`` said 2 of 1 captured event."""
    program = """
        import atexit, json, logging, time

        def report():  # registered first: runs after the exit flush, once the hook returned
            import eventlog_handler.delivery._engine as transport
            time.sleep(1.0)
            [engine] = transport.engines()
            print("MARK stats", json.dumps(engine.stats()), flush=True)

        atexit.register(report)

        import eventlog_handler

        def slow_filter(event, hint):
            time.sleep(0.8)
            return None

        eventlog_handler.setup(shutdown_timeout=0.3, before_send=slow_filter, rollup_window=0)
        logging.getLogger("app").error("dropped by the hook")
        time.sleep(0.2)  # the worker is in the hook
    """
    code, stderr, lines = run_program(program, server.url, tmp_path)
    assert code == 0, stderr
    stats = marks(lines)["stats"]
    assert stats["captured"] == 1, stats
    assert stats["dropped"]["shutdown"] == 1 and stats["dropped_total"] == 1, stats
    assert stats["in_flight"] == 0 == stats["queued"] == stats["delivered"], stats
    assert server.accepted == []


@pytest.mark.parametrize("engines", [1, 2])
def test_a_ctrl_c_during_the_exit_flush_ends_it_and_the_counts_are_still_said(
    server: FaultServer, tmp_path: Path, engines: int
) -> None:
    """A second Ctrl-C while the exit flush waits for a server that hangs: Python printed the
    package's traceback ("Exception ignored in atexit callback"), the line saying what was not
    sent was lost, and the handlers' close waited once more."""
    import signal

    from tests.support.processes import Program

    server.default = "hang"
    program = Program(
        """
        import logging
        import eventlog_handler
        eventlog_handler.setup(shutdown_timeout=5.0, flush_interval=0.05)
        log = logging.getLogger("app.exit")
        if {engines} == 2:  # a handler with another key: an engine of its own
            other = eventlog_handler.EventLogHandler(
                api_key="b" * 40, shutdown_timeout=5.0, flush_interval=0.05
            )
            logging.getLogger("other").addHandler(other)
            logging.getLogger("other").propagate = False
            logging.getLogger("other").warning("on the other engine")
        for index in range(50):
            log.warning("pending %d", index)
        import time; time.sleep(0.3)  # the batch is on the wire
        print("ready", flush=True)
        """.replace("{engines}", str(engines)),
        server.url,
        tmp_path,
    ).start()
    process = program.process
    assert process is not None and process.stdout is not None
    try:
        assert process.stdout.readline().strip() == "ready"
        time.sleep(0.5)  # in the exit flush's wait
        interrupted = time.monotonic()
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=30)
        ended = time.monotonic() - interrupted
    finally:
        if process.poll() is None:
            process.kill()
    assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr
    assert "50 event(s) were on their way" in stderr, stderr
    assert ended < 3.0, (ended, stderr)  # not the rest of shutdown_timeout (5 s)
