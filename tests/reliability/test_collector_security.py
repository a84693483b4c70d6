"""The local collector against hostile clients: scopes, oversized and malformed bodies, XSS.

Everything talks to a :class:`~eventlog_handler.collector.Collector` on 127.0.0.1, in this
process (so the memory a request costs can be measured with ``tracemalloc``).
"""

from __future__ import annotations

import gzip
import json
import logging
import socket
import time
import tracemalloc
import zlib
from html.parser import HTMLParser
from typing import Any

import pytest

from eventlog_handler import EventLogHandler, set_user
from eventlog_handler.collector import Collector
from tests.collector.helpers import Client, assert_problem
from tests.reliability.conftest import FAST

GIGABYTE = 1024**3


@pytest.fixture
def http(client: Client) -> Client:
    """The collector's HTTP helper (``tests/collector``'s fixture) under this file's name."""
    return client


def raw_exchange(
    collector: Collector, head: bytes, body: bytes = b"", timeout: float = 10.0
) -> bytes:
    """Send ``head`` and ``body`` on a raw socket (without closing our side); return what the
    collector answers until it closes the connection."""
    host, port = collector.url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as connection:
        connection.sendall(head + body)
        chunks = []
        while True:
            try:
                chunk = connection.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks)


# -- scopes and projects ------------------------------------------------------------------


def test_project_token_is_refused_on_user_endpoints(http: Client, collector: Collector) -> None:
    token = collector.project_token
    project = collector.project_id
    assert_problem(http.get("/api/v2/projects", token), 403)
    assert_problem(http.get(f"/api/v2/projects/{project}", token), 403)
    assert_problem(http.get(f"/api/v2/tokens/{token}", token), 403)
    created = http.request(
        "POST",
        f"/api/v2/projects/{project}/tokens",
        token,
        data=json.dumps({"scopes": ["user"]}).encode(),
        headers={"Content-Type": "application/json"},
    )
    assert_problem(created, 403)
    # The user token may do all of that.
    assert http.get("/api/v2/projects", collector.user_token).status_code == 200


def test_a_project_token_cannot_post_to_or_read_another_project(
    http: Client, collector: Collector
) -> None:
    other = collector.create_project("other")
    other_token = collector.create_token(other["id"])
    mine = collector.project_token
    response = http.post_events(
        {"message": "into the other project"}, mine, path=f"/api/v2/projects/{other['id']}/events"
    )
    assert_problem(response, 404)
    assert collector.events(project_id=other["id"]) == []
    assert_problem(http.get(f"/api/v2/projects/{other['id']}/events", mine), 404)
    # And the other way round.
    assert http.post_events({"message": "its own"}, other_token).status_code == 202
    assert http.post_events({"message": "mine"}, mine).status_code == 202
    listed = http.get("/api/v2/events", mine).json()
    assert [event["message"] for event in listed] == ["mine"]
    (theirs,) = collector.events(project_id=other["id"])
    assert_problem(http.get(f"/api/v2/events/{theirs['id']}", mine), 404)


# -- oversized bodies ---------------------------------------------------------------------------


@pytest.mark.parametrize("expect_continue", [False, True])
def test_a_one_gigabyte_content_length_is_refused_without_reading(
    collector: Collector, expect_continue: bool
) -> None:
    head = (
        "POST /api/v2/events HTTP/1.1\r\n"
        "Host: 127.0.0.1\r\n"
        f"Authorization: Bearer {collector.project_token}\r\n"
        "Content-Type: application/json\r\n"
        + ("Expect: 100-continue\r\n" if expect_continue else "")
        + f"Content-Length: {GIGABYTE}\r\n\r\n"
    ).encode()
    started = time.monotonic()
    answer = raw_exchange(
        collector, head, b"" if expect_continue else b'[{"message": "' + b"a" * 65536
    )
    status_line = answer.partition(b"\r\n")[0]
    assert status_line.startswith(b"HTTP/1.1 413"), answer[:300]
    # The collector did not try to read (or drain) a gigabyte: it answered and hung up.
    assert time.monotonic() - started < 10
    (info,) = [item for item in collector.request_log if item.status == 413]
    assert info.body_bytes == 0
    # And it still serves.
    client = Client(collector)
    try:
        assert client.post_events({"message": "after"}).status_code == 202
    finally:
        client.close()


def gzip_bomb(inflated_bytes: int, *, members: int = 1) -> bytes:
    """A gzip body that inflates to ``inflated_bytes`` (a JSON array with one long message),
    compressed in chunks so that this test never holds the inflated text itself."""
    chunk = b"a" * (1024 * 1024)
    out = bytearray()
    per_member = inflated_bytes // members
    for member in range(members):
        compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        if member == 0:
            out += compressor.compress(b'[{"message": "')
        for _ in range(per_member // len(chunk)):
            out += compressor.compress(chunk)
        if member == members - 1:
            out += compressor.compress(b'"}]')
        out += compressor.flush()
    return bytes(out)


def deflate_bomb(inflated_bytes: int) -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    out = bytearray(compressor.compress(b'{"message": "'))
    chunk = b"a" * (1024 * 1024)
    for _ in range(inflated_bytes // len(chunk)):
        out += compressor.compress(chunk)
    out += compressor.compress(b'"}') + compressor.flush()
    return bytes(out)


@pytest.mark.parametrize(
    ("encoding", "make"),
    [
        ("gzip", lambda: gzip_bomb(150 * 1024 * 1024)),
        ("gzip", lambda: gzip_bomb(150 * 1024 * 1024, members=30)),
        ("deflate", lambda: deflate_bomb(150 * 1024 * 1024)),
    ],
    ids=["gzip", "gzip-multi-member", "deflate"],
)
def test_a_decompression_bomb_is_refused_with_bounded_memory(
    http: Client, collector: Collector, encoding: str, make: Any
) -> None:
    bomb = make()
    assert len(bomb) < 200_000  # small as sent: it passes the body limit
    tracemalloc.start()
    try:
        response = http.post_events(bomb, headers={"Content-Encoding": encoding})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert response.status_code in (400, 413), response.text
    assert_problem(response, response.status_code)
    # 150 MB inflated; the collector's bound is 10x the body limit (2 MB). Allow for copies.
    assert peak < 16 * 1024 * 1024, peak
    assert collector.events() == []


@pytest.mark.parametrize(
    ("body", "headers", "status"),
    [
        (b'{"message": "unterminated', {}, 400),
        (b"[{]", {}, 400),
        (b'{"message": NaN}', {}, 400),
        (b'{"message": "\xff\xfe not utf-8"}', {}, 400),
        (b'{"message": "\xc3\x28 broken sequence"}', {}, 400),
        (b"[" * 200_000 + b"]" * 200_000, {"Content-Encoding": "gzip"}, 400),
        (gzip.compress(b'{"message": "x"}')[:-12], {"Content-Encoding": "gzip"}, 400),
        (b"\x1f\x8b not gzip at all", {"Content-Encoding": "gzip"}, 400),
        (b"   ", {}, 411),
        (b"[]", {}, 411),
        (b'{"message": "x"}', {"Content-Encoding": "br"}, 415),
        (b'{"message": "x"}', {"Content-Type": "text/plain"}, 415),
        (b'"just a string"', {}, 422),
        (b'[{"message": 5}]', {}, 422),
    ],
    ids=[
        "truncated-json",
        "broken-json",
        "nan",
        "invalid-utf8",
        "broken-utf8-sequence",
        "nesting-bomb",
        "truncated-gzip",
        "corrupt-gzip",
        "blank",
        "empty-array",
        "unknown-encoding",
        "wrong-content-type",
        "scalar",
        "wrong-field-type",
    ],
)
def test_malformed_bodies_get_the_right_status(
    http: Client, collector: Collector, body: bytes, headers: dict[str, str], status: int
) -> None:
    if headers.get("Content-Encoding") == "gzip" and not body.startswith(b"\x1f\x8b"):
        body = gzip.compress(body)
    response = http.post_events(body, headers=headers)
    assert_problem(response, status)
    assert collector.events() == []
    assert http.post_events({"message": "still serving"}).status_code == 202


# -- the dashboard ------------------------------------------------------------------------------

XSS = [
    "<script>alert(1)</script>",
    '"><img src=x onerror=alert(2)>',
    "'><svg onload=alert(3)>",
    "</pre></dd><script>alert(4)</script>",
    "javascript:alert(5)",
    "<a href=javascript:alert(6)>x</a>",
    "<!--",
]
ALLOWED_TAGS = {
    "html", "head", "meta", "title", "style", "body", "header", "main", "a", "h1", "h2", "p",
    "form", "label", "select", "option", "input", "button", "table", "thead", "tbody", "tr",
    "th", "td", "dl", "dt", "dd", "pre", "section", "span", "script",
}  # fmt: skip


class PageStructure(HTMLParser):
    """Every start tag with its attributes, and every comment."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.comments: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_comment(self, data: str) -> None:
        self.comments.append(data)


def assert_structure_is_the_collectors_own(page: str) -> None:
    parser = PageStructure()
    parser.feed(page)
    parser.close()
    assert parser.comments == []
    scripts = [attrs for tag, attrs in parser.tags if tag == "script"]
    assert all(set(attrs) == {"nonce"} for attrs in scripts), scripts
    assert len(scripts) <= 1
    for tag, attrs in parser.tags:
        assert tag in ALLOWED_TAGS, (tag, attrs)
        for name, value in attrs.items():
            assert not name.startswith("on"), (tag, name, value)
            if name in ("href", "action", "src"):
                assert value is not None and value.startswith(("/", "?")), (tag, name, value)


class HostileError(Exception):
    pass


HostileError.__qualname__ = XSS[1]
HostileError.__module__ = XSS[0]


def test_dashboard_escapes_event_content_sent_by_the_handler(
    http: Client, collector: Collector
) -> None:
    handler = EventLogHandler(collector.project_token, collector.url, **FAST)
    logger = logging.Logger(XSS[1], logging.DEBUG)  # the source
    logger.addHandler(handler)
    extras: dict[str, Any] = {payload: payload for payload in XSS}
    extras["nested"] = {payload: [payload] for payload in XSS}
    with set_user(XSS[0], name=XSS[2], data={XSS[3]: XSS[4]}):
        logger.warning("%s", " ".join(XSS), extra=extras)
        try:
            raise HostileError(XSS[3])
        except HostileError:
            logger.exception(XSS[6] + XSS[0])
    assert handler.engine.flush(10), handler.stats()
    stored = collector.wait_for_events(2)
    pages = [http.get("/"), http.get("/", params={"q": XSS[0], "type": XSS[1]})]
    pages += [http.get(f"/events/{event['id']}") for event in stored]
    for response in pages:
        assert response.status_code == 200
        assert response.headers["Content-Type"].startswith("text/html")
        assert "default-src 'none'" in response.headers["Content-Security-Policy"]
        page = response.text
        assert_structure_is_the_collectors_own(page)
        for payload in XSS[:4]:
            assert payload not in page
        assert collector.project_token not in page
        assert collector.user_token not in page
    error_page = pages[2].text if stored[0]["type"] == "error" else pages[3].text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in error_page  # shown, as text
    assert "&quot;&gt;&lt;img src=x onerror=alert(2)&gt;" in error_page
