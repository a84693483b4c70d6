"""Where the time goes: the caller's thread and the delivery thread(s) of one peer, profiled.

    python benchmarks/profile_caller.py                          # eventlog, logger.warning
    python benchmarks/profile_caller.py --peer stdlib            # the stdlib pipeline
    python benchmarks/profile_caller.py --kind exception --calls 5000
    python benchmarks/profile_caller.py --kind error --top 40

The peer sends to the loopback sink (another process), as in the benchmark, and every message
differs (a counter), as in the benchmark. First an unprofiled pass gives the CPU per event of
the logging thread (``time.thread_time``) and of every other thread together (the process's
CPU minus the logging thread's, from the first record until everything is sent). Then a
profiled pass: a ``cProfile.Profile`` on the logging thread, and one on every thread started
after the script begins (``threading.Thread.run`` is wrapped before the peer is attached, so the
listener's or the worker's thread gets one; cleared when the profiled pass starts), timed with
``time.thread_time`` (CPU: a thread waiting on a lock, the network or ``sleep`` counts 0). Each
listing gives microseconds of CPU per log call, by function (own and cumulative time). cProfile adds its own
overhead to every function call: compare functions with each other, not with the table.

py-spy, where installed and allowed to attach, gives the same split without that overhead:
``py-spy record --threads -o profile.svg -- python benchmarks/profile_caller.py --no-profile``.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cases import _recurse
from common import SinkProcess
from peers import PEERS, Target, bench_logger

#: Profiles of the threads started since :func:`profile_new_threads`, by thread name.
THREAD_PROFILES: dict[str, cProfile.Profile] = {}


def profile_new_threads() -> None:
    """Give every thread started from now on a ``cProfile.Profile`` of its own (CPython
    profiles one thread per profiler; the delivery threads are started by the peer)."""
    original = threading.Thread.run

    def run(self: threading.Thread) -> None:
        profile = cProfile.Profile(time.thread_time)  # CPU: a thread's waits count 0
        THREAD_PROFILES[self.name] = profile
        profile.enable()
        try:
            original(self)
        finally:
            profile.disable()

    threading.Thread.run = run  # type: ignore[method-assign]


def listing(title: str, profile: cProfile.Profile, calls: int, top: int) -> list[str]:
    profile.create_stats()
    if not profile.stats:  # type: ignore[attr-defined]
        return ["", f"{title}: ran no Python code during the profiled pass"]
    stats = pstats.Stats(profile)
    rows = []
    for (filename, line, name), (_, ncalls, own, cumulative, _) in stats.stats.items():  # type: ignore[attr-defined]
        where = f"{Path(filename).name}:{line}({name})" if line else name
        rows.append((own, cumulative, ncalls, where))
    total = sum(row[0] for row in rows)
    per = 1e6 / calls
    out = [
        "",
        f"{title}: {total * per:.2f} us CPU per log call (profiled)",
        f"{'own us':>8} {'cum us':>8} {'calls/log':>9}  function",
    ]
    for own, cumulative, ncalls, where in sorted(rows, reverse=True)[:top]:
        out.append(f"{own * per:8.2f} {cumulative * per:8.2f} {ncalls / calls:9.3f}  {where}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peer", default="eventlog", choices=sorted(PEERS))
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--kind", default="warning", choices=("warning", "exception", "error"))
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--no-profile", action="store_true", help="the unprofiled pass only")
    args = parser.parse_args()
    peer = PEERS[args.peer]
    unprofiled = ""
    if not args.no_profile:
        # The unprofiled figures come from a process of their own: once the delivery threads
        # run under a profiler, their CPU is no longer what it is without one.
        done = subprocess.run(
            [sys.executable, *sys.argv, "--no-profile"], capture_output=True, text=True
        )
        unprofiled = done.stdout.strip()
        profile_new_threads()
    counter = [0]
    with SinkProcess() as sink:
        logger = bench_logger()
        peer.attach(logger, Target(sink.http_url, sink.tcp_port), {})

        def loop(n: int) -> None:
            first = counter[0]
            counter[0] += n
            if args.kind == "exception":
                for i in range(first, first + n):
                    try:
                        _recurse(10)
                    except ValueError:
                        logger.exception("job %d failed", i)
            elif args.kind == "error":
                for i in range(first, first + n):
                    logger.error("job %d failed: %s", i, "disk full")
            else:
                warning = logger.warning
                for i in range(first, first + n):
                    warning("user %s did %d things", "ann", i, extra={"a": 1, "b": "two"})

        loop(1000)
        peer.settle(10)
        process0, thread0 = time.process_time(), time.thread_time()
        start = time.perf_counter()
        loop(args.calls)
        wall = time.perf_counter() - start
        caller = time.thread_time() - thread0
        peer.settle(30)
        others = (time.process_time() - process0) - (time.thread_time() - thread0)
        per = 1e6 / args.calls
        out = [
            f"{peer.title}: logger.{args.kind}, {args.calls:,} calls, distinct messages",
            f"unprofiled: {wall * per:.2f} us wall per call on the logging thread; CPU per "
            f"event: logging thread {caller * per:.2f} us, other threads {others * per:.2f} us "
            "(until sent)",
        ]
        if not args.no_profile:
            out = unprofiled.splitlines() or [*out[:1], "(the unprofiled run failed)"]
            for profile in THREAD_PROFILES.values():
                profile.clear()  # the profiled pass only
            main_profile = cProfile.Profile(time.thread_time)
            main_profile.enable()
            loop(args.calls)
            main_profile.disable()
            peer.settle(30)
            out += listing("logging thread", main_profile, args.calls, args.top)
            for name, profile in THREAD_PROFILES.items():
                out += listing(f"thread {name!r}", profile, args.calls, args.top)
    print("\n".join(out))
    sys.stdout.flush()
    os._exit(0)  # the delivery threads are still being profiled: don't wait for them


if __name__ == "__main__":
    main()
