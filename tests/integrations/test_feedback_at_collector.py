"""A user's program with sessions and an error page's feedback, against the local collector
(the service's API, as the README's first command runs it): the session is listed by
``GET /api/v2/events/sessions`` with its heartbeats, duration and end, the program's events
carry its id, and the user's words are on the error, read back by its reference id."""

from __future__ import annotations

from pathlib import Path

import requests

from eventlog_handler.collector import Collector
from tests.support.processes import Program

PROGRAM = """
    import logging, time
    import eventlog_handler

    eventlog_handler.set_user("ann", name="Ann")
    eventlog_handler.setup(sessions=True, heartbeat_interval=1, flush_interval=0.2)
    try:
        raise ValueError("card declined")
    except ValueError:
        logging.getLogger("shop").exception("checkout failed")
    reference = eventlog_handler.last_reference_id()
    print(reference, flush=True)
    eventlog_handler.submit_user_description(
        reference, "ann@example.com", "I pressed Pay twice."
    )
    eventlog_handler.submit_feature_usage("checkout")
    time.sleep(3.5)
"""


def test_session_and_feedback_reach_the_collector(collector: Collector, tmp_path: Path) -> None:
    program = Program(PROGRAM, collector.url, tmp_path, EVENTLOG_API_KEY=collector.project_token)
    process = program.start().process
    assert process is not None
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr
    reference = stdout.split()[0]
    user = {"Authorization": f"Bearer {collector.user_token}"}
    sessions = requests.get(collector.url + "/api/v2/events/sessions", headers=user, timeout=10)
    assert sessions.status_code == 200, sessions.text
    [session] = sessions.json()
    assert session["type"] == "session"
    assert session["data"]["@user"]["identity"] == "ann"
    assert session["data"]["@heartbeats"] >= 2  # one a second for 3.5 s
    assert "sessionend" in session["data"]  # ended by the exit flush
    assert 3 <= session["value"] <= 60
    error = requests.get(
        f"{collector.url}/api/v2/events/by-ref/{reference}", headers=user, timeout=10
    )
    assert error.status_code == 200, error.text
    [event] = error.json()
    assert event["type"] == "error"
    assert event["data"]["@ref:session"] == session["reference_id"]
    assert event["data"]["@user_description"] == {
        "email_address": "ann@example.com",
        "description": "I pressed Pay twice.",
    }
    listed = requests.get(
        collector.url + "/api/v2/events", params={"filter": "type:usage"}, headers=user, timeout=10
    )
    [usage] = listed.json()
    assert usage["source"] == "checkout"
    assert usage["data"]["@ref:session"] == session["reference_id"]
    assert usage["data"]["@submission_client"]["user_agent"].startswith("eventlog-handler/")


REPEATED = """
    import logging, time
    import eventlog_handler

    eventlog_handler.setup()  # the default roll-up: identical errors within 60 s are counted
    for user in ("ann", "bob", "cid"):  # one failing checkout after another, each its page
        try:
            raise RuntimeError("the payment service is unreachable")
        except RuntimeError:
            logging.getLogger("shop").exception("checkout failed")
        reference = eventlog_handler.last_reference_id()
        print(reference, flush=True)
        eventlog_handler.submit_user_description(
            reference, f"{user}@example.com", f"{user} pressed Pay"
        )
        time.sleep(0.3)
"""


def test_each_quoted_reference_of_a_repeated_error_keeps_its_users_words(
    collector: Collector, tmp_path: Path
) -> None:
    """Three users meet the same error within a minute, each quotes the reference id on the
    error page and describes what happened. The roll-up counted the second and third into
    one event: the second id named no event (its words were lost), and the third's words
    came before its event was sent. An event whose id the program was given is sent as it is."""
    program = Program(REPEATED, collector.url, tmp_path, EVENTLOG_API_KEY=collector.project_token)
    process = program.start().process
    assert process is not None
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr
    references = stdout.split()
    assert len(set(references)) == 3, stdout
    user = {"Authorization": f"Bearer {collector.user_token}"}
    for name, reference in zip(("ann", "bob", "cid"), references, strict=True):
        found = requests.get(
            f"{collector.url}/api/v2/events/by-ref/{reference}", headers=user, timeout=10
        )
        assert found.status_code == 200, found.text
        [event] = found.json()
        assert event["data"]["@user_description"] == {
            "email_address": f"{name}@example.com",
            "description": f"{name} pressed Pay",
        }, event
