"""``eventlog login``, ``eventlog settings``, project paging like the real server and the
advice given when the server refuses to create a token: in-process against a collector on
127.0.0.1 (and, for the real server's exact refusal, ``responses``)."""

from __future__ import annotations

import io
import json
import shlex
import subprocess
import sys

import pytest
import responses

from eventlog_handler import Client
from eventlog_handler._version import __version__
from eventlog_handler.cli import _main as cli
from eventlog_handler.collector import Collector
from tests.cli.conftest import Run
from tests.support.waits import poll_until


class Terminal(io.StringIO):
    """A stdin that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def stdin(monkeypatch: pytest.MonkeyPatch, text: str, terminal: bool = False) -> None:
    monkeypatch.setattr(sys, "stdin", (Terminal if terminal else io.StringIO)(text))


def server(collector: Collector) -> list[str]:
    return ["--server-url", collector.url]


# -- login ------------------------------------------------------------------------------------


def test_login_prints_a_session_token_that_works(
    run: Run, collector: Collector, monkeypatch: pytest.MonkeyPatch
) -> None:
    stdin(monkeypatch, collector.admin_password + "\n")

    result = run("login", "--email", collector.admin_email, server(collector))

    assert result.code == 0, result.err
    token = result.out.strip()
    assert result.out == token + "\n"  # only the token on stdout: $(eventlog login ...)
    assert "EVENTLOG_USER_TOKEN" in result.err
    assert collector.admin_password not in result.out + result.err
    listed = run("projects", "--json", "--token", token, server(collector))
    assert listed.code == 0, listed.err
    assert collector.project_id in {row["id"] for row in json.loads(listed.out)}


def test_login_export_line(run: Run, collector: Collector, monkeypatch) -> None:
    stdin(monkeypatch, collector.admin_password)  # no newline at the end: still read

    result = run("login", "--email", collector.admin_email, "--export", server(collector))

    assert result.code == 0, result.err
    [line] = result.out.splitlines()
    words = shlex.split(line)
    assert words[0] == "export"
    name, _, token = words[1].partition("=")
    assert name == "EVENTLOG_USER_TOKEN"
    assert Client(collector.url, token).list_projects()


def test_login_asks_on_a_terminal(run: Run, collector: Collector, monkeypatch) -> None:
    stdin(monkeypatch, collector.admin_email + "\n", terminal=True)
    prompts: list[str] = []

    def fake_getpass(prompt: str = "Password: ") -> str:
        prompts.append(prompt)
        return collector.admin_password

    monkeypatch.setattr(cli.getpass, "getpass", fake_getpass)

    result = run("login", server(collector))

    assert result.code == 0, result.err
    assert prompts == ["Password: "]
    assert result.err.startswith("Email: ")  # the prompt goes to stderr, not into $(...)
    assert len(result.out.split()) == 1


def test_wrong_password(run: Run, collector: Collector, monkeypatch) -> None:
    stdin(monkeypatch, "not-the-password\n")

    result = run("login", "--email", collector.admin_email, server(collector))

    message = result.error_message("not-the-password")
    assert message.startswith(f"login refused for {collector.admin_email}")
    assert "wrong email or password" in message


def test_login_without_email_when_stdin_is_not_a_terminal(run: Run, collector, monkeypatch):
    stdin(monkeypatch, "secret-password\n")

    message = run("login", server(collector)).error_message("secret-password")

    assert "--email" in message


def test_login_with_an_empty_password(run: Run, collector: Collector, monkeypatch) -> None:
    stdin(monkeypatch, "\n")

    message = run("login", "--email", collector.admin_email, server(collector)).error_message()

    assert "no password" in message


def test_the_password_is_never_a_flag(run: Run, collector: Collector) -> None:
    result = run("login", "--email", "a@b", "--password", "hunter2", server(collector))

    assert result.code == 2
    assert "unrecognized arguments" in result.err


def test_login_to_a_stopped_server(run: Run, closed_url: str, monkeypatch) -> None:
    stdin(monkeypatch, "pw\n")

    message = run("login", "--email", "a@b", "--server-url", closed_url).error_message("pw")

    assert "refused" in message and "is the server running?" in message


def test_login_in_a_process(collector: Collector, tmp_path) -> None:
    """The installed command with the password piped in, as in a script."""
    command = [sys.executable, "-m", "eventlog_handler.cli"]
    result = subprocess.run(
        [*command, "login", "--email", collector.admin_email, "--server-url", collector.url],
        input=collector.admin_password + "\n",
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "NO_PROXY": "127.0.0.1"},
    )
    assert result.returncode == 0, result.stderr
    token = result.stdout.strip()
    assert Client(collector.url, token).list_projects()


# -- token creation refused -------------------------------------------------------------------


def test_real_server_refusal_says_to_log_in(run: Run) -> None:
    """The real server answers any API token this way; the command says what to do."""
    url = "http://127.0.0.1:5999"
    project_id = "537650f3b77efe23a47914f3"
    token = "Tk7sQ2mX9pLr4VbN8cYw1ZdF6gHj3KeA5uMo0PiR"
    with responses.RequestsMock() as mocked:
        mocked.add(
            responses.POST,
            f"{url}/api/v2/projects/{project_id}/tokens",
            status=403,
            json={"title": "Token authentication cannot create tokens.", "status": 403},
            content_type="application/problem+json",
        )
        result = run("token", "create", project_id, "--server-url", url, "--token", token)

    message = result.error_message(token)
    assert "only for a login session" in message
    assert "Token authentication cannot create tokens." in message
    assert "eventlog login" in message and "EVENTLOG_USER_TOKEN" in message


def test_scope_refusal_also_mentions_login(run: Run, collector: Collector) -> None:
    token = collector.project_token
    result = run("token", "create", collector.project_id, server(collector), "--token", token)

    message = result.error_message(token)
    assert "scope" in message and "eventlog login" in message


# -- projects like the real server ------------------------------------------------------------


def project_pages(collector: Collector) -> list:
    # the collector records a request just after answering it: give it a moment
    return poll_until(
        lambda: [info for info in collector.request_log if info.path == "/api/v2/projects"],
        bool,
        5,
        step=0.01,
    )


def test_projects_asks_for_pages_of_1000(run: Run, collector: Collector, user_args) -> None:
    for index in range(120):
        collector.create_project(f"Project {index:03d}")
    collector.clear_requests()

    result = run("projects", "--json", user_args)

    assert result.code == 0, result.err
    assert result.err == ""
    assert len(json.loads(result.out)) == 121
    [page] = project_pages(collector)
    assert "limit=1000" in page.query and "page=1" in page.query
    assert page.headers["user-agent"] == f"eventlog-handler/{__version__}"


def test_projects_says_when_rows_are_missing(run: Run, collector: Collector, user_args) -> None:
    """Past 1,000 rows the server gives no next page: the command lists what it got and says
    on one stderr line how many are missing."""
    for index in range(1_049):
        collector.create_project(f"Project {index:04d}")

    result = run("projects", user_args)

    assert result.code == 0, result.err
    assert result.out.splitlines()[-1] == "1000 project(s)"
    [line] = result.err.splitlines()
    assert line == (
        "eventlog: warning: the server counts 1050 projects but gave 1000: 50 are missing "
        "(the server serves no page past 1,000 rows)"
    )


# -- settings ---------------------------------------------------------------------------------


def test_settings_set_get_delete(run: Run, collector: Collector, user_args) -> None:
    pid = collector.project_id
    before = json.loads(run("settings", "get", pid, "--json", user_args).out)

    assert run("settings", "set", pid, "@@log:shop.*", "Warn", user_args).out == (
        "set @@log:shop.* = Warn\n"
    )
    assert run("settings", "set", pid, "@@error:*Timeout*", "false", user_args).code == 0
    assert run("settings", "set", pid, "@@DataExclusions", "*card*,ssn", user_args).code == 0

    after = json.loads(run("settings", "get", pid, "--json", user_args).out)
    assert after["version"] > before["version"]
    assert after["settings"]["@@log:shop.*"] == "Warn"
    assert after["settings"]["@@error:*Timeout*"] == "false"
    assert after["settings"]["@@DataExclusions"] == "*card*,ssn"

    table = run("settings", "get", pid, user_args)
    assert table.code == 0, table.err
    lines = table.out.splitlines()
    assert lines[0].split() == ["KEY", "VALUE"]
    assert "@@log:shop.*" in table.out and "*card*,ssn" in table.out
    assert lines[-1] == f"{len(after['settings'])} setting(s), version {after['version']}"

    assert run("settings", "delete", pid, "@@log:shop.*", user_args).out == (
        "deleted @@log:shop.*\n"
    )
    final = json.loads(run("settings", "get", pid, "--json", user_args).out)
    assert "@@log:shop.*" not in final["settings"]
    assert final["version"] > after["version"]


def test_settings_as_the_handler_sees_them(run: Run, collector: Collector, user_args) -> None:
    """Without a project id, the project of an API key: what ``GET /projects/config`` gives."""
    run("settings", "set", collector.project_id, "@@log:*", "Info", user_args)

    result = run(
        "settings", "get", "--json", "--api-key", collector.project_token, server(collector)
    )

    assert result.code == 0, result.err
    assert json.loads(result.out)["settings"]["@@log:*"] == "Info"
    assert result.out == run("settings", "get", collector.project_id, "--json", user_args).out


def test_settings_get_needs_a_project(run: Run, collector: Collector) -> None:
    message = run("settings", "get", server(collector)).error_message()

    assert "PROJECT_ID" in message and "EVENTLOG_API_KEY" in message


def test_a_value_that_is_not_a_level_is_stored_with_a_warning(
    run: Run, collector: Collector, user_args
) -> None:
    result = run("settings", "set", collector.project_id, "@@log:shop", "Verbose", user_args)

    assert result.code == 0, result.err
    [warning] = result.err.splitlines()
    assert warning.startswith("eventlog: warning: 'Verbose' is not a level")
    assert warning.endswith("(stored)")
    config = Client(collector.url, collector.user_token).project_config(collector.project_id)
    assert config.settings["@@log:shop"] == "Verbose"


def test_a_key_without_its_marks_is_stored_with_a_warning_and_a_missing_one_is_not_deleted(
    run: Run, collector: Collector, user_args
) -> None:
    """``log:shop.*`` (the ``@@`` left out) was stored without a word, and the package never
    read it; deleting a key that is not set (a typo) said "deleted"."""
    pid = collector.project_id
    result = run("settings", "set", pid, "log:shop.*", "Warn", user_args)
    assert result.code == 0, result.err
    assert result.err.splitlines() == [
        "eventlog: warning: log:shop.* is stored, but the package reads @@log:shop.*"
    ]
    before = json.loads(run("settings", "get", pid, "--json", user_args).out)
    result = run("settings", "delete", pid, "@@log:shop.x", user_args)
    assert (result.code, result.out) == (0, "@@log:shop.x is not set: nothing deleted\n")
    after = json.loads(run("settings", "get", pid, "--json", user_args).out)
    assert after == before


@pytest.mark.parametrize(("key", "value"), [("@@log:*", " "), (" ", "Warn")])
def test_blank_keys_and_values_are_refused(run: Run, collector, user_args, key, value) -> None:
    message = run("settings", "set", collector.project_id, key, value, user_args).error_message()

    assert "blank" in message


def test_a_project_token_cannot_edit_settings(run: Run, collector: Collector) -> None:
    token = collector.project_token
    result = run(
        "settings",
        "set",
        collector.project_id,
        "@@log:*",
        "Warn",
        server(collector),
        "--token",
        token,
    )

    assert "403" in result.error_message(token)


def test_settings_of_an_unknown_project(run: Run, collector: Collector, user_args) -> None:
    missing = "0123456789abcdef01234567"

    message = run("settings", "get", missing, user_args).error_message(collector.user_token)

    assert "404" in message


def test_settings_without_action_is_a_usage_error(run: Run) -> None:
    result = run("settings")

    assert result.code == 2
    assert "usage:" in result.err
