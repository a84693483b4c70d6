"""The local collector against hostile clients: scopes, oversized and malformed bodies, XSS,
DNS rebinding (the Host check), clients that hold connections (the connection cap and the
header and body deadlines), and the permissions of its files.

Everything talks to a :class:`~eventlog_handler.collector.Collector` on 127.0.0.1, in this
process (so the memory a request costs can be measured with ``tracemalloc``).
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import socket
import stat
import sys
import threading
import time
import tracemalloc
import zlib
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
import requests

from eventlog_handler import EventLogHandler, set_user
from eventlog_handler.collector import Collector
from tests.reliability.conftest import FAST
from tests.support.collector import Client, assert_problem
from tests.support.waits import wait_until

GIGABYTE = 1024**3


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


def test_project_token_is_refused_on_user_endpoints(client: Client, collector: Collector) -> None:
    token = collector.project_token
    project = collector.project_id
    assert_problem(client.get("/api/v2/projects", token), 403)
    assert_problem(client.get(f"/api/v2/projects/{project}", token), 403)
    assert_problem(client.get(f"/api/v2/tokens/{token}", token), 403)
    created = client.request(
        "POST",
        f"/api/v2/projects/{project}/tokens",
        token,
        data=json.dumps({"scopes": ["user"]}).encode(),
        headers={"Content-Type": "application/json"},
    )
    assert_problem(created, 403)
    # The user token may do all of that.
    assert client.get("/api/v2/projects", collector.user_token).status_code == 200


def test_a_project_token_cannot_post_to_or_read_another_project(
    client: Client, collector: Collector
) -> None:
    other = collector.create_project("other")
    other_token = collector.create_token(other["id"])
    mine = collector.project_token
    response = client.post_events(
        {"message": "into the other project"}, mine, path=f"/api/v2/projects/{other['id']}/events"
    )
    assert_problem(response, 404)
    assert collector.events(project_id=other["id"]) == []
    assert_problem(client.get(f"/api/v2/projects/{other['id']}/events", mine), 403)
    # And the other way round.
    assert client.post_events({"message": "its own"}, other_token).status_code == 202
    assert client.post_events({"message": "mine"}, mine).status_code == 202
    # A project token reads no events (403), not even its own project's.
    assert_problem(client.get("/api/v2/events", mine), 403)
    (theirs,) = collector.events(project_id=other["id"])
    assert_problem(client.get(f"/api/v2/events/{theirs['id']}", mine), 403)
    # A user-scoped token bound to this project does not see the other one's.
    reader = collector.create_token(collector.project_id, ["user"])
    listed = client.get("/api/v2/events", reader).json()
    assert [event["message"] for event in listed] == ["mine"]
    assert_problem(client.get(f"/api/v2/events/{theirs['id']}", reader), 404)


# -- oversized bodies ---------------------------------------------------------------------------


@pytest.mark.parametrize("expect_continue", [False, True])
def test_a_one_gigabyte_content_length_is_refused_without_reading(
    collector: Collector, expect_continue: bool
) -> None:
    head = (
        "POST /api/v2/events HTTP/1.1\r\n"
        f"Host: 127.0.0.1:{collector.port}\r\n"
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
    client: Client, collector: Collector, encoding: str, make: Any
) -> None:
    bomb = make()
    assert len(bomb) < 200_000  # small as sent: it passes the body limit
    tracemalloc.start()
    try:
        response = client.post_events(bomb, headers={"Content-Encoding": encoding})
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
        (gzip.compress(b'{"message": "x"}')[:-12], {"Content-Encoding": "gzip"}, 400),
        (b"\x1f\x8b not gzip at all", {"Content-Encoding": "gzip"}, 400),
        (b"   ", {}, 411),
        (b'{"message": "x"}', {"Content-Encoding": "br"}, 415),
        (b'{"message": "x"}', {"Content-Type": "application/xml"}, 415),
    ],
    ids=[
        "truncated-gzip",
        "corrupt-gzip",
        "blank",  # an empty array is answered 202, as the service: test_post_events
        "unknown-encoding",
        "wrong-content-type",
    ],
)
def test_bodies_that_cannot_be_read_are_refused(
    client: Client, collector: Collector, body: bytes, headers: dict[str, str], status: int
) -> None:
    response = client.post_events(body, headers=headers)
    assert_problem(response, status)
    assert collector.events() == []
    assert client.post_events({"message": "still serving"}).status_code == 202


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"message": "unterminated', None),
        (b"[{]", None),
        (b'{"message": NaN}', None),
        (b"[" * 200_000 + b"]" * 200_000, None),
        (b'"just a string"', None),
        (b'[{"message": 5}]', None),
        (b'{"message": "\xff\xfe not utf-8"}', "\ufffd\ufffd not utf-8"),
        (b'{"message": "\xc3\x28 broken sequence"}', "\ufffd( broken sequence"),
    ],
    ids=[
        "truncated-json",
        "broken-json",
        "nan",
        "nesting-bomb",
        "scalar",
        "wrong-field-type",
        "invalid-utf8",
        "broken-utf8-sequence",
    ],
)
def test_malformed_events_are_stored_like_the_service_stores_them(
    client: Client, collector: Collector, body: bytes, message: str | None
) -> None:
    """As text (the whole body as a log message), or, for bytes that are not UTF-8, read with
    replacement characters."""
    response = client.post_events(gzip.compress(body), headers={"Content-Encoding": "gzip"})
    assert response.status_code == 202
    (event,) = collector.events()
    assert event["type"] == "log"
    assert len(event["message"]) <= 2000
    expected = body.decode()[:2000] if message is None else message
    assert event["message"] == expected
    assert client.get(f"/events/{event['id']}").status_code == 200
    assert client.post_events({"message": "still serving"}).status_code == 202


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
    "html", "head", "meta", "title", "style", "body", "header", "main", "nav", "a", "h1", "h2",
    "h3", "p", "form", "label", "select", "option", "input", "button", "table", "thead", "tbody",
    "tr", "th", "td", "dl", "dt", "dd", "pre", "section", "span", "script", "small", "b", "code",
    "time", "svg", "rect", "div", "ul", "li", "details", "summary", "br", "em", "datalist",
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
    client: Client, collector: Collector
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
    pages = [client.get("/"), client.get("/", params={"q": XSS[0], "type": XSS[1]})]
    pages += [client.get(f"/events/{event['id']}") for event in stored]
    pages += [client.get(f"/stacks/{event['stack_id']}") for event in stored]
    pages += [client.get("/events", params={"q": XSS[2], "level": XSS[3]})]
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

    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in error_page  # shown, as text
    assert "&quot;&gt;&lt;img src=x onerror=alert(2)&gt;" in error_page


# -- DNS rebinding: the Host check ---------------------------------------------------------------


@pytest.mark.parametrize(
    "host",
    ["rebound.example", "rebound.example:{port}", "127.0.0.1.nip.io:{port}", "localhost.evil:80"],
)
def test_requests_addressed_to_another_name_are_refused(collector: Collector, host: str) -> None:
    """A page on http://rebound.example:PORT whose name now resolves to 127.0.0.1 reaches the
    collector with that Host: it gets neither the dashboard nor the API."""
    name = host.format(port=collector.port)
    session = requests.Session()
    session.trust_env = False
    try:
        for method, path, headers in (
            ("GET", "/", {}),
            ("GET", "/about", {}),
            ("GET", "/api/v2/projects", {"Authorization": f"Bearer {collector.user_token}"}),
            ("POST", "/api/v2/events", {"Authorization": f"Bearer {collector.project_token}"}),
        ):
            response = session.request(
                method,
                collector.url + path,
                headers={"Host": name, "Content-Type": "application/json", **headers},
                data=b'{"message": "m"}' if method == "POST" else None,
                timeout=10,
            )
            assert response.status_code == 421, (path, response.text)
            assert response.headers["Content-Type"].startswith("application/problem+json")
            assert "<html" not in response.text
    finally:
        session.close()
    assert collector.events() == []


def test_loopback_names_and_addresses_are_answered(collector: Collector) -> None:
    session = requests.Session()
    session.trust_env = False
    try:
        for host in (f"127.0.0.1:{collector.port}", f"localhost:{collector.port}", "localhost",
                     f"[::1]:{collector.port}", "127.0.0.1:8080"):  # fmt: skip
            response = session.get(collector.url + "/", headers={"Host": host}, timeout=10)
            assert response.status_code == 200, host
    finally:
        session.close()


def test_a_second_host_header_is_refused(collector: Collector) -> None:
    head = (
        f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{collector.port}\r\nHost: rebound.example\r\n"
        "Connection: close\r\n\r\n"
    ).encode()
    assert raw_exchange(collector, head).startswith(b"HTTP/1.1 400")


def test_configured_host_names_are_answered() -> None:
    with Collector(host_names=["dev-box"]) as collector:
        response = requests.get(
            collector.url + "/", headers={"Host": "dev-box:5000"}, timeout=10,
            proxies={"http": "", "https": ""},
        )  # fmt: skip
        assert response.status_code == 200


# -- clients that hold connections ------------------------------------------------------------


def _connect(collector: Collector) -> socket.socket:
    host, port = collector.url.removeprefix("http://").rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=10)


def _closed_by_server(connection: socket.socket, timeout: float) -> float:
    """Seconds until the server closes ``connection`` (reading what it sends meanwhile)."""
    started = time.monotonic()
    connection.settimeout(timeout)
    try:
        while connection.recv(65536):
            pass
    except ConnectionResetError:
        pass
    return time.monotonic() - started


@pytest.fixture
def limited() -> Iterator[Collector]:
    with Collector(max_connections=4, header_timeout=1.0, body_timeout=1.0, idle_timeout=2.0) as c:
        yield c


def test_a_connection_over_the_cap_takes_the_place_of_the_longest_waiting(
    limited: Collector,
) -> None:
    held = [_connect(limited) for _ in range(4)]
    try:
        assert wait_until(lambda: limited.open_connections == 4, 10)
        with _connect(limited) as extra:
            extra.sendall(f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{limited.port}\r\n\r\n".encode())
            extra.settimeout(10)
            answer = extra.recv(65536)
        assert answer.startswith(b"HTTP/1.1 200"), answer[:100]
        # The first connection, idle the longest, was closed to make room.
        assert _closed_by_server(held[0], timeout=5) < 5
        assert limited._server is not None and limited._server.evicted_connections >= 1
    finally:
        for connection in held:
            connection.close()
    assert wait_until(lambda: limited.open_connections == 0, 10)
    http = Client(limited)
    try:
        assert http.post_events({"message": "after"}).status_code == 202
    finally:
        http.close()


def test_connections_over_the_cap_get_503_when_every_one_is_being_served(
    limited: Collector,
) -> None:
    server = limited._server
    assert server is not None
    release = threading.Event()
    entered = threading.Semaphore(0)
    handle = server.api.handle

    def slow(request: Any) -> Any:
        entered.release()
        release.wait(10)
        return handle(request)

    server.api.handle = slow  # type: ignore[method-assign]
    busy = [_connect(limited) for _ in range(4)]
    try:
        for connection in busy:
            connection.sendall(f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{limited.port}\r\n\r\n".encode())
        for _ in busy:
            assert entered.acquire(timeout=10)
        with _connect(limited) as extra:
            extra.sendall(f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{limited.port}\r\n\r\n".encode())
            extra.settimeout(10)
            answer = extra.recv(65536)
        assert answer.startswith(b"HTTP/1.1 503"), answer[:100]
        assert b"Connection: close" in answer
        assert server.refused_connections >= 1
    finally:
        release.set()
        server.api.handle = handle  # type: ignore[method-assign]
        for connection in busy:
            connection.close()


def test_idle_connections_are_closed(limited: Collector) -> None:
    with _connect(limited) as idle:
        elapsed = _closed_by_server(idle, timeout=15)
    assert 1.5 <= elapsed < 10
    assert wait_until(lambda: limited.open_connections == 0, 10)


def test_headers_that_trickle_in_are_cut_off_at_the_deadline(limited: Collector) -> None:
    """A client that sends one header byte at a time, each well within a socket timeout, is
    still closed once the whole header block has taken ``header_timeout``."""
    stop = threading.Event()
    closed_after: list[float] = []

    def trickle(connection: socket.socket) -> None:
        started = time.monotonic()
        head = f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{limited.port}\r\nX-Slow: " + "a" * 200
        try:
            for char in head:
                if stop.is_set():
                    return
                connection.sendall(char.encode())
                time.sleep(0.05)
        except OSError:
            closed_after.append(time.monotonic() - started)

    with _connect(limited) as connection:
        sender = threading.Thread(target=trickle, args=(connection,), daemon=True)
        sender.start()
        elapsed = _closed_by_server(connection, timeout=15)
        stop.set()
        sender.join(10)
    assert elapsed < 8  # 1 s deadline; the trickle alone would take over 12 s
    assert wait_until(lambda: limited.open_connections == 0, 10)


def test_a_body_that_trickles_in_is_cut_off_at_the_deadline(limited: Collector) -> None:
    head = (
        "POST /api/v2/events HTTP/1.1\r\n"
        f"Host: 127.0.0.1:{limited.port}\r\n"
        f"Authorization: Bearer {limited.project_token}\r\n"
        "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
    ).encode()
    with _connect(limited) as connection:
        connection.sendall(head + b'{"message": "')
        started = time.monotonic()
        try:
            for _ in range(100):
                connection.sendall(b"a")
                time.sleep(0.05)
        except OSError:
            pass
        elapsed = _closed_by_server(connection, timeout=15) + (time.monotonic() - started)
    assert elapsed < 8
    assert limited.events() == []
    assert wait_until(lambda: limited.open_connections == 0, 10)


def test_slow_clients_do_not_stop_others(limited: Collector) -> None:
    slow = [_connect(limited) for _ in range(3)]
    try:
        for connection in slow:
            connection.sendall(b"GET / HTTP/1.1\r\nHost: 1")  # and never more
        http = Client(limited)
        try:
            started = time.monotonic()
            assert http.post_events({"message": "served"}).status_code == 202
            assert time.monotonic() - started < 5
        finally:
            http.close()
    finally:
        for connection in slow:
            connection.close()


# -- files ------------------------------------------------------------------------------------


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX permissions")
def test_database_files_are_created_readable_by_the_owner_only(tmp_path: Path) -> None:
    database = tmp_path / "new" / "collector.sqlite3"
    previous = os.umask(0o022)
    try:
        with Collector(database) as collector:
            http = Client(collector)
            assert http.post_events({"message": "m"}).status_code == 202
            http.close()
            files = [database, Path(f"{database}-wal"), Path(f"{database}-shm")]
            for path in files:
                assert path.exists(), path
                assert stat.S_IMODE(path.stat().st_mode) == 0o600, (path, oct(path.stat().st_mode))
        assert stat.S_IMODE(database.parent.stat().st_mode) == 0o700
    finally:
        os.umask(previous)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX permissions")
def test_an_existing_database_is_tightened(tmp_path: Path) -> None:
    database = tmp_path / "old.sqlite3"
    with Collector(database):
        pass
    os.chmod(database, 0o644)
    with Collector(database) as collector:
        assert collector.project_token
    assert stat.S_IMODE(database.stat().st_mode) == 0o600
