"""Exit against a server that accepts connections and never answers.

Each run is a fresh interpreter that calls ``setup()``, logs, and returns from ``main``. The time
from a marker printed just before ``main`` returns (interpreter start-up excluded) to the end of
the process must stay within ``shutdown_timeout`` + 1 s, and what could not be sent, and what was
on the wire without an answer, are reported on stderr as counts.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.support.constants import REPO
from tests.support.faultserver import FaultServer
from tests.support.processes import child_env

SHUTDOWN_TIMEOUT = 1.0

CHILD = textwrap.dedent(
    """
    import logging
    import sys
    import time

    import eventlog_handler


    def main(count: int, in_flight: bool) -> None:
        eventlog_handler.setup(
            shutdown_timeout={shutdown!r},
            timeout=30,
            flush_interval=0.05 if in_flight else 5.0,
            retry_initial=0.01,
            max_backoff=0.05,
        )
        log = logging.getLogger("app.exit")
        for index in range(count):
            log.info("pending %d", index)
        if in_flight:
            # The first batch is on the wire, waiting for an answer that never comes.
            time.sleep(0.3)
            for index in range(count):
                log.warning("more %d", index)
        print(f"RETURNING {{time.monotonic()!r}}", flush=True)


    if __name__ == "__main__":
        main(int(sys.argv[1]), sys.argv[2] == "in-flight")
    """
).format(shutdown=SHUTDOWN_TIMEOUT)


def run_once(script: Path, url: str, count: int, in_flight: bool) -> tuple[float, str, int]:
    """Run the child; return (seconds from the marker to the exit, stderr, return code)."""
    process = subprocess.Popen(
        [sys.executable, str(script), str(count), "in-flight" if in_flight else "queued"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(url),
        cwd=str(REPO),
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("RETURNING "), (
            line,
            process.stderr.read() if process.stderr else "",
        )
        marked = float(line.split()[1])
        process.wait(timeout=30)
        exited = time.monotonic()
        stderr = process.stderr.read() if process.stderr else ""
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()
    return exited - marked, stderr, process.returncode


@pytest.mark.parametrize(
    "runs", [pytest.param(5, id="ci"), pytest.param(30, id="full", marks=pytest.mark.slow)]
)
def test_exit_is_bounded_and_reports_what_was_not_sent(tmp_path: Path, runs: int) -> None:
    script = tmp_path / "app.py"
    script.write_text(CHILD)
    with FaultServer() as server:
        server.default = "hang"
        for run in range(runs):
            in_flight = run % 2 == 1
            count = 40 + run
            elapsed, stderr, code = run_once(script, server.url, count, in_flight)
            assert code == 0, stderr
            assert elapsed < SHUTDOWN_TIMEOUT + 3.0, (run, elapsed, stderr)  # not the 10 s timeout
            # The exit flush puts what is pending on the wire, where it hangs: those events
            # have an unknown outcome (the service may have stored them). With a batch already
            # hanging, the rest never left the process: those could not be sent.
            assert f"{count} event(s) were on their way" in stderr, stderr
            if in_flight:
                assert f"{count} event(s) could not be sent" in stderr, stderr
            else:
                assert "could not be sent" not in stderr, stderr
            assert "Traceback" not in stderr, stderr
        # Every run's events reached the server (and hung there), none was answered.
        assert server.accepted == []
        assert "hang" in server.statuses()
