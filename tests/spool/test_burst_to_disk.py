"""With a spool, an outage burst goes to disk instead of being evicted from memory, and the next
start delivers it: observed from outside, with the program in its own process and the events
counted where they arrive."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support.constants import REPO
from tests.support.faultserver import FaultServer
from tests.support.processes import child_env

PROGRAM = """
import json, logging, sys
import eventlog_handler
handle = eventlog_handler.setup(spool_path=sys.argv[1], shutdown_timeout=5)
log = logging.getLogger("burst")
for i in range(int(sys.argv[2])):
    log.warning("burst %d", i)
stats = handle.stats()
print(json.dumps(stats["dropped"]))
"""

REPLAY = """
import json, sys, time
import eventlog_handler
handle = eventlog_handler.setup(spool_path=sys.argv[1])
deadline = time.monotonic() + 180  # generous: a loaded machine replays slowly
while time.monotonic() < deadline:  # the files of the ended process are replayed from the start
    replayed = handle.stats()["replayed"]
    if replayed["delivered"] + replayed["dropped"] >= int(sys.argv[2]):
        break
    time.sleep(0.2)
print(json.dumps(handle.stats()["replayed"]))
"""


def run(source: str, url: str, *args: str) -> tuple[str, str]:
    done = subprocess.run(
        [sys.executable, "-c", source, *args],
        env=child_env(url),
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout, done.stderr


def test_an_outage_burst_goes_to_disk_and_arrives_at_the_next_start(tmp_path: Path) -> None:
    count = 100_000
    spool = tmp_path / "spool"
    with FaultServer() as down:
        url = down.url
    stdout, stderr = run(PROGRAM, url, str(spool), str(count))
    dropped = json.loads(stdout)
    assert sum(dropped.values()) <= count // 100, dropped  # at most 1 % lost, counted
    assert "kept in the spool" in stderr
    with FaultServer(keep_events=False) as server:
        stdout, _ = run(REPLAY, server.url, str(spool), str(count - sum(dropped.values())))
        replayed = json.loads(stdout)
        assert server.accepted_count() >= count * 99 // 100, (server.accepted_count(), replayed)
        assert server.duplicates == []
