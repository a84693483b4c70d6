"""User feedback and sessions, as the official clients send them, seen at a loopback server:
the user description on the by-ref route with the service's field names, after the error it
is about; a session's start event, its heartbeats, its end, and ``@ref:session`` on every
event of the session — in this process and in a program that exits or is stopped."""

from __future__ import annotations

import contextvars
import logging
import signal
import time
from pathlib import Path
from typing import Any

import pytest

import eventlog_handler
from tests.support.constants import API_KEY, FAST
from tests.support.faultserver import FaultServer
from tests.support.fixtures import fault_server as fault_server  # ``server``: a FaultServer here
from tests.support.processes import Program, run_program
from tests.support.waits import wait_until


def _setup(server: FaultServer, **options: Any) -> Any:
    return eventlog_handler.setup(API_KEY, server.url, capture_exceptions=False, **FAST, **options)


# -- user feedback ------------------------------------------------------------------------------


def test_user_description_reaches_the_by_ref_route_after_its_error(server: FaultServer) -> None:
    setup = _setup(server)
    try:
        contextvars.Context().run(_describe_an_error, server, setup)
    finally:
        setup.close(5)


def _describe_an_error(server: FaultServer, setup: Any) -> None:
    try:
        raise ValueError("card declined")
    except ValueError:
        logging.getLogger("shop").exception("checkout failed")
    reference = eventlog_handler.last_reference_id()
    assert reference is not None
    assert eventlog_handler.submit_user_description(
        reference, "ann@example.com", "I clicked pay twice", data={"page": "/checkout"}
    )
    assert wait_until(lambda: server.descriptions, 10)
    [(route_id, body, headers)] = server.descriptions
    assert route_id == reference
    assert body == {
        "email_address": "ann@example.com",
        "description": "I clicked pay twice",
        "data": {"page": "/checkout"},
    }
    assert headers["authorization"] == f"Bearer {API_KEY}"
    assert headers["content-type"] == "application/json"
    # The error it is about arrived first.
    assert [event["reference_id"] for event in server.accepted] == [reference]
    # Counted once the answer is back (the server records the request before it answers).
    assert wait_until(lambda: setup.stats()["side_requests"]["sent"] == 1, 10)
    assert setup.stats()["side_requests"]["queued"] == 0


def test_a_slow_answer_to_a_description_does_not_hold_back_errors(server: FaultServer) -> None:
    # The description is made on a thread of its own: the worker sending events does not wait
    # for its answer (an error was held back until it came, up to the 10 s timeout).
    server.side_delay = 6.0
    setup = _setup(server)
    try:
        contextvars.Context().run(_describe_then_fail_again, server)
    finally:
        setup.close(1)


def _describe_then_fail_again(server: FaultServer) -> None:
    log = logging.getLogger("shop")
    log.error("first failure")
    reference = eventlog_handler.last_reference_id()
    assert reference is not None
    assert eventlog_handler.submit_user_description(reference, "ann@example.com", "slow")
    assert wait_until(lambda: server.side_requests, 10)  # on the wire, its answer 6 s away
    logged = time.monotonic()
    log.error("second failure")
    assert wait_until(lambda: "second failure" in server.arrivals(), 10)
    assert time.monotonic() - logged < 3.0


def test_a_failing_service_gets_the_description_again(server: FaultServer) -> None:
    setup = _setup(server)
    try:
        server.side_script.extend([503, 503])
        assert eventlog_handler.submit_user_description("abcdef123456", description="broken")
        assert setup.flush(10)
        assert [body for _, body, _ in server.descriptions] == [{"description": "broken"}]
        assert setup.stats()["side_requests"]["sent"] == 1
    finally:
        setup.close(5)


def test_a_refused_description_is_counted_and_said_once(
    server: FaultServer, capfd: pytest.CaptureFixture[str]
) -> None:
    setup = _setup(server)
    try:
        server.side_script.extend([422, 422])
        for _ in range(2):
            assert eventlog_handler.submit_user_description("abcdef123456", description="x")
        assert setup.flush(10)
        assert server.descriptions == []
        assert setup.stats()["side_requests"]["dropped"]["rejected"] == 2
        err = capfd.readouterr().err
        assert err.count("a user description was not sent (the service refused it") == 1
    finally:
        setup.close(5)


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        (("short", "ann@example.com", None), "'short' is not a reference id"),
        (("abcdef123456", None, None), "give an email address, a description, or both"),
        (("abcdef123456", "not-an-email", "hi"), "the email address is not valid"),
        (("abcdef123456", None, 42), "description must be a string, got int"),
    ],
)
def test_bad_arguments_are_said_and_nothing_is_sent(
    server: FaultServer,
    capfd: pytest.CaptureFixture[str],
    arguments: tuple[Any, Any, Any],
    said: str,
) -> None:
    from eventlog_handler.delivery import _stderr

    _stderr._SAID.clear()  # each case's line is said once per process
    setup = _setup(server)
    try:
        assert eventlog_handler.submit_user_description(*arguments) is False
        assert setup.flush(5)
        assert said in capfd.readouterr().err
        assert server.descriptions == []
    finally:
        setup.close(5)


def test_without_setup_nothing_is_queued() -> None:
    assert eventlog_handler.submit_user_description("abcdef123456", description="hi") is False


# -- sessions -----------------------------------------------------------------------------------


def test_a_session_starts_beats_stamps_its_events_and_ends(server: FaultServer) -> None:
    def run() -> None:
        setup = _setup(server, sessions=True, heartbeat_interval=1)
        try:
            logging.getLogger("app").warning("inside the session")
            assert wait_until(lambda: len(server.heartbeats) >= 2, 10)
        finally:
            setup.close(5)

    contextvars.Context().run(run)
    starts = [event for event in server.accepted if event.get("type") == "session"]
    assert len(starts) == 1
    session_id = starts[0]["reference_id"]
    assert "@ref:session" not in starts[0].get("data", {})
    [log] = [event for event in server.accepted if event.get("type") == "log"]
    assert log["data"]["@ref:session"] == session_id
    beats = [(sid, close) for sid, close, _ in server.heartbeats]
    assert beats[-1] == (session_id, True)
    assert all(item == (session_id, False) for item in beats[:-1]) and len(beats) >= 3


def test_another_user_ends_the_session_and_starts_one(server: FaultServer) -> None:
    def run() -> None:
        eventlog_handler.set_user("u-1", name="Ann")
        setup = _setup(server, sessions=True, heartbeat_interval=60)
        try:
            logging.getLogger("app").warning("ann's")
            eventlog_handler.set_user("u-1", name="Ann")  # the same user: the same session
            logging.getLogger("app").warning("ann's again")
            eventlog_handler.set_user("u-2", name="Bob")
            logging.getLogger("app").warning("bob's")
            eventlog_handler.submit_feature_usage("export")
            assert setup.flush(10)
        finally:
            setup.close(5)

    contextvars.Context().run(run)
    starts = [event for event in server.accepted if event.get("type") == "session"]
    assert [start["@user"]["identity"] for start in starts] == ["u-1", "u-2"]
    ann, bob = (start["reference_id"] for start in starts)
    stamped = {
        event.get("message") or event["source"]: event["data"]["@ref:session"]
        for event in server.accepted
        if event.get("type") != "session"
    }
    assert stamped == {"ann's": ann, "ann's again": ann, "bob's": bob, "export": bob}
    assert [(sid, close) for sid, close, _ in server.heartbeats] == [(ann, True), (bob, True)]


def test_every_session_start_arrives_however_alike(server: FaultServer) -> None:
    def run() -> None:
        setup = _setup(server, sessions=True, heartbeat_interval=60)
        try:
            for identity in ("alice", "bob", "alice", "bob", "alice", "bob"):
                eventlog_handler.set_user(identity)
                logging.getLogger("app").warning("working")
            assert setup.flush(10)
        finally:
            setup.close(5)

    contextvars.Context().run(run)
    starts = [event for event in server.accepted if event.get("type") == "session"]
    assert len(starts) == 7 and all("count" not in start for start in starts)  # none rolled up
    started = {start["reference_id"] for start in starts}
    named = {e["data"]["@ref:session"] for e in server.accepted if e.get("type") == "log"}
    assert named <= started
    assert {sid for sid, close, _ in server.heartbeats if close} == started


def test_the_session_follows_the_user_back_after_user_context(server: FaultServer) -> None:
    def run() -> None:
        eventlog_handler.set_user("alice")
        setup = _setup(server, sessions=True, heartbeat_interval=60)
        try:
            logging.getLogger("app").warning("as alice")
            with eventlog_handler.user_context("bob"):
                logging.getLogger("app").warning("as bob")
            logging.getLogger("app").warning("alice again")
            assert setup.flush(10)
        finally:
            setup.close(5)

    contextvars.Context().run(run)
    starts = [event for event in server.accepted if event.get("type") == "session"]
    assert [start["@user"]["identity"] for start in starts] == ["alice", "bob", "alice"]
    sessions = {
        event["message"]: event["data"]["@ref:session"]
        for event in server.accepted
        if event.get("type") == "log"
    }
    assert sessions == {
        "as alice": starts[0]["reference_id"],
        "as bob": starts[1]["reference_id"],
        "alice again": starts[2]["reference_id"],
    }


def test_an_event_is_never_counted_in_another_users_session(server: FaultServer) -> None:
    """The session follows the user out of a block and at ``clear_user()``; an event of a user
    who is not the session's (a web request's, another thread's) carries no session of
    someone else (the service opens its user's own)."""

    def run() -> None:
        setup = _setup(server, sessions=True, heartbeat_interval=60)
        log = logging.getLogger("app")
        try:
            log.warning("nobody yet")
            with eventlog_handler.user_context("u-42"):
                log.warning("as u-42")
            log.warning("nobody after the block")
            eventlog_handler.set_user("u-50")
            log.warning("as u-50")
            eventlog_handler.clear_user()
            log.warning("nobody after clear_user")
            with eventlog_handler.request_scope({"path": "/a"}):
                eventlog_handler.set_user("visitor-9")
                log.warning("a visitor's, in a request")
            log.warning("given another user", extra={"@user": "someone-else"})
            assert setup.flush(10)
        finally:
            setup.close(5)

    contextvars.Context().run(run)
    starts = [event for event in server.accepted if event.get("type") == "session"]
    owners = [start.get("@user", {}).get("identity") for start in starts]
    assert owners == [None, "u-42", None, "u-50", None]
    ids = [start["reference_id"] for start in starts]
    stamped = {
        event["message"]: event.get("data", {}).get("@ref:session")
        for event in server.accepted
        if event.get("type") == "log"
    }
    assert stamped == {
        "nobody yet": ids[0],
        "as u-42": ids[1],
        "nobody after the block": ids[2],  # on the code before: u-42's session
        "as u-50": ids[3],
        "nobody after clear_user": ids[4],  # on the code before: u-50's session
        "a visitor's, in a request": None,
        "given another user": None,
    }
    ended = {sid for sid, close, _ in server.heartbeats if close}
    assert ended == set(ids)


def test_threads_of_two_users_never_share_a_session(server: FaultServer) -> None:
    import threading

    setup = _setup(server, sessions=True, heartbeat_interval=60)
    barrier = threading.Barrier(2)

    def job(identity: str) -> None:
        eventlog_handler.set_user(identity)
        for round_ in range(20):
            barrier.wait(5)
            logging.getLogger("jobs").warning("job %s for %s", round_, identity)

    try:
        threads = [threading.Thread(target=job, args=(name,)) for name in ("u-A", "u-B")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert setup.flush(10)
    finally:
        setup.close(5)
    owner = {
        start["reference_id"]: start.get("@user", {}).get("identity")
        for start in server.accepted
        if start.get("type") == "session"
    }
    logs = [event for event in server.accepted if event.get("type") == "log"]
    assert len(logs) == 40
    assert any("@ref:session" in event.get("data", {}) for event in logs)  # the last user's
    for event in logs:
        session = event.get("data", {}).get("@ref:session")
        if session is not None:
            assert owner[session] == event["@user"]["identity"], event["message"]


def test_a_manual_session_reference_is_sent_as_given(server: FaultServer) -> None:
    setup = _setup(server, sessions=True)
    try:
        logging.getLogger("app").warning("mine", extra={"@ref:session": "my-own-session-1"})
        assert setup.flush(10)
    finally:
        setup.close(5)
    [log] = [event for event in server.accepted if event.get("type") == "log"]
    assert log["data"]["@ref:session"] == "my-own-session-1"


def test_requests_inside_a_web_request_do_not_move_the_session(server: FaultServer) -> None:
    def run() -> None:
        setup = _setup(server, sessions=True)
        try:
            with eventlog_handler.request_scope({"path": "/a"}):
                eventlog_handler.set_user("visitor-9")
            assert setup.flush(10)
        finally:
            setup.close(5)

    contextvars.Context().run(run)
    starts = [event for event in server.accepted if event.get("type") == "session"]
    assert len(starts) == 1 and "@user" not in starts[0]


PROGRAM = """
    import logging, sys, time
    import eventlog_handler

    eventlog_handler.setup(sessions=True, heartbeat_interval=1, flush_interval=0.2)
    eventlog_handler.set_user("worker-7", name="Nightly job")
    logging.getLogger("job").warning("started")
    print("ready", flush=True)
    time.sleep(float(sys.argv[1]) if len(sys.argv) > 1 else 3.5)
    logging.getLogger("job").warning("done")
"""


def test_a_program_sends_its_session_heartbeats_and_end_at_exit(
    server: FaultServer, tmp_path: Path
) -> None:
    started = time.time()
    status, stderr, _ = run_program(PROGRAM, server.url, tmp_path)
    assert status == 0, stderr
    starts = [event for event in server.accepted if event.get("type") == "session"]
    # The process's session from setup() (no user yet), then the user's.
    assert [start.get("@user", {}).get("identity") for start in starts] == [None, "worker-7"]
    session_id = starts[1]["reference_id"]
    logs = [event for event in server.accepted if event.get("type") == "log"]
    assert [event["message"] for event in logs] == ["started", "done"]
    assert all(event["data"]["@ref:session"] == session_id for event in logs)
    beats = [(sid, close, when) for sid, close, when in server.heartbeats if sid == session_id]
    open_beats = [when for _, close, when in beats if not close]
    assert len(open_beats) >= 2, beats  # one a second for 3.5 s
    assert all(when - started < 30 for when in open_beats)
    assert beats[-1][1] is True  # the end, sent by the exit flush
    # The process's session ended when the user became known.
    ended = [sid for sid, close, _ in server.heartbeats if close]
    assert starts[0]["reference_id"] in ended


def test_a_stopped_program_ends_its_session(server: FaultServer, tmp_path: Path) -> None:
    program = Program(PROGRAM.replace("3.5", "60"), server.url, tmp_path).start()
    process = program.process
    assert process is not None and process.stdout is not None
    try:
        assert process.stdout.readline().strip() == "ready"
        assert wait_until(lambda: len(server.heartbeats) >= 2, 10)
        process.send_signal(signal.SIGTERM)
        process.wait(20)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    [start] = [
        event
        for event in server.accepted
        if event.get("type") == "session" and event.get("@user", {}).get("identity")
    ]
    closes = [sid for sid, close, _ in server.heartbeats if close]
    assert start["reference_id"] in closes
