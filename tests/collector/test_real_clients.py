"""What real clients send, accepted as the Exceptionless server accepts it: every rule, against a running collector.

Where the service answers 202 and stores something, the collector does too; these tests post
what the official clients (and people with curl) send and look at what was stored.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
import requests

from eventlog_handler.collector import Collector
from tests.support.collector import Client, assert_problem

#: What the collector adds to each event this test client posts, as the service does: the
#: post's User-Agent (that of ``requests``) as ``@submission_client``.
SENT_BY = {
    "@submission_client": {
        "user_agent": f"python-requests/{requests.__version__}",
        "version": requests.__version__,
    }
}

# -- authentication forms ----------------------------------------------------------------------


def _post(
    collector: Collector,
    client: Client,
    *,
    headers: dict[str, str] | None = None,
    params: dict[str, str] | None = None,
    message: str = "m",
) -> requests.Response:
    return client.session.post(
        collector.url + "/api/v2/events",
        data=json.dumps({"message": message}).encode(),
        headers={"Content-Type": "application/json", **(headers or {})},
        params=params,
        timeout=10,
    )


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.mark.parametrize(
    "form",
    [
        "Bearer",
        "bearer",
        "BEARER",
        "Token",
        "token",
        "basic-client",
        "basic-oauth",
        "access_token",
        "api_key",
        "apikey",
    ],
)
def test_every_way_of_sending_the_key_is_accepted(
    client: Client, collector: Collector, form: str
) -> None:
    key = collector.project_token
    headers: dict[str, str] = {}
    params: dict[str, str] = {}
    if form.lower() in ("bearer", "token"):
        headers["Authorization"] = f"{form} {key}"
    elif form == "basic-client":
        headers["Authorization"] = _basic("client", key)
    elif form == "basic-oauth":
        headers["Authorization"] = _basic(key, "x-oauth-basic")
    else:
        params[form] = key
    response = _post(collector, client, headers=headers, params=params, message=form)
    assert response.status_code == 202, response.text
    assert [event["message"] for event in collector.events()] == [form]


def test_basic_with_an_empty_password_is_refused(client: Client, collector: Collector) -> None:
    # As the service refuses it (the Exceptionless server): 401, nothing stored.
    key = collector.project_token
    response = _post(collector, client, headers={"Authorization": _basic(key, "")})
    assert_problem(response, 401)
    assert collector.events() == []


def test_query_keys_count_only_without_an_authorization_header(
    client: Client, collector: Collector
) -> None:
    key = collector.project_token
    refused = _post(
        collector,
        client,
        headers={"Authorization": "Bearer " + "x" * 40},
        params={"access_token": key},
    )
    assert_problem(refused, 401)
    other_scheme = _post(
        collector, client, headers={"Authorization": f"Digest {key}"}, params={"api_key": key}
    )
    assert_problem(other_scheme, 401)
    assert collector.events() == []


def test_basic_with_the_users_email_and_password(client: Client, collector: Collector) -> None:
    authorization = _basic(collector.admin_email, collector.admin_password)
    response = client.session.get(
        collector.url + "/api/v2/projects", headers={"Authorization": authorization}, timeout=10
    )
    assert response.status_code == 200
    assert [project["id"] for project in response.json()] == [collector.project_id]
    wrong = _basic(collector.admin_email, collector.admin_password + "x")
    response = client.session.get(
        collector.url + "/api/v2/projects", headers={"Authorization": wrong}, timeout=10
    )
    assert_problem(response, 401)


def test_query_key_is_not_copied_into_paging_links(client: Client, collector: Collector) -> None:
    for index in range(12):
        collector.create_project(f"P{index}")
    response = client.get("/api/v2/projects", params={"access_token": collector.user_token})
    assert response.status_code == 200
    assert 'rel="next"' in response.headers["Link"]
    assert collector.user_token not in response.headers["Link"]


# -- bodies ------------------------------------------------------------------------------------


def _messages(collector: Collector) -> list[str]:
    return sorted(str(event["message"]) for event in collector.events())


def test_text_plain_is_one_log_event_per_line(client: Client, collector: Collector) -> None:
    body = b"Disk space is low\r\nUser logged in\n\n   \n  Cache cleared  \n"
    response = client.post_events(body, headers={"Content-Type": "text/plain; charset=utf-8"})
    assert response.status_code == 202
    assert response.headers["X-Events-Accepted"] == "3"
    assert _messages(collector) == ["Cache cleared", "Disk space is low", "User logged in"]
    assert {event["type"] for event in collector.events()} == {"log"}


def test_json_text_sent_as_text_plain_is_read_as_events(
    client: Client, collector: Collector
) -> None:
    body = json.dumps({"type": "error", "message": "as json"}).encode()
    assert client.post_events(body, headers={"Content-Type": "text/plain"}).status_code == 202
    (event,) = collector.events()
    assert (event["type"], event["message"]) == ("error", "as json")


@pytest.mark.parametrize(
    "body",
    [
        b"{not json",
        b'{"message": "unterminated',
        b'{"message": NaN}',
        b'[{"message": "ok"}, "a string"]',
        b'"just a string"',
        b"[" * 2000,
    ],
    ids=["garbage", "truncated", "nan", "mixed-array", "scalar", "deep"],
)
def test_json_that_does_not_parse_is_stored_as_a_log_message(
    client: Client, collector: Collector, body: bytes
) -> None:
    response = client.post_events(body)
    assert response.status_code == 202
    (event,) = collector.events()
    assert event["type"] == "log"
    assert event["message"] == body.decode()[:2000]
    page = client.get(f"/events/{event['id']}")
    assert "Stored as text" in page.text


def test_bytes_that_are_not_utf8_are_read_with_replacement_characters(
    client: Client, collector: Collector
) -> None:
    assert client.post_events(b"caf\xe9 \xff ok", headers={"Content-Type": "text/plain"}).ok
    assert _messages(collector) == ["caf\ufffd \ufffd ok"]


@pytest.mark.parametrize(
    "event",
    [
        {"message": "m", "date": "not-a-date"},
        {"message": "m", "value": "10"},
        {"message": "m", "count": 1.5},
        {"message": "m", "tags": "one"},
        {"message": "m", "type": 5},
        {"message": "m", "geo": [1, 2]},
        {"message": "m", "data": [1]},
        {"message": {"text": "m"}},
    ],
)
def test_fields_of_the_wrong_type_store_the_whole_body_as_a_log_message(
    client: Client, collector: Collector, event: dict[str, Any]
) -> None:
    body = json.dumps(event).encode()
    response = client.post_events(body)
    assert response.status_code == 202
    (stored,) = collector.events()
    assert stored["type"] == "log"
    assert stored["message"] == body.decode()


def test_a_batch_with_one_unreadable_event_is_stored_whole_as_text(
    client: Client, collector: Collector
) -> None:
    body = json.dumps([{"message": "ok"}, {"message": "bad", "date": "nope"}]).encode()
    assert client.post_events(body).status_code == 202
    assert _messages(collector) == [body.decode()]


# -- property names --------------------------------------------------------------------------


def test_property_names_are_case_insensitive(client: Client, collector: Collector) -> None:
    batch = [
        {"Message": "pascal", "ReferenceId": "ref-pascal-1", "Type": "log", "Source": "a.b"},
        {"message": "camel", "referenceId": "ref-camel-01", "source": "a.b"},
        {"MESSAGE": "upper", "REFERENCE_ID": "ref-upper-01", "@Level": "Warn"},
    ]
    assert client.post_events(batch).status_code == 202
    stored = {event["message"]: event for event in collector.events()}
    assert set(stored) == {"pascal", "camel", "upper"}
    assert stored["pascal"]["reference_id"] == "ref-pascal-1"
    assert stored["pascal"]["source"] == "a.b"
    assert stored["camel"]["reference_id"] == "ref-camel-01"
    assert stored["upper"]["reference_id"] == "ref-upper-01"
    assert stored["upper"]["data"] == {"@level": "Warn", **SENT_BY}
    assert collector.events(level="warn") == [stored["upper"]]
    assert client.post_events({"Message": "again", "ReferenceId": "ref-pascal-1"}).ok
    assert "again" not in _messages(collector)  # the same reference id, however spelled


def test_tags_are_a_case_insensitive_set(client: Client, collector: Collector) -> None:
    body = {"message": "m", "tags": ["Checkout", "checkout", "CHECKOUT", "eu", "EU", "beta"]}
    assert client.post_events(body).status_code == 202
    (event,) = collector.events()
    assert event["tags"] == ["Checkout", "eu", "beta"]
    assert collector.events(filter="tag:Checkout") == [event]


# -- errors -------------------------------------------------------------------------------------


def test_error_with_frames_as_objects_is_accepted_and_stacked(
    client: Client, collector: Collector
) -> None:
    frames = [
        {
            "declaring_namespace": "Shop",
            "declaring_type": "Checkout",
            "name": "Pay",
            "file_name": "Checkout.cs",
            "line_number": 42,
        }
    ]
    error = {
        "type": "System.InvalidOperationException",
        "message": "no card",
        "stack_trace": frames,
    }
    assert client.post_events([{"@error": error}, {"@error": error}]).status_code == 202
    events = collector.events()
    assert [event["type"] for event in events] == ["error", "error"]
    assert [event["message"] for event in events] == ["no card", "no card"]
    (stack,) = collector.stacks()
    assert stack["total_occurrences"] == 2
    assert stack["title"] == "InvalidOperationException: no card"
    page = client.get(f"/events/{events[0]['id']}").text
    assert "at Shop.Checkout.Pay in Checkout.cs:line 42" in page


def test_error_message_is_filled_from_the_error(client: Client, collector: Collector) -> None:
    error = {"type": "KeyError", "message": "'cvv'", "stack_trace": "Traceback ..."}
    assert client.post_events({"type": "error", "@simple_error": error}).status_code == 202
    assert client.post_events({"message": "own message", "@simple_error": error}).ok
    assert _messages(collector) == ["'cvv'", "own message"]


# -- GET submit ---------------------------------------------------------------------------------


def test_submit_by_get_with_fields_as_query_parameters(
    client: Client, collector: Collector
) -> None:
    params = {
        "access_token": collector.project_token,
        "type": "usage",
        "source": "build",
        "value": "10",
        "count": "3",
        "message": "Hello World",
        "reference": "get-submit-001",
        "tags": "ci,nightly,ci",
        "geo": "32.85,-96.9613",
        "identity": "u-42",
        "identity.name": "Ann",
        "randomproperty": "true",
        "date": "2030-01-01T12:00:00Z",
    }
    response = client.session.get(
        collector.url + "/api/v2/events/submit", params=params, timeout=10
    )
    assert response.status_code == 200
    assert response.headers["X-Exceptionless-ConfigVersion"] == "0"
    (event,) = collector.events()
    assert (event["type"], event["source"], event["message"]) == ("usage", "build", "Hello World")
    assert (event["value"], event["count"]) == (10, 3)
    assert event["reference_id"] == "get-submit-001"
    assert event["tags"] == ["ci", "nightly"]
    assert event["geo"] == "32.85,-96.9613"
    assert event["data"]["@user"] == {"identity": "u-42", "name": "Ann"}
    assert event["data"]["randomproperty"] == "true"
    assert "access_token" not in event["data"]


def test_submit_by_get_with_the_type_in_the_path(client: Client, collector: Collector) -> None:
    base = f"/api/v2/projects/{collector.project_id}/events/submit/log"
    response = client.get(
        base,
        collector.project_token,
        params={"message": "from the path", "count": "x", "value": "ten", "password": "p"},
    )
    assert response.status_code == 200
    (event,) = collector.events()
    assert (event["type"], event["message"]) == ("log", "from the path")
    assert event["count"] is None and event["value"] is None  # values that do not parse
    assert event["data"] == {"password": "p", **SENT_BY}


def test_submit_by_get_respects_data_exclusions(client: Client, collector: Collector) -> None:
    collector.set_project_setting("@@DataExclusions", "password,*secret*")
    params = {"message": "m", "password": "p", "my_secret_x": "s", "kept": "k"}
    response = client.get("/api/v2/events/submit", collector.project_token, params=params)
    assert response.status_code == 200
    assert collector.events()[0]["data"] == {"kept": "k", **SENT_BY}


def test_submit_by_get_without_fields_stores_nothing(client: Client, collector: Collector) -> None:
    response = client.get("/api/v2/events/submit", collector.project_token)
    assert response.status_code == 200
    assert collector.events() == []


# -- what a client token may do -------------------------------------------------------------


def test_a_client_token_may_not_read_events(client: Client, collector: Collector) -> None:
    assert client.post_events({"message": "secret"}).status_code == 202
    (event,) = collector.events()
    token = collector.project_token
    for path in (
        "/api/v2/events",
        f"/api/v2/events/{event['id']}",
        f"/api/v2/projects/{collector.project_id}/events",
        f"/api/v2/stacks/{event['stack_id']}/events",
        f"/api/v2/stacks/{event['stack_id']}",
    ):
        assert_problem(client.get(path, token), 403)
        assert client.get(path, collector.user_token).status_code == 200, path
    assert client.get("/api/v2/projects/config", token).status_code == 200


def test_config_reads_and_heartbeats_are_never_throttled() -> None:
    with Collector(throttle=2) as collector:
        http = Client(collector)
        try:
            assert http.post_events({"message": "one"}).status_code == 202
            assert http.post_events({"message": "two"}).status_code == 202
            assert_problem(http.post_events({"message": "three"}), 429)
            for _ in range(5):
                config = http.get("/api/v2/projects/config", collector.project_token)
                assert config.status_code == 200
                assert "X-RateLimit-Remaining" not in config.headers
                beat = http.get(
                    "/api/v2/events/session/heartbeat",
                    collector.project_token,
                    params={"id": "s-1"},
                )
                assert beat.status_code == 200
            assert_problem(http.post_events({"message": "four"}), 429)
        finally:
            http.close()
