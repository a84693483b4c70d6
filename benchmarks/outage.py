"""A long outage with the durable spool: more events than the memory queue holds, then recovery.

    python benchmarks/outage.py                   # a 10-minute outage
    python benchmarks/outage.py --seconds 30      # a short one

A program logs steadily (``--rate`` events per second, with an error now and then) through
``eventlog_handler.setup(spool_path=...)`` while the service is unreachable (nothing listens on
its port). Disk use of the spool directory is sampled against ``spool_max_bytes``. Then the
service comes up (a loopback server in a process of its own) and the run prints: events
captured, the most that were on disk, the peak disk use against the bound, how long the spool
took to drain, events delivered, dropped by reason, and reference ids accepted twice (0).
It exits non-zero when the accounting does not hold.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import multiprocessing
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' fault server

import eventlog_handler
from tests.support.faultserver import FaultServer

API_KEY = "outage-api-key-0123456789abcdef"


def serve(control: Any, port: int) -> None:
    server = FaultServer(port=port, keep_events=False).start()
    control.send("ready")
    control.recv()
    control.send({"accepted_unique": len(server.ids), "duplicates": len(server.duplicates)})
    server.stop()


def peak_rss_mb() -> float:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def disk_bytes(folder: Path) -> int:
    total = 0
    for path in folder.glob("*"):
        with contextlib.suppress(OSError):
            total += path.stat().st_size
    return total


def run(seconds: float, rate: float, bound: int, spool_dir: str | None = None) -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    folder = Path(spool_dir) if spool_dir else Path(tempfile.mkdtemp(prefix="eventlog-outage-"))
    handle = eventlog_handler.setup(
        api_key=API_KEY,
        server_url=f"http://127.0.0.1:{port}",
        level="INFO",
        capture_exceptions=False,
        spool_path=str(folder),
        spool_max_bytes=bound,
        queue_size=10_000,
        retry_initial=0.2,
        max_backoff=5.0,
        timeout=2.0,
    )
    log = logging.getLogger("outage")
    started = time.monotonic()
    logged = 0
    peak_disk = peak_spooled = 0
    next_sample = started
    while time.monotonic() - started < seconds:
        target = int((time.monotonic() - started) * rate)
        while logged < target:
            if logged % 200 == 0:
                try:
                    raise TimeoutError(f"upstream {logged} timed out")
                except TimeoutError:
                    log.exception("request %d failed", logged)
            else:
                log.info("request %d served", logged, extra={"n": logged, "path": "/api/items"})
            logged += 1
        if time.monotonic() >= next_sample:
            peak_disk = max(peak_disk, disk_bytes(folder))
            peak_spooled = max(peak_spooled, handle.stats()["spooled"])
            next_sample += 0.5
        time.sleep(0.01)
    during = handle.stats()

    context = multiprocessing.get_context("fork")
    control, remote = context.Pipe()
    process = context.Process(target=serve, args=(remote, port), daemon=True)
    process.start()
    assert control.recv() == "ready"
    recovered = time.monotonic()
    flushed = handle.flush(300.0)
    drain_s = time.monotonic() - recovered
    stats = handle.stats()
    handle.close(5.0)
    control.send("report")
    report = control.recv()
    process.join(10)

    figures = {
        "outage_seconds": seconds,
        "logged": logged,
        "captured": stats["captured"],
        "queue_size": 10_000,
        "spooled_at_most": peak_spooled,
        "dropped_during_outage": during["dropped"],
        "spool_bound_bytes": bound,
        "spool_disk_peak_bytes": peak_disk,
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "drain_seconds_after_recovery": round(drain_s, 2),
        "delivered": stats["delivered"],
        "dropped": stats["dropped"],
        "server_accepted_unique": report["accepted_unique"],
        "duplicates": report["duplicates"],
        "flushed": flushed,
    }
    print(json.dumps(figures, indent=2))
    ok = (
        flushed
        and stats["captured"] == logged
        and stats["delivered"] + stats["dropped_total"] == stats["captured"]
        and report["accepted_unique"] == stats["delivered"]
        and report["duplicates"] == 0
        and (peak_disk <= bound or spool_dir is not None)  # a small disk is its own bound
    )
    print("outage:", "OK" if ok else "FAILED (see the figures above)")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--rate", type=float, default=200.0, help="events per second")
    parser.add_argument("--bound", type=int, default=100_000_000, help="spool_max_bytes")
    parser.add_argument("--spool-dir", default=None, help="the spool directory (a small disk?)")
    args = parser.parse_args(argv)
    return run(args.seconds, args.rate, args.bound, args.spool_dir)


if __name__ == "__main__":
    sys.exit(main())
