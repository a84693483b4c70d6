"""api.Client against a mocked service (``responses``): requests, answers, errors, pages."""

from __future__ import annotations

import contextlib
import datetime as dt
import email.utils
import gzip
import json
import warnings

import pytest
import requests
import responses
import urllib3
from responses import matchers

from eventlog_handler._version import __version__
from eventlog_handler.api import _answers as answers
from eventlog_handler.api import _client as api
from eventlog_handler.api import _errors as errors
from eventlog_handler.wire._events import message_event
from eventlog_handler.wire._logs import log_event

from .conftest import SERVER, TOKEN

EVENTS_URL = f"{SERVER}/api/v2/events"
PROJECTS_URL = f"{SERVER}/api/v2/projects"
CONFIG_URL = f"{SERVER}/api/v2/projects/config"
PROJECT_ID = "537650f3b77efe23a47914f3"
TOKENS_URL = f"{SERVER}/api/v2/projects/{PROJECT_ID}/tokens"
NEW_KEY = "NewKey0123456789abcdefghijklmnopqrstuvwx"
UTC = dt.timezone.utc


def body_of(call) -> bytes:
    body = call.request.body
    return body.encode() if isinstance(body, str) else body


def sent_json(call):
    raw = body_of(call)
    if call.request.headers.get("Content-Encoding") == "gzip":
        raw = gzip.decompress(raw)
    return json.loads(raw.decode("utf-8"))


def assert_common_headers(call):
    headers = call.request.headers
    assert headers["Authorization"] == f"Bearer {TOKEN}"
    assert headers["User-Agent"] == f"eventlog-handler/{__version__}"


# -- submit -----------------------------------------------------------------------------------


def test_submit_one_event(mocked, client):
    mocked.add(responses.POST, EVENTS_URL, status=202, body="")
    event = message_event("Disk space is low")
    result = client.submit(event)
    assert len(mocked.calls) == 1
    call = mocked.calls[0]
    assert call.request.method == "POST"
    assert call.request.url == EVENTS_URL
    assert_common_headers(call)
    assert call.request.headers["Content-Type"] == "application/json"
    assert "Content-Encoding" not in call.request.headers
    assert json.loads(body_of(call)) == event
    assert result.status == 202
    assert result.events == 1
    assert result.bytes_sent == len(body_of(call))


def test_submit_a_list(mocked, client):
    mocked.add(responses.POST, EVENTS_URL, status=202)
    batch = [message_event("one"), log_event("two", user={"identity": "u-42"})]
    result = client.submit(batch)
    call = mocked.calls[0]
    assert_common_headers(call)
    assert call.request.headers["Content-Type"] == "application/json"
    assert sent_json(call) == batch
    assert result.events == 2


def test_submit_makes_values_json_safe(mocked, client):
    mocked.add(responses.POST, EVENTS_URL, status=202)
    when = dt.datetime(2030, 1, 1, tzinfo=UTC)
    client.submit({"message": "m", "data": {"when": when, "ratio": float("nan"), "ids": {2, 1}}})
    assert sent_json(mocked.calls[0])["data"] == {
        "when": "2030-01-01T00:00:00+00:00",
        "ratio": "NaN",
        "ids": [1, 2],
    }


def test_large_body_is_gzipped(mocked, client):
    mocked.add(responses.POST, EVENTS_URL, status=202)
    batch = [message_event("x" * 600 + str(i)) for i in range(5)]
    result = client.submit(batch)
    call = mocked.calls[0]
    raw = body_of(call)
    assert call.request.headers["Content-Encoding"] == "gzip"
    assert call.request.headers["Content-Type"] == "application/json"
    assert raw[:2] == b"\x1f\x8b"  # gzip, not zlib or raw deflate
    assert json.loads(gzip.decompress(raw).decode("utf-8")) == batch
    assert result.bytes_sent == len(raw)
    assert len(raw) < 1024


def test_small_body_is_not_gzipped(mocked, client):
    mocked.add(responses.POST, EVENTS_URL, status=202)
    client.submit(message_event("y" * 500))
    call = mocked.calls[0]
    assert "Content-Encoding" not in call.request.headers
    assert body_of(call)[:1] == b"{"


def test_threshold_is_1kb():
    small = b"a" * api.GZIP_THRESHOLD
    assert api.compress(small) == (small, False)
    big = b"a" * (api.GZIP_THRESHOLD + 1)
    packed, gzipped = api.compress(big)
    assert gzipped
    assert gzip.decompress(packed) == big


def test_empty_list_is_refused_without_a_request(mocked, client):
    with pytest.raises(ValueError):
        client.submit([])
    assert len(mocked.calls) == 0


@pytest.mark.parametrize(
    ("given", "said"),
    [("hello", "got a text: 'hello'"), ([{"message": "ok"}, 7], "as mappings, got int")],
)
def test_what_is_not_an_event_is_named_without_a_request(mocked, client, given, said):
    """A text, or a list with a number in it: "dictionary update sequence element #0..."."""
    with pytest.raises(ValueError, match=said):
        client.submit(given)
    assert len(mocked.calls) == 0


def test_a_problems_detail_is_part_of_the_message(mocked, client):
    """The service's words for this very request (RFC 7807 ``detail``): "400 Bad Request"
    alone told the user nothing."""
    mocked.add(
        responses.POST,
        EVENTS_URL,
        status=400,
        json={"title": "Bad Request", "status": 400, "detail": "This token is not bound to a "
              "project: use a project token (API key)."},
        content_type="application/problem+json",
    )  # fmt: skip
    with pytest.raises(errors.BadRequestError) as info:
        client.submit({"message": "x"})
    assert str(info.value).startswith("400 Bad Request: This token is not bound to a project")


def test_submit_reads_config_version_and_rate_headers(mocked, client):
    mocked.add(
        responses.POST,
        EVENTS_URL,
        status=202,
        headers={"X-Exceptionless-ConfigVersion": "7", "X-RateLimit-Remaining": "3499"},
    )
    result = client.submit(message_event("m"))
    assert result.config_version == 7
    assert result.rate_limit_remaining == 3499


def test_submit_without_optional_headers(mocked, client):
    mocked.add(responses.POST, EVENTS_URL, status=202, headers={"X-RateLimit-Remaining": "n/a"})
    result = client.submit(message_event("m"))
    assert result.config_version is None
    assert result.rate_limit_remaining is None


# -- status mapping ---------------------------------------------------------------------------


STATUS_CASES = [
    (400, errors.BadRequestError),
    (411, errors.BadRequestError),
    (415, errors.BadRequestError),
    (422, errors.ValidationError),
    (401, errors.AuthenticationError),
    (402, errors.PaymentRequiredError),
    (403, errors.PermissionDeniedError),
    (404, errors.NotFoundError),
    (409, errors.RateLimitedError),
    (429, errors.RateLimitedError),
    (413, errors.PayloadTooLargeError),
    (500, errors.ServerError),
    (502, errors.ServerError),
    (503, errors.ServiceUnavailableError),
]


@pytest.mark.parametrize(("status", "cls"), STATUS_CASES)
def test_status_maps_to_error_class(mocked, client, status, cls):
    title = f"Problem number {status}"
    mocked.add(
        responses.POST,
        EVENTS_URL,
        status=status,
        json={"type": "about:blank", "title": title, "status": status, "instance": "/x"},
        content_type="application/problem+json",
    )
    with pytest.raises(errors.ApiError) as info:
        client.submit(message_event("m"))
    err = info.value
    assert type(err) is cls
    assert isinstance(err, errors.EventLogError)
    assert err.status == status
    assert err.title == title
    assert title in str(err)
    assert str(status) in str(err)
    assert TOKEN not in str(err) and TOKEN not in repr(err)


@pytest.mark.parametrize(("status", "cls"), STATUS_CASES)
def test_status_without_body(mocked, client, status, cls):
    mocked.add(responses.POST, EVENTS_URL, status=status, body="")
    with pytest.raises(cls) as info:
        client.submit(message_event("m"))
    assert info.value.status == status
    assert TOKEN not in str(info.value)


def test_error_hierarchy():
    assert issubclass(errors.ValidationError, errors.BadRequestError)
    assert issubclass(errors.ServiceUnavailableError, errors.ServerError)
    for _, cls in STATUS_CASES:
        assert issubclass(cls, errors.ApiError)
    assert issubclass(errors.TransportError, errors.EventLogError)
    assert not issubclass(errors.TransportError, errors.ApiError)
    assert errors.error_class_for(418) is errors.BadRequestError
    assert errors.error_class_for(504) is errors.ServerError


def test_validation_error_from_problem_body(mocked, client):
    mocked.add(
        responses.POST,
        EVENTS_URL,
        status=422,
        json={
            "type": "https://tools.ietf.org/html/rfc4918#section-11.2",
            "title": "One or more validation errors occurred.",
            "status": 422,
            "errors": {"scopes": ["Invalid scope: admin"], "notes": ["too long"]},
        },
        content_type="application/problem+json",
    )
    with pytest.raises(errors.ValidationError) as info:
        client.submit(message_event("m"))
    err = info.value
    assert err.title == "One or more validation errors occurred."
    assert err.errors == {"scopes": ["Invalid scope: admin"], "notes": ["too long"]}
    assert "Invalid scope: admin" in str(err)
    assert "scopes" in str(err)


def test_non_json_error_body_uses_reason(mocked, client):
    mocked.add(responses.POST, EVENTS_URL, status=500, body="<html>oops</html>")
    with pytest.raises(errors.ServerError) as info:
        client.submit(message_event("m"))
    assert info.value.title == "Internal Server Error"
    assert "oops" in info.value.body


@pytest.mark.parametrize("status", [429, 409])
def test_rate_limited_without_retry_after(mocked, client, status):
    mocked.add(responses.POST, EVENTS_URL, status=status)
    with pytest.raises(errors.RateLimitedError) as info:
        client.submit(message_event("m"))
    assert info.value.retry_after is None
    assert info.value.status == status


@pytest.mark.parametrize("status", [429, 409])
def test_rate_limited_with_retry_after_seconds(mocked, client, status):
    mocked.add(responses.POST, EVENTS_URL, status=status, headers={"Retry-After": "120"})
    with pytest.raises(errors.RateLimitedError) as info:
        client.submit(message_event("m"))
    assert info.value.retry_after == 120.0


def test_rate_limited_with_retry_after_http_date(mocked, client):
    when = dt.datetime.now(UTC) + dt.timedelta(seconds=90)
    header = email.utils.format_datetime(when, usegmt=True)
    mocked.add(responses.POST, EVENTS_URL, status=429, headers={"Retry-After": header})
    with pytest.raises(errors.RateLimitedError) as info:
        client.submit(message_event("m"))
    assert 80 <= info.value.retry_after <= 91


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        ("", None),
        ("0", 0.0),
        (" 5 ", 5.0),
        ("1.5", 1.5),
        ("-3", 0.0),
        ("soon", None),
        ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0),
    ],
)
def test_parse_retry_after(value, expected):
    assert answers.parse_retry_after(value) == expected


# -- transport errors -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (requests.ConnectionError(ConnectionRefusedError(111, "Connection refused")), "refused"),
        (requests.ConnectionError(ConnectionRefusedError()), "refused"),
        (requests.ConnectTimeout("connect timed out"), "timeout"),
        (requests.ReadTimeout("read timed out"), "timeout"),
        (requests.ConnectionError(ConnectionResetError(104, "Connection reset by peer")), "reset"),
        (
            requests.ConnectionError(
                urllib3.exceptions.ProtocolError(
                    "Connection aborted.", ConnectionResetError(104, "Connection reset by peer")
                )
            ),
            "reset",
        ),
        (requests.exceptions.SSLError("certificate verify failed"), "tls"),
        (requests.ConnectionError("Name or service not known"), "other"),
    ],
)
def test_transport_errors(mocked, client, exc, kind):
    mocked.add(responses.POST, EVENTS_URL, body=exc)
    with pytest.raises(errors.TransportError) as info:
        client.submit(message_event("m"))
    err = info.value
    assert err.kind == kind
    assert "127.0.0.1:5000" in str(err)
    if "Name or service" in str(exc):
        assert "its name does not resolve (a typo in the URL?)" in str(err), err
    assert TOKEN not in str(err) and TOKEN not in repr(err)
    assert err.__cause__ is None or TOKEN not in str(err.__cause__)


def test_transport_error_on_get(mocked, client):
    mocked.add(responses.GET, PROJECTS_URL, body=requests.ReadTimeout("slow"))
    with pytest.raises(errors.TransportError) as info:
        client.list_projects()
    assert info.value.kind == "timeout"


# -- projects ---------------------------------------------------------------------------------


def project(i, **extra):
    data = {
        "id": f"p{i:023d}",
        "created_utc": "2026-01-15T12:00:00Z",
        "organization_id": "org1",
        "organization_name": "Acme",
        "name": f"Project {i}",
        "delete_bot_data_enabled": True,
        "is_configured": True,
        "stack_count": i,
        "event_count": 10 * i,
        "has_premium_features": False,
        "has_slack_integration": False,
    }
    data.update(extra)
    return data


def add_page(mocked, page, items, link=None, total=None, limit=1000):
    headers = {"X-Result-Count": str(total if total is not None else 5)}
    if link:
        headers["Link"] = link
    return mocked.add(
        responses.GET,
        PROJECTS_URL,
        json=items,
        headers=headers,
        match=[matchers.query_param_matcher({"page": str(page), "limit": str(limit)})],
    )


def test_list_projects_follows_pages(mocked, client):
    add_page(
        mocked,
        1,
        [project(1), project(2, created_utc="2026-01-15T12:00:00.1234567Z")],
        f'<{PROJECTS_URL}?page=2&limit=1000>; rel="next"',
    )
    add_page(
        mocked,
        2,
        [project(3, created_utc="2026-01-15T12:00:00.5"), project(4)],
        f'<{PROJECTS_URL}?page=1&limit=1000>; rel="previous", '
        '</api/v2/projects?page=3&limit=1000>; rel="next"',
    )
    add_page(
        mocked,
        3,
        [project(5, usage=[{"date": "2026-01-01", "total": 3}], promoted_tabs=["x"])],
        f'<{PROJECTS_URL}?page=2&limit=1000>; rel="previous"',
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # all 5 counted rows arrived: no warning
        projects = client.list_projects()
    assert [p.name for p in projects] == [f"Project {i}" for i in range(1, 6)]
    assert len(mocked.calls) == 3
    for call in mocked.calls:
        assert call.request.method == "GET"
        assert_common_headers(call)
    first = projects[0]
    assert isinstance(first, api.Project)
    assert first.id == "p" + "1".zfill(23)
    assert first.organization_name == "Acme"
    assert first.stack_count == 1 and first.event_count == 10
    assert first.is_configured is True and first.has_premium_features is False
    assert first.created_utc == dt.datetime(2026, 1, 15, 12, tzinfo=UTC)
    for p in projects:
        assert p.created_utc.tzinfo is not None
        assert p.created_utc.utcoffset() == dt.timedelta(0)
    assert projects[1].created_utc.microsecond == 123456
    assert projects[2].created_utc.microsecond == 500000
    assert projects[4].extra == {
        "usage": [{"date": "2026-01-01", "total": 3}],
        "promoted_tabs": ["x"],
    }
    assert projects[0].extra == {}


def test_list_projects_asks_for_the_largest_page(mocked, client):
    """The service serves at most 1,000 projects a page: one request for up to 1,000."""
    add_page(mocked, 1, [project(i) for i in range(1, 1001)], total=1000)
    assert len(client.list_projects()) == 1000
    assert len(mocked.calls) == 1
    assert api.PROJECTS_PAGE_LIMIT == 1000


def test_list_projects_single_page(mocked, client):
    add_page(mocked, 1, [project(1)], total=1)
    assert [p.name for p in client.list_projects()] == ["Project 1"]
    assert len(mocked.calls) == 1


def test_list_projects_empty(mocked, client):
    add_page(mocked, 1, [], f'<{PROJECTS_URL}?page=2&limit=1000>; rel="next"', total=0)
    assert client.list_projects() == []
    assert len(mocked.calls) == 1


def test_list_projects_stops_on_a_link_loop(mocked, client):
    add_page(mocked, 1, [project(1)], f'<{PROJECTS_URL}?page=2&limit=1000>; rel="next"', total=2)
    add_page(mocked, 2, [project(2)], f'<{PROJECTS_URL}?page=2&limit=1000>; rel="next"', total=2)
    assert [p.name for p in client.list_projects()] == ["Project 1", "Project 2"]
    assert len(mocked.calls) == 2


def test_missing_rows_are_warned_about(mocked, client):
    """The real server gives no next link once a page would skip 1,000 rows: 1,000 of 1,450
    projects arrive, and the caller is told that 450 are missing."""
    add_page(mocked, 1, [project(i) for i in range(1, 1001)], total=1450)
    with pytest.warns(api.IncompleteListWarning, match="listed 1000 of 1450 projects") as info:
        projects = client.list_projects()
    assert len(projects) == 1000
    [warning] = info.list
    assert (warning.message.received, warning.message.total) == (1000, 1450)
    assert warning.filename == __file__  # points at the caller


def test_no_warning_without_a_count(mocked, client):
    mocked.add(responses.GET, PROJECTS_URL, json=[project(1)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(client.list_projects()) == 1


@pytest.mark.parametrize("size", [0, -1, 1001, 2.5, True, "100"])
def test_page_size_is_checked(client, size):
    with pytest.raises(ValueError, match="page_size"):
        client.list_projects(size)


def test_a_smaller_page_size_is_sent(mocked, client):
    add_page(mocked, 1, [project(1)], total=1, limit=10)
    assert len(client.list_projects(10)) == 1


@pytest.mark.parametrize(
    "foreign",
    [
        "http://evil.example:5000/api/v2/projects?page=2&limit=1000",
        "https://127.0.0.1:5000/api/v2/projects?page=2&limit=1000",
        "http://127.0.0.1:5001/api/v2/projects?page=2&limit=1000",
        "//evil.example/api/v2/projects?page=2&limit=1000",
        "http://10.0.0.7:8080/api/v2/projects?page=2&limit=1000",
    ],
)
def test_link_to_another_origin_is_rebased_on_the_server(mocked, client, foreign):
    """A proxy may rewrite the next link's origin: its path and query are followed on the
    server the client was given, and the token goes nowhere else."""
    add_page(mocked, 1, [project(1)], f'<{foreign}>; rel="next"', total=2)
    add_page(mocked, 2, [project(2)], total=2)
    trap = mocked.add(responses.GET, "http://evil.example:5000/api/v2/projects", json=[])
    trap2 = mocked.add(responses.GET, "http://evil.example/api/v2/projects", json=[])
    assert [p.name for p in client.list_projects()] == ["Project 1", "Project 2"]
    assert trap.call_count == 0 and trap2.call_count == 0
    assert len(mocked.calls) == 2
    assert all(call.request.url.startswith(SERVER + "/") for call in mocked.calls)
    assert mocked.calls[1].request.url == f"{SERVER}/api/v2/projects?page=2&limit=1000"
    for call in mocked.calls:
        assert_common_headers(call)


def test_rebased_link_keeps_the_server_url_path_prefix(mocked):
    """``server_url`` behind a proxy under a path: a link from the service itself (without
    the prefix) is followed under the prefix."""
    base = f"{SERVER}/exceptionless"
    client = api.Client(base, TOKEN)
    listing = f"{base}/api/v2/projects"
    mocked.add(
        responses.GET,
        listing,
        json=[project(1)],
        headers={
            "X-Result-Count": "2",
            "Link": '<http://internal:5000/api/v2/projects?page=2&limit=1000>; rel="next"',
        },
        match=[matchers.query_param_matcher({"page": "1", "limit": "1000"})],
    )
    mocked.add(
        responses.GET,
        listing,
        json=[project(2)],
        headers={"X-Result-Count": "2"},
        match=[matchers.query_param_matcher({"page": "2", "limit": "1000"})],
    )
    assert len(client.list_projects()) == 2
    assert mocked.calls[1].request.url == f"{listing}?page=2&limit=1000"


@pytest.mark.parametrize(
    "elsewhere",
    [
        "http://evil.example/api/v2/projects/p1/tokens",
        "/api/v2/events?page=2",
        "http://127.0.0.1:5000/api/v2/organizations",
    ],
)
def test_a_next_link_to_another_resource_is_refused(mocked, client, elsewhere):
    add_page(mocked, 1, [project(1)], f'<{elsewhere}>; rel="next"', total=2)
    with pytest.raises(errors.ApiError, match="next page link") as info:
        client.list_projects()
    assert TOKEN not in str(info.value)
    assert len(mocked.calls) == 1


def test_projects_answer_that_is_not_a_list(mocked, client):
    mocked.add(responses.GET, PROJECTS_URL, json={"message": "nope"})
    with pytest.raises(errors.ApiError):
        client.list_projects()


def test_projects_answer_that_is_not_json(mocked, client):
    mocked.add(responses.GET, PROJECTS_URL, body="<html>", content_type="text/html")
    with pytest.raises(errors.ApiError) as info:
        client.list_projects()
    assert "not JSON" in str(info.value)


def test_projects_forbidden_for_client_token(mocked, client):
    mocked.add(responses.GET, PROJECTS_URL, status=403, json={"title": "Forbidden"})
    with pytest.raises(errors.PermissionDeniedError):
        client.list_projects()


def test_project_from_json():
    p = api.Project.from_json({"id": "abc", "name": None, "custom": 1, "created_utc": "bad"})
    assert p.id == "abc" and p.name == "" and p.created_utc is None
    assert p.extra == {"custom": 1}
    with pytest.raises(ValueError):
        api.Project.from_json({"name": "no id"})
    with pytest.raises(ValueError):
        api.Project.from_json(["not", "a", "dict"])


# -- tokens -----------------------------------------------------------------------------------


def token_json(scopes=("user", "client")):
    return {
        "id": NEW_KEY,
        "organization_id": "org1",
        "project_id": PROJECT_ID,
        "scopes": list(scopes),
        "is_disabled": False,
        "created_utc": "2026-01-15T12:00:00.1234567Z",
        "updated_utc": "2026-01-15T12:00:00Z",
        "notes": None,
        "expires_utc": None,
    }


@pytest.mark.parametrize("status", [201, 200])
def test_create_token(mocked, client, status):
    mocked.add(
        responses.POST,
        TOKENS_URL,
        status=status,
        json=token_json(),
        headers={"Location": f"{SERVER}/api/v2/tokens/{NEW_KEY}"},
    )
    token = client.create_token(PROJECT_ID, scopes=["user"])
    call = mocked.calls[0]
    assert call.request.method == "POST"
    assert call.request.url == TOKENS_URL
    assert_common_headers(call)
    assert call.request.headers["Content-Type"] == "application/json"
    assert json.loads(body_of(call)) == {"scopes": ["user"]}
    assert isinstance(token, api.Token)
    assert token.id == NEW_KEY
    assert token.scopes == ("user", "client")
    assert token.project_id == PROJECT_ID
    assert token.is_disabled is False
    assert token.created_utc == dt.datetime(2026, 1, 15, 12, 0, 0, 123456, tzinfo=UTC)
    assert token.updated_utc == dt.datetime(2026, 1, 15, 12, tzinfo=UTC)
    assert token.extra == {"expires_utc": None}
    assert NEW_KEY not in repr(token)
    assert NEW_KEY not in str(token)
    assert NEW_KEY[:4] + "…" in repr(token)


def test_create_token_default_scope_and_notes(mocked, client):
    mocked.add(responses.POST, TOKENS_URL, status=201, json=token_json(["client"]))
    client.create_token(PROJECT_ID, notes="for CI")
    assert json.loads(body_of(mocked.calls[0])) == {"scopes": ["client"], "notes": "for CI"}


def test_create_token_with_scopes_as_a_text_is_named_without_a_request(mocked, client):
    """``scopes="user"`` was sent as four scopes, "u", "s", "e" and "r"."""
    with pytest.raises(ValueError, match=r"like \['user'\]"):
        client.create_token(PROJECT_ID, scopes="user")
    assert len(mocked.calls) == 0


@pytest.mark.parametrize(
    ("call", "named"),
    [
        pytest.param(lambda c: c.create_token(PROJECT_ID, scopes=5), "scopes", id="scopes=5"),
        pytest.param(lambda c: c.create_token(PROJECT_ID, scopes=[1]), "scopes", id="scopes=[1]"),
        pytest.param(lambda c: c.list_events(limit="abc"), "'limit'", id="limit=abc"),
        pytest.param(lambda c: c.list_events(page=None, limit=None), "'limit'", id="limit=None"),
        pytest.param(lambda c: c.list_events(page="x"), "'page'", id="page=x"),
        # were asked as limit=1 and page=1, and answered without a word
        pytest.param(lambda c: c.list_events(limit=0), "'limit'", id="limit=0"),
        pytest.param(lambda c: c.list_events(limit=-5), "'limit'", id="limit=-5"),
        pytest.param(lambda c: c.list_events(page=0), "'page'", id="page=0"),
        pytest.param(lambda c: api.Client(SERVER, TOKEN, timeout=-1), "'timeout'", id="-1"),
        pytest.param(lambda c: api.Client(SERVER, TOKEN, timeout="abc"), "'timeout'", id="abc"),
        pytest.param(lambda c: api.Client(SERVER, TOKEN, timeout=(1,)), "'timeout'", id="(1,)"),
        pytest.param(lambda c: api.Client(SERVER, TOKEN, timeout=(5, 0)), "'timeout'", id="(5,0)"),
    ],
)
def test_a_bad_argument_is_named_without_a_request(mocked, client, call, named):
    """Not Python's own ``TypeError`` from deep inside, nor a request that fails later."""
    with pytest.raises(ValueError, match=f"^eventlog_handler: .*{named}") as info:
        call(client)
    assert type(info.value) is ValueError
    assert len(mocked.calls) == 0


def test_a_timeout_may_be_a_pair_a_text_or_none():
    assert api.Client(SERVER, TOKEN, timeout=(3, 10)).timeout == (3.0, 10.0)
    assert api.Client(SERVER, TOKEN, timeout="5").timeout == 5.0
    assert api.Client(SERVER, TOKEN, timeout=None).timeout is None  # no limit, as in requests
    assert api.Client(SERVER, TOKEN, timeout=(3, None)).timeout == (3.0, None)


@pytest.mark.parametrize("password", ["a", "e", "{", "pw12"])
def test_a_short_password_is_not_masked_inside_the_words_of_an_answer(mocked, password):
    """A refused login with a one-letter password read ``401 Un[excluded]uthorized``."""
    mocked.add(
        responses.POST,
        f"{SERVER}/api/v2/auth/login",
        status=401,
        json={"title": "Unauthorized", "status": 401},
    )
    with pytest.raises(errors.AuthenticationError, match=r"^401 Unauthorized from "):
        api.Client(SERVER).login("ann@example.com", password)


def test_create_token_invalid_scope(mocked, client):
    mocked.add(
        responses.POST,
        TOKENS_URL,
        status=422,
        json={"title": "Validation failed", "status": 422, "errors": {"scopes": ["admin"]}},
        content_type="application/problem+json",
    )
    with pytest.raises(errors.ValidationError) as info:
        client.create_token(PROJECT_ID, scopes=["admin"])
    assert info.value.errors == {"scopes": ["admin"]}
    assert "scopes" in str(info.value)
    assert TOKEN not in str(info.value)


def test_create_token_unknown_project(mocked, client):
    mocked.add(responses.POST, TOKENS_URL, status=404, json={"title": "Not Found"})
    with pytest.raises(errors.NotFoundError):
        client.create_token(PROJECT_ID)


def test_create_token_answer_without_id(mocked, client):
    mocked.add(responses.POST, TOKENS_URL, status=201, json={"scopes": ["client"]})
    with pytest.raises(errors.ApiError):
        client.create_token(PROJECT_ID)


@pytest.mark.parametrize("project_id", ["", "a/b", None, 5])
def test_create_token_rejects_bad_project_ids(mocked, client, project_id):
    with pytest.raises(ValueError):
        client.create_token(project_id)
    assert len(mocked.calls) == 0


@pytest.mark.parametrize("project_id", ["abc?x=1", "abc#frag", ".."])
def test_create_token_project_id_cannot_escape_its_path(mocked, client, project_id):
    mocked.add(responses.POST, f"{SERVER}/api/v2/projects/abc", status=201, json=token_json())
    mocked.add(responses.POST, f"{SERVER}/api/v2/tokens", status=201, json=token_json())
    with contextlib.suppress(ValueError, errors.EventLogError):
        client.create_token(project_id)
    for call in mocked.calls:
        path = call.request.path_url.split("?")[0]
        assert path.startswith("/api/v2/projects/") and path.endswith("/tokens")


def test_token_from_json():
    with pytest.raises(ValueError):
        api.Token.from_json({"scopes": []})
    token = api.Token.from_json({"id": NEW_KEY})
    assert token.scopes == () and token.created_utc is None


# -- config -----------------------------------------------------------------------------------


def test_get_config(mocked, client):
    payload = {"version": 4, "settings": {"@@log:*": "Info", "@@DataExclusions": "ssn"}}
    mocked.add(
        responses.GET,
        CONFIG_URL,
        json=payload,
        match=[matchers.query_param_matcher({"v": "3"})],
    )
    assert client.get_config(3) == payload
    assert_common_headers(mocked.calls[0])


def test_get_config_without_version(mocked, client):
    mocked.add(
        responses.GET,
        CONFIG_URL,
        json={"version": 1, "settings": {}},
        match=[matchers.query_param_matcher({})],
    )
    assert client.get_config() == {"version": 1, "settings": {}}


def test_get_config_not_modified(mocked, client):
    mocked.add(responses.GET, CONFIG_URL, status=304)
    assert client.get_config(4) is None


def test_token_creation_refused_to_an_api_token(mocked, client):
    """The real server's answer to any API token: only a login session creates tokens."""
    mocked.add(
        responses.POST,
        TOKENS_URL,
        status=403,
        json={"title": "Token authentication cannot create tokens.", "status": 403},
        content_type="application/problem+json",
    )
    with pytest.raises(api.TokenCreationRefusedError) as info:
        client.create_token(PROJECT_ID)
    assert isinstance(info.value, errors.PermissionDeniedError)
    assert info.value.status == 403
    assert info.value.title == api.TOKEN_AUTH_CANNOT_CREATE
    assert "log in" in str(info.value) and "session token" in str(info.value)
    assert TOKEN not in str(info.value)


def test_project_config_of_a_project(mocked, client):
    mocked.add(
        responses.GET,
        f"{SERVER}/api/v2/projects/{PROJECT_ID}/config",
        json={"version": 7, "settings": {"@@log:*": "Warn", "@@error:KeyError": "false"}},
    )
    config = client.project_config(PROJECT_ID)
    assert config == api.ProjectConfig(7, {"@@log:*": "Warn", "@@error:KeyError": "false"})
    assert_common_headers(mocked.calls[0])


def test_project_config_of_the_token_project(mocked, client):
    mocked.add(responses.GET, CONFIG_URL, json={"version": 0, "settings": {}})
    assert client.project_config() == api.ProjectConfig(0, {})


@pytest.mark.parametrize("body", [[], {"version": "x"}, {"version": 1, "settings": []}])
def test_project_config_that_is_not_one(mocked, client, body):
    mocked.add(responses.GET, CONFIG_URL, json=body)
    with pytest.raises(errors.ApiError):
        client.project_config()


def test_set_project_setting(mocked, client):
    url = f"{SERVER}/api/v2/projects/{PROJECT_ID}/config"
    mocked.add(
        responses.POST,
        url,
        status=200,
        match=[matchers.query_param_matcher({"key": "@@log:shop.*"})],
    )
    client.set_project_setting(PROJECT_ID, " @@log:shop.* ", " Warn ")
    call = mocked.calls[0]
    assert_common_headers(call)
    assert call.request.headers["Content-Type"] == "application/json"
    assert json.loads(body_of(call)) == {"value": "Warn"}


def test_delete_project_setting(mocked, client):
    url = f"{SERVER}/api/v2/projects/{PROJECT_ID}/config"
    mocked.add(
        responses.DELETE,
        url,
        status=200,
        match=[matchers.query_param_matcher({"key": "@@DataExclusions"})],
    )
    client.delete_project_setting(PROJECT_ID, "@@DataExclusions")
    assert mocked.calls[0].request.method == "DELETE"
    assert_common_headers(mocked.calls[0])


@pytest.mark.parametrize(
    ("key", "value"),
    [("", "x"), ("  ", "x"), ("k", ""), ("k", "   "), (None, "x"), ("k", 3), ("a\nb", "x")],
)
def test_blank_settings_are_refused_before_sending(mocked, client, key, value):
    with pytest.raises(ValueError):
        client.set_project_setting(PROJECT_ID, key, value)
    assert len(mocked.calls) == 0


def test_settings_need_a_real_project_id(mocked, client):
    with pytest.raises(ValueError):
        client.set_project_setting("../tokens", "k", "v")
    with pytest.raises(ValueError):
        client.delete_project_setting("a/b", "k")
    assert len(mocked.calls) == 0


def test_setting_on_an_unknown_project(mocked, client):
    url = f"{SERVER}/api/v2/projects/{PROJECT_ID}/config"
    mocked.add(responses.POST, url, status=404, json={"title": "Not Found"})
    with pytest.raises(errors.NotFoundError):
        client.set_project_setting(PROJECT_ID, "k", "v")


# -- login ------------------------------------------------------------------------------------

LOGIN_URL = f"{SERVER}/api/v2/auth/login"
SESSION = "Sess1onT0kenAbcdefghijklmnopqrstuvwxyz12"
PASSWORD = "correct horse battery staple"


def test_login_returns_the_session_token_and_uses_it(mocked):
    mocked.add(responses.POST, LOGIN_URL, json={"token": SESSION})
    mocked.add(responses.POST, TOKENS_URL, status=201, json=token_json())
    client = api.Client(SERVER)
    assert client.login("  admin@localhost ", PASSWORD) == SESSION
    login = mocked.calls[0]
    assert "Authorization" not in login.request.headers
    assert login.request.headers["Content-Type"] == "application/json"
    assert json.loads(body_of(login)) == {"email": "admin@localhost", "password": PASSWORD}
    assert login.request.headers["User-Agent"] == f"eventlog-handler/{__version__}"
    client.create_token(PROJECT_ID)
    assert mocked.calls[1].request.headers["Authorization"] == f"Bearer {SESSION}"
    assert SESSION not in repr(client) and PASSWORD not in repr(client)


def test_login_sends_no_old_token(mocked, client):
    mocked.add(responses.POST, LOGIN_URL, json={"token": SESSION})
    client.login("admin@localhost", PASSWORD)
    assert "Authorization" not in mocked.calls[0].request.headers


def test_login_refused(mocked):
    mocked.add(responses.POST, LOGIN_URL, status=401, json={"title": "Unauthorized", "status": 401})
    client = api.Client(SERVER)
    with pytest.raises(errors.AuthenticationError) as info:
        client.login("admin@localhost", PASSWORD)
    assert PASSWORD not in str(info.value) and PASSWORD not in repr(info.value)
    with pytest.raises(ValueError, match="no token"):
        client.list_projects()  # still no token


@pytest.mark.parametrize("answer", [{}, {"token": ""}, {"token": 5}, ["x"], {"token": "short"}])
def test_login_answer_without_a_token(mocked, answer):
    mocked.add(responses.POST, LOGIN_URL, json=answer)
    with pytest.raises((errors.ApiError, ValueError)):
        api.Client(SERVER).login("admin@localhost", PASSWORD)


@pytest.mark.parametrize(
    ("email", "password"), [("", "pw"), ("  ", "pw"), ("a@b", ""), (None, "pw"), ("a@b", None)]
)
def test_login_needs_an_email_and_a_password(mocked, email, password):
    with pytest.raises(ValueError):
        api.Client(SERVER).login(email, password)
    assert len(mocked.calls) == 0


def test_a_client_without_token_refuses_calls_that_need_one(mocked):
    client = api.Client(SERVER)
    assert "token=None" in repr(client)
    for call in (
        client.list_projects,
        lambda: client.submit({"message": "m"}),
        lambda: client.create_token(PROJECT_ID),
        client.project_config,
    ):
        with pytest.raises(ValueError, match="no token"):
            call()
    assert len(mocked.calls) == 0


# -- secrets and transport security -----------------------------------------------------------


def test_token_not_in_repr(client):
    assert TOKEN not in repr(client)
    assert TOKEN not in str(client)
    assert TOKEN[:4] + "…" in repr(client)
    assert SERVER in repr(client)


def test_token_not_in_any_error_message(mocked, client):
    seen = []
    for status, _ in STATUS_CASES:
        mocked.upsert(
            responses.POST,
            EVENTS_URL,
            status=status,
            json={"title": f"t{status}", "errors": {"field": ["bad"]}},
        )
        with pytest.raises(errors.ApiError) as info:
            client.submit(message_event("m"))
        seen.append(info.value)
    mocked.add(responses.GET, PROJECTS_URL, body=requests.ConnectionError(ConnectionRefusedError()))
    with pytest.raises(errors.TransportError) as info:
        client.list_projects()
    seen.append(info.value)
    assert len(seen) == len(STATUS_CASES) + 1
    for err in seen:
        for text in (str(err), repr(err), getattr(err, "url", ""), getattr(err, "body", "")):
            assert TOKEN not in text


def test_bad_token_message_does_not_reveal_it():
    with pytest.raises(ValueError) as info:
        api.Client(SERVER, "secret token with spaces")
    assert "secret token with spaces" not in str(info.value)


@pytest.mark.parametrize(
    "url", ["http://example.com", "http://10.0.0.5:5000", "http://collector.example.org/base"]
)
def test_insecure_transport_warning(mocked, url):
    with pytest.warns(api.InsecureTransportWarning) as record:
        api.Client(url, TOKEN)
    assert TOKEN not in str(record[0].message)
    assert len(mocked.calls) == 0


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:5000",
        "http://localhost:5000",
        "http://[::1]:5000",
        "https://example.com",
        "https://127.0.0.1:8443",
    ],
)
def test_no_warning_for_loopback_or_https(mocked, url):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        api.Client(url, TOKEN)
    assert len(mocked.calls) == 0


def test_https_loopback_server(mocked):
    https_server = "https://127.0.0.1:8443"
    mocked.add(responses.POST, f"{https_server}/api/v2/events", status=202)
    client = api.Client(https_server + "/", TOKEN, verify=False)
    assert client.server_url == https_server
    assert client.submit(message_event("m")).status == 202
    assert mocked.calls[0].request.url == f"{https_server}/api/v2/events"


def test_client_validates_its_arguments():
    with pytest.raises(ValueError, match="server_url"):
        api.Client("ftp://127.0.0.1", TOKEN)
    with pytest.raises(ValueError, match="token"):
        api.Client(SERVER, "short")


def test_batch_body():
    assert api.batch_body([b'{"a":1}', b'{"b":2}']) == b'[{"a":1},{"b":2}]'


@responses.activate
def test_a_user_and_password_in_the_url_do_not_replace_the_token() -> None:
    """requests sends a URL's ``user:password`` as Basic auth, over the ``Authorization``
    header that carries the token: every call was refused, and the token blamed."""
    with_password = SERVER.replace("://", "://ci:pw12345@")
    responses.add(
        responses.GET,
        f"{with_password}/api/v2/projects/config",
        json={"version": 1, "settings": {}},
        match=[matchers.header_matcher({"Authorization": f"Bearer {TOKEN}"})],
    )
    client = api.Client(with_password, TOKEN, warn_insecure=False)
    assert client.get_config() == {"version": 1, "settings": {}}
