"""Ingest rate of the local collector: events per second stored from the package's own client.

    python benchmarks/ingest.py                      # 100,000 events into a file database
    python benchmarks/ingest.py --db memory          # ... into an in-memory database
    python benchmarks/ingest.py --events 20000 --engine
    python benchmarks/ingest.py --profile collector.prof   # cProfile the collector process

What it does, all on 127.0.0.1:

1. Builds the batches first, as the package sends them: events from the package's own builders
   (``log_event`` like the throughput case's warnings, and one error event with a chained cause
   in every 50), each encoded with :func:`eventlog_handler.wire._events.encode`, 500 to a JSON array,
   gzip-compressed by :func:`eventlog_handler.api._client.compress`. Every event has its own
   ``reference_id``, so none is discarded as a duplicate.
2. **Baseline**: posts them with :meth:`eventlog_handler.api._client.Client.post_payload`, one after the
   other (the delivery worker sends one batch at a time), to the counting sink
   (``benchmarks/sink.py``, another process: it gunzips, parses and counts). That is the
   ceiling of the client and of HTTP on this machine.
3. **Collector**: the same batches, the same way, to ``python -m eventlog_handler.collector`` in
   its own process (a file database in a temporary directory by default, as ``eventlog serve``
   uses). The collector answers 202 once a batch is stored. The figure is the events stored
   (``X-Result-Count`` of ``GET /api/v2/events``, asked after the last post) over the seconds
   from the first post until that answer; the collector process's CPU time per event is
   printed too (a steadier figure on a busy machine).
4. ``--engine`` also logs ``--events`` warnings through an ``EventLogHandler`` into a fresh
   collector and reports the rate at which they are stored (the engine's own speed is part of
   that figure).

The target: at least 50,000 events/s into the collector. Per-request latency (p50, p99) is
printed too. Nothing is asserted; the figures are printed.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import SinkProcess, machine

from eventlog_handler.api._client import Client, batch_body, compress
from eventlog_handler.wire._events import encode, error_event
from eventlog_handler.wire._logs import log_event

TARGET = 50_000
BATCH = 500


class CheckoutError(Exception):
    """The error the error events carry."""


def _failing() -> None:
    try:
        {"card": "4242"}["cvv"]
    except KeyError as exc:
        raise CheckoutError("payment failed") from exc


def build_batches(events: int, batch: int, seed: str) -> list[tuple[bytes, bool, int]]:
    """``(payload, gzipped, count)`` per batch, as the delivery worker posts them."""
    try:
        _failing()
    except CheckoutError as exc:
        failure = exc
    batches: list[tuple[bytes, bool, int]] = []
    encoded: list[bytes] = []
    for index in range(events):
        reference = f"{seed}-{index:08d}"
        if index % 50 == 49:
            event = error_event(
                failure,
                message="checkout failed for order 1001",
                level="Error",
                source="shop.checkout",
                reference_id=reference,
            )
        else:
            event = log_event(
                "user ann did 3 things",
                level="Warn",
                source="bench",
                data={"a": 1, "b": "two"},
                reference_id=reference,
            )
        encoded.append(encode(event))
        if len(encoded) == batch:
            payload, gzipped = compress(batch_body(encoded))
            batches.append((payload, gzipped, len(encoded)))
            encoded = []
    if encoded:
        payload, gzipped = compress(batch_body(encoded))
        batches.append((payload, gzipped, len(encoded)))
    return batches


def post_all(client: Client, batches: list[tuple[bytes, bool, int]]) -> dict[str, Any]:
    """Post every batch in turn; the seconds it took and the per-request latencies."""
    latencies: list[float] = []
    started = time.perf_counter()
    for payload, gzipped, count in batches:
        before = time.perf_counter()
        result = client.post_payload(payload, gzipped, count)
        latencies.append(time.perf_counter() - before)
        if result.status != 202:
            raise RuntimeError(f"answered {result.status}")
    seconds = time.perf_counter() - started
    latencies.sort()
    return {
        "seconds": seconds,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000,
    }


class CollectorProcess:
    """``python -m eventlog_handler.collector`` in a process of its own."""

    def __init__(self, db: str, profile: str | None = None) -> None:
        command = [sys.executable]
        if profile:
            command += ["-m", "cProfile", "-o", profile]
        command += ["-m", "eventlog_handler.collector", "--port", "0", "--db", db]
        self.proc = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        assert self.proc.stdout is not None
        fields: dict[str, str] = {}
        for line in self.proc.stdout:
            if "serving at" in line:
                fields["url"] = line.rsplit(" ", 1)[1].strip()
            elif "project token:" in line:
                fields["project"] = line.split(":", 1)[1].split()[0]
            elif "user token:" in line:
                fields["user"] = line.split(":", 1)[1].split()[0]
            elif "Press Ctrl-C" in line:
                break
        if len(fields) != 3:
            self.close()
            raise RuntimeError("the collector did not print its URL and tokens")
        self.url, self.project_token, self.user_token = (
            fields["url"],
            fields["project"],
            fields["user"],
        )

    def cpu_seconds(self) -> float | None:
        """User + system CPU seconds the collector process has used (Linux), or None."""
        try:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return None
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stored(self) -> int:
        request = urllib.request.Request(
            f"{self.url}/api/v2/events?limit=1",
            headers={"Authorization": f"Bearer {self.user_token}"},
        )
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(request, timeout=30) as response:
            return int(response.headers["X-Result-Count"])

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def run_sink(batches: list[tuple[bytes, bool, int]], warmup: list[Any]) -> dict[str, Any]:
    with SinkProcess() as sink:
        client = Client(sink.http_url, "b" * 40)
        post_all(client, warmup)
        base = sink.counts()["events"]
        result = post_all(client, batches)
        result["stored"] = sink.counts()["events"] - base
        client.close()
    return result


def run_collector(
    batches: list[tuple[bytes, bool, int]], warmup: list[Any], db: str, profile: str | None
) -> dict[str, Any]:
    folder = tempfile.mkdtemp(prefix="eventlog-ingest-")
    try:
        target = ":memory:" if db == "memory" else str(Path(folder) / "ingest.sqlite3")
        collector = CollectorProcess(target, profile)
        try:
            client = Client(collector.url, collector.project_token)
            post_all(client, warmup)
            base = collector.stored()
            cpu_before = collector.cpu_seconds()
            started = time.perf_counter()
            result = post_all(client, batches)
            result["stored"] = collector.stored() - base
            result["seconds"] = time.perf_counter() - started
            cpu_after = collector.cpu_seconds()
            if cpu_before is not None and cpu_after is not None and result["stored"]:
                result["cpu_us_per_event"] = (cpu_after - cpu_before) / result["stored"] * 1e6
            client.close()
        finally:
            collector.close()
        return result
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def run_engine(events: int, db: str) -> dict[str, Any]:
    from eventlog_handler import EventLogHandler

    folder = tempfile.mkdtemp(prefix="eventlog-ingest-")
    try:
        target = ":memory:" if db == "memory" else str(Path(folder) / "engine.sqlite3")
        collector = CollectorProcess(target)
        try:
            handler = EventLogHandler(collector.project_token, collector.url)
            logger = logging.getLogger("bench.ingest")
            logger.setLevel(logging.DEBUG)
            logger.propagate = False
            logger.addHandler(handler)
            started = time.perf_counter()
            for _ in range(events):
                logger.warning("user %s did %d things", "ann", 3, extra={"a": 1, "b": "two"})
            handler.engine.flush(120)
            seconds = time.perf_counter() - started
            logger.removeHandler(handler)
            handler.close()
            return {"seconds": seconds, "stored": collector.stored()}
        finally:
            collector.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--events", type=int, default=100_000, help="events per run")
    parser.add_argument("--batch", type=int, default=BATCH, help="events per request")
    parser.add_argument("--db", choices=("file", "memory"), default="file")
    parser.add_argument("--engine", action="store_true", help="also log through the handler")
    parser.add_argument("--no-sink", action="store_true", help="skip the sink baseline")
    parser.add_argument("--profile", metavar="PATH", help="cProfile the collector into PATH")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    args = parser.parse_args(argv)
    if args.events < 1 or args.batch < 1:
        parser.error("--events and --batch must be positive")

    seed = f"{os.getpid():x}{int(time.time()):x}"
    print(f"machine: {machine()}", file=sys.stderr)
    print(f"building {args.events} events in batches of {args.batch} ...", file=sys.stderr)
    batches = build_batches(args.events, args.batch, seed)
    warmup = build_batches(args.batch * 4, args.batch, seed + "w")
    sizes = [len(payload) for payload, _, _ in batches]
    figures: dict[str, Any] = {
        "machine": machine(),
        "events": args.events,
        "batch": args.batch,
        "requests": len(batches),
        "mean_request_bytes": statistics.mean(sizes),
        "db": args.db,
    }
    if not args.no_sink:
        print("posting to the counting sink ...", file=sys.stderr)
        figures["sink"] = run_sink(batches, warmup)
    print(f"posting to the collector ({args.db} database) ...", file=sys.stderr)
    figures["collector"] = run_collector(batches, warmup, args.db, args.profile)
    if args.engine:
        print("logging through EventLogHandler into the collector ...", file=sys.stderr)
        figures["engine"] = run_engine(args.events, args.db)

    print(f"\n{figures['machine']}")
    print(
        f"{args.events} events, {len(batches)} gzip'd requests of {args.batch} "
        f"(mean {figures['mean_request_bytes']:.0f} bytes), Client.post_payload one at a time\n"
    )
    print(f"{'into':<34}{'events/s':>12}{'stored':>10}{'p50 ms':>9}{'p99 ms':>9}{'CPU us/ev':>11}")
    rows = [("counting sink (baseline)", "sink"), (f"collector, {args.db} db", "collector")]
    rows.append(("collector via EventLogHandler", "engine"))
    for label, key in rows:
        result = figures.get(key)
        if result is None:
            continue
        result["events_per_s"] = result["stored"] / result["seconds"]
        p50 = f"{result['p50_ms']:9.1f}" if "p50_ms" in result else f"{'-':>9}"
        p99 = f"{result['p99_ms']:9.1f}" if "p99_ms" in result else f"{'-':>9}"
        cpu = result.get("cpu_us_per_event")
        cpu_text = f"{cpu:11.1f}" if cpu is not None else f"{'-':>11}"
        print(
            f"{label:<34}{result['events_per_s']:>12,.0f}{result['stored']:>10}{p50}{p99}{cpu_text}"
        )
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    if load is not None:
        print(f"\nload average (1 min) at the end: {load:.2f} on {os.cpu_count()} CPUs")
    cpu = figures["collector"].get("cpu_us_per_event")
    if cpu:
        print(f"collector CPU per event: {cpu:.1f} us, i.e. {1e6 / cpu:,.0f} events per CPU-second")
    rate = figures["collector"]["events_per_s"]
    complete = figures["collector"]["stored"] == args.events
    verdict = "PASS" if rate >= TARGET and complete else "FAIL"
    print(f"\ntarget: >= {TARGET:,} events/s stored by the collector, all of them: {verdict}")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
