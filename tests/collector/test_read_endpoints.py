"""GET /api/v2/events, events by id, config, heartbeat, user descriptions, routing errors."""

from __future__ import annotations

import re
import socket
from datetime import datetime, timedelta, timezone

import pytest

from eventlog_handler.collector import Collector
from eventlog_handler.collector._formats import format_event_date
from tests.support.collector import Client, assert_problem


def _links(header: str) -> dict[str, str]:
    return {rel: url for url, rel in re.findall(r'<([^>]+)>;\s*rel="(\w+)"', header)}


def _seed(client: Client, count: int) -> None:
    now = datetime.now(timezone.utc)
    batch = [
        {
            "type": "error" if i % 3 == 0 else "log",
            "message": f"event {i:02d}",
            "source": "app.db" if i % 2 else "app.web",
            "date": format_event_date(now - timedelta(minutes=count - i)),
            "tags": ["even"] if i % 2 == 0 else [],
            "@level": "Error" if i % 3 == 0 else "Info",
            "reference_id": f"seed-ref-{i:04d}",
        }
        for i in range(count)
    ]
    assert client.post_events(batch).status_code == 202


def test_list_events_newest_first_with_count(client: Client, collector: Collector) -> None:
    _seed(client, 5)
    response = client.get("/api/v2/events", collector.user_token)
    assert response.status_code == 200
    assert response.headers["X-Result-Count"] == "5"
    assert "X-Exceptionless-ConfigVersion" not in response.headers  # no project on the token
    messages = [e["message"] for e in response.json()]
    assert messages == [f"event {i:02d}" for i in range(4, -1, -1)]
    ascending = client.get("/api/v2/events", collector.user_token, params={"sort": "date"})
    assert [e["message"] for e in ascending.json()] == messages[::-1]


def test_pagination_follows_link_headers_across_pages(client: Client, collector: Collector) -> None:
    _seed(client, 7)
    url = collector.url + "/api/v2/events?limit=3&filter=app&page=1"
    seen: list[str] = []
    pages = 0
    previous_seen = []
    while url:
        response = client.session.get(
            url, headers={"Authorization": f"Bearer {collector.user_token}"}, timeout=10
        )
        assert response.status_code == 200
        assert response.headers["X-Result-Count"] == "7"
        links = _links(response.headers.get("Link", ""))
        if pages:
            assert "previous" in links
            previous_seen.append(links["previous"])
        else:
            assert "previous" not in links
        assert "filter=app" in links.get("next", "filter=app")
        seen += [e["message"] for e in response.json()]
        pages += 1
        url = links.get("next", "")
    assert pages == 3
    assert seen == [f"event {i:02d}" for i in range(6, -1, -1)]
    assert "page=1" in previous_seen[0]


@pytest.mark.parametrize(
    ("filter_text", "expected"),
    [
        ("type:error", {0, 3, 6}),
        ("level:error", {0, 3, 6}),
        ("level:Info", {1, 2, 4, 5}),
        ("type:error type:log", set(range(7))),
        ("source:app.db", {1, 3, 5}),
        ("source:app.*", set(range(7))),  # a prefix, as the service's wildcard
        ("source:app.w*", {0, 2, 4, 6}),
        ("source:app.db source:app.w*", set(range(7))),
        ("source:app", set()),  # exact without the star
        ("source:db*", set()),
        ("tag:even", {0, 2, 4, 6}),
        ("reference:seed-ref-0004", {4}),
        ('"event 05"', {5}),
        ("EVENT 0", set(range(7))),
        ("type:error app.db", {3}),
        ("nothing-matches", set()),
    ],
)
def test_filters(
    client: Client, collector: Collector, filter_text: str, expected: set[int]
) -> None:
    _seed(client, 7)
    response = client.get(
        "/api/v2/events", collector.user_token, params={"filter": filter_text, "limit": 100}
    )
    assert response.status_code == 200
    assert {int(e["message"][-2:]) for e in response.json()} == expected


def test_project_filter_and_project_token_scope(client: Client, collector: Collector) -> None:
    other = collector.create_project("Other")
    other_token = collector.create_token(other["id"])
    client.post_events({"message": "mine"})
    client.post_events({"message": "theirs"}, token=other_token)

    def messages(token: str, **params: str) -> list[str]:
        response = client.get("/api/v2/events", token, params=params)
        assert response.status_code == 200
        return [e["message"] for e in response.json()]

    assert sorted(messages(collector.user_token)) == ["mine", "theirs"]
    assert messages(collector.user_token, filter=f"project:{other['id']}") == ["theirs"]
    path = f"/api/v2/projects/{other['id']}/events"
    assert [e["message"] for e in client.get(path, collector.user_token).json()] == ["theirs"]
    # A user-scoped token bound to a project reads only that project.
    bound = collector.create_token(collector.project_id, ["user"])
    assert messages(bound) == ["mine"]
    assert messages(bound, filter=f"project:{other['id']}") == []
    assert_problem(client.get(path, bound), 404)
    # Project (client) tokens read no events at all.
    assert_problem(client.get("/api/v2/events", other_token), 403)


def test_list_limit_is_capped_at_100_and_bad_values_get_400(
    client: Client, collector: Collector
) -> None:
    _seed(client, 3)
    response = client.get("/api/v2/events", collector.user_token, params={"limit": 5000})
    assert response.status_code == 200
    assert len(response.json()) == 3
    for params in ({"limit": "many"}, {"page": "-1"}, {"sort": "message"}):
        assert_problem(client.get("/api/v2/events", collector.user_token, params=params), 400)
    empty = client.get("/api/v2/events", collector.user_token, params={"page": 99})
    assert empty.json() == []
    assert _links(empty.headers["Link"]).keys() == {"previous"}


def test_get_event_by_id(client: Client, collector: Collector) -> None:
    client.post_events({"message": "one", "reference_id": "get-by-id-1"})
    event = collector.events()[0]
    response = client.get(f"/api/v2/events/{event['id']}", collector.user_token)
    assert response.status_code == 200
    assert response.json() == event
    assert_problem(client.get(f"/api/v2/events/{event['id']}", collector.project_token), 403)
    assert_problem(client.get("/api/v2/events/" + "0" * 24, collector.user_token), 404)
    assert_problem(client.get("/api/v2/events/not-an-id", collector.user_token), 404)
    assert_problem(
        client.get("/api/v2/events/" + event["id"][:8] + "f" * 16, collector.user_token), 404
    )
    other = collector.create_project("Other")
    other_user = collector.create_token(other["id"], ["user"])
    assert_problem(client.get(f"/api/v2/events/{event['id']}", other_user), 404)


def test_cursor_paging_with_after_and_before(client: Client, collector: Collector) -> None:
    _seed(client, 7)
    seen: list[str] = []
    url = collector.url + "/api/v2/events?limit=3&after=" + collector.events()[0]["id"]
    seen.append(collector.events()[0]["message"])
    while url:
        response = client.session.get(
            url, headers={"Authorization": f"Bearer {collector.user_token}"}, timeout=10
        )
        assert response.status_code == 200
        seen += [e["message"] for e in response.json()]
        url = _links(response.headers.get("Link", "")).get("next", "")
    assert seen == [f"event {i:02d}" for i in range(6, -1, -1)]
    oldest = collector.events(limit=1000)[-1]["id"]
    newer = client.get(
        "/api/v2/events", collector.user_token, params={"before": oldest, "limit": 2}
    )
    assert [e["message"] for e in newer.json()] == ["event 02", "event 01"]
    assert "previous" in _links(newer.headers["Link"])
    assert_problem(
        client.get("/api/v2/events", collector.user_token, params={"after": "0" * 24}), 400
    )


def test_skipping_past_a_thousand_rows_answers_nothing(
    client: Client, collector: Collector
) -> None:
    _seed(client, 3)
    far = client.get("/api/v2/events", collector.user_token, params={"page": 12, "limit": 100})
    assert far.status_code == 200
    assert far.json() == []
    assert "Link" not in far.headers


def test_stack_endpoints(client: Client, collector: Collector) -> None:
    error = {"type": "KeyError", "message": "'x'", "stack_trace": "tb"}
    client.post_events([{"@simple_error": error}, {"@simple_error": error}, {"message": "log"}])
    (event, *_) = collector.events(type="error")
    stack_path = f"/api/v2/stacks/{event['stack_id']}"
    stack = client.get(stack_path, collector.user_token).json()
    assert stack["total_occurrences"] == 2
    assert stack["status"] == "open"
    assert stack["signature_info"]["ExceptionType"] == "KeyError"
    events = client.get(stack_path + "/events", collector.user_token)
    assert events.headers["X-Result-Count"] == "2"
    assert {e["stack_id"] for e in events.json()} == {event["stack_id"]}
    fixed = client.request("POST", stack_path + "/mark-fixed", collector.user_token)
    assert fixed.status_code == 200
    assert client.get(stack_path, collector.user_token).json()["status"] == "fixed"
    reopened = client.request("DELETE", stack_path + "/mark-fixed", collector.user_token)
    assert reopened.status_code == 200
    ignored = client.request(
        "POST", stack_path + "/change-status", collector.user_token, params={"status": "ignored"}
    )
    assert ignored.status_code == 200
    assert collector.stacks(status="ignored")[0]["id"] == event["stack_id"]
    bad = client.request(
        "POST", stack_path + "/change-status", collector.user_token, params={"status": "gone"}
    )
    assert_problem(bad, 400)
    assert_problem(client.get("/api/v2/stacks/" + "0" * 24, collector.user_token), 404)
    assert_problem(client.get(stack_path, collector.project_token), 403)


def test_config_version_and_304(client: Client, collector: Collector) -> None:
    response = client.get("/api/v2/projects/config", collector.project_token)
    assert response.status_code == 200
    assert response.json() == {"version": 0, "settings": {}}
    assert response.headers["X-Exceptionless-ConfigVersion"] == "0"
    current = client.get("/api/v2/projects/config", collector.project_token, params={"v": 0})
    assert current.status_code == 304
    assert current.content == b""
    assert collector.set_project_setting("@@log:*", "Info") == 1
    changed = client.get("/api/v2/projects/config", collector.project_token, params={"v": 0})
    assert changed.json() == {"version": 1, "settings": {"@@log:*": "Info"}}
    assert changed.headers["X-Exceptionless-ConfigVersion"] == "1"
    assert client.post_events({"message": "m"}).headers["X-Exceptionless-ConfigVersion"] == "1"
    by_path = client.get(f"/api/v2/projects/{collector.project_id}/config", collector.user_token)
    assert by_path.json()["version"] == 1
    assert_problem(client.get("/api/v2/projects/config", collector.user_token), 400)
    assert (
        client.get("/api/v2/projects/config", collector.project_token, params={"v": 1}).status_code
        == 304
    )


def test_heartbeat(client: Client, collector: Collector) -> None:
    path = "/api/v2/events/session/heartbeat"
    response = client.get(path, collector.project_token, params={"id": "s-1", "close": "true"})
    assert response.status_code == 200
    assert_problem(client.get(path, params={"id": "s-1"}), 401)


def test_user_description_is_attached(client: Client, collector: Collector) -> None:
    client.post_events({"message": "crash", "reference_id": "user-desc-0001"})
    path = "/api/v2/events/by-ref/user-desc-0001/user-description"
    body = {"email_address": "ann@example.invalid", "description": "it broke"}
    response = client.request("POST", path, collector.project_token, json=body)
    assert response.status_code == 202
    data = collector.events()[0]["data"]
    assert data["@user_description"] == body
    unknown = "/api/v2/events/by-ref/no-such-ref-1/user-description"
    assert client.request("POST", unknown, collector.project_token, json=body).status_code == 202
    assert_problem(
        client.request(
            "POST",
            "/api/v2/events/by-ref/bad!/user-description",
            collector.project_token,
            json=body,
        ),
        404,  # as the service: an invalid reference id does not match its route
    )
    assert_problem(client.request("POST", path, collector.project_token, json=[1]), 400)


def test_unknown_paths_get_404_and_wrong_methods_405(client: Client, collector: Collector) -> None:
    assert_problem(client.get("/api/v2/nothing", collector.user_token), 404)
    assert_problem(client.get("/favicon.ico"), 404)
    response = client.request("DELETE", "/api/v2/events", collector.user_token)
    assert_problem(response, 405)
    assert response.headers["Allow"] == "GET, HEAD, POST"
    response = client.request("POST", "/api/v2/projects", collector.user_token, json={})
    assert_problem(response, 405)
    assert response.headers["Allow"] == "GET, HEAD"
    assert_problem(client.request("PUT", "/", json={}), 405)


def test_head_and_trailing_slash(client: Client, collector: Collector) -> None:
    response = client.request("HEAD", "/api/v2/projects/", collector.user_token)
    assert response.status_code == 200
    assert response.content == b""
    assert int(response.headers["Content-Length"]) > 0


def test_access_token_query_parameter(client: Client, collector: Collector) -> None:
    response = client.get("/api/v2/projects", params={"access_token": collector.user_token})
    assert response.status_code == 200


def test_malformed_http_does_not_hurt_the_server(client: Client, collector: Collector) -> None:
    host, port = collector.url.removeprefix("http://").split(":")
    for garbage in (b"\x00\x01\x02 garbage\r\n\r\n", b"GET\r\n\r\n", b"BREW / HTTP/1.1\r\n\r\n"):
        with socket.create_connection((host, int(port)), timeout=5) as connection:
            connection.sendall(garbage)
            answer = connection.recv(4096)
        assert answer.startswith(b"HTTP/1."), answer
        assert b" 400 " in answer or b" 501 " in answer or b" 405 " in answer
    with socket.create_connection((host, int(port)), timeout=5) as connection:
        head = (
            f"POST /api/v2/events HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Authorization: Bearer {collector.project_token}\r\n"
            'Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"mess'
        )
        connection.sendall(head.encode())  # then hang up mid-body
    assert client.post_events({"message": "still fine"}).status_code == 202
    assert [e["message"] for e in collector.events()] == ["still fine"]
