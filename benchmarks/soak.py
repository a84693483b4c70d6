"""Soak: minutes of logging through rotating faults, then the accounting.

    python benchmarks/soak.py                 # 10 minutes
    python benchmarks/soak.py --minutes 1     # shorter
    python benchmarks/soak.py --seconds 15    # a smoke run

Four threads log through ``eventlog_handler.setup()`` (logs, errors with chained causes, and
some large events) into a scriptable loopback server that cycles through faults: healthy,
flapping 50% 503/reset, a 429 storm, 413 for large requests, 200 with an HTML body, answers that
never come, the server down, and the server restarting mid-batch. At the end the server heals,
everything is flushed, and the run prints: events captured, delivered, dropped by reason, peak
RSS, and reference ids the server accepted twice (must be 0). It exits non-zero when the
accounting does not hold.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
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


class Phases:
    """The fault schedule: each phase sets the server's behaviour for a while."""

    def __init__(self, seed: int) -> None:
        self.random = random.Random(seed)
        self.lock = threading.Lock()

    def flapping(self, events: list[dict[str, Any]], size: int) -> Any:
        with self.lock:
            roll = self.random.random()
        if roll < 0.25:
            return 503
        if roll < 0.5:
            return "reset"
        return 202

    @staticmethod
    def large_refused(events: list[dict[str, Any]], size: int) -> Any:
        return 413 if size > 20_000 else 202

    @staticmethod
    def html_ok(events: list[dict[str, Any]], size: int) -> Any:
        return Reply(200, b"<html><body>OK</body></html>", {"Content-Type": "text/html"})


def run(seconds: float, seed: int) -> int:
    server = FaultServer().start()
    port = server.port
    phases = Phases(seed)
    handle = eventlog_handler.setup(
        api_key=API_KEY,
        server_url=server.url,
        level="INFO",
        capture_exceptions=False,
        flush_interval=0.5,
        timeout=1.0,
        retry_initial=0.05,
        max_backoff=2.0,
        queue_size=10_000,
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
    index = 0
    seen_phases: list[str] = []
    while time.monotonic() - started < seconds:
        phase = schedule[index % len(schedule)]
        seen_phases.append(phase)
        server.script.clear()
        if phase == "healthy":
            server.default = 202
        elif phase == "flapping":
            server.default = phases.flapping
        elif phase == "429":
            server.default = 429
        elif phase == "413":
            server.default = phases.large_refused
        elif phase == "html":
            server.default = phases.html_ok
        elif phase == "hang":
            server.default = "hang"
        elif phase == "down":
            server.stop()
        elif phase == "restart":
            server.default = 202
        time.sleep(phase_length)
        if phase == "down" or phase == "hang":
            if phase == "hang":
                server.stop()
            server = _restart(server, port)
        if phase == "restart":  # stop while batches are in flight, then come back at once
            server.stop()
            server = _restart(server, port)
        index += 1

    stop.set()
    for thread in threads:
        thread.join(5)
    server.default = 202
    server.script.clear()
    flushed = handle.flush(60.0)
    stats = handle.stats()
    handle.close(5.0)
    server.stop()

    accepted = _accepted
    accepted.extend(server.accepted)
    duplicates = len(_duplicates) + len(server.duplicates)
    unique = len({event.get("reference_id") for event in accepted})
    settled = stats["delivered"] + stats["dropped_total"]
    figures = {
        "seconds": round(seconds, 1),
        "phases": seen_phases,
        "logged": sum(logged),
        "captured": stats["captured"],
        "delivered": stats["delivered"],
        "dropped": stats["dropped"],
        "queued_at_end": stats["queued"] + stats["in_flight"],
        "retries": stats["retries"],
        "server_accepted_unique": unique,
        "duplicates": duplicates,
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "flushed": flushed,
    }
    print(json.dumps(figures, indent=2))
    ok = (
        flushed
        and settled == stats["captured"]
        and duplicates == 0
        and unique == stats["delivered"]
        and stats["captured"] == sum(logged)
    )
    print("soak:", "OK" if ok else "FAILED (see the figures above)")
    return 0 if ok else 1


# Events accepted by servers that were stopped (each restart is a new server on the same port).
_accepted: list[dict[str, Any]] = []
_duplicates: list[str] = []
_ids: set[str] = set()


def _restart(old: FaultServer, port: int) -> FaultServer:
    for event in old.accepted:
        ref = str(event.get("reference_id"))
        if ref in _ids:
            _duplicates.append(ref)
        _ids.add(ref)
    _accepted.extend(old.accepted)
    _duplicates.extend(old.duplicates)
    for attempt in range(50):
        try:
            new = FaultServer(port=port).start()
        except OSError:
            time.sleep(0.05 * (attempt + 1))
            continue
        new._ids = set(_ids)  # a real service remembers the ids it accepted
        return new
    raise RuntimeError(f"could not restart the server on port {port}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--seconds", type=float, default=None, help="overrides --minutes")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    seconds = args.seconds if args.seconds is not None else args.minutes * 60
    return run(seconds, args.seed)


if __name__ == "__main__":
    sys.exit(main())
