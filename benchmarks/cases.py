"""The benchmark cases. Each runs in a process of its own and prints ``RESULT {json}`` last.

``python benchmarks/cases.py CASE PEER [--quick] [--variant V]``; :mod:`run` starts these.
Every peer sends to a sink in another process (:mod:`sink`), so the sink never competes with the
measured process for its interpreter lock.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from statistics import median
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import SinkProcess, closed_port, rss_bytes, wait_for
from peers import PEERS, Peer, Target, bench_logger

CASES = ("caller", "errors", "throughput", "burst", "idle", "memory", "exit")

#: Sizes of the full run and of ``--quick``.
SIZES: dict[str, dict[str, Any]] = {
    "full": {
        "caller_calls": 10_000,  # warnings per repeat
        "caller_repeats": 5,
        "caller_repeat_budget": 1.5,  # seconds; a slow peer does fewer calls per repeat
        "caller_probe": 100,
        "exception_calls": 2_000,  # logger.exception, 10 frames, per repeat
        "error_calls": 5_000,  # logger.error without an exception, per repeat
        "errors_repeats": 3,
        "settle_timeout": 10.0,
        "burst": 20_000,
        "burst_runs": 20,  # consecutive 20,000-record bursts into one handler
        "burst_timeout": 10.0,
        "throughput": 200_000,
        "idle_s": 5.0,
        "idle_runs": 1,
        "throughput_timeout": 60.0,
        "stall": 3.5,  # seconds without progress after which delivery counts as over
        "memory_warmup": 1_000,
        "memory": 1_000_000,
        "exit_pending": 10_000,
        "exit_kill_after": 10.0,
        "log_budget": 10.0,  # seconds of logging at most (a peer slower than that is cut short)
        "memory_budget": 60.0,  # the same, for the memory case of the peers that can log 1M
    },
    "quick": {
        "caller_calls": 300,
        "caller_repeats": 2,
        "caller_repeat_budget": 0.1,
        "caller_probe": 20,
        "exception_calls": 100,
        "error_calls": 100,
        "errors_repeats": 2,
        "settle_timeout": 1.0,
        "burst": 1_000,
        "burst_runs": 2,
        "burst_timeout": 0.5,
        "throughput": 2_000,
        "idle_s": 0.2,
        "idle_runs": 1,
        "throughput_timeout": 1.0,
        "stall": 0.5,
        "memory_warmup": 100,
        "memory": 3_000,
        "exit_pending": 200,
        "exit_kill_after": 1.5,
        "log_budget": 0.5,
        "memory_budget": 1.0,
        "shutdown_timeout": 0.3,  # eventlog's and sentry's exit deadline, to keep it short
        "flush_interval": 0.2,  # eventlog's and the stdlib pipeline's partial-batch delay
    },
}


def peer_options(size: dict[str, Any]) -> dict[str, Any]:
    """Options the quick sizes give the peers that take them (none in the full run)."""
    return {key: size[key] for key in ("flush_interval",) if key in size}


def _log_warnings(logger: Any, count: int, budget: float) -> int:
    """Log ``count`` warnings, stopping early when ``budget`` seconds are spent; return how many.

    Each message differs (a counter), as a program's do: nothing can merge them.
    """
    global _counter
    warning = logger.warning
    deadline = time.perf_counter() + budget
    done = 0
    while done < count:
        chunk = min(100, count - done)
        for index in range(_counter, _counter + chunk):
            warning("user %s did %d things", "ann", index, extra={"a": 1, "b": "two"})
        done += chunk
        _counter += chunk
        if time.perf_counter() > deadline:
            break
    return done


#: Numbers the messages of a process: no two are alike.
_counter = 0


def _percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def _recurse(depth: int) -> None:
    if depth <= 1:
        raise ValueError("failed at the bottom")
    _recurse(depth - 1)


def _delivered(sink: SinkProcess, peer: Peer) -> int:
    assert peer.counter is not None
    return int(sink.counts()[peer.counter])


# -- 1. caller cost ------------------------------------------------------------------------------


def _repeat(
    loop: Any, calls: int, peer: Peer, size: dict[str, Any], samples: list[int], repeats: int
) -> dict[str, Any]:
    """Warm up, size the repeats to the budget, run them; the mean (median over repeats) of
    the loop's wall time per call, and p50/p99 of each call's own time."""
    budget = size["caller_repeat_budget"]
    # Warm up (first-use costs: worker start, connection, lazy imports), then size the
    # repeats so that a slow peer still finishes in its budget.
    probe = max(1, min(size["caller_probe"], calls))
    per_call = loop(probe) / probe
    n = max(min(calls, 20), min(calls, int(budget / max(per_call, 1e-9))))
    peer.settle(size["settle_timeout"])
    means = []
    samples.clear()
    for _ in range(repeats):
        means.append(loop(n) / n * 1e6)
        peer.settle(size["settle_timeout"])
    # The mean includes the delivery thread's share of the interpreter while the loop runs;
    # each call's own time is measured around the call alone.
    return {
        "us": median(means),
        "p50_us": _percentile(samples, 0.50) / 1000,
        "p99_us": _percentile(samples, 0.99) / 1000,
        "calls": n,
    }


def case_caller(peer: Peer, size: dict[str, Any], variant: str) -> dict[str, Any]:
    """µs per ``logger.warning("user %s did %d things", "ann", n, extra={...})``, distinct n."""
    with SinkProcess() as sink:
        logger = bench_logger()
        peer.attach(logger, Target(sink.http_url, sink.tcp_port), peer_options(size))
        samples: list[int] = []

        def warnings(n: int) -> float:
            global _counter
            clock, record = time.perf_counter_ns, samples.append
            warning = logger.warning
            first = _counter
            _counter += n
            start = time.perf_counter()
            for index in range(first, first + n):
                before = clock()
                warning("user %s did %d things", "ann", index, extra={"a": 1, "b": "two"})
                record(clock() - before)
            return time.perf_counter() - start

        figures = _repeat(
            warnings, size["caller_calls"], peer, size, samples, size["caller_repeats"]
        )
        return {f"warning_{key}": value for key, value in figures.items()}


def case_errors(peer: Peer, size: dict[str, Any], variant: str) -> dict[str, Any]:
    """µs per ``logger.exception("job %d failed", n)`` inside ``except`` with a fresh 10-frame
    traceback (the raise is outside the timed call), and per ``logger.error("job %d failed",
    n)`` without an exception."""
    with SinkProcess() as sink:
        logger = bench_logger()
        peer.attach(logger, Target(sink.http_url, sink.tcp_port), peer_options(size))
        samples: list[int] = []

        def exceptions(n: int) -> float:
            global _counter
            clock, record = time.perf_counter_ns, samples.append
            first = _counter
            _counter += n
            start = time.perf_counter()
            for i in range(first, first + n):
                try:
                    _recurse(10)
                except ValueError:
                    before = clock()
                    logger.exception("job %d failed", i)
                    record(clock() - before)
            return time.perf_counter() - start

        def errors(n: int) -> float:
            global _counter
            clock, record = time.perf_counter_ns, samples.append
            error = logger.error
            first = _counter
            _counter += n
            start = time.perf_counter()
            for i in range(first, first + n):
                before = clock()
                error("job %d failed: %s", i, "disk full")
                record(clock() - before)
            return time.perf_counter() - start

        result: dict[str, Any] = {}
        for key, loop, calls in (
            ("exception", exceptions, size["exception_calls"]),
            ("error", errors, size["error_calls"]),
        ):
            figures = _repeat(loop, calls, peer, size, samples, size["errors_repeats"])
            for name, value in figures.items():
                result[f"{key}_{name}"] = value
        return result


# -- 2. burst ------------------------------------------------------------------------------------


def case_burst(peer: Peer, size: dict[str, Any], variant: str) -> dict[str, Any]:
    """``burst_runs`` bursts of ``burst`` records, one after the other, into one handler,
    each waited for."""
    if peer.counter is None:
        return {"na": "delivers nothing"}
    count, runs = size["burst"], size["burst_runs"]
    with SinkProcess() as sink:
        logger = bench_logger()
        peer.attach(logger, Target(sink.http_url, sink.tcp_port), peer_options(size))
        # One record first, so the worker and the connection exist: the burst hits a handler
        # that is already in use, as in a running program.
        logger.warning("ready")
        peer.settle(size["settle_timeout"])
        wait_for(lambda: _delivered(sink, peer) >= 1, size["settle_timeout"])
        fractions, drains, logs, rates = [], [], [], []
        logged = count
        for _ in range(runs):
            base = _delivered(sink, peer)
            start = time.perf_counter()
            logged = _log_warnings(logger, count, size["log_budget"])
            burst_s = time.perf_counter() - start
            timeout = size["burst_timeout"]
            result = _sustained(
                lambda: _delivered(sink, peer) - base,  # noqa: B023 - used at once
                logged,
                start,
                timeout,
                size["stall"],
            )
            delivered = result["delivered"]
            fractions.append(delivered / count)
            drains.append(result["seconds"] if delivered >= count else None)
            logs.append(burst_s)
            rates.append(result["events_per_s"])
            if delivered < count:
                break  # a run that lost events settles the question (and slow peers stop here)
            peer.settle(size["settle_timeout"])
        complete = [drain for drain in drains if drain is not None]
        return {
            "logged": logged,
            "planned": count,
            "burst_runs": len(fractions),
            "complete_runs": len(complete),
            "fraction": min(fractions),
            "all_s": max(complete) if len(complete) == runs else None,
            "planned_runs": runs,
            "all_s_median": median(complete) if complete else None,
            "burst_s": median(logs),
            "events_per_s": median(rates),
            "stats": peer.stats(),
        }


# -- 3. throughput -------------------------------------------------------------------------------


def _start_collector() -> tuple[subprocess.Popen[str], str, str, str]:
    # The ``eventlog`` command the package installs (next to this interpreter), else its module.
    script = shutil.which("eventlog", path=str(Path(sys.executable).parent))
    command = [script] if script else [sys.executable, "-m", "eventlog_handler.cli"]
    proc = subprocess.Popen(
        [*command, "serve", "--port", "0", "--db", ":memory:"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    url = project_token = user_token = ""
    for line in proc.stdout:
        if "serving at" in line:
            url = line.rsplit(" ", 1)[1].strip()
        elif "project token:" in line:
            project_token = line.split(":", 1)[1].split()[0]
        elif "user token:" in line:
            user_token = line.split(":", 1)[1].split()[0]
        elif "Press Ctrl-C" in line:
            break
    if not (url and project_token and user_token):
        proc.kill()
        raise RuntimeError("the local collector did not print its URL and tokens")
    return proc, url, project_token, user_token


def _stored(url: str, user_token: str) -> int:
    request = urllib.request.Request(
        f"{url}/api/v2/events?limit=1", headers={"Authorization": f"Bearer {user_token}"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return int(response.headers["X-Result-Count"])


def _sustained(
    count: Any, logged: int, start: float, timeout: float, stall: float
) -> dict[str, Any]:
    """Poll ``count()`` until it reaches ``logged``, stops growing for ``stall`` s, or time is
    up; the rate is what arrived by the last time the count grew."""
    last, last_change = 0, time.perf_counter()
    deadline = start + timeout
    while True:
        now = time.perf_counter()
        current = count()
        if current != last:
            last, last_change = current, now
        if current >= logged or now - last_change > stall or now > deadline:
            break
        time.sleep(0.01)
    elapsed = last_change - start
    return {
        "delivered": last,
        "seconds": elapsed,
        "events_per_s": last / elapsed if elapsed > 0 and last else 0.0,
    }


def _other_threads() -> list[str]:
    main = threading.main_thread()
    return sorted(t.name for t in threading.enumerate() if t is not main)


def case_throughput(peer: Peer, size: dict[str, Any], variant: str) -> dict[str, Any]:
    """``throughput`` records logged flat out; events/s until the sink has them all, and the
    CPU each thread spent per event.

    CPU: the logging (main) thread's ``time.thread_time()`` across the logging loop is the
    caller's; the process's ``time.process_time()`` from the first record until the sink has
    the last, minus the main thread's own over the same span (its polling of the sink), is the
    delivery threads' (the listener's, the worker's, and any thread they start, even one that
    ended meanwhile). For peers that deliver nothing (no-op, queue floor) the span ends when
    their queue is empty.
    """
    n = size["throughput"]
    if variant == "collector":
        return _throughput_collector(peer, size)
    with SinkProcess() as sink:
        logger = bench_logger()
        peer.attach(logger, Target(sink.http_url, sink.tcp_port), peer_options(size))
        logger.warning("ready")
        peer.settle(size["settle_timeout"])
        if peer.counter is not None:
            wait_for(lambda: _delivered(sink, peer) >= 1, size["settle_timeout"])
            base = _delivered(sink, peer)
        gc.collect()
        process0, thread0 = time.process_time(), time.thread_time()
        start = time.perf_counter()
        logged = _log_warnings(logger, n, size["log_budget"] * 2)
        log_s = time.perf_counter() - start
        caller_cpu = time.thread_time() - thread0
        if peer.counter is None:
            peer.settle(size["throughput_timeout"])
            result: dict[str, Any] = {"delivered": None, "seconds": time.perf_counter() - start}
        else:
            result = _sustained(
                lambda: _delivered(sink, peer) - base,
                logged,
                start,
                size["throughput_timeout"],
                size["stall"],
            )
            result.update(fraction=result["delivered"] / n)
        main_cpu = time.thread_time() - thread0
        delivery_cpu = max(0.0, (time.process_time() - process0) - main_cpu)
        result.update(
            logged=logged,
            planned=n,
            log_s=log_s,
            caller_cpu_us=caller_cpu / max(1, logged) * 1e6,
            delivery_cpu_us=delivery_cpu / max(1, logged) * 1e6,
            cpu_us=(caller_cpu + delivery_cpu) / max(1, logged) * 1e6,
            threads=_other_threads(),
            stats=peer.stats(),
        )
        if peer.counter is not None:
            result["all_s"] = result["seconds"] if result["delivered"] >= n else None
        else:
            result.pop("delivered")
        return result


def _throughput_collector(peer: Peer, size: dict[str, Any]) -> dict[str, Any]:
    """The same records into the local collector (``eventlog serve``), eventlog only."""
    if peer.name != "eventlog":
        return {"na": "eventlog only"}
    n = size["throughput"]
    proc, url, project_token, user_token = _start_collector()
    try:
        logger = bench_logger()
        peer.attach(logger, Target(url, 0, api_key=project_token), peer_options(size))
        start = time.perf_counter()
        logged = _log_warnings(logger, n, size["log_budget"] * 2)
        result = _sustained(
            lambda: int(peer.stats()["delivered"]),
            logged,
            start,
            size["throughput_timeout"],
            size["stall"],
        )
        result.update(logged=logged, planned=n, fraction=result["delivered"] / n)
        result["stored"] = _stored(url, user_token)
        result["stats"] = peer.stats()
        return result
    finally:
        proc.terminate()
        proc.wait(10)


# -- 4. idle, then one record ------------------------------------------------------------------


def case_idle(peer: Peer, size: dict[str, Any], variant: str) -> dict[str, Any]:
    """After ``idle_s`` seconds without logging, one warning (or one error record): seconds
    from the call until the sink has it, the worst of ``idle_runs``."""
    if peer.counter is None:
        return {"na": "delivers nothing"}
    with SinkProcess() as sink:
        logger = bench_logger()
        peer.attach(logger, Target(sink.http_url, sink.tcp_port), peer_options(size))
        logger.warning("ready")
        wait_for(lambda: _delivered(sink, peer) >= 1, size["settle_timeout"])
        waits: dict[str, list[float]] = {"warning": [], "error": []}
        for run in range(size["idle_runs"]):
            for kind in ("warning", "error"):
                time.sleep(size["idle_s"])
                base = _delivered(sink, peer)
                start = time.perf_counter()
                getattr(logger, kind)("run %d: after %.0f s of quiet", run, size["idle_s"])
                arrived = wait_for(
                    lambda base=base: _delivered(sink, peer) > base,  # type: ignore[misc]
                    65.0,
                    0.002,
                )
                waits[kind].append(time.perf_counter() - start if arrived else math.inf)
        return {
            "warning_s": max(waits["warning"]),
            "error_s": max(waits["error"]),
            "idle_s": size["idle_s"],
        }


# -- 5. memory against a dead server -------------------------------------------------------------


def case_memory(peer: Peer, size: dict[str, Any], variant: str) -> dict[str, Any]:
    port = closed_port()
    logger = bench_logger()
    peer.attach(logger, Target(f"http://127.0.0.1:{port}", port), peer_options(size))
    # First-use costs (worker, imports, the first failures) are not growth.
    _log_warnings(logger, size["memory_warmup"], 60.0)
    time.sleep(0.2)
    gc.collect()
    baseline = peak = rss_bytes()
    total, chunk = size["memory"], max(1, size["memory"] // 50)
    logged, start = 0, time.perf_counter()
    # A million records take the package and the stdlib pipeline 20-60 s on a busy 2-core
    # machine; sentry-sdk and logstash-async could not log them in minutes: they are cut short
    # (and marked) at the usual budget.
    fast = peer.name in ("noop", "floor", "stdlib") or peer.name.startswith("eventlog")
    deadline = start + (size["memory_budget"] if fast else size["log_budget"] * 2)
    while logged < total and time.perf_counter() < deadline:
        remaining = deadline - time.perf_counter()
        logged += _log_warnings(logger, min(chunk, total - logged), remaining)
        peak = max(peak, rss_bytes())
    seconds = time.perf_counter() - start
    time.sleep(0.2)
    peak = max(peak, rss_bytes())
    return {
        "logged": logged,
        "planned": total,
        "growth_mb": (peak - baseline) / 1e6,
        "baseline_mb": baseline / 1e6,
        "seconds": seconds,
        "stats": peer.stats(),
    }


# -- 6. exit with events pending -----------------------------------------------------------------


def exit_child(peer: Peer, size: dict[str, Any], variant: str, url: str, tcp_port: int) -> None:
    """The process whose exit is timed: log, print the mark, fall off the end of the script."""
    options = peer_options(size)
    if "shutdown_timeout" in size and peer.name in ("eventlog", "sentry"):
        options["shutdown_timeout"] = size["shutdown_timeout"]
    logger = bench_logger()
    peer.attach(logger, Target(url, tcp_port), options)
    _log_warnings(logger, size["exit_pending"], size["log_budget"])
    info = {"pending": peer.pending(), "shutdown_timeout": peer.shutdown_timeout()}
    sys.stdout.write(f"MARK {time.monotonic()!r} {json.dumps(info)}\n")
    sys.stdout.flush()


def case_exit(peer: Peer, size: dict[str, Any], variant: str, quick: bool) -> dict[str, Any]:
    if peer.counter is None:
        return {"na": "nothing pending"}
    with SinkProcess() as sink:
        if variant == "up":
            url, tcp_port = sink.http_url, sink.tcp_port
        elif variant == "down":
            port = closed_port()
            url, tcp_port = f"http://127.0.0.1:{port}", port
        else:  # hung: the connection is taken, no answer ever comes
            url, tcp_port = f"http://127.0.0.1:{sink.hung_port}", sink.hung_port
        command = [sys.executable, str(Path(__file__).resolve()), "exit-child", peer.name]
        command += ["--url", url, "--tcp-port", str(tcp_port), "--variant", variant]
        if quick:
            command.append("--quick")
        child = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ
        )
        assert child.stdout is not None and child.stderr is not None
        mark, info = None, {}
        for line in child.stdout:
            if line.startswith("MARK "):
                _, stamp, text = line.split(" ", 2)
                mark, info = float(stamp), json.loads(text)
                break
        killed = False
        try:
            child.wait(timeout=size["exit_kill_after"])
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            killed = True
        ended = time.monotonic()
        stderr = child.stderr.read()
        child.stdout.close()
        child.stderr.close()
        if mark is None:
            raise RuntimeError(f"the exiting process printed no mark: {stderr[-2000:]}")
        result: dict[str, Any] = {
            "exit_s": None if killed else ended - mark,
            "killed_after": size["exit_kill_after"] if killed else None,
            "logged": size["exit_pending"],
            **info,
        }
        if variant == "up":
            time.sleep(0.05)
            result["delivered"] = _delivered(sink, peer)
            result["fraction"] = result["delivered"] / size["exit_pending"]
        return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("case", choices=(*CASES, "exit-child"))
    parser.add_argument("peer", choices=sorted(PEERS))
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--variant", default="")
    parser.add_argument("--url", default="")
    parser.add_argument("--tcp-port", type=int, default=0)
    args = parser.parse_args(argv)
    peer = PEERS[args.peer]
    size = SIZES["quick" if args.quick else "full"]
    if args.case == "exit-child":
        exit_child(peer, size, args.variant, args.url, args.tcp_port)
        return 0
    if not peer.available():
        result: dict[str, Any] = {"na": "not installed"}
    elif args.case == "exit":
        result = case_exit(peer, size, args.variant, args.quick)
    else:
        result = {
            "caller": case_caller,
            "errors": case_errors,
            "burst": case_burst,
            "throughput": case_throughput,
            "memory": case_memory,
            "idle": case_idle,
        }[args.case](peer, size, args.variant)
    sys.stdout.write("RESULT " + json.dumps(result, default=str) + "\n")
    sys.stdout.flush()
    sys.stdout.close()
    os._exit(0)  # the case is over: don't time (or wait for) the peers' exit flush here


if __name__ == "__main__":
    sys.exit(main())
