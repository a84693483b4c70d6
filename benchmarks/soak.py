"""Soak: minutes of logging through rotating faults, then the accounting.

    python benchmarks/soak.py                 # 10 minutes
    python benchmarks/soak.py --minutes 1     # shorter
    python benchmarks/soak.py --seconds 15    # a smoke run
    python benchmarks/soak.py --spool DIR     # with the durable spool in DIR (a small disk?)

Four threads log through ``eventlog_handler.setup()`` (logs, errors with chained causes, and
some large events) into a scriptable loopback server that cycles through faults: healthy,
flapping 50% 503/reset, a 429 storm, 413 for large requests, 200 with an HTML body, answers that
never come, the server down, and the server restarting mid-batch. At the end the server heals,
everything is flushed, and the run prints: events captured, delivered, dropped by reason, peak
RSS of the logging process (the server runs in a process of its own, so its memory is not
counted), and reference ids the server accepted twice (must be 0). It exits non-zero when the
accounting does not hold.
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import random
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import eventlog_handler  # noqa: E402
from tests.transport.faultserver import FaultServer, Reply  # noqa: E402

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
    ids: set[str] = set()
    duplicates: list[str] = []
    extra = [0]  # events a roll-up (an event with ``count``) stood for beyond itself
    server: FaultServer | None = None

    def start() -> FaultServer:
        for attempt in range(100):
            try:
                new = FaultServer(port=port, keep_events=False)
            except OSError:
                time.sleep(0.05 * (attempt + 1))
                continue
            new._ids = ids  # one memory of accepted ids across restarts, like the service
            original_record = new.record

            def record(seen: Any, original: Any = original_record) -> None:
                fresh = [e for e in seen.events if e.get("reference_id") not in ids]
                original(seen)
                for event in fresh:
                    if event.get("reference_id") in ids:
                        extra[0] += int(event.get("count", 1)) - 1

            new.record = record  # type: ignore[method-assign]
            new.duplicates = duplicates
            return new.start()
        raise RuntimeError(f"could not listen on port {port}")

    server = start()
    control.send("ready")
    while True:
        command, argument = control.recv()
        if command == "phase":
            if argument == "down":
                if server is not None:
                    server.stop()
                    server = None
                continue
            if server is None:
                server = start()
            server.default = BEHAVIOURS[argument]
            server.script.clear()
        elif command == "restart":
            if server is not None:
                server.stop()
            server = start()
        elif command == "report":
            control.send(
                {"accepted_unique": len(ids), "rolled_up": extra[0], "duplicates": len(duplicates)}
            )
        elif command == "stop":
            if server is not None:
                server.stop()
            control.send("stopped")
            return


def run(seconds: float, seed: int, spool: str | None = None) -> int:
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--seconds", type=float, default=None, help="overrides --minutes")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--spool", default=None, help="a spool directory (e.g. on a small disk)")
    args = parser.parse_args(argv)
    seconds = args.seconds if args.seconds is not None else args.minutes * 60
    return run(seconds, args.seed, args.spool)


if __name__ == "__main__":
    sys.exit(main())
