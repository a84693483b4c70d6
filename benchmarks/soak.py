"""Soak: minutes of logging through rotating faults, and memory under two hostile patterns.

    python benchmarks/soak.py                              # faults, 10 minutes
    python benchmarks/soak.py --seconds 15                 # faults, a smoke run
    python benchmarks/soak.py --spool DIR                  # faults, with the durable spool in DIR
    python benchmarks/soak.py --pattern varying-data       # 20 s (--seconds for longer)
    python benchmarks/soak.py --pattern large              # 2,000 records (--records for more)
    python benchmarks/soak.py --pattern memory             # both memory patterns, one after the other

``faults``: four threads log through ``eventlog_handler.setup()`` (logs, errors with chained
causes, and some large events) into a scriptable loopback server (``tests/support/faultserver.py``, in a process of
its own) that cycles through faults: healthy, flapping 50% 503/reset, a 429 storm, 413 for
large requests, 200 with an HTML body, answers that never come, the server down, and the
server restarting mid-batch. At the end the server heals, everything is flushed, and the run
prints: events captured, delivered, dropped by reason, peak RSS of the logging process, and
reference ids the server accepted twice (must be 0). It exits non-zero when the accounting
does not hold.

``varying-data``: ``log.info("order updated", extra={"order": i, "blob": <1 KB, distinct>})`` as
fast as it goes for ``--seconds`` into a healthy counting sink (``sink.py``): one message, data
that differs every time (what a roll-up keyed on the message would have to hold).
``large``: ``--records`` records (``log.info``) each carrying a 100 KB string, the server down (a closed
loopback port). Both run the logging program in a child process, whose RSS is sampled from
outside (psutil, or ``/proc``, every 100 ms): the level once it is set up and warmed up, the
peak, the growth (peak minus that level), and the package's own counts. A growth above
``--max-growth-mb`` (100) fails the run.
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))  # the repository: its tests' fault server

from common import SinkProcess, closed_port  # noqa: E402

import eventlog_handler  # noqa: E402
from tests.support.faultserver import FaultServer, Reply  # noqa: E402

API_KEY = "soak-api-key-0123456789abcdef"


def peak_rss_mb() -> float:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def flapping(events: list[dict[str, Any]], size: int) -> Any:
    roll = random.random()
    if roll < 0.25:
        return 503
    if roll < 0.5:
        return "reset"
    return 202


def large_refused(events: list[dict[str, Any]], size: int) -> Any:
    return 413 if size > 20_000 else 202


def html_ok(events: list[dict[str, Any]], size: int) -> Any:
    return Reply(200, b"<html><body>OK</body></html>", {"Content-Type": "text/html"})


BEHAVIOURS: dict[str, Any] = {
    "healthy": 202,
    "flapping": flapping,
    "429": 429,
    "413": large_refused,
    "html": html_ok,
    "hang": "hang",
    "restart": 202,
}


def serve(control: Any, port: int) -> None:
    """The fault server, in a process of its own, driven by commands from the soak."""
    ids: set[str] = set()  # one memory of accepted ids across restarts, like the service
    totals = {"duplicates": 0, "rolled_up": 0}
    server: FaultServer | None = None

    def start() -> FaultServer:
        for attempt in range(100):
            try:
                return FaultServer(port=port, keep_events=False, ids=ids).start()
            except OSError:
                time.sleep(0.05 * (attempt + 1))
        raise RuntimeError(f"could not listen on port {port}")

    def end(old: FaultServer | None) -> None:
        if old is not None:
            old.stop()
            totals["duplicates"] += len(old.duplicates)
            totals["rolled_up"] += old.rolled_up

    server = start()
    control.send("ready")
    while True:
        command, argument = control.recv()
        if command == "phase":
            if argument == "down":
                end(server)
                server = None
                continue
            if server is None:
                server = start()
            server.default = BEHAVIOURS[argument]
            server.script.clear()
        elif command == "restart":
            end(server)
            server = start()
        elif command == "report":
            control.send(
                {
                    "accepted_unique": len(ids),
                    "rolled_up": totals["rolled_up"] + (server.rolled_up if server else 0),
                    "duplicates": totals["duplicates"] + (len(server.duplicates) if server else 0),
                }
            )
        elif command == "stop":
            end(server)
            server = None
            control.send("stopped")
            return


def run_faults(seconds: float, seed: int, spool: str | None = None) -> int:
    context = multiprocessing.get_context("fork")
    control, remote = context.Pipe()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server_process = context.Process(target=serve, args=(remote, port), daemon=True)
    server_process.start()
    assert control.recv() == "ready"
    handle = eventlog_handler.setup(
        api_key=API_KEY,
        server_url=f"http://127.0.0.1:{port}",
        level="INFO",
        capture_exceptions=False,
        flush_interval=0.5,
        timeout=1.0,
        retry_initial=0.05,
        max_backoff=2.0,
        spool_path=spool,
    )
    log = logging.getLogger("soak")
    stop = threading.Event()
    logged = [0] * 4

    def producer(number: int) -> None:
        rng = random.Random(seed + number)
        while not stop.is_set():
            kind = rng.random()
            if kind < 0.9:
                log.info("event %d from %d", logged[number], number, extra={"n": logged[number]})
            elif kind < 0.97:
                try:
                    try:
                        {}["missing"]
                    except KeyError as exc:
                        raise RuntimeError(f"failed {logged[number]}") from exc
                except RuntimeError:
                    log.exception("caught %d", logged[number])
            else:
                log.warning("large", extra={"blob": rng.randbytes(6000).hex()})
            logged[number] += 1
            time.sleep(rng.uniform(0, 0.002))

    threads = [threading.Thread(target=producer, args=(n,), daemon=True) for n in range(4)]
    for thread in threads:
        thread.start()

    schedule = ["healthy", "flapping", "429", "413", "html", "hang", "down", "restart"]
    phase_length = max(1.0, seconds / (len(schedule) * 2))
    started = time.monotonic()
    seen_phases: list[str] = []
    rss_peak = 0.0
    index = 0
    while time.monotonic() - started < seconds:
        phase = schedule[index % len(schedule)]
        seen_phases.append(phase)
        control.send(("phase", phase))
        end = time.monotonic() + phase_length
        while time.monotonic() < end:
            time.sleep(0.25)
            rss_peak = max(rss_peak, rss_mb())
        if phase == "restart":  # stop while batches are in flight, then come back at once
            control.send(("restart", None))
        index += 1

    stop.set()
    for thread in threads:
        thread.join(5)
    control.send(("phase", "healthy"))
    flushed = handle.flush(60.0)
    stats = handle.stats()
    handle.close(5.0)
    control.send(("report", None))
    report = control.recv()
    control.send(("stop", None))
    control.recv()
    server_process.join(10)

    settled = stats["delivered"] + stats["dropped_total"]
    figures = {
        "seconds": round(seconds, 1),
        "phases": len(seen_phases),
        "logged": sum(logged),
        "captured": stats["captured"],
        "delivered": stats["delivered"],
        "dropped": stats["dropped"],
        "queued_at_end": stats["queued"] + stats["in_flight"],
        "spooled_at_end": stats["spooled"],
        "spool": spool,
        "retries": stats["retries"],
        "server_accepted_unique": report["accepted_unique"],
        "server_rolled_up": report["rolled_up"],
        "duplicates": report["duplicates"],
        "peak_rss_mb": round(max(rss_peak, peak_rss_mb()), 1),
        "flushed": flushed,
    }
    print(json.dumps(figures, indent=2))
    ok = (
        flushed
        and settled == stats["captured"]
        and report["duplicates"] == 0
        and report["accepted_unique"] + report["rolled_up"] == stats["delivered"]
        and stats["captured"] == sum(logged)
    )
    print("soak:", "OK" if ok else "FAILED (see the figures above)")
    return 0 if ok else 1


def rss_mb() -> float:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


# -- memory patterns: the logging program in a child, its RSS sampled from outside ---------------


def child(pattern: str, url: str, seconds: float, records: int) -> None:
    """The logging program of a memory pattern. Prints ``READY`` once set up and warmed up,
    then logs, then prints ``DONE {json}`` with its counts."""
    handle = eventlog_handler.setup(
        api_key=API_KEY, server_url=url, level="INFO", capture_exceptions=False
    )
    log = logging.getLogger("soak")
    rng = random.Random(7)
    for i in range(200):  # warm-up: the worker, the connection (or the first failures)
        log.info("warming up %d", i)
    time.sleep(0.5)
    sys.stdout.write("READY\n")
    sys.stdout.flush()
    start = time.monotonic()
    logged = 0
    if pattern == "varying-data":
        while time.monotonic() - start < seconds:
            for _ in range(100):
                blob = rng.randbytes(512).hex()  # 1 KB of text, different every time
                log.info("order updated", extra={"order": logged, "blob": blob})
                logged += 1
    else:  # large: 100 KB strings, the server down
        for i in range(records):
            big = f"{i:08d}" + rng.randbytes(50_000).hex()[:99_992]
            log.info("large payload %d", i, extra={"payload": big})
            logged += 1
    elapsed = time.monotonic() - start
    flushed = handle.flush(30.0) if pattern == "varying-data" else None
    stats = handle.stats()
    figures = {
        "logged": logged,
        "log_seconds": round(elapsed, 2),
        "flushed": flushed,
        **{
            key: stats.get(key)
            for key in ("captured", "delivered", "dropped", "queued", "rolled_up", "memory_bytes")
        },
    }
    sys.stdout.write("DONE " + json.dumps(figures) + "\n")
    sys.stdout.flush()
    os._exit(0)  # the exit flush is not what this measures


def _rss_of(pid: int) -> int | None:
    try:
        import psutil

        return int(psutil.Process(pid).memory_info().rss)
    except ImportError:
        try:
            with open(f"/proc/{pid}/status") as status:
                for line in status:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            return None
    except Exception:  # the process ended
        return None
    return None


def run_memory(pattern: str, seconds: float, records: int, max_growth_mb: float) -> int:
    """One memory pattern: a child logs, this process samples its RSS every 100 ms."""
    sink = SinkProcess() if pattern == "varying-data" else None
    url = sink.http_url if sink is not None else f"http://127.0.0.1:{closed_port()}"
    try:
        command = [sys.executable, str(Path(__file__).resolve()), "--child", pattern]
        command += ["--url", url, "--seconds", str(seconds), "--records", str(records)]
        errors = tempfile.TemporaryFile("w+")  # noqa: SIM115 - closed below
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=errors, text=True)
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if line.strip() != "READY":
            proc.kill()
            raise RuntimeError(f"the logging process did not start: {line!r}")
        baseline = _rss_of(proc.pid) or 0
        peak, samples = baseline, 0
        done: dict[str, Any] = {}
        reader_lines: list[str] = []
        stdout = proc.stdout
        reader = threading.Thread(target=lambda: reader_lines.extend(stdout), daemon=True)
        reader.start()
        last = baseline
        while proc.poll() is None:
            rss = _rss_of(proc.pid)
            if rss:  # (0 once the process has ended)
                peak = max(peak, rss)
                samples += 1
                last = rss
            time.sleep(0.1)
        reader.join(5)
        for text in reader_lines:
            if text.startswith("DONE "):
                done = json.loads(text[5:])
        errors.seek(0)
        stderr_tail = errors.read()[-2000:]
        errors.close()
        counts = sink.counts() if sink is not None else {}
    finally:
        if sink is not None:
            sink.close()
    figures = {
        "pattern": pattern,
        "server": "healthy (counting sink)" if pattern == "varying-data" else "down (port closed)",
        "rss_after_warmup_mb": round(baseline / 1e6, 1),
        "rss_peak_mb": round(peak / 1e6, 1),
        "rss_growth_mb": round((peak - baseline) / 1e6, 1),
        "rss_last_sample_mb": round(last / 1e6, 1),
        "rss_samples": samples,
        **done,
    }
    if sink is not None:
        figures["sink_events"] = counts.get("events")
    print(json.dumps(figures, indent=2))
    if not done:
        print(f"the logging process printed no figures; its stderr ends with:\n{stderr_tail}")
    ok = bool(done) and figures["rss_growth_mb"] <= max_growth_mb
    if pattern == "varying-data":
        ok = ok and bool(done.get("flushed")) and done.get("delivered", 0) > 0
    print(
        f"soak {pattern}:",
        "OK" if ok else f"FAILED (growth over {max_growth_mb:g} MB, or no figures)",
    )
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--pattern", default="faults", choices=("faults", "varying-data", "large", "memory")
    )
    parser.add_argument("--minutes", type=float, default=None, help="faults: default 10")
    parser.add_argument(
        "--seconds", type=float, default=None, help="overrides --minutes (varying-data: 20)"
    )
    parser.add_argument("--records", type=int, default=2_000, help="large: records of 100 KB")
    parser.add_argument("--max-growth-mb", type=float, default=100.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--spool", default=None, help="a spool directory (e.g. on a small disk)")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--url", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, args.url, args.seconds or 20.0, args.records)
        return 0
    if args.pattern == "faults":
        minutes = 10.0 if args.minutes is None else args.minutes
        seconds = args.seconds if args.seconds is not None else minutes * 60
        return run_faults(seconds, args.seed, args.spool)
    seconds = args.seconds if args.seconds is not None else (args.minutes or 0) * 60 or 20.0
    patterns = ("varying-data", "large") if args.pattern == "memory" else (args.pattern,)
    failed = 0
    for pattern in patterns:
        failed += run_memory(pattern, seconds, args.records, args.max_growth_mb)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
