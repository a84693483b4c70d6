"""Answers the collector gives as the real server gives them (the Exceptionless server): an event's ``id``
taken as its reference id, an invalid reference id kept in ``data.InvalidReferenceId``, a
``@stack`` that is not an object renamed ``_@stack`` (a string holding a JSON object is read),
an empty array answered 202, Basic credentials with an empty password refused."""

from __future__ import annotations

import json
from typing import Any

import requests

from eventlog_handler.collector import Collector
from tests.support.collector import Client, assert_problem


def _only(collector: Collector) -> dict:  # type: ignore[type-arg]
    (event,) = collector.events()
    return event


def test_an_events_id_is_its_reference_id_when_it_has_none(
    client: Client, collector: Collector
) -> None:
    assert client.post_events({"message": "m", "id": "abc12345-x"}).status_code == 202
    assert _only(collector)["reference_id"] == "abc12345-x"


def test_a_reference_id_given_wins_over_the_id(client: Client, collector: Collector) -> None:
    body = {"message": "m", "id": "from-the-id", "reference_id": "from-the-field"}
    assert client.post_events(body).status_code == 202
    assert _only(collector)["reference_id"] == "from-the-field"


def test_an_invalid_reference_id_is_kept_in_data(client: Client, collector: Collector) -> None:
    assert client.post_events({"message": "m", "reference_id": "short"}).status_code == 202
    event = _only(collector)
    assert event["reference_id"] == "invalid-reference-id"
    assert event["data"]["InvalidReferenceId"] == "short"


def test_a_stack_that_is_not_an_object_is_renamed(client: Client, collector: Collector) -> None:
    assert client.post_events({"message": "m", "data": {"@stack": "my key"}}).status_code == 202
    event = _only(collector)
    assert "@stack" not in event["data"]
    assert event["data"]["_@stack"] == "my key"


def test_a_stack_string_holding_an_object_is_read(client: Client, collector: Collector) -> None:
    stack = {"title": "Checkout", "signature_data": {"area": "checkout"}}
    body = {"message": "m", "data": {"@stack": json.dumps(stack)}}
    assert client.post_events(body).status_code == 202
    event = _only(collector)
    assert event["data"]["@stack"] == stack
    (only_stack,) = collector.stacks()
    assert only_stack["title"] == "Checkout"


def test_an_empty_array_is_202(client: Client, collector: Collector) -> None:
    assert client.post_events(b"[]").status_code == 202
    assert collector.events() == []


def test_basic_with_an_empty_password_is_401(collector: Collector) -> None:
    answer = requests.post(
        f"{collector.url}/api/v2/events",
        json={"message": "m"},
        auth=(collector.project_token, ""),
        timeout=10,
    )
    assert_problem(answer, 401)
    assert collector.events() == []


def _describe(client: Client, collector: Collector, reference: str, body: object) -> Any:
    path = f"/api/v2/events/by-ref/{reference}/user-description"
    return client.request("POST", path, collector.project_token, json=body)


def test_user_descriptions_are_validated_as_the_service_validates_them(
    client: Client, collector: Collector
) -> None:
    client.post_events({"message": "crash", "reference_id": "feedback-0001"})
    bad_email = {"email_address": "not an address", "description": "it broke"}
    problem = assert_problem(_describe(client, collector, "feedback-0001", bad_email), 422)
    assert "email_address" in problem["errors"]
    assert_problem(_describe(client, collector, "feedback-0001", {}), 422)
    assert_problem(_describe(client, collector, "short", {"description": "x"}), 404)
    good = {"email_address": "ann@example.test", "description": "it broke"}
    assert _describe(client, collector, "feedback-0001", good).status_code == 202
    assert (
        _describe(client, collector, "feedback-0001", {"description": "again"}).status_code == 202
    )
    (event,) = collector.events()
    assert event["data"]["@user_description"] == {"description": "again"}


def test_an_event_is_found_by_its_reference_id(client: Client, collector: Collector) -> None:
    client.post_events([{"message": "first", "reference_id": "lookup-0001"}, {"message": "other"}])
    found = client.get("/api/v2/events/by-ref/lookup-0001", collector.user_token)
    assert found.status_code == 200, found.text
    assert [event["message"] for event in found.json()] == ["first"]  # a list, as the service
    nothing = client.get("/api/v2/events/by-ref/lookup-0002", collector.user_token)
    assert (nothing.status_code, nothing.json()) == (200, [])  # the service: 200 with []
    assert_problem(client.get("/api/v2/events/by-ref/short", collector.user_token), 404)
    assert_problem(client.get("/api/v2/events/by-ref/lookup-0001", collector.project_token), 403)
