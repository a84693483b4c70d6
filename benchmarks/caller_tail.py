"""What makes the caller's slowest calls slow: the garbage collector, or the other thread.

    python benchmarks/caller_tail.py                 # 5 interleaved rounds, eventlog and stdlib
    python benchmarks/caller_tail.py --rounds 3 --calls 20000

The call is the caller case's (``logger.warning("user %s did %d things", "ann", n,
extra={...})``, every message distinct) against the loopback sink in another process, each
peer in a fresh process per round. Per call, its wall time and its thread's CPU time are
taken, and every collection of the garbage collector is noted (``gc.callbacks``). Printed per
peer, medians over the rounds:

- ``p50``, ``p99``: of the calls' wall time, in µs;
- ``gc/10k``: collections started during 10,000 calls (a collection runs after about 700 new
  container objects that are still alive: the more objects a call leaves behind until the
  worker takes them, the more often);
- ``slowest with gc``: of the 1 % slowest calls, how many had a collection run inside them;
- ``slowest waiting``: of the 1 % slowest calls, how many spent most of their time off the
  CPU (the interpreter was with the other thread), the rest being CPU of their own;
- ``kept/call``: container objects a call leaves alive until the delivery thread takes them
  (``gc.get_count()`` over 400 more calls, the collector paused): what drives ``gc/10k``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

PROGRAM = """
import bisect, gc, json, sys, time
sys.path.insert(0, {here!r})
from common import SinkProcess
from peers import PEERS, Target, bench_logger

peer = PEERS[{peer!r}]
starts = []
gc.callbacks.append(lambda phase, info: phase == "start" and starts.append(time.perf_counter_ns()))
with SinkProcess() as sink:
    logger = bench_logger()
    peer.attach(logger, Target(sink.http_url, sink.tcp_port), {{}})
    warning = logger.warning
    for index in range(2000):
        warning("user %s did %d things", "ann", index, extra={{"a": 1, "b": "two"}})
    peer.settle(10)
    starts.clear()
    wall, cpu, begun = [], [], []
    clock, thread_clock = time.perf_counter_ns, time.thread_time_ns
    for index in range({calls}):
        before, before_cpu = clock(), thread_clock()
        warning("user %s did %d things", "ann", index, extra={{"a": 1, "b": "two"}})
        cpu.append(thread_clock() - before_cpu)
        wall.append(clock() - before)
        begun.append(before)
    peer.settle(10)
    gc.disable()
    gc.collect()
    before = gc.get_count()[0]
    for index in range(400):  # fewer than a batch: nothing is taken meanwhile
        warning("user %s did %d things", "ann", index, extra={{"a": 1, "b": "two"}})
    kept = (gc.get_count()[0] - before) / 400
    gc.enable()
    peer.settle(10)
collections = [when for when in starts if begun[0] <= when <= begun[-1] + wall[-1]]
order = sorted(range(len(wall)), key=wall.__getitem__)
slowest = order[len(order) * 99 // 100:]
with_gc = 0
for index in slowest:
    at = bisect.bisect_left(collections, begun[index])
    with_gc += at < len(collections) and collections[at] <= begun[index] + wall[index]
waiting = sum(1 for index in slowest if wall[index] - cpu[index] > wall[index] / 2)
print(json.dumps({{
    "p50": wall[order[len(order) // 2]] / 1000,
    "p99": wall[order[len(order) * 99 // 100]] / 1000,
    "gc/10k": len(collections) * 10_000 / len(wall),
    "slowest with gc": with_gc * 100 / len(slowest),
    "slowest waiting": waiting * 100 / len(slowest),
    "kept/call": kept,
}}))
"""

PEER_NAMES = ("stdlib", "eventlog")


def run_round(peer: str, calls: int) -> dict[str, float]:
    source = PROGRAM.format(here=str(HERE), peer=peer, calls=calls)
    done = subprocess.run(
        [sys.executable, "-c", source], capture_output=True, text=True, timeout=600, check=True
    )
    figures: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=10_000)
    args = parser.parse_args(argv)
    results: dict[str, list[dict[str, float]]] = {name: [] for name in PEER_NAMES}
    for _ in range(args.rounds):
        for name in PEER_NAMES:  # interleaved: a slow moment of the machine hits both
            results[name].append(run_round(name, args.calls))
    columns = ("p50", "p99", "gc/10k", "slowest with gc", "slowest waiting", "kept/call")
    print(f"{args.calls:,} warnings per round, medians of {args.rounds} rounds")
    print(f"{'peer':<10}" + "".join(f"{column:>18}" for column in columns))
    for name in PEER_NAMES:
        cells = []
        for column in columns:
            value = statistics.median(result[column] for result in results[name])
            suffix = " %" if column.startswith("slowest") else (" us" if column[0] == "p" else "")
            cells.append(f"{value:.1f}{suffix}".rjust(18))
        print(f"{name:<10}" + "".join(cells))


if __name__ == "__main__":
    main()
