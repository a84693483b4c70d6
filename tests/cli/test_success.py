"""The command's success paths, in-process against a collector on 127.0.0.1."""

from __future__ import annotations

import json
import re

import pytest

from eventlog_handler import Client
from eventlog_handler._version import __version__
from eventlog_handler.collector import Collector
from tests.cli.conftest import Run

#: What the service makes of the package's User-Agent (``eventlog-handler/<version>``).
SUBMISSION_CLIENT = {"user_agent": f"eventlog-handler/{__version__}", "version": __version__}

# -- projects ---------------------------------------------------------------------------------


def test_projects_table_lists_every_project(run: Run, collector: Collector, user_args) -> None:
    extra = [collector.create_project(name) for name in ("Billing", "Web Shop", "Zeta API")]

    result = run("projects", user_args)

    assert result.code == 0, result.err
    assert result.err == ""
    lines = result.out.splitlines()
    assert lines[0].split() == ["ID", "NAME", "ORGANIZATION", "EVENTS", "CREATED"]
    assert lines[-1] == "4 project(s)"
    rows = lines[1:-1]
    assert len(rows) == 4
    ids = {row.split()[0] for row in rows}
    assert ids == {collector.project_id, *(project["id"] for project in extra)}
    for name in ("Local Project", "Billing", "Web Shop", "Zeta API"):
        assert sum(name in row for row in rows) == 1
    # the columns line up: every row's NAME starts where the header's does
    name_column = lines[0].index("NAME")
    for project in extra:
        (row,) = [row for row in rows if row.startswith(project["id"])]
        assert row[name_column:].startswith(project["name"])
        assert "Local Organization" in row
        assert re.search(r"\b\d{4}-\d\d-\d\d \d\d:\d\d$", row)


def test_projects_json(run: Run, collector: Collector, user_args) -> None:
    other = collector.create_project("Second")
    third = collector.create_project("Third")
    Client(collector.url, collector.project_token).submit({"type": "log", "message": "one"})
    collector.wait_for_events(1)

    result = run("projects", "--json", user_args)

    assert result.code == 0, result.err
    assert result.err == ""
    rows = json.loads(result.out)
    assert isinstance(rows, list)
    by_id = {row["id"]: row for row in rows}
    assert len(rows) == 3
    assert set(by_id) == {collector.project_id, other["id"], third["id"]}
    assert {row["name"] for row in rows} == {"Local Project", "Second", "Third"}
    local = by_id[collector.project_id]
    assert set(local) == {
        "id",
        "name",
        "organization_id",
        "organization_name",
        "created_utc",
        "event_count",
        "stack_count",
    }
    assert local["organization_id"] == collector.organization_id
    assert local["organization_name"] == "Local Organization"
    assert local["event_count"] == 1
    assert by_id[other["id"]]["event_count"] == 0
    assert local["created_utc"].endswith("+00:00")


def test_projects_lists_only_the_tokens_organization(
    run: Run, collector: Collector, user_args
) -> None:
    other_org = collector.create_organization("Someone Else")
    collector.create_project("Not Mine", other_org)

    result = run("projects", "--json", user_args)

    assert result.code == 0, result.err
    assert [row["name"] for row in json.loads(result.out)] == ["Local Project"]


# -- token create ----------------------------------------------------------------------------


def test_token_create_prints_a_working_project_token(
    run: Run, collector: Collector, user_args
) -> None:
    project = collector.create_project("Mobile")

    result = run("token", "create", project["id"], user_args)

    assert result.code == 0, result.err
    token = result.out.strip()
    assert result.out == token + "\n"
    assert re.fullmatch(r"\S{40}", token)
    assert token not in (collector.user_token, collector.project_token)
    assert project["id"] in result.err
    assert "client" in result.err
    assert token not in result.err

    Client(collector.url, token).submit({"type": "log", "message": "from the new token"})
    (event,) = collector.wait_for_events(1, project_id=project["id"])
    assert event["message"] == "from the new token"
    assert collector.events(project_id=collector.project_id) == []


def test_token_create_json(run: Run, collector: Collector, user_args) -> None:
    result = run("token", "create", collector.project_id, "--json", user_args)

    assert result.code == 0, result.err
    assert result.err == ""
    created = json.loads(result.out)
    assert created["project_id"] == collector.project_id
    assert created["scopes"] == ["client"]
    assert len(created["id"]) == 40

    Client(collector.url, created["id"]).submit({"type": "log", "message": "json token"})
    assert collector.wait_for_events(1)[0]["message"] == "json token"


def test_token_create_with_user_scope(run: Run, collector: Collector, user_args) -> None:
    result = run("token", "create", collector.project_id, "--scope", "user", "--json", user_args)

    assert result.code == 0, result.err
    created = json.loads(result.out)
    assert sorted(created["scopes"]) == ["client", "user"]
    # a user-scoped token can list projects, where a client token cannot
    listed = run("projects", "--server-url", collector.url, "--token", created["id"])
    assert listed.code == 0, listed.err
    assert collector.project_id in listed.out


def test_token_create_plain_output_names_the_scopes(
    run: Run, collector: Collector, user_args
) -> None:
    result = run("token", "create", collector.project_id, "--scope", "user", user_args)

    assert result.code == 0, result.err
    assert result.err.strip() == f"project {collector.project_id}, scopes user, client"


# -- send -------------------------------------------------------------------------------------


def test_send_stores_a_log_event(run: Run, collector: Collector) -> None:
    result = run(
        "send",
        "Disk space is low",
        "--level",
        "Warn",
        "--tag",
        "a",
        "--tag",
        "disk",
        "--source",
        "ops.check",
        "--server-url",
        collector.url,
        "--api-key",
        collector.project_token,
    )

    assert result.code == 0, result.err
    assert result.err == ""
    (event,) = collector.wait_for_events(1)
    assert event["type"] == "log"
    assert event["message"] == "Disk space is low"
    assert event["data"] == {"@level": "Warn", "@submission_client": SUBMISSION_CLIENT}
    assert event["tags"] == ["a", "disk"]
    assert event["source"] == "ops.check"
    assert event["project_id"] == collector.project_id
    assert result.out == f"sent log event {event['reference_id']}\n"
    assert collector.events(level="warn") == [event]


def test_send_defaults(run: Run, collector: Collector) -> None:
    result = run(
        "send", "hello", "--server-url", collector.url, "--api-key", collector.project_token
    )

    assert result.code == 0, result.err
    (event,) = collector.wait_for_events(1)
    assert event["data"] == {"@level": "Info", "@submission_client": SUBMISSION_CLIENT}
    assert event["source"] == "eventlog.cli"
    assert event["tags"] == []


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        ("warn", "Warn"),
        ("WARNING", "Warn"),
        ("error", "Error"),
        ("critical", "Fatal"),
        ("Trace", "Trace"),
        ("debug", "Debug"),
        ("fatal", "Fatal"),
    ],
)
def test_send_level_names(run: Run, collector: Collector, given: str, stored: str) -> None:
    result = run(
        "send",
        "x",
        "--level",
        given,
        "--server-url",
        collector.url,
        "--api-key",
        collector.project_token,
    )

    assert result.code == 0, result.err
    assert collector.wait_for_events(1)[0]["data"]["@level"] == stored


# -- settings from the environment ------------------------------------------------------------


def test_projects_settings_from_env(
    run: Run, collector: Collector, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVENTLOG_SERVER_URL", collector.url)
    monkeypatch.setenv("EVENTLOG_USER_TOKEN", collector.user_token)

    result = run("projects")

    assert result.code == 0, result.err
    assert collector.project_id in result.out


def test_flags_win_over_env(
    run: Run, collector: Collector, closed_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVENTLOG_SERVER_URL", closed_url)
    monkeypatch.setenv("EVENTLOG_USER_TOKEN", "e" * 40)

    result = run("projects", "--server-url", collector.url, "--token", collector.user_token)

    assert result.code == 0, result.err
    assert collector.project_id in result.out


def test_env_token_with_server_url_flag(
    run: Run, collector: Collector, closed_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVENTLOG_SERVER_URL", closed_url)
    monkeypatch.setenv("EVENTLOG_USER_TOKEN", collector.user_token)

    result = run("token", "create", collector.project_id, "--server-url", collector.url)

    assert result.code == 0, result.err
    assert len(result.out.strip()) == 40


def test_send_settings_from_env(
    run: Run, collector: Collector, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVENTLOG_SERVER_URL", collector.url)
    monkeypatch.setenv("EVENTLOG_API_KEY", collector.project_token)

    result = run("send", "from the environment")

    assert result.code == 0, result.err
    assert collector.wait_for_events(1)[0]["message"] == "from the environment"


def test_send_api_key_flag_wins_over_env(
    run: Run, collector: Collector, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = collector.create_project("Other")
    other_token = collector.create_token(other["id"])
    monkeypatch.setenv("EVENTLOG_SERVER_URL", collector.url)
    monkeypatch.setenv("EVENTLOG_API_KEY", collector.project_token)

    result = run("send", "to the other project", "--api-key", other_token)

    assert result.code == 0, result.err
    (event,) = collector.wait_for_events(1)
    assert event["project_id"] == other["id"]


def test_user_token_env_is_not_used_as_api_key(
    run: Run, collector: Collector, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVENTLOG_SERVER_URL", collector.url)
    monkeypatch.setenv("EVENTLOG_USER_TOKEN", collector.user_token)

    result = run("send", "no key")

    message = result.error_message(collector.user_token)
    assert "EVENTLOG_API_KEY" in message
    assert collector.requests == []
