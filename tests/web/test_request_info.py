"""``@request`` from WSGI environs and ASGI scopes: shape, facts, and no secrets."""

from __future__ import annotations

import json
from typing import Any

import pytest

from eventlog_handler.integrations._request import (
    MAX_HEADERS,
    clean_query,
    clean_url,
    from_environ,
    from_scope,
    is_secret_name,
)
from eventlog_handler.settings import DEFAULT_DATA_EXCLUSIONS

EX = DEFAULT_DATA_EXCLUSIONS


def wsgi(**extra: Any) -> dict[str, Any]:
    environ: dict[str, Any] = {
        "REQUEST_METHOD": "GET",
        "SCRIPT_NAME": "",
        "PATH_INFO": "/orders/42",
        "QUERY_STRING": "",
        "SERVER_NAME": "backend.internal",
        "SERVER_PORT": "8000",
        "REMOTE_ADDR": "10.0.0.9",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "wsgi.url_scheme": "http",
        "wsgi.input": object(),
    }
    environ.update(extra)
    return environ


@pytest.mark.parametrize(
    "name",
    [
        "Authorization",
        "Proxy-Authorization",
        "Cookie",
        "Set-Cookie",
        "X-Api-Key",
        "X-Goog-Api-Key",
        "Ocp-Apim-Subscription-Key",
        "X-Auth-Token",
        "X-CSRFToken",
        "X-XSRF-TOKEN",
        "Sec-WebSocket-Key",
        "X-Session-Id",
        "token",
        "access_token",
        "api_key",
        "apikey",
        "key",
        "sig",
        "signature",
        "password",
        "pwd",
        "client_secret",
        "jwt",
        "oauth",
        "code_verifier",
        "X-Amz-Security-Token",
    ],
)
def test_secret_names(name: str) -> None:
    assert is_secret_name(name)
    assert is_secret_name(name, EX)


@pytest.mark.parametrize(
    "name",
    ["page", "q", "sort", "Accept", "Content-Type", "X-Request-Id", "author", "authority",
     "keyword", "X-Forwarded-For", "User-Agent", "code"],
)  # fmt: skip
def test_ordinary_names(name: str) -> None:
    assert not is_secret_name(name, EX)


def test_data_exclusions_add_names() -> None:
    assert not is_secret_name("X-Tenant", EX)
    assert is_secret_name("X-Tenant", (*EX, "tenant"))


def test_a_full_wsgi_request() -> None:
    info = from_environ(
        wsgi(
            QUERY_STRING="token=abc&page=2&q=caf%C3%A9+au+lait&page=3&flag",
            HTTP_HOST="shop.example.com",
            HTTP_USER_AGENT="Mozilla/5.0",
            HTTP_REFERER="https://ann:hunter2@shop.example.com/cart?api_key=k1&step=2#frag",
            HTTP_ACCEPT="text/html",
            HTTP_AUTHORIZATION="Bearer xyz",
            HTTP_COOKIE="sessionid=abc",
            HTTP_X_API_KEY="k2",
            HTTP_X_FORWARDED_FOR="203.0.113.7, 10.0.0.1",
            CONTENT_TYPE="application/json",
            CONTENT_LENGTH="",
            **{"wsgi.url_scheme": "https"},
        ),
        EX,
    )
    assert info == {
        "http_method": "GET",
        "is_secure": True,
        "host": "shop.example.com",
        "port": 443,
        "path": "/orders/42",
        "client_ip_address": "203.0.113.7",
        "user_agent": "Mozilla/5.0",
        "referrer": "https://shop.example.com/cart?api_key=[excluded]&step=2",
        "headers": {
            "Accept": ["text/html"],
            "X-Forwarded-For": ["203.0.113.7, 10.0.0.1"],
            "Content-Type": ["application/json"],
        },
        "query_string": {"token": "[excluded]", "page": "2,3", "q": "café au lait", "flag": ""},
        "data": {
            "url": "https://shop.example.com/orders/42?token=[excluded]&page=2"
            "&q=caf%C3%A9+au+lait&page=3&flag"
        },
    }
    text = json.dumps(info)
    for secret in ("hunter2", "xyz", "sessionid", "k1", "k2", "abc"):
        assert secret not in text


@pytest.mark.parametrize(
    ("host", "scheme", "expected"),
    [
        ("example.com:8080", "http", ("example.com", 8080, "http://example.com:8080/p")),
        ("example.com", "http", ("example.com", 80, "http://example.com/p")),
        ("Example.COM:443", "https", ("example.com", 443, "https://example.com/p")),
        ("[::1]:8000", "http", ("::1", 8000, "http://[::1]:8000/p")),
        ("[::1]", "https", ("::1", 443, "https://[::1]/p")),
        ("ann:hunter2@example.com:81", "http", ("example.com", 81, "http://example.com:81/p")),
        ("example.com:notaport", "http", ("example.com", 80, "http://example.com/p")),
    ],
)
def test_host_and_port(host: str, scheme: str, expected: tuple[str, int, str]) -> None:
    info = from_environ(wsgi(HTTP_HOST=host, PATH_INFO="/p", **{"wsgi.url_scheme": scheme}))
    assert (info["host"], info["port"], info["data"]["url"]) == expected


def test_without_a_host_header_the_server_name_and_port() -> None:
    info = from_environ(wsgi())
    assert (info["host"], info["port"]) == ("backend.internal", 8000)
    assert info["client_ip_address"] == "10.0.0.9"


def test_script_name_and_utf8_paths() -> None:
    raw = "/café".encode().decode("latin-1")  # how a WSGI server hands over the bytes
    info = from_environ(wsgi(SCRIPT_NAME="/shop", PATH_INFO=raw))
    assert info["path"] == "/shop/café"
    assert from_environ(wsgi(), scheme="https", path="/given")["path"] == "/given"
    assert from_environ(wsgi(), scheme="https")["is_secure"] is True


def test_bounds() -> None:
    many = {f"HTTP_X_H{i}": "v" for i in range(MAX_HEADERS + 50)}
    info = from_environ(wsgi(HTTP_X_LONG="x" * 10_000, **many))
    assert len(info["headers"]) == MAX_HEADERS
    long = from_environ(wsgi(HTTP_X_LONG="x" * 10_000))["headers"]["X-Long"][0]
    assert len(long) <= 2_001
    query = "&".join(f"p{i}=v" for i in range(500))
    assert len(from_environ(wsgi(QUERY_STRING=query))["query_string"]) == 100


@pytest.mark.parametrize(
    "environ",
    [
        {},
        {"REQUEST_METHOD": None, "PATH_INFO": None, "SERVER_PORT": "x"},
        {1: "not a string key", b"HTTP_X": b"bytes", "HTTP_X_Y": None, "QUERY_STRING": "=&&=x"},
        {"HTTP_HOST": "[::1", "PATH_INFO": b"/bytes"},
    ],
)
def test_strange_environs_never_raise(environ: dict[Any, Any]) -> None:
    info = from_environ(environ, EX)
    json.dumps(info)
    assert "http_method" in info


def test_an_asgi_http_scope() -> None:
    info = from_scope(
        {
            "type": "http",
            "method": "post",
            "scheme": "https",
            "root_path": "/api",
            "path": "/items",
            "query_string": b"api_key=k1&x=1",
            "server": ("10.0.0.2", 8443),
            "client": ("198.51.100.4", 55000),
            "headers": [
                (b"host", b"api.example.com"),
                (b"accept", b"*/*"),
                (b"accept", b"text/plain"),
                (b"authorization", b"Basic YW5uOmh1bnRlcjI="),
                (b"x-real-ip", b"198.51.100.9"),
            ],
        },
        EX,
    )
    assert info == {
        "http_method": "POST",
        "is_secure": True,
        "host": "api.example.com",
        "port": 443,
        "path": "/api/items",
        "client_ip_address": "198.51.100.9",
        "headers": {"Accept": ["*/*", "text/plain"], "X-Real-Ip": ["198.51.100.9"]},
        "query_string": {"api_key": "[excluded]", "x": "1"},
        "data": {"url": "https://api.example.com/api/items?api_key=[excluded]&x=1"},
    }


def test_an_asgi_websocket_scope() -> None:
    info = from_scope(
        {"type": "websocket", "path": "/ws", "root_path": "/ws-root", "server": None},
        EX,
    )
    assert info["http_method"] == "GET"
    assert info["is_secure"] is False
    assert info["path"] == "/ws-root/ws"
    assert info["data"]["url"] == "ws:///ws-root/ws"
    assert from_scope({"type": "websocket", "scheme": "wss", "path": "/"})["is_secure"] is True
    # root_path already in path (newer servers): not doubled
    assert from_scope({"type": "http", "root_path": "/a", "path": "/a/b"})["path"] == "/a/b"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://ann:hunter2@db.example.com/x", "https://db.example.com/x"),
        ("https://example.com/a?token=t&b=1#access_token=f", "https://example.com/a?token=[excluded]&b=1"),
        ("/path?password=p", "/path?password=[excluded]"),
        ("https://example.com/plain", "https://example.com/plain"),
    ],
)  # fmt: skip
def test_clean_url(url: str, expected: str) -> None:
    assert clean_url(url, EX) == expected


def test_clean_query_keeps_the_raw_form_of_other_values() -> None:
    assert clean_query("a=%2F&api%5Fkey=s&b=+", EX) == (
        "a=%2F&api%5Fkey=[excluded]&b=+",
        {"a": "/", "api_key": "[excluded]", "b": " "},
    )
    assert clean_query("", EX) == ("", {})
