"""The caller's cost of ``logger.debug`` under ``setup()``, which keeps DEBUG lines for the
trace log (``@trace``) by lowering the root logger to DEBUG when no handler of the program
would print them.

    python benchmarks/debug_cost.py            # 5 interleaved rounds of 200,000 calls each

Each configuration runs in a fresh process; nothing is sent (no record reaches the event level),
so no server is needed (the URL is a closed loopback port). Printed: the median per call, in
nanoseconds, for

- ``no setup``: Python's defaults (root at WARNING: ``debug`` returns at the level check);
- ``trace off``: ``setup(trace_size=0)`` (root at INFO: the same check);
- ``trace on``: ``setup()`` (root at DEBUG: a record is made and noted in the trace log);
- ``library``: ``setup()``, a debug call of ``urllib3`` (a logger whose records are never sent
  nor traced: left at INFO by ``setup()``, so its debug calls stay at the level check).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

CASES = {
    "no setup": ("", "app"),
    "trace off": ("eventlog_handler.setup(trace_size=0)", "app"),
    "trace on": ("eventlog_handler.setup()", "app"),
    "library": ("eventlog_handler.setup()", "urllib3.connectionpool"),
}

PROGRAM = """
import logging, os, sys, time
sys.path.insert(0, {root!r})
os.environ["EVENTLOG_API_KEY"] = "benchmark-key-0123456789abcdef0123456789"
os.environ["EVENTLOG_SERVER_URL"] = "http://127.0.0.1:9"
import eventlog_handler
{setup}
log = logging.getLogger({logger!r})
calls = {calls}
for index in range(2000):
    log.debug("warm %s", index)
start = time.perf_counter_ns()
for index in range(calls):
    log.debug("loaded cart %s", index)
print((time.perf_counter_ns() - start) / calls)
"""


def run_case(name: str, calls: int) -> float:
    setup, logger = CASES[name]
    source = PROGRAM.format(
        root=str(Path(__file__).resolve().parents[1]), setup=setup, logger=logger, calls=calls
    )
    done = subprocess.run(
        [sys.executable, "-c", source], capture_output=True, text=True, timeout=300, check=True
    )
    return float(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=200_000)
    options = parser.parse_args()
    figures: dict[str, list[float]] = {name: [] for name in CASES}
    names = list(CASES)
    for round_number in range(options.rounds):
        for name in names if round_number % 2 == 0 else reversed(names):
            figures[name].append(run_case(name, options.calls))
    print(f"logger.debug per call, median of {options.rounds} rounds of {options.calls:,} calls")
    for name, values in figures.items():
        print(f"  {name:<10} {statistics.median(values):8.0f} ns")


if __name__ == "__main__":
    main()
