"""Where a log call's time goes: cProfile around the caller-cost loop of one peer.

    python benchmarks/profile_caller.py                    # eventlog, logger.warning
    python benchmarks/profile_caller.py --peer stdlib --exception --calls 5000

The peer sends to the loopback sink (another process), as in the benchmark. Only the logging
thread is profiled; the listing gives microseconds per log call, by function (own time and
cumulative time), so it reads directly against the caller-cost row of the table. cProfile adds
its own overhead to every function call: compare functions with each other, not with the table.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cases import _recurse
from common import SinkProcess
from peers import PEERS, Target, bench_logger


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--peer", default="eventlog", choices=sorted(PEERS))
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--exception", action="store_true", help="logger.exception, 10 frames")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    peer = PEERS[args.peer]
    with SinkProcess() as sink:
        logger = bench_logger()
        peer.attach(logger, Target(sink.http_url, sink.tcp_port), {})

        def loop(n: int) -> None:
            if args.exception:
                for i in range(n):
                    try:
                        _recurse(10)
                    except ValueError:
                        logger.exception("job %d failed", i)
            else:
                for _ in range(n):
                    logger.warning("user %s did %d things", "ann", 3, extra={"a": 1, "b": "two"})

        loop(1000)
        peer.settle(10)
        start = time.perf_counter()
        loop(args.calls)
        plain = (time.perf_counter() - start) / args.calls * 1e6
        peer.settle(10)
        profile = cProfile.Profile()
        profile.enable()
        loop(args.calls)
        profile.disable()
        peer.settle(10)
    stats = pstats.Stats(profile)
    rows = []
    for (filename, line, name), (_, calls, own, cumulative, _) in stats.stats.items():  # type: ignore[attr-defined]
        where = f"{Path(filename).name}:{line}({name})" if line else name
        rows.append((own, cumulative, calls, where))
    total = sum(row[0] for row in rows)
    per = 1e6 / args.calls
    kind = "logger.exception" if args.exception else "logger.warning"
    print(f"{peer.title}: {kind}, {args.calls:,} calls")
    print(f"unprofiled: {plain:.2f} us per call; profiled: {total * per:.2f} us per call")
    print(f"{'own us':>8} {'cum us':>8} {'calls/log':>9}  function")
    for own, cumulative, calls, where in sorted(rows, reverse=True)[: args.top]:
        print(f"{own * per:8.2f} {cumulative * per:8.2f} {calls / args.calls:9.2f}  {where}")
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
