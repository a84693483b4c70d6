"""Memory held for delivery is bounded in bytes, observed as a user observes it: the program's
resident memory (RSS), read from outside the process while it logs.

Two traffic shapes that grew without bound before the byte budget:

- one constant message with varying data (``log.info("order updated", extra={...})``, the
  most common structured-logging pattern) at a healthy server: the roll-up remembered every
  distinct event of its window, with its data;
- large payloads (100 KB per record) while the server is down: the queue was bounded in
  events (10,000), not bytes.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.support.constants import REPO
from tests.support.faultserver import Delay, FaultServer
from tests.support.processes import child_env, marks

BUDGET_MB = 16
#: What the interpreter, the package and the allocator's slack may add beyond the budget.
SLACK_MB = 30


def rss_mb(pid: int) -> float | None:
    """The resident memory of ``pid`` in MB (``None`` once it has ended)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def watch(source: str, url: str, tmp_path: Path, timeout: float) -> tuple[float, float, str]:
    """Run ``source``; return its RSS when it printed ``ready``, its peak RSS after that, and
    its stderr."""
    path = tmp_path / "program.py"
    path.write_text(textwrap.dedent(source))
    errors = (tmp_path / "stderr.txt").open("w+")  # a file: the program's console may be busy
    process = subprocess.Popen(
        [sys.executable, str(path)],
        stdout=subprocess.PIPE,
        stderr=errors,
        text=True,
        env=child_env(url),
        cwd=str(REPO),
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "ready"
        start = rss_mb(process.pid) or 0.0
        peak = start
        deadline = time.monotonic() + timeout
        while process.poll() is None and time.monotonic() < deadline:
            now = rss_mb(process.pid)
            if now is not None:
                peak = max(peak, now)
            time.sleep(0.1)
        process.communicate(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        errors.seek(0)
        stderr = errors.read()
        errors.close()
    assert process.returncode == 0, stderr
    return start, peak, stderr


def test_constant_message_with_varying_data_at_a_healthy_server(tmp_path: Path) -> None:
    with FaultServer(keep_events=False) as server:
        start, peak, _ = watch(
            f"""
            import logging, os, time
            import eventlog_handler
            handle = eventlog_handler.setup(memory_budget={BUDGET_MB} * 1024 * 1024)
            log = logging.getLogger("shop")
            log.info("warm up")
            handle.flush(10)
            print("ready", flush=True)
            blob = os.urandom(384).hex()  # 768 characters, each record's own below
            end = time.monotonic() + 10
            i = 0
            while time.monotonic() < end:
                log.info("order updated", extra={{"order": i, "blob": blob + str(i)}})
                i += 1
            assert handle.flush(30), handle.stats()
            stats = handle.stats()
            assert stats["dropped_total"] == 0, stats
            assert stats["memory_bytes"] <= {BUDGET_MB} * 1024 * 1024, stats
            """,
            server.url,
            tmp_path,
            timeout=60,
        )
        assert server.accepted_count() > 1000  # the run really sent a stream of events
    assert peak - start < BUDGET_MB + SLACK_MB, (start, peak)


def test_large_payloads_while_the_server_is_down(tmp_path: Path) -> None:
    with FaultServer() as server:
        url = server.url
    # The server is gone: the port refuses connections.
    start, peak, stderr = watch(
        f"""
        import logging, os
        import eventlog_handler
        handle = eventlog_handler.setup(memory_budget={BUDGET_MB} * 1024 * 1024,
                                        shutdown_timeout=0.5)
        log = logging.getLogger("bulk")
        print("ready", flush=True)
        for i in range(10_000):
            log.warning("upload %d", i, extra={{"body": os.urandom(50_000).hex()}})
        stats = handle.stats()
        assert stats["memory_bytes"] <= {BUDGET_MB} * 1024 * 1024, stats
        assert stats["dropped"]["queue_full"] > 0, stats  # said and counted, not silent
        """,
        url,
        tmp_path,
        timeout=60,
    )
    assert "could not be sent" in stderr
    # The evictions are said too, not only counted: at exit, with their reason.
    assert re.search(r"\d+ event\(s\) were dropped from memory while they waited", stderr)
    assert "queue_full: past queue_size=10000 or memory_budget=16777216" in stderr
    assert peak - start < BUDGET_MB + SLACK_MB, (start, peak)


def test_large_payloads_while_the_server_is_down_with_a_spool(tmp_path: Path) -> None:
    """With a spool, what piles up during the retry's pause goes to disk. It was taken from
    memory all at once (up to ``queue_size`` events) and built and encoded in one list before
    it was written: 200-250 MB of RSS for a 64 MB budget, while the logging threads filled
    the buffer again. Now a part at a time."""
    with FaultServer() as server:
        url = server.url
    spool = tmp_path / "spool"
    start, peak, stderr = watch(
        f"""
        import logging
        import eventlog_handler
        handle = eventlog_handler.setup(memory_budget={BUDGET_MB} * 1024 * 1024,
                                        spool_path={str(spool)!r}, shutdown_timeout=0.5)
        log = logging.getLogger("bulk")
        print("ready", flush=True)
        for i in range(20_000):
            log.info("upload %d", i, extra={{"pad": "q" * 10_000}})
        stats = handle.stats()
        assert stats["memory_bytes"] <= {BUDGET_MB} * 1024 * 1024, stats
        """,
        url,
        tmp_path,
        timeout=90,
    )
    assert "kept" in stderr or "spool" in stderr, stderr
    assert peak - start < BUDGET_MB + SLACK_MB, (start, peak)


def test_a_small_budget_at_a_slow_healthy_server_waits_rather_than_evicts(tmp_path: Path) -> None:
    """A healthy service that takes 0.2 s per post, the smallest budget (1 MB) and records of
    about 1.3 KB: a batch on the wire holds most of the budget. The logging thread waits for
    the worker instead of seeing its logs evicted (5,473 of 6,000 were, counted as
    ``queue_full``, when the wait during a post ignored the room the batch in flight leaves
    and the byte high water did not make fewer events than a batch due)."""
    with FaultServer(keep_events=False) as server:
        server.default = Delay(0.2)
        start, peak, stderr = watch(
            """
            import logging
            import eventlog_handler
            handle = eventlog_handler.setup(memory_budget=1_000_000)
            log = logging.getLogger("bulk")
            print("ready", flush=True)
            for i in range(6_000):
                log.warning("upload %d", i, extra={"body": "x" * 1_200})
            assert handle.flush(60), handle.stats()
            stats = handle.stats()
            assert stats["dropped_total"] == 0, stats
            assert stats["delivered"] == 6_000, stats
            """,
            server.url,
            tmp_path,
            timeout=120,
        )
        assert server.accepted_count() == 6_000, stderr[-2000:]
    assert peak - start < 1 + SLACK_MB, (start, peak)


def _down_url() -> str:
    with FaultServer() as server:
        return server.url  # the server is gone: the port refuses connections


def test_queued_errors_with_before_send_do_not_keep_their_frames_alive(tmp_path: Path) -> None:
    """A ``before_send`` hook gets the exception in its hint. While the server is down, every
    queued error waits with it: when the entry held the exception itself, its traceback kept
    each failing call's locals alive (5 MB here, 60 errors: +300 MB, while ``memory_bytes``
    read a few KB). The hint gets a copy without the traceback, and it still names the type,
    the arguments and the cause."""
    start, peak, stderr = watch(
        f"""
        import logging, sys
        import eventlog_handler

        seen = []
        def hook(event, hint):
            seen.append(hint["exception"])
            return event

        handle = eventlog_handler.setup(memory_budget={BUDGET_MB} * 1024 * 1024,
                                        before_send=hook, retry_initial=0.2, max_backoff=0.5,
                                        shutdown_timeout=1, include_locals=False)
        log = logging.getLogger("jobs")

        def job(n):
            scratch = bytearray(5_000_000)  # the job's own working memory
            try:
                raise KeyError(n)
            except KeyError as exc:
                raise RuntimeError(f"job {{n}} failed") from exc

        print("ready", flush=True)
        for n in range(60):
            try:
                job(n)
            except RuntimeError:
                log.exception("job failed")
        stats = handle.stats()
        assert stats["queued"] + stats["in_flight"] == 60, stats
        assert stats["memory_bytes"] <= {BUDGET_MB} * 1024 * 1024, stats
        handle.flush(1.5)  # the worker retries meanwhile: the hook runs on each error
        assert seen, "the hook never ran"
        first = seen[0]
        assert type(first) is RuntimeError and "failed" in str(first), first
        assert first.__traceback__ is None and type(first.__cause__) is KeyError, first
        print("hint ok", flush=True)
        """,
        _down_url(),
        tmp_path,
        timeout=60,
    )
    assert peak - start < BUDGET_MB + SLACK_MB + 20, (start, peak, stderr)


def test_queued_errors_with_before_send_count_what_their_exceptions_hold(
    tmp_path: Path,
) -> None:
    """The hint's copy of an exception shares its arguments and attributes: an HTTP error
    with the body it read (here 1 MB on the error, or on the response it holds). While the
    server was down, 150 such errors queued 150 MB that ``memory_bytes`` did not count (RSS
    12 times the budget). They count now, and the budget holds."""
    start, peak, stderr = watch(
        f"""
        import logging
        import eventlog_handler

        handle = eventlog_handler.setup(memory_budget={BUDGET_MB} * 1024 * 1024,
                                        before_send=lambda event, hint: event,
                                        retry_initial=0.2, max_backoff=0.5, shutdown_timeout=1)
        log = logging.getLogger("client")

        class Response:
            def __init__(self, body):
                self.status_code = 500
                self.content = body

        class UpstreamError(Exception):
            pass

        print("ready", flush=True)
        for n in range(150):
            try:
                error = UpstreamError(f"upstream answered 500 ({{n}})")
                if n % 2:
                    error.body = bytes(1_000_000) + n.to_bytes(4, "big")
                else:
                    error.response = Response(bytes(1_000_000) + n.to_bytes(4, "big"))
                raise error
            except UpstreamError:
                log.exception("call failed")
        stats = handle.stats()
        assert stats["memory_bytes"] <= {BUDGET_MB} * 1024 * 1024, stats
        assert stats["dropped"]["queue_full"] > 100, stats  # counted, as the budget says
        print("counted", flush=True)
        """,
        _down_url(),
        tmp_path,
        timeout=60,
    )
    assert peak - start < BUDGET_MB + SLACK_MB, (start, peak, stderr)


def test_non_ascii_text_counts_by_what_it_takes(tmp_path: Path) -> None:
    """A message of 250,000 emoji takes 1 MB in memory, not 250 KB: counted by characters,
    the budget let four times its size be queued while the server was down."""
    start, peak, stderr = watch(
        f"""
        import logging
        import eventlog_handler
        handle = eventlog_handler.setup(memory_budget={BUDGET_MB} * 1024 * 1024,
                                        shutdown_timeout=0.5)
        log = logging.getLogger("chat")
        print("ready", flush=True)
        for i in range(200):
            log.warning("\\U0001F600" * 250_000 + str(i))
        stats = handle.stats()
        assert stats["memory_bytes"] <= {BUDGET_MB} * 1024 * 1024, stats
        assert stats["dropped"]["queue_full"] > 100, stats
        """,
        _down_url(),
        tmp_path,
        timeout=60,
    )
    assert peak - start < BUDGET_MB + SLACK_MB, (start, peak, stderr)


def test_many_small_containers_in_extra_count_in_full(tmp_path: Path) -> None:
    """``extra=`` holding thousands of small lists: the size estimate looked at 2,000 of them
    and counted each of the rest as 64 bytes, about a thirteenth of what they hold, so the
    budget let many times its size be queued."""
    start, peak, stderr = watch(
        f"""
        import logging
        import eventlog_handler
        handle = eventlog_handler.setup(memory_budget={BUDGET_MB} * 1024 * 1024,
                                        shutdown_timeout=0.5)
        log = logging.getLogger("report")
        print("ready", flush=True)
        for i in range(300):
            rows = {{f"k{{j}}": [[j, k, f"v{{k}}-{{i}}"] for k in range(20)] for j in range(400)}}
            log.warning("report %d", i, extra={{"rows": rows}})
        stats = handle.stats()
        assert stats["memory_bytes"] <= {BUDGET_MB} * 1024 * 1024, stats
        assert stats["dropped"]["queue_full"] > 0, stats
        """,
        _down_url(),
        tmp_path,
        timeout=90,
    )
    assert peak - start < BUDGET_MB + SLACK_MB, (start, peak, stderr)


CONTAINER_LIMIT = 80 * 1024 * 1024


def _memory_cgroup(name: str) -> Path | None:
    """A new memory cgroup limited to :data:`CONTAINER_LIMIT` (v2 or v1), or ``None`` where
    this process may not make one (not root, no memory controller)."""
    v2 = Path("/sys/fs/cgroup")
    v1 = v2 / "memory"
    try:
        if (v2 / "cgroup.controllers").exists():
            group = v2 / name
            group.mkdir()
            (group / "memory.max").write_text(str(CONTAINER_LIMIT))
            swap = group / "memory.swap.max"
            if swap.exists():
                swap.write_text("0")
            return group
        if (v1 / "memory.limit_in_bytes").exists():
            group = v1 / name
            group.mkdir()
            (group / "memory.limit_in_bytes").write_text(str(CONTAINER_LIMIT))
            swap = group / "memory.memsw.limit_in_bytes"
            if swap.exists():
                swap.write_text(str(CONTAINER_LIMIT))
            return group
    except OSError:
        return None
    return None


CONTAINER_PROGRAM = """
import json, logging, time
import eventlog_handler

handle = eventlog_handler.setup(shutdown_timeout=0.5)
print("MARK budget", json.dumps(handle.handler.settings.memory_budget), flush=True)
log = logging.getLogger("bulk")
fields = {f"field_{k}": "x" * 100 + str(k) for k in range(1_000)}
end = time.monotonic() + 8
i = 0
while time.monotonic() < end:
    log.warning("record %d", i, extra=dict(fields, n=i))
    i += 1
print("MARK stats", json.dumps(handle.stats()), flush=True)
"""


def test_in_a_memory_limited_container_the_default_budget_keeps_the_program_alive(
    tmp_path: Path,
) -> None:
    """A container with an 80 MiB memory limit and the server down, the program logging
    records with 1,000 fields each: the default budget is an eighth of the limit (64 MB
    filled the container, and the kernel killed the program), the program runs to its end,
    and what did not fit is counted as dropped."""
    group = _memory_cgroup(f"eventlog-test-{os.getpid()}-{time.monotonic_ns()}")
    if group is None:
        pytest.skip("needs the right to make a memory cgroup (root, a memory controller)")
    try:
        path = tmp_path / "program.py"
        path.write_text(textwrap.dedent(CONTAINER_PROGRAM))
        joined = f'echo $$ > {group / "cgroup.procs"} && exec "$0" "$1"'
        done = subprocess.run(
            ["sh", "-c", joined, sys.executable, str(path)],
            capture_output=True,
            text=True,
            env=child_env(_down_url()),
            timeout=90,
        )
    finally:
        for _ in range(50):
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.1)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])  # -9: killed
    found = marks(done.stdout.splitlines())
    assert found["budget"] == CONTAINER_LIMIT // 8
    assert found["stats"]["dropped"]["queue_full"] > 0, found["stats"]
    assert found["stats"]["memory_bytes"] <= CONTAINER_LIMIT // 8


DEEP_MODULE = "import logging\nlog = logging.getLogger('deep.app')\n" + "".join(
    f"\ndef f{depth}(n):\n"
    + f"    # {'s' * 190}\n" * 5
    + (f"    return f{depth + 1}(n)  # {'#' * 170}\n" if depth < 29 else "")
    + (f"    log.error(f'order {{n}} failed')  # {'#' * 160}\n" if depth == 29 else "")
    + f"    # {'s' * 190}\n" * 5
    for depth in range(30)
)


def test_duplicate_errors_from_deep_call_sites_are_rolled_up_within_the_budget(
    tmp_path: Path,
) -> None:
    """``log.error(f"order {n} failed")`` 30 calls deep, each message twice, at a healthy
    server, with the default budget: the roll-up kept each pending message's last event and
    key by the size it had when it was logged, before the worker gave its frames their source
    lines (about 25 times as much). RSS grew by 130 MB while ``memory_bytes`` said 5 MB."""
    (tmp_path / "deepmod.py").write_text(DEEP_MODULE)
    with FaultServer(keep_events=False) as server:
        start, peak, _ = watch(
            f"""
            import sys, time
            sys.path.insert(0, {str(tmp_path)!r})
            import eventlog_handler, deepmod
            handle = eventlog_handler.setup()
            deepmod.f0(-1)
            handle.flush(10)
            print("ready", flush=True)
            end = time.monotonic() + 15
            n = 0
            while time.monotonic() < end:
                deepmod.f0(n)
                deepmod.f0(n)
                n += 1
                time.sleep(1 / 150)
            stats = handle.stats()
            assert stats["dropped_total"] == 0, stats
            assert stats["memory_bytes"] <= 64 * 1024 * 1024, stats
            """,
            server.url,
            tmp_path,
            timeout=90,
        )
        assert server.accepted_count() > 1000
    assert peak - start < 64 + SLACK_MB, (start, peak)
