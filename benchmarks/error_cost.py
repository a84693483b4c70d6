"""The caller's cost of errors: ``logger.exception`` (a 10-frame traceback) and ``logger.error``
without an exception, with ``include_locals`` off (the default) and on, for this work tree and,
optionally, another one (an earlier commit: ``git worktree add /tmp/base <commit>``; a base
without ``include_locals`` is measured with the defaults only).

    python benchmarks/error_cost.py                           # this tree, 5 rounds
    python benchmarks/error_cost.py --base /tmp/base          # against another tree

Each figure is the mean microseconds per call of 2,000 calls after 200 warm-up calls, in a fresh
process whose events go to the counting sink in another process (``sink.py``), with the
package's defaults otherwise. The configurations run in interleaved rounds (the order reversed
every other round); printed: the median over the rounds of each mean, and with ``--base`` the
median of the per-round ratios this tree / base.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import SinkProcess  # noqa: E402

PROGRAM = """
import json, logging, os, sys, time
import eventlog_handler

options = json.loads(sys.argv[1])
# The program has a handler of its own (it does nothing), as most programs have a console: so
# the figure is the package's cost, not the standard library formatting each traceback for
# logging.lastResort, which setup() keeps for a program without one (before 8cad27d, setup()
# left such a program's console silent, which made a base from then look twice as fast).
logging.getLogger().addHandler(logging.NullHandler())
eventlog_handler.setup(**options)
log = logging.getLogger("bench.errors")


def recurse(depth):
    if depth <= 1:
        raise ValueError("failed at the bottom")
    recurse(depth - 1)


def exception(i):
    try:
        recurse(10)
    except ValueError:
        before = time.perf_counter_ns()
        log.exception("job %d failed", i)
        return time.perf_counter_ns() - before


def error(i):
    before = time.perf_counter_ns()
    log.error("job %d failed: %s", i, "disk full")
    return time.perf_counter_ns() - before


kind = sys.argv[2]
call = exception if kind == "exception" else error
for i in range(200):
    call(i)
spent = [call(i) for i in range(200, 2200)]
print(eventlog_handler.__file__)
print(json.dumps(sum(spent) / len(spent) / 1000))
os._exit(0)  # the figure is the caller's: delivery is not waited for
"""

KINDS = ("exception", "error")
LOCALS = (False, True)


def measure(tree: Path, sink: SinkProcess, kind: str, with_locals: bool) -> float:
    options = {
        "server_url": sink.http_url,
        "api_key": "benchmark-key-0123456789abcdef0123456789",
    }
    if with_locals:
        options["include_locals"] = True
    env = dict(os.environ)
    env["PYTHONPATH"] = str(tree)
    env.pop("EVENTLOG_API_KEY", None)
    env.pop("EVENTLOG_SERVER_URL", None)
    # ``python -c`` puts the working directory first on ``sys.path``: run in the tree, so that
    # its package is the one imported (from the repository's root, the work tree's package
    # would shadow ``PYTHONPATH`` and a base would measure this tree).
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, json.dumps(options), kind],
        env=env,
        cwd=str(tree),
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    imported, figure = done.stdout.strip().splitlines()[-2:]
    if not Path(imported).resolve().is_relative_to(tree):
        raise SystemExit(f"measuring {tree} imported the package from {imported}")
    return float(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", help="another work tree to compare with")
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args()
    trees = {"this tree": HERE.parent}
    if options.base:
        trees["base"] = Path(options.base).resolve()
    # A base from before include_locals existed is measured with its defaults only.
    configurations = [
        (name, kind, loc)
        for kind in KINDS
        for loc in LOCALS
        for name in trees
        if not (loc and name == "base")
    ]
    figures: dict[tuple[str, str, bool], list[float]] = {c: [] for c in configurations}
    with SinkProcess() as sink:
        for round_number in range(options.rounds):
            order = configurations if round_number % 2 == 0 else configurations[::-1]
            for name, kind, with_locals in order:
                figures[(name, kind, with_locals)].append(
                    measure(trees[name], sink, kind, with_locals)
                )
    print(f"caller's mean per call, us (median of {options.rounds} interleaved rounds)")
    for kind in KINDS:
        for with_locals in LOCALS:
            label = f"{kind:<9} locals {'on ' if with_locals else 'off'}"
            cells = [
                f"{name} {statistics.median(figures[(name, kind, with_locals)]):7.1f}"
                for name in trees
                if (name, kind, with_locals) in figures
            ]
            line = f"  {label}  " + "   ".join(cells)
            if ("base", kind, with_locals) in figures:
                ratios = [
                    new / old
                    for new, old in zip(
                        figures[("this tree", kind, with_locals)],
                        figures[("base", kind, with_locals)],
                        strict=True,
                    )
                ]
                line += f"   ratio {statistics.median(ratios):.2f}x"
            print(line)


if __name__ == "__main__":
    main()
