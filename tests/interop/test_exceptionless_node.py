"""The official JavaScript client, ``@exceptionless/node``, against the local collector.

npm installs the client (the version pinned in ``node_client/package.json``) into a temporary
directory once per test session; ``node_client/send.mjs`` then drives it once against a
collector on 127.0.0.1: a session start, a log, a log the server's settings switch off, an
error, a feature usage, a 404, the user's description of the error, a heartbeat and the
session's end. The tests read back what the collector stored through its API and its dashboard.

The tests skip, saying why, when ``node``/``npm`` are not on PATH or npm cannot reach its
registry. Nothing but that install leaves the machine: the script points every URL of the
client (``serverUrl``, ``configServerUrl``, ``heartbeatServerUrl``) at the collector and
refuses any other request before it is made.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from html import unescape
from pathlib import Path
from typing import Any

import pytest

from eventlog_handler.collector import Collector
from tests.support.collector import Client

NODE_CLIENT = Path(__file__).parent / "node_client"
PACKAGE = "@exceptionless/node"
NPM_TIMEOUT = 300  # seconds: a cold cache on a slow registry
RUN_TIMEOUT = 60
NODE_MAJOR = 18  # the client's "engines"

#: Signs in npm's output that the registry could not be reached (no network), not a bad package.
OFFLINE = re.compile(
    r"ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ECONNRESET|ETIMEDOUT|ENETUNREACH|EHOSTUNREACH"
    r"|network|socket hang up|request to https?://\S+ failed",
    re.IGNORECASE,
)

MUTED_SOURCE = "interop.muted"
USER = {"identity": "node-user-1", "name": "Node Interop User"}
DESCRIPTION = {
    "email_address": "ann@example.com",
    "description": "I clicked the button and it broke",
}


# -- the client, installed once ---------------------------------------------------------------


def _npm_failure(output: str) -> str:
    """The lines of npm's output that say what went wrong (its error code and message)."""
    lines = [line.strip() for line in output.splitlines()]
    wanted = [
        line
        for line in lines
        if re.match(r"npm (error|ERR!) (code|errno|syscall|request|network)", line)
    ]
    return "; ".join(wanted[:4]) or (lines[-1] if lines else "no output")


@pytest.fixture(scope="session")
def node_client(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A temporary directory holding ``send.mjs`` with the client installed next to it."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip(
            "node and npm are needed to run the official JavaScript client "
            f"(node: {node or 'not on PATH'}, npm: {npm or 'not on PATH'}); "
            "install Node.js (apt-get install nodejs npm)"
        )
    version = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30)
    major = re.match(r"v(\d+)\.", version.stdout.strip())
    if major is None or int(major.group(1)) < NODE_MAJOR:
        pytest.skip(
            f"{PACKAGE} needs Node.js >= {NODE_MAJOR}; {node} is {version.stdout.strip()!r}"
        )
    folder = tmp_path_factory.mktemp("exceptionless-node")
    for name in ("package.json", "send.mjs"):
        shutil.copy(NODE_CLIENT / name, folder / name)
    try:
        done = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--no-save", "--loglevel=error"],
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=NPM_TIMEOUT,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        pytest.skip(
            f"npm install of {PACKAGE} took over {NPM_TIMEOUT} s: no network to the npm registry?"
        )
    output = done.stdout + done.stderr
    if done.returncode != 0:
        if OFFLINE.search(output):
            pytest.skip(
                f"npm install of {PACKAGE} could not reach the npm registry (no network): "
                + _npm_failure(output)
            )
        pytest.fail(f"npm install of {PACKAGE} failed (exit {done.returncode}):\n{output[-3000:]}")
    assert (folder / "node_modules" / "@exceptionless" / "node" / "package.json").exists(), output
    return folder


def installed_version(folder: Path) -> str:
    manifest = folder / "node_modules" / "@exceptionless" / "node" / "package.json"
    return str(json.loads(manifest.read_text())["version"])


# -- one run of the client against one collector ----------------------------------------------


class Run:
    """What the script reported, and the collector it talked to."""

    def __init__(self, collector: Collector, http: Client, report: dict[str, Any], stderr: str):
        self.collector = collector
        self.http = http
        self.report = report
        self.stderr = stderr

    def api(self, path: str, **params: Any) -> Any:
        response = self.http.get(path, self.collector.user_token, params=params)
        assert response.status_code == 200, (path, response.status_code, response.text)
        return response.json()

    def events(self) -> list[dict[str, Any]]:
        return list(self.api("/api/v2/events", limit=100))

    def one(self, type_: str) -> dict[str, Any]:
        found = [event for event in self.events() if event["type"] == type_]
        assert len(found) == 1, (
            type_,
            [(e["type"], e["source"], e["message"]) for e in self.events()],
        )
        return found[0]


@pytest.fixture(scope="module")
def run(node_client: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    with Collector() as collector:
        http = Client(collector)
        try:
            # A setting the client must fetch and obey: logs of this source are switched off.
            saved = http.request(
                "POST",
                f"/api/v2/projects/{collector.project_id}/config",
                collector.user_token,
                params={"key": f"@@log:{MUTED_SOURCE}"},
                data=json.dumps({"value": "Off"}).encode(),
                headers={"Content-Type": "application/json"},
            )
            assert saved.status_code == 200, saved.text
            # Its own working directory: the client keeps settings in ./.exceptionless.
            workdir = tmp_path_factory.mktemp("node-run")
            env = {
                key: value
                for key, value in os.environ.items()
                if not key.lower().endswith("_proxy") and not key.startswith("NODE_OPTIONS")
            }
            env["EXCEPTIONLESS_SERVER_URL"] = collector.url
            env["EXCEPTIONLESS_API_KEY"] = collector.project_token
            done = subprocess.run(
                [shutil.which("node") or "node", str(node_client / "send.mjs")],
                cwd=workdir,
                env=env,
                capture_output=True,
                text=True,
                timeout=RUN_TIMEOUT,
                stdin=subprocess.DEVNULL,
            )
            assert done.returncode == 0, done.stderr[-4000:]
            lines = [line for line in done.stdout.splitlines() if line.strip()]
            assert lines, ("the script printed nothing", done.stderr[-4000:])
            report = json.loads(lines[-1])
            collector.wait_for_events(5, timeout=10)
            yield Run(collector, http, report, done.stderr)
        finally:
            http.close()


# -- the client was configured for this machine only -------------------------------------------


def test_the_installed_client_is_the_pinned_3x(node_client: Path) -> None:
    pinned = json.loads((NODE_CLIENT / "package.json").read_text())["dependencies"][PACKAGE]
    version = installed_version(node_client)
    assert version == pinned
    assert version.startswith("3.")


def test_every_request_went_to_the_collector_and_succeeded(run: Run) -> None:
    report = run.report
    # The client's defaults are the hosted service; the script replaced all three.
    assert report["defaults"]["serverUrl"].startswith("https://")
    for key in ("server_url", "config_server_url", "heartbeat_server_url"):
        assert report[key] == run.collector.url, key
    requests = report["requests"]
    assert requests, "the client made no request"
    for request in requests:
        assert request["url"].startswith(run.collector.url + "/api/v2/"), request
        assert request["status"] in (200, 202), request
        assert request["user_agent"] == report["client_version"]
    made = [(r["method"], r["url"].split("?")[0].removeprefix(run.collector.url)) for r in requests]
    assert ("POST", "/api/v2/events") in made
    assert ("GET", "/api/v2/projects/config") in made
    assert ("GET", "/api/v2/events/session/heartbeat") in made
    assert (
        "POST",
        f"/api/v2/events/by-ref/{report['error_reference_id']}/user-description",
    ) in made


def test_the_collector_answered_the_config_and_heartbeat_requests(run: Run) -> None:
    answered = [(r.method, r.path.split("?")[0], r.status) for r in run.collector.requests]
    assert ("GET", "/api/v2/projects/config", 200) in answered
    heartbeats = [r for r in answered if r[1] == "/api/v2/events/session/heartbeat"]
    # One heartbeat and one close by hand (the client closes again when the process exits).
    assert len(heartbeats) >= 2 and all(status == 200 for _, _, status in heartbeats)
    posts = [r for r in answered if r[:2] == ("POST", "/api/v2/events")]
    assert len(posts) == 2 and all(status == 202 for _, _, status in posts)


# -- what was stored ---------------------------------------------------------------------------


def test_the_log_is_stored_with_source_message_and_level(run: Run) -> None:
    logs = [event for event in run.events() if event["type"] == "log"]
    assert [(e["source"], e["message"]) for e in logs] == [
        ("interop.node", "hello from the node client")
    ]
    (log,) = logs
    assert log["data"]["@level"] == "Info"
    assert log["data"]["@user"] == USER
    assert log["data"]["@ref:session"] == run.report["session_id"]
    assert log["data"]["@environment"]["runtime_version"].startswith("v")


def test_the_error_is_stored_with_its_frames_and_message(run: Run) -> None:
    error = run.one("error")
    assert error["message"] == "boom from the node client"
    assert error["reference_id"] == run.report["error_reference_id"]
    details = error["data"].get("@error") or error["data"].get("@simple_error")
    assert details is not None, sorted(error["data"])
    assert details["type"] == "TypeError"
    assert details["message"] == "boom from the node client"
    if "@error" in error["data"]:
        frames = details["stack_trace"]
        assert isinstance(frames, list) and frames
        assert any(str(frame.get("file_name", "")).endswith("send.mjs") for frame in frames)


def test_the_feature_usage_is_stored_with_the_feature_as_source(run: Run) -> None:
    usage = run.one("usage")
    assert usage["source"] == "interop-feature"
    assert usage["data"]["@ref:session"] == run.report["session_id"]


def test_the_404_is_stored_with_the_path_as_source(run: Run) -> None:
    not_found = run.one("404")
    assert not_found["source"] == "/interop/missing-page"


def test_the_session_start_is_stored_with_the_session_id(run: Run) -> None:
    session = run.one("session")
    assert session["reference_id"] == run.report["session_id"]
    assert re.fullmatch(r"[0-9a-f]{32}", session["reference_id"])
    assert session["data"]["@user"] == USER


def test_the_users_description_is_merged_into_the_error(run: Run) -> None:
    reference_id = run.report["error_reference_id"]
    assert re.fullmatch(r"[0-9a-f]{10}", reference_id)
    (event,) = run.api(f"/api/v2/events/by-ref/{reference_id}")  # a list, as the service
    assert event["type"] == "error"
    assert event["data"]["@user_description"] == DESCRIPTION


def test_the_servers_settings_reach_the_client(run: Run) -> None:
    config = run.http.get("/api/v2/projects/config", run.collector.project_token)
    assert config.status_code == 200
    version = config.json()["version"]
    # The first 202 told the client of a newer settings version; it fetched them at once.
    assert run.report["settings_after_first_post"] == {
        "version": version,
        "settings": {f"@@log:{MUTED_SOURCE}": "Off"},
    }
    fetched = [r for r in run.report["requests"] if "/api/v2/projects/config" in r["url"]]
    assert fetched and all(r["status"] == 200 for r in fetched)
    # ... and obeyed them: the log of the muted source never left the client.
    assert all(event["source"] != MUTED_SOURCE for event in run.events())
    assert "Cancelling log event due to minimum log level" in run.stderr


def test_submission_client_comes_from_the_user_agent(run: Run) -> None:
    version = installed_version_from_agent(run.report["client_version"])
    for event in run.events():
        assert event["data"].get("@submission_client") == {
            "user_agent": run.report["client_version"],
            "version": version,
        }, event["type"]


def installed_version_from_agent(agent: str) -> str:
    name, _, version = agent.partition("/")
    assert name == "exceptionless-js" and version, agent
    return version


# -- the session: heartbeat and end --------------------------------------------------------------


def test_the_session_is_listed_with_its_heartbeat_end_and_duration(run: Run) -> None:
    response = run.http.get(
        "/api/v2/events/sessions", run.collector.user_token, params={"limit": 100}
    )
    assert response.status_code == 200, (response.status_code, response.text)
    (session,) = response.json()
    assert session["type"] == "session"
    assert session["reference_id"] == run.report["session_id"]
    data = session["data"]
    assert data.get("sessionend"), data  # closed by the client's heartbeat with close=true
    assert data.get("@heartbeats", 0) >= 1
    # Between the start and the end the script slept twice 1.1 s.
    assert session["value"] is not None and 2.0 <= float(session["value"]) < RUN_TIMEOUT


# -- the dashboard -------------------------------------------------------------------------------


def _dashboard(run: Run, path: str, **params: Any) -> str:
    response = run.http.get(path, params=params)
    assert response.status_code == 200, (path, response.status_code, response.text[:500])
    assert response.headers["Content-Type"].startswith("text/html")
    return unescape(response.text)


def test_the_dashboard_shows_what_the_client_sent(run: Run) -> None:
    page = _dashboard(run, "/events", refresh=0)
    assert "hello from the node client" in page
    assert "interop-feature" in page
    assert "/interop/missing-page" in page
    assert "boom from the node client" in page
    assert "this log is switched off" not in page
    sessions = _dashboard(run, "/sessions", refresh=0)
    assert USER["name"] in sessions or USER["identity"] in sessions
    error = run.one("error")
    detail = _dashboard(run, f"/events/{error['id']}")
    assert DESCRIPTION["description"] in detail
    assert DESCRIPTION["email_address"] in detail
