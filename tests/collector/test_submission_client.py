"""``@submission_client``: set from the User-Agent of the request that brought an event, as the
service sets it (whatever the client sent under that key is replaced), kept with the body so
it survives a restart, including one between the answer and the store; and a database of the
previous schema (no User-Agents, no sessions) opened by this version."""

from __future__ import annotations

import http.client
import json
import sqlite3
import time
from pathlib import Path
from typing import Any

from eventlog_handler.collector import Collector
from eventlog_handler.collector._ingest import Received
from eventlog_handler.collector._storage import Storage
from tests.support.collector import Client

JS = "exceptionless-js/3.2.1"


def _post(client: Client, body: Any, user_agent: str | None) -> None:
    headers = {} if user_agent is None else {"User-Agent": user_agent}
    response = client.post_events(body, headers=headers)
    assert response.status_code == 202, response.text


def _read(client: Client, collector: Collector) -> dict[str, dict[str, Any]]:
    """The stored events by message, read over the API."""
    response = client.get("/api/v2/events", collector.user_token, params={"limit": 100})
    assert response.status_code == 200
    return {event["message"]: event for event in response.json()}


def test_the_user_agent_becomes_the_submission_client(client: Client, collector: Collector) -> None:
    _post(client, [{"message": "one"}, {"message": "two", "data": {"k": 1}}], JS)
    events = _read(client, collector)
    expected = {"user_agent": "exceptionless-js/3.2.1", "version": "3.2.1"}
    assert events["one"]["data"] == {"@submission_client": expected}
    assert events["two"]["data"] == {"k": 1, "@submission_client": expected}
    by_id = client.get(f"/api/v2/events/{events['one']['id']}", collector.user_token).json()
    assert by_id["data"]["@submission_client"] == expected
    page = client.get(f"/events/{events['one']['id']}").text
    overview = page[page.index('<section class="card overview">') :]
    overview = overview[: overview.index("</section>")]
    assert "<dt>Client</dt><dd>exceptionless-js/3.2.1 <small>version 3.2.1</small></dd>" in overview


def test_what_the_client_sent_under_that_key_is_replaced(
    client: Client, collector: Collector
) -> None:
    forged = {"user_agent": "forged/9.9", "version": "9.9", "ip_address": "10.0.0.1"}
    _post(
        client,
        [
            {"message": "in data", "data": {"@submission_client": forged}},
            {"message": "at the top", "@submission_client": forged},
            {"message": "odd spelling", "@Submission_Client": "text"},
        ],
        JS,
    )
    expected = {"user_agent": "exceptionless-js/3.2.1", "version": "3.2.1"}
    for event in _read(client, collector).values():
        assert event["data"] == {"@submission_client": expected}, event["message"]


def test_user_agents_that_are_not_name_and_version(client: Client, collector: Collector) -> None:
    _post(client, {"message": "browser"}, "Mozilla/5.0 (X11; Linux x86_64) Chrome/120.0")
    _post(client, {"message": "no version"}, "MyApp")
    _post(client, {"message": "pre-release"}, "Exceptionless.Net/4.8.0-beta1")
    _post(client, {"message": "padded"}, "exceptionless-js/03.2")
    events = _read(client, collector)
    assert events["browser"]["data"]["@submission_client"] == {
        "user_agent": "mozilla/5.0 (x11; linux x86_64) chrome/120.0"
    }
    assert events["no version"]["data"]["@submission_client"] == {"user_agent": "myapp"}
    assert events["pre-release"]["data"]["@submission_client"] == {
        "user_agent": "exceptionless.net/4.8.0-beta1"
    }
    assert events["padded"]["data"]["@submission_client"] == {
        "user_agent": "exceptionless-js/03.2",
        "version": "3.2",
    }


def test_a_request_without_user_agent_keeps_no_client_key(
    client: Client, collector: Collector
) -> None:
    body = json.dumps({"message": "anonymous", "@submission_client": {"user_agent": "x/1.0"}})
    connection = http.client.HTTPConnection("127.0.0.1", collector.port, timeout=10)
    try:  # http.client sends no User-Agent unless told to
        connection.request(
            "POST",
            "/api/v2/events",
            body=body.encode(),
            headers={
                "Content-Type": "application/json",
                "Authorization": f"Bearer {collector.project_token}",
            },
        )
        response = connection.getresponse()
        response.read()
    finally:
        connection.close()
    assert response.status == 202
    assert _read(client, collector)["anonymous"]["data"] == {}


def test_events_by_get_and_as_text(client: Client, collector: Collector) -> None:
    params = {"message": "by get", "kept": "k"}
    headers = {"User-Agent": "curl/8.5.0"}
    response = client.get(
        "/api/v2/events/submit", collector.project_token, params=params, headers=headers
    )
    assert response.status_code == 200
    text = client.request(
        "POST",
        "/api/v2/events",
        collector.project_token,
        data=b"a line of text",
        headers={"Content-Type": "text/plain", "User-Agent": "curl/8.5.0"},
    )
    assert text.status_code == 202
    curl = {"user_agent": "curl/8.5.0", "version": "8.5.0"}
    events = _read(client, collector)
    assert events["by get"]["data"] == {"kept": "k", "@submission_client": curl}
    assert events["a line of text"]["data"] == {"@submission_client": curl}


def test_the_user_agent_survives_a_restart(tmp_path: Path) -> None:
    database = tmp_path / "collector.sqlite3"
    with Collector(database) as collector:
        client = Client(collector)
        _post(client, {"message": "before the restart"}, JS)
        organization_id, project_id = collector.organization_id, collector.project_id
        client.close()
    # What kill -9 leaves between a post's answer and the store of its events: the body is
    # kept, with its User-Agent, and marked unstored. The collector stores it when it starts.
    storage = Storage(database)
    body = json.dumps([{"message": "acknowledged, not stored"}]).encode()
    storage.receive_batch(organization_id, project_id, time.time(), Received(body, user_agent=JS))
    storage.close()
    with Collector(database) as collector:
        client = Client(collector)
        try:
            events = _read(client, collector)
        finally:
            client.close()
    expected = {"user_agent": "exceptionless-js/3.2.1", "version": "3.2.1"}
    assert events["before the restart"]["data"] == {"@submission_client": expected}
    assert events["acknowledged, not stored"]["data"] == {"@submission_client": expected}


def test_a_database_of_schema_2_is_migrated(tmp_path: Path) -> None:
    database = tmp_path / "collector.sqlite3"
    with Collector(database) as collector:
        client = Client(collector)
        _post(client, {"message": "old", "@submission_client": {"user_agent": "kept/1.0"}}, JS)
        ref = {"@ref:session": "session-old-1"}
        _post(client, {"type": "session", "reference_id": "session-old-1"}, JS)
        _post(client, {"type": "sessionend", "message": "ended", **ref}, JS)
        _post(client, {"type": "session", "reference_id": "session-old-2"}, JS)
        client.close()
    with sqlite3.connect(database) as db:  # as the previous version left it
        db.execute("ALTER TABLE batches DROP COLUMN user_agent")
        db.execute("DROP TABLE sessions")
        db.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    with Collector(database) as collector:
        client = Client(collector)
        try:
            _post(client, {"message": "new"}, JS)
            _post(client, {"type": "session", "reference_id": "session-mig-1"}, JS)
            heartbeat = "/api/v2/events/session/heartbeat"
            for session_id in ("session-mig-1", "session-old-2"):
                beat = {"id": session_id, "close": "true"}
                answer = client.get(heartbeat, collector.project_token, params=beat)
                assert answer.status_code == 200
            events = _read(client, collector)
            listed = client.get("/api/v2/events/sessions", collector.user_token).json()
            sessions = {session["reference_id"]: session for session in listed}
        finally:
            client.close()
    # A body kept before has no known User-Agent: its events stay as the client sent them.
    assert events["old"]["data"] == {"@submission_client": {"user_agent": "kept/1.0"}}
    assert events["new"]["data"]["@submission_client"]["version"] == "3.2.1"
    assert sessions["session-mig-1"]["data"]["@heartbeats"] == 1
    # The sessions of the old database come from its session start and end events.
    assert sessions["session-old-1"]["data"]["sessionend"]
    assert sessions["session-old-1"]["data"]["@heartbeats"] == 0
    assert sessions["session-old-2"]["data"]["@heartbeats"] == 1  # open until now
    assert sessions["session-old-2"]["data"]["sessionend"]
    with sqlite3.connect(database) as db:
        version = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    assert version == ("3",)
