"""Opt-in 404 reporting in the web middleware: a not-found event (``type: "404"``, ``source``
= the path, ``@request``) for each 404 answer, none for a crawler named by the service's
``@@UserAgentBotPatterns``, none for other answers — under a real uvicorn server, and in a
Flask application."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests

import eventlog_handler
from tests.support.constants import API_KEY, FAST
from tests.support.faultserver import FaultServer
from tests.support.processes import child_env
from tests.support.waits import wait_until

from .test_uvicorn import Uvicorn

pytest.importorskip("fastapi")
pytest.importorskip("flask")

BOTS = {"@@UserAgentBotPatterns": "*bot*, curl*"}
BROWSER = "Mozilla/5.0 (X11; Linux x86_64) Firefox/128.0"


@pytest.fixture
def fault_server() -> Iterator[FaultServer]:
    with FaultServer() as running:
        running.config = {"version": 3, "settings": BOTS}
        yield running


def test_uvicorn_app_reports_its_404s_but_not_a_crawlers(fault_server: FaultServer) -> None:
    app = Uvicorn(
        ["-m", "uvicorn", "tests.web.notfound_app:asgi", "--host", "127.0.0.1", "--port", "0"],
        child_env(fault_server.url, NOTFOUND_TEST_SETUP="1"),
    )
    try:
        get = requests.get
        assert get(app.url + "/hello", headers={"User-Agent": BROWSER}, timeout=10).ok
        answer = get(app.url + "/no/such/page?x=1", headers={"User-Agent": BROWSER}, timeout=10)
        assert answer.status_code == 404
        # The service's settings (with the bot patterns) come with the first event's worker.
        assert wait_until(lambda: fault_server.config_requests, 10)
        time.sleep(0.3)
        crawler = {"User-Agent": "Mozilla/5.0 (compatible; Googlebot/2.1)"}
        assert get(app.url + "/robots-only", headers=crawler, timeout=10).status_code == 404
        curl = {"User-Agent": "curl/8.5"}
        assert get(app.url + "/curl-only", headers=curl, timeout=10).status_code == 404
    finally:
        output = app.stop()
    assert app.process.returncode == 0, output
    [event] = [event for event in fault_server.accepted if event.get("type") == "404"]
    assert event["source"] == "/no/such/page"
    request = event["data"]["@request"]
    assert (request["path"], request["http_method"]) == ("/no/such/page", "GET")
    assert request["user_agent"] == BROWSER
    assert "message" not in event
    assert [e.get("type") for e in fault_server.accepted] == ["404"]


def test_behind_a_proxy_the_404s_source_is_the_path_the_client_asked_for(
    fault_server: FaultServer,
) -> None:
    """``uvicorn --root-path /api``: a proxy takes ``/api/gone`` and forwards ``/gone``; the
    server puts the prefix in front of the path already, and the event named
    ``/api/api/gone``."""
    app = Uvicorn(
        [
            *("-m", "uvicorn", "tests.web.notfound_app:asgi", "--host", "127.0.0.1"),
            *("--port", "0", "--root-path", "/api"),
        ],
        child_env(fault_server.url, NOTFOUND_TEST_SETUP="1"),
    )
    try:
        headers = {"User-Agent": BROWSER}
        assert requests.get(app.url + "/gone", headers=headers, timeout=10).status_code == 404
        assert wait_until(lambda: fault_server.accepted, 10)
    finally:
        output = app.stop()
    assert app.process.returncode == 0, output
    [event] = fault_server.accepted
    assert event["type"] == "404"
    assert (event["source"], event["data"]["@request"]["path"]) == ("/api/gone", "/api/gone")


def test_flask_app_reports_its_404s(fault_server: FaultServer) -> None:
    from tests.web.notfound_app import create_flask

    setup = eventlog_handler.setup(API_KEY, fault_server.url, capture_exceptions=False, **FAST)
    try:
        client = create_flask().test_client()
        assert client.get("/hello", headers={"User-Agent": BROWSER}).status_code == 200
        assert client.get("/missing", headers={"User-Agent": BROWSER}).status_code == 404
        assert wait_until(lambda: setup.stats()["server_settings_version"] == 3, 5)
        assert client.get("/missing", headers={"User-Agent": "SomeBot/1.0"}).status_code == 404
        assert setup.flush(5)
        stats: dict[str, Any] = setup.stats()
    finally:
        setup.close(5)
    [event] = fault_server.accepted
    assert (event["type"], event["source"]) == ("404", "/missing")
    assert event["data"]["@request"]["user_agent"] == BROWSER
    assert stats["dropped"]["filtered"] == 1  # the crawler's, counted


def test_without_the_option_no_404_is_sent(fault_server: FaultServer) -> None:
    from flask import Flask

    from eventlog_handler.wsgi import init_flask

    setup = eventlog_handler.setup(API_KEY, fault_server.url, capture_exceptions=False, **FAST)
    try:
        client = init_flask(Flask("plain")).test_client()
        assert client.get("/missing").status_code == 404
        assert setup.flush(5)
    finally:
        setup.close(5)
    assert fault_server.accepted == []


def test_an_application_that_reports_its_own_404_sends_one_event(
    fault_server: FaultServer,
) -> None:
    """The README shows both ``submit_not_found(request.path)`` and the middleware's option: a
    request whose 404 the application reported is not reported again by the middleware."""
    from tests.web.notfound_app import create_flask

    app = Uvicorn(
        ["-m", "uvicorn", "tests.web.notfound_app:asgi", "--host", "127.0.0.1", "--port", "0"],
        child_env(fault_server.url, NOTFOUND_TEST_SETUP="1"),
    )
    try:
        headers = {"User-Agent": BROWSER}
        for name in ("a", "b"):
            answer = requests.get(f"{app.url}/items/{name}", headers=headers, timeout=10)
            assert answer.status_code == 404
        assert requests.get(app.url + "/nowhere", headers=headers, timeout=10).status_code == 404
        assert wait_until(lambda: len(fault_server.accepted) >= 3, 10)
        time.sleep(0.5)  # a second event per request would have come by now
    finally:
        output = app.stop()
    assert app.process.returncode == 0, output
    sources = sorted(event["source"] for event in fault_server.accepted)
    assert sources == ["/items/a (the application's)", "/items/b (the application's)", "/nowhere"]

    fault_server.accepted.clear()
    setup = eventlog_handler.setup(API_KEY, fault_server.url, capture_exceptions=False, **FAST)
    try:
        client = create_flask().test_client()
        # Closed, as a server closes it: its request scope ends then (open, it was this
        # thread's, and the tests run after it here saw its request and its trace).
        with client.get("/items/c", headers={"User-Agent": BROWSER}) as answer:
            assert answer.status_code == 404
        assert setup.flush(5)
    finally:
        setup.close(5)
    assert [event["source"] for event in fault_server.accepted] == ["/items/c (the application's)"]
