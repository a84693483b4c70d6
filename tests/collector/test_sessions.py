"""Manual sessions: a session start event, heartbeats (by session id or user identity), the
session's events, its end (close=true or a sessionend event), and GET /api/v2/events/sessions."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from eventlog_handler.collector import Collector
from eventlog_handler.collector._formats import format_event_date, parse_date
from tests.support.collector import Client, assert_problem

HEARTBEAT = "/api/v2/events/session/heartbeat"
SESSIONS = "/api/v2/events/sessions"


def _ago(minutes: float) -> str:
    return format_event_date(datetime.now(timezone.utc) - timedelta(minutes=minutes))


def _start(session_id: str, identity: str, minutes_ago: float = 10) -> dict[str, Any]:
    return {
        "type": "session",
        "reference_id": session_id,
        "date": _ago(minutes_ago),
        "@user": {"identity": identity, "name": identity.title()},
    }


def _beat(client: Client, collector: Collector, identifier: str, close: str = "false") -> None:
    response = client.get(
        HEARTBEAT, collector.project_token, params={"id": identifier, "close": close}
    )
    assert response.status_code == 200, response.text
    assert response.content == b""


def _sessions(client: Client, collector: Collector, **params: Any) -> list[dict[str, Any]]:
    response = client.get(SESSIONS, collector.user_token, params=params)
    assert response.status_code == 200, response.text
    return list(response.json())


def _by_id(client: Client, collector: Collector) -> dict[str, dict[str, Any]]:
    return {session["reference_id"]: session for session in _sessions(client, collector)}


def test_heartbeats_keep_a_session_alive_and_close_ends_it(
    client: Client, collector: Collector
) -> None:
    assert client.post_events(_start("session-ann-1", "ann")).status_code == 202
    (session,) = _sessions(client, collector)
    assert session["type"] == "session"
    assert session["data"]["@heartbeats"] == 0
    assert "sessionend" not in session["data"]
    assert session["data"]["@user"]["identity"] == "ann"

    _beat(client, collector, "session-ann-1")  # by session id
    _beat(client, collector, "ann")  # by the user's identity
    (session,) = _sessions(client, collector)
    assert session["data"]["@heartbeats"] == 2
    assert "sessionend" not in session["data"]  # still active
    assert 590 <= session["value"] <= 700  # started ten minutes ago, alive now
    last = parse_date(session["data"]["@last_heartbeat"])
    assert abs((datetime.now(timezone.utc) - last).total_seconds()) < 30

    _beat(client, collector, "session-ann-1", close="true")
    (ended,) = _sessions(client, collector)
    assert ended["data"]["@heartbeats"] == 3
    end = parse_date(ended["data"]["sessionend"])
    start = parse_date(ended["date"])
    assert abs(ended["value"] - (end - start).total_seconds()) < 0.01
    # The same event, read by id, shows the same session.
    by_id = client.get(f"/api/v2/events/{ended['id']}", collector.user_token).json()
    assert by_id["data"]["sessionend"] == ended["data"]["sessionend"]
    assert by_id["value"] == ended["value"]

    # An ended session takes no more heartbeats.
    _beat(client, collector, "session-ann-1")
    _beat(client, collector, "ann", close="true")
    (after,) = _sessions(client, collector)
    assert after["data"]["@heartbeats"] == 3
    assert after["data"]["sessionend"] == ended["data"]["sessionend"]


def test_an_identity_heartbeat_goes_to_the_users_open_session(
    client: Client, collector: Collector
) -> None:
    client.post_events([_start("session-bob-1", "bob", 30), _start("session-cy-01", "cy", 20)])
    _beat(client, collector, "session-bob-1", close="true")
    client.post_events(_start("session-bob-2", "bob", 5))
    _beat(client, collector, "bob")
    _beat(client, collector, "nobody-at-all")  # no session: 200, nothing changes
    sessions = _by_id(client, collector)
    assert sessions["session-bob-1"]["data"]["@heartbeats"] == 1
    assert sessions["session-bob-2"]["data"]["@heartbeats"] == 1
    assert "sessionend" not in sessions["session-bob-2"]["data"]
    assert sessions["session-cy-01"]["data"]["@heartbeats"] == 0
    # Newest first, by the start event's date.
    assert [s["reference_id"] for s in _sessions(client, collector)] == [
        "session-bob-2",
        "session-cy-01",
        "session-bob-1",
    ]


def test_session_events_end_and_heartbeat_events(client: Client, collector: Collector) -> None:
    ref = {"@ref:session": "session-dee-1"}
    batch = [
        _start("session-dee-1", "dee", 10),
        {"type": "log", "message": "in the session", "date": _ago(8), **ref},
        {"type": "heartbeat", "date": _ago(7), **ref},
        {"type": "heartbeat", "date": _ago(6), **ref},
        {"type": "sessionend", "date": _ago(4), **ref},
        {"type": "sessionend", "date": _ago(4), "@ref:session": "no-such-session"},
        {"type": "heartbeat", "message": "of no session", "@ref:session": "no-such-session-2"},
    ]
    response = client.post_events(batch)
    assert response.status_code == 202
    stored = collector.events()
    types = sorted(event["type"] for event in stored)
    # The session's heartbeat events are counted, not stored; a lone sessionend is cancelled;
    # a heartbeat event of no session is an ordinary event.
    assert types == ["heartbeat", "log", "session", "sessionend"]
    (session,) = _sessions(client, collector)
    assert session["data"]["@heartbeats"] == 2
    assert 350 <= session["value"] <= 370  # from ten minutes ago to the end, four minutes ago
    end = parse_date(session["data"]["sessionend"])
    assert end == parse_date(next(e for e in stored if e["type"] == "sessionend")["date"])
    # A later sessionend of the same session is stored; the session stays as it ended.
    client.post_events({"type": "sessionend", "date": _ago(1), **ref})
    assert [e["type"] for e in collector.events(type="sessionend")] == ["sessionend"] * 2
    (again,) = _sessions(client, collector)
    assert again["data"]["sessionend"] == session["data"]["sessionend"]


def test_the_session_list_is_the_events_list_of_session_starts(
    client: Client, collector: Collector
) -> None:
    client.post_events(
        [_start(f"session-many-{i:02d}", f"user-{i}", 50 - i) for i in range(12)]
        + [{"message": "not a session"}, {"type": "error", "message": "nor this"}]
    )
    first = client.get(SESSIONS, collector.user_token, params={"limit": 5})
    assert first.headers["X-Result-Count"] == "12"
    assert "after=" in first.headers["Link"]
    assert {s["type"] for s in first.json()} == {"session"}
    # type terms of the filter are replaced: only sessions are listed.
    assert len(_sessions(client, collector, filter="type:error", limit=100)) == 12
    assert [s["reference_id"] for s in _sessions(client, collector, filter="user:user-3")] == [
        "session-many-03"
    ]
    by_project = client.get(
        f"/api/v2/projects/{collector.project_id}/events/sessions", collector.user_token
    )
    assert by_project.headers["X-Result-Count"] == "12"
    assert_problem(client.get(SESSIONS, collector.project_token), 403)
    assert_problem(client.get(SESSIONS), 401)


def test_heartbeat_answers(client: Client, collector: Collector) -> None:
    assert client.get(HEARTBEAT, collector.project_token).status_code == 200  # no id
    bad = client.get(HEARTBEAT, collector.project_token, params={"id": "x", "close": "maybe"})
    assert_problem(bad, 400)
    no_project = client.get(HEARTBEAT, collector.user_token, params={"id": "session-x-01"})
    assert_problem(no_project, 400)
    assert_problem(client.get(HEARTBEAT, params={"id": "session-x-01"}), 401)


def test_heartbeats_are_not_throttled() -> None:
    with Collector(throttle=2) as collector:
        client = Client(collector)
        try:
            assert client.post_events(_start("session-thr-1", "eve")).status_code == 202
            assert client.post_events({"message": "at the limit"}).status_code == 202
            assert client.post_events({"message": "over the limit"}).status_code == 429
            for _ in range(10):
                _beat(client, collector, "session-thr-1")  # 200 all the same
            (session,) = collector.events(type="session")
            assert session["data"]["@heartbeats"] == 10
        finally:
            client.close()


def test_sessions_survive_a_restart(tmp_path: Path) -> None:
    database = tmp_path / "collector.sqlite3"
    with Collector(database) as collector:
        client = Client(collector)
        client.post_events(_start("session-fay-1", "fay"))
        _beat(client, collector, "fay")
        client.close()
    with Collector(database) as collector:
        client = Client(collector)
        try:
            _beat(client, collector, "session-fay-1", close="true")
            (session,) = _sessions(client, collector)
            assert session["data"]["@heartbeats"] == 2
            assert "sessionend" in session["data"]
        finally:
            client.close()


def test_heartbeats_before_their_sessions_start_are_counted_when_it_starts(
    client: Client, collector: Collector
) -> None:
    """After an outage the session's start event is sent again, its heartbeats (never retried)
    may come first: they were answered 200 and lost, and the session's duration counted only
    from the heartbeats after its start. The service keeps a heartbeat for 2 hours."""
    _beat(client, collector, "session-eve-1")  # before the start
    _beat(client, collector, "eve")  # by the user's identity, before the start too
    _beat(client, collector, "session-old-1")  # a session that never starts: nothing
    assert _sessions(client, collector) == []
    assert client.post_events(_start("session-eve-1", "eve", 10)).status_code == 202
    (session,) = _sessions(client, collector)
    assert session["data"]["@heartbeats"] == 2
    assert 590 <= session["value"] <= 700  # started ten minutes ago, alive until the beats
    _beat(client, collector, "session-eve-1", close="true")
    (ended,) = _sessions(client, collector)
    assert ended["data"]["@heartbeats"] == 3 and "sessionend" in ended["data"]
    # A heartbeat of the user's ended session is not kept for a later one of theirs.
    _beat(client, collector, "eve")
    assert client.post_events(_start("session-eve-2", "eve", 1)).status_code == 202
    assert _by_id(client, collector)["session-eve-2"]["data"]["@heartbeats"] == 0
