"""Project settings through the API (set, delete, read back) and logging in."""

from __future__ import annotations

import json
import re

import pytest

from eventlog_handler.collector import Collector
from tests.support.collector import Client, assert_problem

KEY = re.compile(r"^[A-Za-z0-9]{40}$")


def _config(client: Client, collector: Collector) -> dict[str, object]:
    response = client.get("/api/v2/projects/config", collector.project_token)
    assert response.status_code == 200
    return dict(response.json())


def _set(client: Client, collector: Collector, key: str, body: bytes, token: str | None = None):  # type: ignore[no-untyped-def]
    return client.request(
        "POST",
        f"/api/v2/projects/{collector.project_id}/config",
        token or collector.user_token,
        params={"key": key},
        data=body,
        headers={"Content-Type": "application/json"},
    )


def test_set_and_delete_a_setting(client: Client, collector: Collector) -> None:
    response = _set(client, collector, "@@log:*", json.dumps({"value": "Warn"}).encode())
    assert response.status_code == 200
    assert _config(client, collector) == {"version": 1, "settings": {"@@log:*": "Warn"}}
    bare = _set(client, collector, "@@DataExclusions", json.dumps("password,*token*").encode())
    assert bare.status_code == 200
    assert _config(client, collector) == {
        "version": 2,
        "settings": {"@@log:*": "Warn", "@@DataExclusions": "password,*token*"},
    }
    posted = client.post_events({"message": "m"})
    assert posted.headers["X-Exceptionless-ConfigVersion"] == "2"
    path = f"/api/v2/projects/{collector.project_id}/config"
    deleted = client.request("DELETE", path, collector.user_token, params={"key": "@@log:*"})
    assert deleted.status_code == 200
    assert _config(client, collector) == {
        "version": 3,
        "settings": {"@@DataExclusions": "password,*token*"},
    }
    missing = client.request("DELETE", path, collector.user_token, params={"key": "@@nothing"})
    assert missing.status_code == 200
    assert _config(client, collector)["version"] == 3  # nothing removed, nothing bumped


@pytest.mark.parametrize(
    ("key", "body"),
    [
        ("", b'{"value": "Warn"}'),
        ("@@log:*", b'{"value": ""}'),
        ("@@log:*", b'{"value": 5}'),
        ("@@log:*", b'{"other": "x"}'),
        ("@@log:*", b"{not json"),
    ],
)
def test_bad_setting_requests_get_400(
    client: Client, collector: Collector, key: str, body: bytes
) -> None:
    assert_problem(_set(client, collector, key, body), 400)
    assert _config(client, collector)["version"] == 0


def test_settings_need_a_user_token_and_the_right_project(
    client: Client, collector: Collector
) -> None:
    assert_problem(_set(client, collector, "@@log:*", b'"Info"', collector.project_token), 403)
    organization = collector.create_organization("Elsewhere")
    foreign = collector.create_project("Foreign", organization_id=organization)
    response = client.request(
        "POST",
        f"/api/v2/projects/{foreign['id']}/config",
        collector.user_token,
        params={"key": "@@log:*"},
        json={"value": "Info"},
    )
    assert_problem(response, 404)
    assert _config(client, collector)["version"] == 0


def test_login_gives_a_new_user_token(client: Client, collector: Collector) -> None:
    response = client.request(
        "POST",
        "/api/v2/auth/login",
        json={"email": collector.admin_email, "password": collector.admin_password},
    )
    assert response.status_code == 200
    token = response.json()["token"]
    assert KEY.match(token)
    assert token != collector.user_token
    assert client.get("/api/v2/projects", token).status_code == 200
    created = client.request(
        "POST", f"/api/v2/projects/{collector.project_id}/tokens", token, json={}
    )
    assert created.status_code == 201
    assert created.json()["scopes"] == ["client"]
    again = client.request(
        "POST",
        "/api/v2/auth/login",
        json={"email": collector.admin_email.upper(), "password": collector.admin_password},
    )
    assert again.json()["token"] != token


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"email": "admin@localhost", "password": "wrong"}, 401),
        ({"email": "nobody@localhost", "password": "x"}, 401),
        ({"email": "admin@localhost"}, 422),
        ({"password": "x"}, 422),
        ([], 400),
    ],
)
def test_login_refusals(client: Client, collector: Collector, body: object, status: int) -> None:
    problem = assert_problem(client.request("POST", "/api/v2/auth/login", json=body), status)
    assert collector.admin_password not in json.dumps(problem)


def test_the_user_survives_a_restart(tmp_path: object) -> None:
    from pathlib import Path

    db = Path(str(tmp_path)) / "login.sqlite3"
    with Collector(db) as first:
        credentials = (first.admin_email, first.admin_password)
    with Collector(db) as second:
        assert (second.admin_email, second.admin_password) == credentials
        http = Client(second)
        response = http.request(
            "POST",
            "/api/v2/auth/login",
            json={"email": credentials[0], "password": credentials[1]},
        )
        http.close()
        assert response.status_code == 200
