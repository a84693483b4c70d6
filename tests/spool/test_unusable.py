"""A spool directory that can't be used is said once, and nothing claims events are on disk."""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

from tests.support.constants import REPO
from tests.support.processes import child_env
from tests.support.waits import dead_port

PROGRAM = """
import logging, sys
import eventlog_handler
handle = eventlog_handler.setup(spool_path=sys.argv[1], shutdown_timeout=0.5, outage_notice=0)
log = logging.getLogger("app")
for i in range(100):
    log.warning("event %d", i)
handle.flush(1.5)
print(handle.stats()["spooled"])
"""


def run(spool: Path) -> subprocess.CompletedProcess[str]:
    url = f"http://127.0.0.1:{dead_port()}"  # every post is refused
    return subprocess.run(
        [sys.executable, "-c", PROGRAM, str(spool)],
        env=child_env(url),
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_spool_path_that_cannot_be_created_is_said_once(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    spool = blocker / "spool"
    done = run(spool)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if "spool directory" in line]
    assert len(lines) == 1, done.stderr
    assert str(spool) in lines[0] and "memory only" in lines[0]
    assert "kept on disk" not in done.stderr and "kept in the spool" not in done.stderr
    assert done.stdout.strip() == "0"
    assert "100 event(s) could not be sent" in done.stderr


def test_a_spool_directory_open_to_others_is_tightened(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    spool.mkdir(mode=0o755)
    spool.chmod(0o755)
    done = run(spool)
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(spool.stat().st_mode) == 0o700
    assert "kept in the spool" in done.stderr


def test_a_spool_path_from_the_environment_that_is_a_file_is_said_once(tmp_path: Path) -> None:
    """``EVENTLOG_SPOOL_PATH`` names a file: the program runs on, memory-only, and says so
    once (it ended with a ValueError from ``setup()``)."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    url = f"http://127.0.0.1:{dead_port()}"
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM.replace("spool_path=sys.argv[1], ", ""), "unused"],
        env=child_env(url, EVENTLOG_SPOOL_PATH=str(blocker)),
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if "spool directory" in line]
    assert len(lines) == 1, done.stderr
    assert str(blocker) in lines[0] and "not a directory" in lines[0], lines
    assert "memory only" in lines[0]
    assert done.stdout.strip() == "0"
    assert "100 event(s) could not be sent" in done.stderr
