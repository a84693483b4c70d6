"""What ``eventlog login`` and ``eventlog demo`` tell a person is true, run as processes: a
refused login names the lockout the local collector really applies (10 failures of an account
in 15 minutes, then 429 with ``Retry-After``, the right password too) and says when to try
again; the demo's counts add up and no cell of its event table is left unexplained."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import requests

from eventlog_handler.collector import Collector
from tests.support.constants import REPO

WRONG = "not-the-password"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVENTLOG_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["NO_PROXY"] = "127.0.0.1"
    env.update(extra)
    return env


def _login(collector: Collector, password: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "eventlog_handler.cli", "login", "--email", collector.admin_email],
        input=password + "\n",
        env=_env(EVENTLOG_SERVER_URL=collector.url),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=str(REPO),
    )


def test_a_refused_login_says_what_the_collector_really_does(collector: Collector) -> None:
    session = requests.Session()
    session.trust_env = False
    for _ in range(9):  # 9 failures; the command makes the 10th
        answer = session.post(
            f"{collector.url}/api/v2/auth/login",
            json={"email": collector.admin_email, "password": WRONG},
            timeout=10,
        )
        assert answer.status_code == 401
    session.close()

    tenth = _login(collector, WRONG)

    assert tenth.returncode == 1 and tenth.stdout == "", tenth.stderr
    assert tenth.stderr.startswith(f"eventlog: error: login refused for {collector.admin_email}")
    assert "wrong email or password" in tenth.stderr
    assert "5 attempts" not in tenth.stderr  # the collector allows 10, as the README says
    assert "after 10 failures in 15 minutes" in tenth.stderr, tenth.stderr
    assert WRONG not in tenth.stderr

    # The 11th, with the right password: refused (429) until failures age out, and said so.
    eleventh = _login(collector, collector.admin_password)

    assert eleventh.returncode == 1 and eleventh.stdout == "", eleventh.stderr
    lines = eleventh.stderr.splitlines()
    assert len(lines) == 1, eleventh.stderr
    assert "wrong email or password" not in lines[0]
    assert "429" in lines[0] and "too many failed logins" in lines[0], lines[0]
    when = re.search(r"try again in (\d+) minutes \((\d+) s\)", lines[0])
    assert when is not None, lines[0]
    assert 0 < int(when.group(2)) <= 15 * 60 and int(when.group(1)) == 15
    assert collector.admin_password not in eleventh.stderr


def test_the_demos_counts_add_up_and_every_level_is_shown(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "eventlog_handler.cli", "demo"],
        env=_env(TMPDIR=str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(tmp_path),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout

    received = re.search(
        r"^The (\d+) event\(s\) it received \((\d+) logged through the handler, "
        r"(\d+) posted with Client\.submit\(\)\):$",
        out,
        re.MULTILINE,
    )
    assert received is not None, out
    total, logged, posted = (int(group) for group in received.groups())
    stats = re.search(r"captured (\d+), delivered (\d+), dropped (\d+)\.$", out, re.MULTILINE)
    assert stats is not None, out
    captured, delivered, dropped = (int(group) for group in stats.groups())
    assert total == logged + posted == delivered + posted, out
    assert captured == delivered and dropped == 0, out

    # The events' table: no row with an empty LEVEL; a plain message says what it is.
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("TYPE   LEVEL"))
    header = lines[start]
    level_at, source_at = header.index("LEVEL"), header.index("SOURCE")
    rows = lines[start + 1 : start + 1 + total]
    assert len(rows) == total, out
    for row in rows:
        assert row[level_at:source_at].strip(), f"an empty LEVEL: {row!r}"
    (message,) = [row for row in rows if "Disk space is low" in row]
    assert "(message)" in message
    assert any(line.startswith("(message):") and "Client.submit()" in line for line in lines), out
