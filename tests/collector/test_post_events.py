"""POST /api/v2/events: accepted forms, the service's rules, and every refusal."""

from __future__ import annotations

import contextlib
import gzip
import json
import socket
import zlib
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import requests

from eventlog_handler.collector import Collector
from eventlog_handler.collector._endpoints import DEFAULT_MAX_BODY_BYTES
from eventlog_handler.collector._formats import format_event_date, parse_date
from tests.support.collector import Client, assert_problem

#: What the collector adds to each event this test client posts, as the service does: the
#: post's User-Agent (that of ``requests``) as ``@submission_client``.
SENT_BY = {
    "@submission_client": {
        "user_agent": f"python-requests/{requests.__version__}",
        "version": requests.__version__,
    }
}

NOW_TOLERANCE = timedelta(minutes=2)


def _only_event(collector: Collector) -> dict[str, Any]:
    events = collector.events()
    assert len(events) == 1, events
    return events[0]


def _near_now(date: str) -> bool:
    return abs(parse_date(date) - datetime.now(timezone.utc)) < NOW_TOLERANCE


# -- accepted --------------------------------------------------------------------------------


def test_message_form_is_accepted_with_202_and_service_headers(
    client: Client, collector: Collector
) -> None:
    response = client.post_events({"message": "Disk space is low"})
    assert response.status_code == 202
    assert response.content == b""
    assert response.headers["X-Exceptionless-ConfigVersion"] == "0"
    assert response.headers["X-RateLimit-Limit"] == "3500"
    assert int(response.headers["X-RateLimit-Remaining"]) < 3500
    event = _only_event(collector)
    assert event["message"] == "Disk space is low"
    assert event["type"] == "log"
    assert event["project_id"] == collector.project_id
    assert event["organization_id"] == collector.organization_id
    assert _near_now(event["date"])
    assert len(event["id"]) == 24


def test_log_form_keeps_date_and_user(client: Client, collector: Collector) -> None:
    date = format_event_date(
        datetime.now(timezone(timedelta(hours=-5))).replace(microsecond=123456)
    )
    body = {
        "type": "log",
        "message": "User logged in",
        "date": date,
        "@user": {"identity": "u-42", "name": "Ann"},
    }
    assert client.post_events(body).status_code == 202
    event = _only_event(collector)
    assert event["date"] == date
    assert event["date"].endswith("-05:00")
    assert ".1234560-" in event["date"]
    assert event["data"]["@user"] == {"identity": "u-42", "name": "Ann"}


@pytest.mark.parametrize("key", ["@simple_error", "@error"])
def test_type_defaults_to_error_when_an_error_is_present(
    client: Client, collector: Collector, key: str
) -> None:
    error = {"message": "division by zero", "type": "ZeroDivisionError", "stack_trace": "tb"}
    assert client.post_events({key: error}).status_code == 202
    event = _only_event(collector)
    assert event["type"] == "error"
    assert event["data"][key] == error


def test_empty_type_gets_the_default(client: Client, collector: Collector) -> None:
    assert client.post_events({"type": "", "message": "m"}).status_code == 202
    assert _only_event(collector)["type"] == "log"


def test_custom_type_is_kept(client: Client, collector: Collector) -> None:
    assert client.post_events({"type": "usage", "source": "feature"}).status_code == 202
    assert _only_event(collector)["type"] == "usage"


def test_array_batch_stores_every_event(client: Client, collector: Collector) -> None:
    batch = [{"message": f"m{i}", "reference_id": f"ref-batch-{i:04d}"} for i in range(3)]
    response = client.post_events(batch)
    assert response.status_code == 202
    assert response.headers["X-Events-Accepted"] == "3"
    assert sorted(e["message"] for e in collector.events()) == ["m0", "m1", "m2"]


def test_gzip_body_is_decoded(client: Client, collector: Collector) -> None:
    batch = [{"type": "log", "message": "compressed"}] * 2
    response = client.post_events(batch, compress=True)
    assert response.status_code == 202
    assert [e["message"] for e in collector.events()] == ["compressed", "compressed"]


def test_multi_member_gzip_and_raw_deflate_are_decoded(
    client: Client, collector: Collector
) -> None:
    text = json.dumps([{"message": "a"}, {"message": "b"}]).encode()
    two_members = gzip.compress(text[:10]) + gzip.compress(text[10:])
    response = client.post_events(two_members, headers={"Content-Encoding": "gzip"})
    assert response.status_code == 202
    compressor = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    raw_deflate = compressor.compress(b'{"message": "c"}') + compressor.flush()
    response = client.post_events(raw_deflate, headers={"Content-Encoding": "deflate"})
    assert response.status_code == 202
    assert sorted(e["message"] for e in collector.events()) == ["a", "b", "c"]


def test_unknown_top_level_keys_move_into_data(client: Client, collector: Collector) -> None:
    body = {
        "message": "m",
        "@level": "Info",
        "custom": 1,
        "id": "client-chosen",
        "data": {"custom": 2, "@level": "Error", "other": True},
    }
    assert client.post_events(body).status_code == 202
    event = _only_event(collector)
    assert event["data"] == {
        "custom": 2,
        "@level": "Error",
        "other": True,
        "_@level": "Info",
        "_@custom": 1,
        **SENT_BY,
    }
    # The service takes a client's "id" as the event's reference id (it has none of its own).
    assert event["reference_id"] == "client-chosen"
    assert event["id"] != "client-chosen"


def test_an_event_reads_back_the_same_every_time(client: Client, collector: Collector) -> None:
    body = {"message": "m", "@level": "Info", "@user": {"identity": "u"}, "data": {"k": 1}}
    assert client.post_events([body, body]).status_code == 202
    first = collector.events()
    assert first == collector.events() == collector.events()
    assert first[0]["data"] == {"k": 1, "@level": "Info", "@user": {"identity": "u"}, **SENT_BY}
    page = client.get(f"/events/{first[0]['id']}").text
    assert "_@level" not in page and "_@user" not in page
    assert client.get(f"/api/v2/events/{first[0]['id']}", collector.user_token).json() == first[0]


def test_message_and_source_are_truncated(client: Client, collector: Collector) -> None:
    assert client.post_events({"message": "m" * 5000, "source": "s" * 3000}).status_code == 202
    event = _only_event(collector)
    assert event["message"] == "m" * 2000
    assert event["source"] == "s" * 2000


def test_tag_limits(client: Client, collector: Collector) -> None:
    tags = ["x" * 101, "keep", "keep", ""] + [f"t{i}" for i in range(60)]
    assert client.post_events({"message": "m", "tags": tags}).status_code == 202
    kept = _only_event(collector)["tags"]
    assert len(kept) == 50
    assert kept[0] == "keep"
    assert "x" * 101 not in kept
    assert len(set(kept)) == 50


@pytest.mark.parametrize("bad", ["short", "has space-123", "x" * 101, 12345678, "ünïcode-id"])
def test_invalid_reference_id_is_replaced(client: Client, collector: Collector, bad: Any) -> None:
    assert client.post_events({"message": "m", "reference_id": bad}).status_code == 202
    assert _only_event(collector)["reference_id"] == "invalid-reference-id"


def test_invalid_reference_ids_are_not_duplicates_of_each_other(
    client: Client, collector: Collector
) -> None:
    batch = [{"message": "a", "reference_id": "bad"}, {"message": "b", "reference_id": "bad"}]
    assert client.post_events(batch).status_code == 202
    assert len(collector.events()) == 2


def test_repeated_reference_id_is_discarded_within_the_project(
    client: Client, collector: Collector
) -> None:
    first = {"message": "first", "reference_id": "abcd-1234-efgh"}
    again = {"message": "again", "reference_id": "abcd-1234-efgh"}
    assert client.post_events([first, again]).status_code == 202
    response = client.post_events(again)
    assert response.status_code == 202  # discarded when stored, as on the service
    assert [e["message"] for e in collector.events()] == ["first"]
    other = collector.create_project("Other")
    other_token = collector.create_token(other["id"])
    assert client.post_events(again, token=other_token).status_code == 202
    assert len(collector.events(project_id=other["id"])) == 1


def test_events_older_than_three_days_are_discarded(client: Client, collector: Collector) -> None:
    now = datetime.now(timezone.utc)
    old = format_event_date(now - timedelta(days=3, minutes=5))
    recent = format_event_date(now - timedelta(days=2, hours=23))
    response = client.post_events(
        [{"message": "old", "date": old}, {"message": "recent", "date": recent}]
    )
    assert response.status_code == 202
    assert response.headers["X-Events-Discarded"] == "1"
    event = _only_event(collector)
    assert event["message"] == "recent"
    assert event["date"] == recent


def test_only_expired_events_still_get_202(client: Client, collector: Collector) -> None:
    old = format_event_date(datetime.now(timezone.utc) - timedelta(days=10))
    assert client.post_events({"message": "old", "date": old}).status_code == 202
    assert collector.events() == []


def test_dates_more_than_an_hour_ahead_are_clamped(client: Client, collector: Collector) -> None:
    now = datetime.now(timezone.utc)
    far = format_event_date(now + timedelta(hours=2))
    near = format_event_date(now + timedelta(minutes=30))
    client.post_events([{"message": "far", "date": far}, {"message": "near", "date": near}])
    by_message = {e["message"]: e for e in collector.events()}
    assert _near_now(by_message["far"]["date"])
    assert by_message["near"]["date"] == near


def test_dates_in_other_iso_shapes_are_accepted(client: Client, collector: Collector) -> None:
    now = datetime.now(timezone.utc)
    shapes = [
        now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        now.strftime("%Y-%m-%dT%H:%M:%S.%f"),
        now.isoformat(),
    ]
    assert client.post_events([{"message": s, "date": s} for s in shapes]).status_code == 202
    assert len(collector.events()) == 3


def test_project_token_may_post_through_its_project_path(
    client: Client, collector: Collector
) -> None:
    path = f"/api/v2/projects/{collector.project_id}/events"
    assert client.post_events({"message": "m"}, path=path).status_code == 202
    assert client.post_events({"message": "u"}, collector.user_token, path=path).status_code == 202
    assert len(collector.events(project_id=collector.project_id)) == 2


# -- refused ---------------------------------------------------------------------------------


def test_missing_unknown_and_disabled_tokens_get_401(client: Client, collector: Collector) -> None:
    response = client.request("POST", "/api/v2/events", json={"message": "m"})
    assert "Bearer" in assert_problem(response, 401)["detail"]
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert_problem(client.post_events({"message": "m"}, token="x" * 40), 401)
    token = collector.create_token()
    assert client.post_events({"message": "m"}, token=token).status_code == 202
    collector.disable_token(token)
    assert_problem(client.post_events({"message": "m"}, token=token), 401)
    response = client.request(
        "POST", "/api/v2/events", json={"m": 1}, headers={"Authorization": "Basic abc"}
    )
    assert_problem(response, 401)
    assert len(collector.events()) == 1


def test_user_token_without_a_project_gets_400(client: Client, collector: Collector) -> None:
    assert_problem(client.post_events({"message": "m"}, token=collector.user_token), 400)
    assert collector.events() == []


def test_project_token_cannot_post_to_another_project(client: Client, collector: Collector) -> None:
    other = collector.create_project("Other")
    response = client.post_events({"message": "m"}, path=f"/api/v2/projects/{other['id']}/events")
    assert_problem(response, 404)
    response = client.post_events({"message": "m"}, path="/api/v2/projects/nope/events")
    assert_problem(response, 404)
    assert collector.events() == []


def test_token_of_another_organization_cannot_post_to_this_project(
    client: Client, collector: Collector
) -> None:
    organization = collector.create_organization("Elsewhere")
    foreign_user = collector.create_token(None, ["user"], organization_id=organization)
    path = f"/api/v2/projects/{collector.project_id}/events"
    assert_problem(client.post_events({"message": "m"}, foreign_user, path=path), 404)


@pytest.mark.parametrize("content_type", ["application/x-www-form-urlencoded", "image/png", None])
def test_other_content_types_get_415(
    client: Client, collector: Collector, content_type: str | None
) -> None:
    headers = {"Authorization": f"Bearer {collector.project_token}"}
    if content_type:
        headers["Content-Type"] = content_type
    response = client.session.post(
        collector.url + "/api/v2/events", data=b'{"message": "m"}', headers=headers, timeout=10
    )
    assert_problem(response, 415)
    assert collector.events() == []


def test_content_type_parameters_are_accepted(client: Client, collector: Collector) -> None:
    response = client.post_events(
        {"message": "m"}, headers={"Content-Type": "Application/JSON; charset=utf-8"}
    )
    assert response.status_code == 202


def test_unknown_content_encoding_gets_415(client: Client) -> None:
    assert_problem(client.post_events({"message": "m"}, headers={"Content-Encoding": "br"}), 415)


@pytest.mark.parametrize("body", [b"", b"   \n"], ids=["empty", "whitespace"])
def test_empty_bodies_get_411(client: Client, collector: Collector, body: bytes) -> None:
    assert_problem(client.post_events(body), 411)
    assert collector.events() == []


@pytest.mark.parametrize("body", [b"[]", b" [ ] "], ids=["empty-array", "spaced-empty-array"])
def test_an_empty_array_gets_202_and_stores_nothing(
    client: Client, collector: Collector, body: bytes
) -> None:
    answer = client.post_events(body)  # as the service answers it (the Exceptionless server)
    assert answer.status_code == 202
    assert answer.headers["X-Events-Accepted"] == "0"
    assert collector.events() == []


def test_missing_content_length_gets_411(client: Client, collector: Collector) -> None:
    response = client.post_events(b"", headers={})  # Content-Length: 0
    assert_problem(response, 411)
    assert collector.events() == []


def test_a_chunked_body_is_read_as_the_service_reads_it(
    client: Client, collector: Collector
) -> None:
    """``requests`` sends a generator's body chunked, without a Content-Length; the service
    reads it (its POST checks only for a Content-Length of 0). It was refused with 411."""

    def chunks() -> Any:
        yield b'[{"message": "chunked 1"},'
        yield b' {"message": "chunked 2"}]'

    def post(body: Any) -> Any:
        return client.request(
            "POST",
            "/api/v2/events",
            collector.project_token,
            data=body,
            headers={"Content-Type": "application/json"},
        )

    response = post(chunks())
    assert "Transfer-Encoding" in response.request.headers
    assert response.status_code == 202, response.text
    assert post(b'{"message": "after, on the same connection"}').status_code == 202
    messages = sorted(event["message"] for event in collector.events())
    assert messages == ["after, on the same connection", "chunked 1", "chunked 2"]

    def too_much() -> Any:
        yield b"x" * (DEFAULT_MAX_BODY_BYTES // 2)
        yield b"x" * (DEFAULT_MAX_BODY_BYTES // 2 + 1000)  # just past the limit

    assert_problem(post(too_much()), 413)


def test_corrupt_gzip_gets_400(client: Client, collector: Collector) -> None:
    """A difference on purpose: the service answers 202 and loses such a body."""
    good = gzip.compress(b'{"message": "m"}')
    assert_problem(
        client.post_events(b"not gzip at all", headers={"Content-Encoding": "gzip"}), 400
    )
    assert_problem(client.post_events(good[:-12], headers={"Content-Encoding": "gzip"}), 400)
    assert collector.events() == []


def test_a_type_longer_than_100_characters_drops_the_event_after_a_202(
    client: Client, collector: Collector
) -> None:
    response = client.post_events([{"type": "t" * 101, "message": "dropped"}, {"message": "kept"}])
    assert response.status_code == 202
    assert response.headers["X-Events-Accepted"] == "1"
    assert response.headers["X-Events-Discarded"] == "1"
    assert [e["message"] for e in collector.events()] == ["kept"]


# -- size limits -----------------------------------------------------------------------------


def _raw_request(collector: Collector, head: bytes, body: bytes = b"") -> bytes:
    """Send raw bytes on a fresh connection; return everything the server answers."""
    host, port = collector.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as connection:
        connection.sendall(head + body)
        connection.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := connection.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_413_is_decided_from_content_length_without_reading_the_body(
    collector: Collector,
) -> None:
    head = (
        "POST /api/v2/events HTTP/1.1\r\n"
        f"Host: 127.0.0.1:{collector.port}\r\n"
        f"Authorization: Bearer {collector.project_token}\r\n"
        "Content-Type: application/json\r\n"
        "Content-Length: 50000000\r\n\r\n"
    ).encode()
    answer = _raw_request(collector, head)  # the body is never sent
    status_line, _, rest = answer.partition(b"\r\n")
    assert status_line.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b"Connection: close" in rest
    assert json.loads(rest.split(b"\r\n\r\n", 1)[1])["status"] == 413


def test_body_over_the_limit_gets_a_readable_413(client: Client, collector: Collector) -> None:
    big = [{"message": "x" * 1000} for _ in range(250)]
    response = client.post_events(big)
    assert_problem(response, 413)
    assert collector.events() == []
    assert client.post_events({"message": "after"}).status_code == 202


def test_body_just_under_the_limit_is_accepted() -> None:
    with Collector(max_body_bytes=5000) as collector:
        http = Client(collector)
        body = json.dumps({"message": "x" * 1900}).encode().ljust(5000)
        assert http.post_events(body).status_code == 202
        assert_problem(http.post_events(body + b" "), 413)
        http.close()


def test_gzip_bomb_is_refused_without_inflating_it(client: Client, collector: Collector) -> None:
    inflated = b'{"message": "' + b"a" * 5_000_000 + b'"}'
    bomb = gzip.compress(inflated, compresslevel=9)
    assert len(bomb) < 200_000
    assert_problem(client.post_events(bomb, headers={"Content-Encoding": "gzip"}), 413)
    assert collector.events() == []


def test_decompressed_limit_is_ten_times_the_body_limit() -> None:
    with Collector(max_body_bytes=1000) as collector:
        http = Client(collector)
        fits = json.dumps({"message": "m", "data": {"pad": "p" * 9000}}).encode()
        assert len(fits) <= 10_000
        assert http.post_events(fits, compress=True).status_code == 202
        too_big = json.dumps({"message": "m", "data": {"pad": "p" * 10_000}}).encode()
        assert_problem(http.post_events(too_big, compress=True), 413)
        http.close()


# -- throttle --------------------------------------------------------------------------------


def test_throttle_answers_429_per_organization() -> None:
    with Collector(throttle=3) as collector:
        http = Client(collector)
        remaining = []
        for _ in range(3):
            response = http.post_events({"message": "m"})
            assert response.status_code == 202
            assert response.headers["X-RateLimit-Limit"] == "3"
            remaining.append(response.headers["X-RateLimit-Remaining"])
        assert remaining == ["2", "1", "0"]
        refused = http.post_events({"message": "m"})
        assert_problem(refused, 429)
        assert "X-RateLimit-Remaining" not in refused.headers
        assert_problem(http.get("/api/v2/projects", collector.user_token), 429)
        organization = collector.create_organization("Another")
        project = collector.create_project("P", organization_id=organization)
        other = collector.create_token(project["id"])
        assert http.post_events({"message": "m"}, token=other).status_code == 202
        assert len(collector.events()) == 4
        http.close()


def test_lone_surrogates_in_json_strings_are_stored_and_shown(
    client: Client, collector: Collector
) -> None:
    body = b'{"message": "bad \\ud800 text", "source": "\\udfff", "tags": ["\\ud83d"]}'
    assert client.post_events(body).status_code == 202
    event = collector.events()[0]
    assert event["message"] == "bad \ud800 text"
    listed = client.get("/api/v2/events", collector.user_token)
    assert listed.status_code == 200
    assert listed.json()[0]["message"] == "bad \ud800 text"
    assert client.get(f"/events/{event['id']}").status_code == 200
    assert client.get("/", params={"q": "bad"}).status_code == 200


def _raw_post(
    collector: Collector, headers: bytes, body: bytes, *, more: bool = False
) -> tuple[int, bytes]:
    """A POST written byte for byte; the status the collector answers, and all it sent
    (``more``: the client goes on as if more were to come, and waits 5 s for an answer)."""
    host, port = collector.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5 if more else 10) as connection:
        request = (
            f"POST /api/v2/events HTTP/1.1\r\nHost: {host}:{port}\r\n"
            f"Authorization: Bearer {collector.project_token}\r\n"
            "Content-Type: application/json\r\n"
        ).encode()
        with contextlib.suppress(OSError):  # it may answer and close before all is sent
            connection.sendall(request + headers + b"\r\n" + body)
            if not more:
                connection.shutdown(socket.SHUT_WR)
        answer = b""
        with contextlib.suppress(OSError):
            while chunk := connection.recv(65536):
                answer += chunk
    return (int(answer.split(b" ", 2)[1]) if answer else 0), answer


GOOD = b'{"message":"hi"}'


@pytest.mark.parametrize(
    ("headers", "body"),
    [
        (b"Transfer-Encoding: chunked\r\n", b"-1\r\n" + b"x" * 5000),  # read to the end
        (b"Transfer-Encoding: chunked\r\n", b"0" * 1030 + b"10\r\n" + GOOD + b"\r\n0\r\n\r\n"),
        (b"Transfer-Encoding: chunked\r\n", b"0x10\r\n" + GOOD + b"\r\n0\r\n\r\n"),
        (b"Transfer-Encoding: chunked\r\n", b"+10\r\n" + GOOD + b"\r\n0\r\n\r\n"),
        (b"Transfer-Encoding: chunked\r\n", b"10\r\n" + GOOD + b"X\r\n0\r\n\r\n"),
        (b"Transfer-Encoding: xchunked\r\n", b"10\r\n" + GOOD + b"\r\n0\r\n\r\n"),
        (b"Transfer-Encoding: gzip, chunked\r\n", b"10\r\n" + GOOD + b"\r\n0\r\n\r\n"),
        (
            b"Transfer-Encoding: chunked\r\nContent-Length: 21\r\n",
            b"10\r\n" + GOOD + b"\r\n0\r\n\r\n",
        ),
    ],
    ids=["negative", "long-line", "0x", "plus", "no-crlf", "xchunked", "gzip", "with-length"],
)
def test_a_chunked_body_read_otherwise_by_a_proxy_is_refused(
    collector: Collector, headers: bytes, body: bytes
) -> None:
    """Read strictly (RFC 9112): a body a proxy in front would frame differently is refused
    (a negative size read everything to the end of the connection; a size line cut at 1,026
    bytes turned the rest into a second request)."""
    # The client does not end its side: a reader that waits for more (a negative size read
    # to the end of the connection, holding what came) answers only at its body timeout.
    status, answer = _raw_post(collector, headers, body, more=True)
    assert status == 400, answer[:300]
    assert collector.events() == []
    assert [info.status for info in collector.request_log] == [400]  # one request, not two


def test_a_chunked_body_with_extensions_and_trailers_is_read(collector: Collector) -> None:
    body = b"10;name=value\r\n" + GOOD + b"\r\n0\r\nX-Checksum: 1\r\n\r\n"
    status, answer = _raw_post(collector, b"Transfer-Encoding: chunked\r\n", body)
    assert status == 202, answer[:300]
    assert [event["message"] for event in collector.events()] == ["hi"]
