"""Permissions that keep a program from its spool are said on stderr: another user's file left
in the directory, and a directory that stops being writable while the program runs.

The programs run as root without the capabilities that let root ignore permissions
(``setpriv``), so that a file's owner and mode bind them as they bind any other user."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from eventlog_handler.delivery._spool import SUFFIX, Spool, target_tag
from tests.support.constants import API_KEY, REPO
from tests.support.faultserver import FaultServer
from tests.support.processes import child_env

#: Root without the capabilities that override file permissions.
AS_A_USER = [
    "setpriv",
    "--bounding-set=-dac_override,-dac_read_search,-fowner",
    "--inh-caps=-dac_override,-dac_read_search,-fowner",
]


def as_a_user(tmp_path: Path) -> list[str]:
    """The command prefix, or the test skipped where it can't bind the program."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv(1) to run a program bound by file permissions")
    probe = tmp_path / "probe"
    probe.write_text("")
    probe.chmod(0o600)
    os.chown(probe, 65534, 65534)
    done = subprocess.run(
        [*AS_A_USER, sys.executable, "-c", f"open({str(probe)!r}, 'r+')"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    probe.unlink()
    if "PermissionError" not in done.stderr:
        pytest.skip(f"setpriv does not bind the program here: {done.returncode} {done.stderr!r}")
    return AS_A_USER


def run(prefix: list[str], source: str, url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*prefix, sys.executable, "-c", textwrap.dedent(source), *args],
        env=child_env(url),
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=120,
    )


OTHER_USERS = """
import logging, sys, time
import eventlog_handler
logging.getLogger().addHandler(logging.NullHandler())  # no console: stderr is the subject
handle = eventlog_handler.setup(spool_path=sys.argv[1], spool_scan_interval=0.2)
logging.getLogger("app").warning("mine")
print("flushed", handle.flush(10), flush=True)
time.sleep(1.0)  # five scans more
"""


def test_a_file_of_another_user_is_said_once_and_left(tmp_path: Path) -> None:
    """An ended process of another user left its file (``0600``, its own): this program can't
    open its lock. It was skipped without a word; the README says such a file stays, is said
    once, and is tried again at each scan."""
    prefix = as_a_user(tmp_path)
    spool = tmp_path / "spool"
    theirs = Spool(spool, target=target_tag(API_KEY))
    own = theirs.own()
    own.append([(time.time(), False, b'{"type":"log","message":"theirs"}')])
    left = own.path
    theirs.close()
    for path in spool.iterdir():
        os.chown(path, 65534, 65534)
    with FaultServer() as server:
        done = run(prefix, OTHER_USERS, server.url, str(spool))
        messages = [event["message"] for event in server.accepted]
    assert done.returncode == 0, done.stderr
    assert "flushed True" in done.stdout, done.stdout + done.stderr
    assert messages == ["mine"]
    said = [line for line in done.stderr.splitlines() if left.name in line]
    assert len(said) == 1, done.stderr
    assert "Permission denied" in said[0] and "stays on disk" in said[0], said
    assert left.exists() and Path(f"{left}.lock").exists()
    assert [path.name for path in spool.glob(f"*{SUFFIX}")] == [left.name]


UNWRITABLE = """
import logging, os, sys
import eventlog_handler
logging.getLogger().addHandler(logging.NullHandler())  # no console: stderr is the subject
handle = eventlog_handler.setup(spool_path=sys.argv[1], retry_initial=0.05, shutdown_timeout=1)
os.chmod(sys.argv[1], 0o500)  # a cleanup, a remount: the directory is no longer writable
for i in range(300):
    logging.getLogger("app").warning("event %d", i)
handle.flush(2)
print("spooled", handle.stats()["spooled"], flush=True)
"""


def test_a_spool_that_stops_being_writable_is_said(tmp_path: Path) -> None:
    """The service fails and the spool directory is no longer writable: the events stay in
    memory, and stderr says why the spool takes none (it said nothing of the spool)."""
    prefix = as_a_user(tmp_path)
    spool = tmp_path / "spool"
    try:
        with FaultServer() as server:
            server.default = 503
            done = run(prefix, UNWRITABLE, server.url, str(spool))
    finally:
        spool.chmod(0o700)
    assert done.returncode == 0, done.stderr
    assert "spooled 0" in done.stdout, done.stdout + done.stderr
    said = [line for line in done.stderr.splitlines() if "can't be written" in line]
    assert len(said) == 1, done.stderr
    assert f"the spool {spool} can't be written (Permission denied)" in said[0], said
    assert API_KEY not in done.stderr


def test_tightening_an_unwritable_directory_leaves_it_unwritable(tmp_path: Path) -> None:
    """A spool directory the program's owner made ``0555`` (not to be written) was "tightened"
    to ``0700``, giving the owner the write right it had taken away, and written to."""
    prefix = as_a_user(tmp_path)
    spool = tmp_path / "spool"
    spool.mkdir()
    spool.chmod(0o555)
    try:
        with FaultServer() as server:
            done = run(prefix, OTHER_USERS, server.url, str(spool))
            messages = [event["message"] for event in server.accepted]
        mode = spool.stat().st_mode & 0o777
    finally:
        spool.chmod(0o700)
    assert done.returncode == 0, done.stderr
    assert mode == 0o500, oct(mode)  # others' rights taken away, the owner's as they were
    assert messages == ["mine"]  # sent without the spool
    said = f"the spool directory {spool} can't be used (Permission denied)"
    assert said in done.stderr, done.stderr
    assert not list(spool.iterdir())
