"""The official JavaScript client, ``@exceptionless/node`` 3.2.1, against the collector: its
log, error, feature usage, 404, session (start, heartbeats, end), user description and
settings fetch are all answered as the service answers them, stored, and shown.

The client is installed with npm into a temporary directory (the npm registry is the only
host reached, by npm); where npm is missing or the install fails, the tests are skipped,
saying so. The client is configured with the collector's URL for events, settings and
heartbeats alike, so nothing it sends leaves 127.0.0.1."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from eventlog_handler import Client as ApiClient
from eventlog_handler.collector import Collector

HERE = Path(__file__).resolve().parent / "js_client"
#: The client's User-Agent, as the service records it (``@submission_client``).
USER_AGENT_SEEN = "exceptionless-js/3.2.1"


@pytest.fixture(scope="module")
def js_client(tmp_path_factory: pytest.TempPathFactory) -> Path:
    npm, node = shutil.which("npm"), shutil.which("node")
    if npm is None or node is None:
        pytest.skip("node and npm are not installed: the official JavaScript client can't run")
    folder = tmp_path_factory.mktemp("js_client")
    for name in ("package.json", "send.mjs"):
        shutil.copy(HERE / name, folder / name)
    try:
        installed = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--ignore-scripts"],
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=300,
        )
    except subprocess.TimeoutExpired:
        pytest.skip("npm install @exceptionless/node took over 300 s (no registry reachable?)")
    if installed.returncode != 0:
        pytest.skip(f"npm install @exceptionless/node failed: {installed.stderr.strip()[-300:]}")
    return folder


@pytest.fixture(scope="module")
def sent(js_client: Path) -> Iterator[tuple[Collector, dict[str, Any]]]:
    with Collector() as collector:
        settings = ApiClient(collector.url, collector.user_token)
        settings.set_project_setting(collector.project_id, "@@log:interop.quiet", "Off")
        ran = subprocess.run(
            ["node", "send.mjs", collector.url, collector.project_token],
            cwd=js_client,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert ran.returncode == 0, ran.stderr[-2000:]
        printed = json.loads(ran.stdout.strip().splitlines()[-1])
        yield collector, printed


def _get(collector: Collector, path: str, **params: Any) -> Any:
    answer = requests.get(
        collector.url + path,
        params=params,
        headers={"Authorization": f"Bearer {collector.user_token}"},
        timeout=10,
    )
    assert answer.status_code == 200, answer.text
    return answer.json()


def _events(collector: Collector) -> list[dict[str, Any]]:
    return list(_get(collector, "/api/v2/events", limit=100))


def test_log_error_usage_and_404_are_stored(sent: tuple[Collector, dict[str, Any]]) -> None:
    collector, printed = sent
    events = _events(collector)
    by_type: dict[str, list[dict[str, Any]]] = {}
    for event in events:
        by_type.setdefault(event["type"], []).append(event)
    [log] = by_type["log"]
    assert (log["source"], log["message"]) == ("interop.loud", "hello from the js client")
    assert log["data"]["@level"].lower() == "warn"
    assert "interop" in log["tags"]
    [error] = by_type["error"]
    assert error["reference_id"] == printed["reference"]
    assert error["message"] == "the js client failed on purpose"
    assert error["data"]["@error"]["type"] == "TypeError"
    [usage] = by_type["usage"]
    assert usage["source"] == "js-export"
    [missing] = by_type["404"]
    assert missing["source"] == "/js/missing/page"
    for event in (log, error, usage, missing):
        assert event["data"]["@user"]["identity"] == "js-user"
        assert event["data"]["@ref:session"] == printed["session"]
        client = event["data"]["@submission_client"]
        assert client == {"user_agent": USER_AGENT_SEEN, "version": "3.2.1"}


def test_the_projects_settings_reach_the_client(sent: tuple[Collector, dict[str, Any]]) -> None:
    collector, printed = sent
    assert printed["settings"] >= 1  # the version the client fetched
    messages = [event.get("message") for event in _events(collector)]
    assert "filtered by the project's settings" not in messages  # @@log:interop.quiet = Off


def test_the_session_with_its_heartbeats_and_end(sent: tuple[Collector, dict[str, Any]]) -> None:
    collector, printed = sent
    [session] = _get(collector, "/api/v2/events/sessions")
    assert session["reference_id"] == printed["session"]
    assert session["data"]["@user"]["identity"] == "js-user"
    assert session["data"]["@heartbeats"] >= 2
    assert "sessionend" in session["data"]
    assert session["value"] >= 1


def test_the_user_description_is_on_the_error(sent: tuple[Collector, dict[str, Any]]) -> None:
    collector, printed = sent
    error = _get(collector, f"/api/v2/events/by-ref/{printed['reference']}")
    assert error["data"]["@user_description"] == {
        "email_address": "js-user@example.com",
        "description": "I clicked export and it broke.",
    }


def test_the_dashboard_shows_them(sent: tuple[Collector, dict[str, Any]]) -> None:
    collector, printed = sent
    web = requests.Session()
    web.trust_env = False
    page = web.get(collector.url + "/events", timeout=10).text
    for shown in ("hello from the js client", "js-export", "/js/missing/page"):
        assert shown in page
    sessions = web.get(collector.url + "/sessions", timeout=10).text
    assert "js-user" in sessions
    error = _get(collector, f"/api/v2/events/by-ref/{printed['reference']}")
    detail = web.get(f"{collector.url}/events/{error['id']}", timeout=10).text
    assert "the js client failed on purpose" in detail
    assert "I clicked export and it broke." in detail and "js-user@example.com" in detail
