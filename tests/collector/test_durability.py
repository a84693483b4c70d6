"""A 202 from the collector means stored: ``kill -9`` under ingest loses no acknowledged event.

The collector runs as its user runs it (``python -m eventlog_handler.collector`` with a file
database), eight threads post batches with their own reference ids, the process is killed with
``SIGKILL`` in the middle, and started again on the same database: every event whose post was
answered 202 is in it.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import requests

from tests.collector.test_cli import _read_banner, _spawn, close
from tests.support.constants import REPO
from tests.support.fixtures import tmpfs
from tests.support.waits import wait_until

THREADS = 8
BATCH = 50


def _start(database: Path) -> tuple[subprocess.Popen[str], str, str]:
    process = _spawn("--port", "0", "--db", str(database), "--print-env")
    banner = _read_banner(process)
    url = re.search(r"EVENTLOG_SERVER_URL=(\S+)", banner)
    key = re.search(r"EVENTLOG_API_KEY=(\S+)", banner)
    assert url is not None and key is not None, banner
    return process, url.group(1).strip("'"), key.group(1).strip("'")


def test_every_acknowledged_event_survives_kill_9(tmp_path: Path) -> None:
    database = tmp_path / "collector.sqlite3"
    process, url, key = _start(database)
    acknowledged: list[set[str]] = [set() for _ in range(THREADS)]
    stop = threading.Event()

    def post(number: int) -> None:
        session = requests.Session()
        headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        batch = 0
        while not stop.is_set():
            ids = [f"t{number}-b{batch}-e{index}" for index in range(BATCH)]
            events = [
                {"type": "log", "message": f"durable {ref}", "reference_id": ref} for ref in ids
            ]
            try:
                answer = session.post(
                    f"{url}/api/v2/events", json=events, headers=headers, timeout=10
                )
            except requests.RequestException:
                return  # the collector is gone: what was acknowledged is what counts
            if answer.status_code == 202:
                acknowledged[number].update(ids)
            batch += 1

    threads = [threading.Thread(target=post, args=(number,)) for number in range(THREADS)]
    try:
        for thread in threads:
            thread.start()
        wait_until(lambda: sum(map(len, acknowledged)) >= 6_000, 30, step=0.05)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=15)
        close(process)
    answered = set().union(*acknowledged)
    assert len(answered) >= 1_000, "too few posts were answered before the kill"

    restarted, url, key = _start(database)  # stores what was acknowledged and not stored
    try:
        answer = requests.get(
            f"{url}/api/v2/events",
            params={"limit": 1},
            headers={"Authorization": f"Bearer {key}"},
            timeout=10,
        )
        assert answer.status_code in (200, 401, 403)  # serving again
    finally:
        restarted.send_signal(signal.SIGTERM)
        try:
            restarted.wait(timeout=20)
        finally:
            close(restarted)
    with sqlite3.connect(database) as db:
        stored = {row[0] for row in db.execute("SELECT reference_id FROM events")}
        unstored = db.execute("SELECT COUNT(*) FROM unstored").fetchone()[0]
    missing = answered - stored
    assert not missing, f"{len(missing)} of {len(answered)} acknowledged events lost"
    assert unstored == 0


def test_events_acknowledged_while_the_disk_was_full_are_stored_once_it_has_room(
    tmp_path: Path,
) -> None:
    """The collector on a real 2 MB file system that fills up: a body is committed before its
    202, and storing its events after the answer fails for lack of space. Those events were
    stored only at the next start; now the next store that works stores them too."""
    disk = tmp_path / "disk"
    disk.mkdir()
    with tmpfs(disk, "size=2m") as failure:
        if failure is not None:
            pytest.skip(failure)
        database = disk / "collector.sqlite3"
        log = (tmp_path / "collector.log").open("w")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        command = ["-m", "eventlog_handler.collector", "--port", "0", "--db", str(database)]
        process = subprocess.Popen(
            [sys.executable, *command, "--print-env"],
            stdout=subprocess.PIPE,
            stderr=log,  # a traceback per failed store: a pipe nobody reads would fill
            text=True,
            env=env,
        )
        try:
            banner = _read_banner(process)
            url = re.search(r"EVENTLOG_SERVER_URL=(\S+)", banner)
            key = re.search(r"EVENTLOG_API_KEY=(\S+)", banner)
            assert url is not None and key is not None, banner
            session = requests.Session()
            session.headers["Authorization"] = "Bearer " + key.group(1).strip("'")
            endpoint = url.group(1).strip("'") + "/api/v2/events"
            acknowledged: set[str] = set()
            statuses: list[int] = []
            for batch in range(120):
                ids = [f"full-{batch}-{index}" for index in range(50)]
                # Gzipped and compressible: the body kept before the 202 is small, and the events
                # stored after it are not, so the disk fills up while storing them.
                events = [
                    {"type": "log", "reference_id": ref, "message": f"{ref} " + "x" * 2000}
                    for ref in ids
                ]
                body = gzip.compress(json.dumps(events).encode())
                headers = {"Content-Type": "application/json", "Content-Encoding": "gzip"}
                answer = session.post(endpoint, data=body, headers=headers, timeout=30)
                statuses.append(answer.status_code)
                if answer.status_code == 202:
                    acknowledged.update(ids)
                elif statuses.count(answer.status_code) >= 3:
                    break  # the disk is full: the collector refuses bodies it can't keep
            assert statuses[-1] != 202, statuses  # the disk did fill up
            subprocess.run(["mount", "-o", "remount,size=20m", str(disk)], check=True)
            answer = session.post(
                endpoint, json=[{"type": "log", "reference_id": "room-after-remount"}]
            )
            assert answer.status_code == 202
            acknowledged.add("room-after-remount")
            time.sleep(1.0)  # stored right after the answer
            with sqlite3.connect(database) as db:
                stored = {row[0] for row in db.execute("SELECT reference_id FROM events")}
            missing = acknowledged - stored
            assert not missing, f"{len(missing)} of {len(acknowledged)} acknowledged events missing"
        finally:
            close(process)
            log.close()
