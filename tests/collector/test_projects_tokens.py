"""GET /api/v2/projects and POST /api/v2/projects/{id}/tokens."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

import pytest

from eventlog_handler.collector import Collector
from tests.support.collector import Client, assert_problem

UTC_Z = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,7})?Z$")
KEY = re.compile(r"^[A-Za-z0-9]{40}$")


def _links(header: str) -> dict[str, str]:
    return {rel: url for url, rel in re.findall(r'<([^>]+)>;\s*rel="(\w+)"', header)}


def test_list_projects_fields(client: Client, collector: Collector) -> None:
    client.post_events({"message": "m"})
    response = client.get("/api/v2/projects", collector.user_token)
    assert response.status_code == 200
    assert response.headers["X-Result-Count"] == "1"
    assert "Link" not in response.headers
    [project] = response.json()
    assert project["id"] == collector.project_id
    assert project["organization_id"] == collector.organization_id
    assert UTC_Z.match(project["created_utc"])
    for name, kind in [
        ("organization_name", str),
        ("name", str),
        ("delete_bot_data_enabled", bool),
        ("is_configured", bool),
        ("stack_count", int),
        ("event_count", int),
        ("has_premium_features", bool),
        ("has_slack_integration", bool),
        ("data", dict),
    ]:
        assert isinstance(project[name], kind), name
    assert project["event_count"] == 1
    assert project["stack_count"] == 1
    assert project["is_configured"] is True


def test_list_projects_pages_with_link_headers(client: Client, collector: Collector) -> None:
    created = {collector.project_id}
    for index in range(7):
        created.add(collector.create_project(f"Project {index}")["id"])
    url = collector.url + "/api/v2/projects?limit=3"
    seen: list[str] = []
    pages = 0
    while url:
        response = client.session.get(
            url, headers={"Authorization": f"Bearer {collector.user_token}"}, timeout=10
        )
        assert response.status_code == 200
        assert response.headers["X-Result-Count"] == "8"
        links = _links(response.headers.get("Link", ""))
        assert ("previous" in links) == (pages > 0)
        seen += [p["id"] for p in response.json()]
        pages += 1
        url = links.get("next", "")
    assert pages == 3
    assert len(seen) == 8
    assert set(seen) == created
    page_two = client.get("/api/v2/projects", collector.user_token, params={"page": 2, "limit": 3})
    links = _links(page_two.headers["Link"])
    assert "page=1" in links["previous"]
    assert "page=3" in links["next"]


def test_list_projects_limits(client: Client, collector: Collector) -> None:
    for index in range(11):
        collector.create_project(f"P{index}")
    default = client.get("/api/v2/projects", collector.user_token)
    assert len(default.json()) == 10
    assert 'rel="next"' in default.headers["Link"]
    everything = client.get("/api/v2/projects", collector.user_token, params={"limit": 5000})
    assert len(everything.json()) == 12
    assert_problem(client.get("/api/v2/projects", collector.user_token, params={"page": "x"}), 400)


def test_only_the_callers_organization_is_listed(client: Client, collector: Collector) -> None:
    organization = collector.create_organization("Elsewhere")
    foreign = collector.create_project("Foreign", organization_id=organization)
    ids = [p["id"] for p in client.get("/api/v2/projects", collector.user_token).json()]
    assert foreign["id"] not in ids
    assert_problem(client.get(f"/api/v2/projects/{foreign['id']}", collector.user_token), 404)
    mine = client.get(f"/api/v2/projects/{collector.project_id}", collector.user_token)
    assert mine.json()["name"] == "Local Project"


def test_client_token_cannot_list_projects_or_create_tokens(
    client: Client, collector: Collector
) -> None:
    assert_problem(client.get("/api/v2/projects", collector.project_token), 403)
    path = f"/api/v2/projects/{collector.project_id}/tokens"
    assert_problem(client.request("POST", path, collector.project_token, json={}), 403)
    assert_problem(client.get("/api/v2/projects", "unknown-token-value"), 401)


@pytest.mark.parametrize(
    ("body", "scopes"),
    [
        (None, ["client"]),
        ({}, ["client"]),
        ({"scopes": []}, ["client"]),
        ({"scopes": ["client"]}, ["client"]),
        ({"scopes": ["user"]}, ["user", "client"]),
        ({"scopes": ["User", "client"]}, ["user", "client"]),
        ({"scopes": ["global"]}, ["global", "user", "client"]),
    ],
)
def test_create_token_scopes(
    client: Client, collector: Collector, body: dict[str, object] | None, scopes: list[str]
) -> None:
    path = f"/api/v2/projects/{collector.project_id}/tokens"
    if body is None:
        response = client.request("POST", path, collector.user_token)
    else:
        response = client.request("POST", path, collector.user_token, json=body)
    assert response.status_code == 201, response.text
    token = response.json()
    assert KEY.match(token["id"])
    assert token["scopes"] == scopes
    assert token["project_id"] == collector.project_id
    assert token["organization_id"] == collector.organization_id
    assert token["is_disabled"] is False
    assert UTC_Z.match(token["created_utc"])
    assert UTC_Z.match(token["updated_utc"])
    assert response.headers["Location"] == f"{collector.url}/api/v2/tokens/{token['id']}"
    fetched = client.session.get(
        response.headers["Location"],
        headers={"Authorization": f"Bearer {collector.user_token}"},
        timeout=10,
    )
    assert fetched.json() == token


def test_created_token_posts_to_its_project(client: Client, collector: Collector) -> None:
    project = collector.create_project("Second")
    response = client.request(
        "POST",
        f"/api/v2/projects/{project['id']}/tokens",
        collector.user_token,
        json={"scopes": ["client"], "notes": "ci"},
    )
    assert response.json()["notes"] == "ci"
    token = response.json()["id"]
    assert client.post_events({"message": "to second"}, token=token).status_code == 202
    assert [e["message"] for e in collector.events(project_id=project["id"])] == ["to second"]
    assert collector.events(project_id=collector.project_id) == []


def test_user_scoped_project_token_can_list_projects(client: Client, collector: Collector) -> None:
    response = client.request(
        "POST",
        f"/api/v2/projects/{collector.project_id}/tokens",
        collector.user_token,
        json={"scopes": ["user"]},
    )
    token = response.json()["id"]
    assert client.get("/api/v2/projects", token).status_code == 200
    assert client.post_events({"message": "m"}, token=token).status_code == 202


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"scopes": ["admin"]}, "scopes"),
        ({"scopes": ["client", "root"]}, "scopes"),
        ({"scopes": "client"}, "scopes"),
        ({"scopes": [1]}, "scopes"),
        ({"notes": 5}, "notes"),
        ({"expires_utc": "soon"}, "expires_utc"),
    ],
)
def test_create_token_validation_gets_422(
    client: Client, collector: Collector, body: dict[str, object], field: str
) -> None:
    path = f"/api/v2/projects/{collector.project_id}/tokens"
    problem = assert_problem(client.request("POST", path, collector.user_token, json=body), 422)
    assert field in problem["errors"]


def test_create_token_bad_requests(client: Client, collector: Collector) -> None:
    assert_problem(
        client.request(
            "POST", "/api/v2/projects/" + "0" * 24 + "/tokens", collector.user_token, json={}
        ),
        404,
    )
    organization = collector.create_organization("Elsewhere")
    foreign = collector.create_project("Foreign", organization_id=organization)
    assert_problem(
        client.request(
            "POST", f"/api/v2/projects/{foreign['id']}/tokens", collector.user_token, json={}
        ),
        404,
    )
    path = f"/api/v2/projects/{collector.project_id}/tokens"
    assert_problem(
        client.request(
            "POST",
            path,
            collector.user_token,
            data=b"{bad",
            headers={"Content-Type": "application/json"},
        ),
        400,
    )
    assert_problem(client.request("POST", path, collector.user_token, json=["client"]), 400)
    assert_problem(
        client.request(
            "POST", path, collector.user_token, data=b"{}", headers={"Content-Type": "text/plain"}
        ),
        415,
    )


def test_expired_token_gets_401(client: Client, collector: Collector) -> None:
    path = f"/api/v2/projects/{collector.project_id}/tokens"
    past = (datetime.now(timezone.utc) - timedelta(minutes=1)).isoformat()
    future = (datetime.now(timezone.utc) + timedelta(days=1)).isoformat()
    expired = client.request("POST", path, collector.user_token, json={"expires_utc": past})
    valid = client.request("POST", path, collector.user_token, json={"expires_utc": future})
    assert UTC_Z.match(expired.json()["expires_utc"])
    assert_problem(client.post_events({"message": "m"}, token=expired.json()["id"]), 401)
    assert client.post_events({"message": "m"}, token=valid.json()["id"]).status_code == 202


def test_no_next_link_once_the_next_page_would_skip_a_thousand_rows(
    client: Client, collector: Collector
) -> None:
    for index in range(600):
        collector.create_project(f"Many {index:03d}")
    first = client.get("/api/v2/projects", collector.user_token, params={"limit": 500})
    assert first.status_code == 200
    assert len(first.json()) == 500
    assert first.headers["X-Result-Count"] == "601"
    assert "Link" not in first.headers  # (1 + 1) x 500 would skip 1,000 rows
    second = client.get("/api/v2/projects", collector.user_token, params={"page": 2, "limit": 500})
    assert len(second.json()) == 101
    assert _links(second.headers["Link"]).keys() == {"previous"}
    under = client.get("/api/v2/projects", collector.user_token, params={"limit": 450})
    assert _links(under.headers["Link"]).keys() == {"next"}  # (1 + 1) x 450 skips 900
    beyond = client.get("/api/v2/projects", collector.user_token, params={"page": 4, "limit": 400})
    assert beyond.status_code == 200
    assert beyond.json() == []
    assert "X-Result-Count" not in beyond.headers


def test_links_use_the_address_the_client_used(client: Client, collector: Collector) -> None:
    for index in range(12):
        collector.create_project(f"P{index}")
    url = f"http://localhost:{collector.port}/api/v2/projects"
    response = client.session.get(
        url, headers={"Authorization": f"Bearer {collector.user_token}"}, timeout=10
    )
    assert _links(response.headers["Link"])["next"].startswith(url + "?")
