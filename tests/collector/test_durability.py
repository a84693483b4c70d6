"""A 202 from the collector means stored: ``kill -9`` under ingest loses no acknowledged event.

The collector runs as its user runs it (``python -m eventlog_handler.collector`` with a file
database), eight threads post batches with their own reference ids, the process is killed with
``SIGKILL`` in the middle, and started again on the same database: every event whose post was
answered 202 is in it.
"""

from __future__ import annotations

import re
import signal
import sqlite3
import subprocess
import threading
import time
from pathlib import Path

import requests

from tests.collector.test_cli import _read_banner, _spawn, close

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
        deadline = time.monotonic() + 30
        while sum(map(len, acknowledged)) < 6_000 and time.monotonic() < deadline:
            time.sleep(0.05)
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
