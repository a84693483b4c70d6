"""``eventlog tail`` as a developer keeps it open in a terminal: new events of a collector, one
line each, as they arrive; ``--errors``; a server that goes away said once; Ctrl-C ends it."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

from eventlog_handler.collector import Collector
from tests.support.collector import Client
from tests.support.constants import REPO
from tests.support.processes import stop_with_ctrl_c, with_lines


def _tail(collector: Collector, *args: str) -> tuple[subprocess.Popen[str], queue.Queue[str]]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    env["EVENTLOG_USER_TOKEN"] = collector.user_token
    env["NO_PROXY"] = "127.0.0.1"
    command = [sys.executable, "-m", "eventlog_handler.cli", "tail", "--server-url", collector.url]
    return with_lines([*command, "--interval", "0.2", *args], env)


def _next(lines: queue.Queue[str], timeout: float = 15) -> str:
    return lines.get(timeout=timeout)


@contextlib.contextmanager
def _tailing(collector: Collector, *args: str) -> Iterator[tuple[queue.Queue[str], Client]]:
    """``eventlog tail`` running (its lines, and an HTTP client of the collector to post
    with); Ctrl-C ends it after the block, with exit status 0."""
    http = Client(collector)
    process, lines = _tail(collector, *args)
    try:
        yield lines, http
    finally:
        code, stderr = stop_with_ctrl_c(process)
        http.close()
    assert code == 0, stderr


def _nothing_more(lines: queue.Queue[str]) -> None:
    time.sleep(0.6)
    assert lines.empty(), lines.get()  # each event once


def test_new_events_print_as_they_arrive_and_ctrl_c_ends(collector: Collector) -> None:
    http = Client(collector)
    http.post_events({"message": "before tail", "source": "shop.cart", "@level": "Info"})
    http.close()
    with _tailing(collector, "--last", "5") as (lines, http):
        first = _next(lines)
        assert "before tail" in first and "shop.cart" in first and "Info" in first
        error = {"type": "KeyError", "message": "'sku'", "stack_trace": "KeyError: 'sku'"}
        http.post_events({"type": "error", "source": "shop.stock", "@simple_error": error})
        line = _next(lines)
        assert "shop.stock" in line and "KeyError" in line
        assert f"{collector.url}/stacks/" in line  # the stack's page on the dashboard
        _nothing_more(lines)


def test_errors_only(collector: Collector) -> None:
    with _tailing(collector, "--errors") as (lines, http):
        time.sleep(0.5)
        http.post_events({"message": "just a log", "source": "shop.cart"})
        error = {"type": "ValueError", "message": "bad", "stack_trace": "ValueError: bad"}
        http.post_events({"type": "error", "source": "shop.pay", "@simple_error": error})
        line = _next(lines)
        assert "ValueError" in line and "shop.pay" in line
        _nothing_more(lines)


def test_a_server_that_is_gone_is_said_once(collector: Collector) -> None:
    url = collector.url
    collector.stop()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    process = subprocess.Popen(
        [sys.executable, "-m", "eventlog_handler.cli", "tail", "--server-url", url,
         "--token", "t" * 40, "--interval", "0.1"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    time.sleep(1.5)
    code, stderr = stop_with_ctrl_c(process)
    assert code == 0
    assert stderr.count("trying again") == 1, stderr


def test_a_burst_larger_than_a_page_is_printed_whole_and_control_characters_are_not(
    collector: Collector,
) -> None:
    """One batch of 300 events between two looks (the package posts up to 500 at once): tail
    printed the newest 100 and nothing said the rest were skipped. And a message with escape
    sequences (a window title, a colour) acted on the terminal."""
    with _tailing(collector, "--filter", "source:shop.burst") as (lines, http):
        time.sleep(1.0)  # tail's first look is done: what follows is new
        http.post_events([{"message": f"B-{i}", "source": "shop.burst"} for i in range(300)])
        http.post_events(
            {"message": "title\x1b]0;PWNED\x07 red\x1b[31mRED\x1b[0m", "source": "shop.burst"}
        )
        printed = [_next(lines) for _ in range(301)]
        _nothing_more(lines)
    burst = [line for line in printed if " B-" in line]
    assert len(burst) == 300 and len({line.split()[-2] for line in burst}) == 300, printed[:5]
    [styled] = [line for line in printed if "PWNED" in line]
    assert "\x1b" not in styled and "\x07" not in styled, repr(styled)
    assert "title ]0;PWNED red [31mRED [0m" in styled, repr(styled)


def test_under_a_steady_stream_each_event_is_printed_once(collector: Collector) -> None:
    """Bursts of 150 events every 0.3 s while tail reads page after page: events that came
    meanwhile pushed the older ones down a page, and tail printed them twice (or, stopping
    at the first repeat, skipped the ones pushed further)."""
    posted = 0
    with _tailing(collector, "--filter", "source:shop.stream", "--interval", "1") as (
        lines,
        http,
    ):
        time.sleep(1.5)  # tail's first look is done
        for _ in range(12):
            batch = [{"message": f"S-{posted + i}", "source": "shop.stream"} for i in range(150)]
            http.post_events(batch)
            posted += 150
            time.sleep(0.3)
        printed = [_next(lines) for _ in range(posted)]
        time.sleep(0.9)  # one more look
        _nothing_more(lines)
    messages = sorted(int(line.split(" S-")[1].split()[0]) for line in printed)
    assert messages == list(range(posted))


def _tail_process(collector: Collector, *arguments: str) -> subprocess.Popen[str]:
    """``eventlog tail`` against ``collector`` in a process of its own, its output piped."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    env["EVENTLOG_USER_TOKEN"] = collector.user_token
    command = [sys.executable, "-m", "eventlog_handler.cli", "tail", "--server-url", collector.url]
    return subprocess.Popen(
        [*command, *arguments],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def test_a_reader_that_goes_away_ends_tail_without_a_traceback(collector: Collector) -> None:
    """``eventlog tail | head -1``: the next line tail printed after ``head`` had gone raised
    ``BrokenPipeError`` into a traceback. It ends as a tool killed by SIGPIPE: status 141."""
    http = Client(collector)
    http.post_events({"message": "first", "source": "shop.pipe"})
    process = _tail_process(collector, "--interval", "0.2", "--filter", "source:shop.pipe")
    try:
        assert process.stdout is not None
        assert "first" in process.stdout.readline()
        process.stdout.close()  # as head -1 does after its line
        for index in range(20):  # lines for tail to print, until it finds the pipe closed
            http.post_events({"message": f"more {index}", "source": "shop.pipe"})
            time.sleep(0.3)
            if process.poll() is not None:
                break
        code = process.wait(timeout=15)
    finally:
        http.close()
        if process.poll() is None:
            process.kill()
    stderr = process.stderr.read() if process.stderr else ""
    assert code == 141, (code, stderr)
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr


def test_a_reader_that_goes_away_ends_tail_on_a_quiet_project(collector: Collector) -> None:
    """``eventlog tail | head -1`` where no event comes after ``head``'s line: tail noticed the
    closed pipe only at its next line, and ran on until an event came, maybe never."""
    http = Client(collector)
    http.post_events([{"message": f"quiet {i}", "source": "shop.quiet"} for i in range(3)])
    http.close()
    process = _tail_process(collector, "--interval", "1", "--last", "3")
    try:
        assert process.stdout is not None
        assert "quiet" in process.stdout.readline()
        time.sleep(0.5)  # its three lines are printed: it waits for the next look
        process.stdout.close()  # as head -1 does after its line
        code = process.wait(timeout=15)
    finally:
        if process.poll() is None:
            process.kill()
    stderr = process.stderr.read() if process.stderr else ""
    assert code == 141, (code, stderr)
    assert "Traceback" not in stderr, stderr


class _Deploying(http.server.BaseHTTPRequestHandler):
    """A proxy in front of a server being deployed: its first ``failures`` answers are 503
    with ``Retry-After: 1``, then the server lists one event."""

    failures = 3
    seen: list[float] = []

    def do_GET(self) -> None:
        self.seen.append(time.monotonic())
        if len(self.seen) <= self.failures:
            body = b"<html>503 Service Temporarily Unavailable</html>"
            self.send_response(503)
            self.send_header("Retry-After", "1")
            self.send_header("Content-Type", "text/html")
        else:
            event = {"id": "e" * 24, "message": "after the deploy", "source": "shop.deploy",
                     "date": "2026-11-29T10:00:00+00:00", "data": {"@level": "Warn"}}  # fmt: skip
            body = json.dumps([event]).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_a_server_answering_503_for_a_while_is_waited_for() -> None:
    """A proxy answers 503 while the server behind it restarts: tail quit with an error. It
    says so once, waits the ``Retry-After``, and prints the events once the server is back."""
    _Deploying.seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Deploying)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        process, lines = with_lines(
            [sys.executable, "-m", "eventlog_handler.cli", "tail", "--server-url", url,
             "--token", "t" * 40, "--interval", "0.1"],
            env,
        )  # fmt: skip
        line = _next(lines)
        code, stderr = stop_with_ctrl_c(process)
    finally:
        server.shutdown()
        server.server_close()
    assert "after the deploy" in line and "shop.deploy" in line
    assert code == 0, stderr
    assert stderr.count("trying again") == 1 and "503" in stderr, stderr
    seen = _Deploying.seen
    gaps = [seen[index + 1] - seen[index] for index in range(len(seen) - 1)]
    assert min(gaps[:3]) >= 0.9, gaps  # the Retry-After, not the 0.1 s interval


def test_last_reads_as_many_pages_as_it_needs_and_is_checked(collector: Collector) -> None:
    """``--last 250`` printed the newest 100 (one page) without a word; ``--last -5`` was
    taken and printed nothing."""
    http = Client(collector)
    http.post_events([{"message": f"L-{i}", "source": "shop.last"} for i in range(300)])
    http.close()
    with _tailing(collector, "--filter", "source:shop.last", "--last", "250") as (lines, _):
        printed = [_next(lines) for _ in range(250)]
        _nothing_more(lines)
    numbers = [int(line.split(" L-")[1].split()[0]) for line in printed]
    assert numbers == list(range(50, 300))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    for bad in ("-5", "1001", "many"):
        done = subprocess.run(
            [sys.executable, "-m", "eventlog_handler.cli", "tail", "--server-url", collector.url,
             "--token", "t" * 40, "--last", bad],
            env=env, capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert done.returncode == 2, done
        assert "--last" in done.stderr and bad in done.stderr, done.stderr
