"""Bursts, memory, flush and close deadlines, exit and fork, over real loopback HTTP."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from eventlog_handler.delivery import _engine as transport
from eventlog_handler.settings import Settings
from eventlog_handler.wire._logs import log_event
from tests.support.accounting import accounted_in_memory as accounted
from tests.support.constants import TRANSPORT_API_KEY as API_KEY

ROOT = Path(__file__).resolve().parents[2]


def test_burst_of_100000_with_default_settings_all_arrive(server):
    settings = Settings.from_options({"server_url": server.url, "api_key": API_KEY}, environ={})
    engine = transport.Engine(settings)
    posting_threads: set[int] = set()
    original = engine.client

    def client_for(timeout: float | None = None) -> Any:
        client = original(timeout)
        post = client.post_payload

        def post_and_note(*args: Any, **kwargs: Any) -> Any:
            posting_threads.add(threading.get_ident())
            return post(*args, **kwargs)

        client.post_payload = post_and_note  # type: ignore[method-assign]
        return client

    engine.delivery.client = client_for  # the client the delivery posts with
    try:
        for index in range(100_000):
            engine.enqueue(log_event(f"burst {index}", level="Info", data={"index": index}))
        assert engine.flush(60.0), engine.stats()
        stats = engine.stats()
        assert stats["captured"] == stats["delivered"] == 100_000, stats
        assert stats["dropped_total"] == 0
        assert len(server.accepted) == 100_000 and server.duplicates == []
        messages = {event["message"] for event in server.accepted}
        assert messages == {f"burst {index}" for index in range(100_000)}
        assert all(event["data"]["index"] == int(event["message"][6:]) for event in server.accepted)
        # The log calls never touched the network: every request went out on the worker.
        assert posting_threads and threading.get_ident() not in posting_threads
    finally:
        engine.shutdown(1.0)


def hold_the_interpreter(seconds: float) -> None:
    """Stop every other thread of this process for ``seconds``, as a long garbage collection
    does: spin without letting the interpreter lock go."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(seconds + 5.0)
    try:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass
    finally:
        sys.setswitchinterval(interval)


def test_a_burst_outlives_stalls_of_the_whole_process_during_posts(server):
    """While a request is on the wire, the process stands still for 0.7 s six times (here the
    loopback server's thread holds the interpreter, as a long collection in a process with a
    large heap does), and the answer comes 0.1 s after that. By then the request has been out
    for longer than 0.5 s, but the service was not slow: the process was. The burst is
    delivered, nothing evicted."""
    stalls: list[int] = []

    def stall_some(events: list[Any], size: int) -> int:
        if len(server.requests) in (10, 40, 70, 100, 130, 160):
            stalls.append(len(server.requests))
            hold_the_interpreter(0.7)
            time.sleep(0.1)  # and then takes a moment more to answer, as a server does
        return 202

    server.default = stall_some
    settings = Settings.from_options({"server_url": server.url, "api_key": API_KEY}, environ={})
    engine = transport.Engine(settings)
    try:
        for index in range(100_000):
            engine.enqueue(log_event(f"burst {index}", level="Info", data={"index": index}))
        assert engine.flush(60.0), engine.stats()
        stats = engine.stats()
        assert stats["dropped_total"] == 0, stats["dropped"]
        assert len(stalls) == 6
        assert stats["delivered"] == 100_000 == len(server.accepted)
    finally:
        engine.shutdown(1.0)


def test_log_calls_do_not_wait_for_a_server_that_never_answers(make_engine, server):
    server.default = "hang"
    engine = make_engine(timeout=30.0)
    done = threading.Event()

    def burst() -> None:
        for index in range(20_000):
            engine.enqueue(log_event(f"e{index}", level="Info"))
        done.set()

    threading.Thread(target=burst, daemon=True).start()
    # The worker is stuck in a request that will not be answered for 30 s; the burst must
    # still finish (in well under that), dropping the overflow with a count.
    assert done.wait(25.0)
    stats = engine.stats()
    assert stats["captured"] == 20_000 == accounted(stats)
    assert stats["queued"] <= engine.settings.queue_size
    assert stats["dropped"]["queue_full"] > 0


def test_flush_returns_by_its_deadline_under_the_logging_lock(make_engine, server):
    server.default = "hang"
    engine = make_engine(timeout=30.0)
    engine.enqueue(log_event("stuck", level="Info"))
    result: list[bool] = []

    def flush_like_dictconfig() -> None:
        with logging._lock:  # type: ignore[attr-defined]
            result.append(engine.flush(0.3))
            result.append(engine.close(0.3))

    thread = threading.Thread(target=flush_like_dictconfig, daemon=True)
    started = time.monotonic()
    thread.start()
    thread.join(10.0)
    assert not thread.is_alive(), "flush/close did not return under the logging lock"
    assert result == [False, False]
    assert time.monotonic() - started < 5.0


def test_close_then_reuse_starts_a_new_worker(make_engine, server):
    engine = make_engine()
    engine.enqueue(log_event("before close", level="Info"))
    assert engine.close(5.0)
    assert not engine.stats()["worker_alive"]
    engine.enqueue(log_event("after close", level="Info"))
    assert engine.flush(5.0)
    assert [event["message"] for event in server.accepted] == ["before close", "after close"]


def test_one_engine_per_server_and_key():
    try:
        first = Settings.from_options(
            {"server_url": "http://127.0.0.1:9", "api_key": API_KEY}, environ={}
        )
        same = Settings.from_options(
            {"server_url": "http://127.0.0.1:9/", "api_key": API_KEY, "batch_size": 7},
            environ={},
        )
        other = Settings.from_options(
            {"server_url": "http://127.0.0.1:9", "api_key": API_KEY + "x"}, environ={}
        )
        assert transport.get_engine(first) is transport.get_engine(same)
        assert transport.get_engine(first) is not transport.get_engine(other)
    finally:
        transport._forget_engines_for_tests()


# -- subprocesses: exit and fork --------------------------------------------------------------

PRELUDE = """
import os, sys, time
sys.path.insert(0, {root!r})
from eventlog_handler.delivery import _engine as transport
from eventlog_handler.wire._logs import log_event
from eventlog_handler.settings import Settings
settings = Settings.from_options(
    {{"server_url": {url!r}, "api_key": {key!r}, "shutdown_timeout": {shutdown!r},
      "flush_interval": 5.0, "timeout": 30.0, "retry_initial": 0.01, "max_backoff": 0.05}},
    environ={{}},
)
engine = transport.get_engine(settings)
"""


def run_script(
    body: str,
    url: str,
    shutdown: float = 1.0,
    timeout: float = 30.0,
    as_file: Path | None = None,
) -> Any:
    code = PRELUDE.format(root=str(ROOT), url=url, key=API_KEY, shutdown=shutdown)
    code += textwrap.dedent(body)
    command = [sys.executable, "-c", code]
    if as_file is not None:  # multiprocessing's spawn re-imports the main module from a file
        script = as_file / "app.py"
        script.write_text(code)
        command = [sys.executable, str(script)]
    started = time.monotonic()
    completed = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    return completed, time.monotonic() - started


def test_exit_with_a_server_that_never_answers_is_bounded_and_reports(server):
    server.default = "hang"
    body = """
    for i in range(500):
        engine.enqueue(log_event(f"pending {i}", level="Info"))
    """
    completed, elapsed = run_script(body, server.url, shutdown=1.0)
    assert completed.returncode == 0, completed.stderr
    # shutdown_timeout + 1 s, plus the interpreter's own start-up (generous for a loaded
    # machine, still far below the 10 s request timeout an unbounded exit would wait out).
    assert elapsed < 1.0 + 1.0 + 4.0, elapsed
    # The batch was on the wire when the deadline came: the service may have stored it, so it
    # is reported as of unknown outcome, never as lost.
    assert "500 event(s) were on their way" in completed.stderr
    assert "outcome is unknown" in completed.stderr
    assert "could not be sent" not in completed.stderr


def test_exit_delivers_everything_logged_just_before_it(server):
    body = """
    for i in range(300):
        engine.enqueue(log_event(f"last words {i}", level="Info"))
    """
    completed, _ = run_script(body, server.url, shutdown=5.0)
    assert completed.returncode == 0, completed.stderr
    assert completed.stderr == ""
    assert sorted(event["message"] for event in server.accepted) == sorted(
        f"last words {i}" for i in range(300)
    )


def test_exit_sends_from_the_exiting_thread_when_no_worker_can_start(server):
    # The first event arrives from an atexit hook, when (on 3.12+) no thread can start.
    body = """
    import atexit
    atexit.register(lambda: engine.enqueue(log_event("from atexit", level="Info")))
    """
    completed, _ = run_script(body, server.url, shutdown=5.0)
    assert completed.returncode == 0, completed.stderr
    assert [event["message"] for event in server.accepted] == ["from atexit"]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_forked_child_sends_its_own_events_and_none_of_its_parents(server):
    body = """
    import json
    server_down = True
    for i in range(50):
        engine.enqueue(log_event(f"parent {i}", level="Info"))
    pid = os.fork()
    if pid == 0:
        for i in range(20):
            engine.enqueue(log_event(f"child {i}", level="Info"))
        ok = engine.flush(10)
        print(json.dumps({"child_ok": ok, "stats": engine.stats()}), flush=True)
        os._exit(0)
    os.waitpid(pid, 0)
    engine.flush(10)
    print(json.dumps({"parent": engine.stats()}), flush=True)
    """
    completed, _ = run_script(body, server.url, shutdown=5.0)
    assert completed.returncode == 0, completed.stderr
    lines = [json.loads(line) for line in completed.stdout.splitlines()]
    child = next(line for line in lines if "child_ok" in line)
    parent = next(line for line in lines if "parent" in line)["parent"]
    assert child["child_ok"] is True
    assert child["stats"]["captured"] == child["stats"]["delivered"] == 20
    assert parent["captured"] == parent["delivered"] == 50
    messages = [event["message"] for event in server.accepted]
    assert sorted(messages) == sorted(
        [f"parent {i}" for i in range(50)] + [f"child {i}" for i in range(20)]
    )
    assert server.duplicates == []


def test_one_million_events_against_a_dead_server_keep_memory_bounded():
    # Nothing listens on the port: every event is captured, the queue stays at its cap, and the
    # overflow is counted. RSS growth is measured inside the child.
    import socket

    body = """
    import json, gc
    def rss_kb():
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0
    for i in range(20_000):  # warm up: the queue fills to its cap once
        engine.enqueue(log_event(f"warm {i}", level="Info", data={"i": i}))
    gc.collect()
    before = rss_kb()
    for i in range(1_000_000):
        engine.enqueue(log_event(f"dead server {i}", level="Info", data={"i": i}))
    gc.collect()
    after = rss_kb()
    print(json.dumps({"growth_kb": after - before, "stats": engine.stats()}), flush=True)
    """
    # The port stays bound, never listening, for the whole run (see the next test).
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}"
        completed, _ = run_script(body, url, shutdown=0.2, timeout=240)
    assert completed.returncode == 0, completed.stderr
    result = json.loads(completed.stdout.splitlines()[-1])
    stats = result["stats"]
    assert stats["captured"] == 1_020_000 == accounted(stats)
    assert stats["queued"] <= 10_000
    assert stats["dropped"]["queue_full"] >= 1_020_000 - 10_000 - 500
    # Past the warm-up the queue is full: a million more events must not grow memory.
    assert result["growth_kb"] < 20_000, result


def test_dead_server_exit_reports_unsent_and_accounting_holds():
    import socket

    body = """
    import json
    for i in range(50):
        engine.enqueue(log_event(f"e{i}", level="Info"))
    unsent = transport.shutdown_all(0.5)
    print(json.dumps({"unsent": unsent, "stats": engine.stats()}), flush=True)
    """
    # The port stays bound, never listening, for the whole run: connections are refused, and
    # no other server (another test's: freed ports are reused) can take it meanwhile.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}"
        completed, _ = run_script(body, url, shutdown=0.5)
    result = json.loads(completed.stdout.splitlines()[-1])
    assert result["unsent"] == 50
    assert result["stats"]["dropped"]["shutdown"] == 50
    assert result["stats"]["captured"] == accounted(result["stats"])


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_multiprocessing_children_deliver_their_events_once(server, method, tmp_path):
    if method == "fork" and not hasattr(os, "fork"):
        pytest.skip("needs os.fork")
    body = f"""
    import multiprocessing

    def child(index):
        from eventlog_handler.delivery import _engine as transport
        from eventlog_handler.wire._logs import log_event
        from eventlog_handler.settings import Settings
        engine = transport.get_engine(settings)
        for i in range(30):
            engine.enqueue(log_event(f"child {{index}} event {{i}}", level="Info"))
        # no flush: the child's normal end must send what is pending

    if __name__ == "__main__":
        for i in range(10):
            engine.enqueue(log_event(f"parent {{i}}", level="Info"))
        context = multiprocessing.get_context({method!r})
        processes = [context.Process(target=child, args=(n,)) for n in range(3)]
        for process in processes:
            process.start()
        for process in processes:
            process.join(30)
        assert all(process.exitcode == 0 for process in processes)
    """
    completed, _ = run_script(body, server.url, shutdown=5.0, timeout=60, as_file=tmp_path)
    assert completed.returncode == 0, completed.stderr
    messages = sorted(event["message"] for event in server.accepted)
    expected = sorted(
        [f"parent {i}" for i in range(10)]
        + [f"child {n} event {i}" for n in range(3) for i in range(30)]
    )
    assert messages == expected
    assert server.duplicates == []


def test_a_burst_at_start_is_not_evicted_while_the_settings_are_slow_to_come(server):
    """The first batch waits for the service's first settings (their data exclusions); a
    burst that fills the queue meanwhile holds its logging thread, which after a second of no
    progress evicts the oldest logs: the wait is kept short while logging threads wait."""
    from tests.support.faultserver import Delay

    server.config = Delay(5.0, then={"version": 1, "settings": {}})
    settings = Settings.from_options({"server_url": server.url, "api_key": API_KEY}, environ={})
    engine = transport.Engine(settings)
    try:
        for index in range(30_000):
            engine.enqueue(log_event(f"burst {index}", level="Info"))
        assert engine.flush(30.0), engine.stats()
        stats = engine.stats()
        assert stats["dropped_total"] == 0, stats["dropped"]
        assert stats["delivered"] == 30_000 == len(server.accepted)
    finally:
        engine.shutdown(1.0)
