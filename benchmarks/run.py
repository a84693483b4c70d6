"""Run the benchmarks and print one table: eventlog-handler against its peers and the targets.

    python benchmarks/run.py                 # every case, once
    python benchmarks/run.py --repeat 3      # medians of three runs
    python benchmarks/run.py --quick         # tiny sizes: checks that everything runs
    python benchmarks/run.py --cases caller,exit --peers eventlog,stdlib

Each case runs for each peer in a process of its own (``benchmarks/cases.py``), and each of those
sends to a counting sink in yet another process (``benchmarks/sink.py``), all on 127.0.0.1.
A peer that is not installed is shown as ``n/a``. Progress goes to stderr, the table to stdout.
See ``benchmarks/README.md``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import json
import math
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from statistics import median
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cases import CASES, SIZES
from common import HERE, machine
from peers import PEERS

REPO = HERE.parent
PEER_ORDER = ("noop", "floor", "stdlib", "eventlog", "sentry", "logstash")
#: Variants of the package shown only when asked for (``--peers ...,eventlog-spool``).
EXTRA_PEERS = ("eventlog-spool", "eventlog-spool-all")
ALL_PEERS = PEER_ORDER[:4] + EXTRA_PEERS + PEER_ORDER[4:]
VARIANTS: dict[str, tuple[str, ...]] = {
    "burst": ("20k", "200k"),
    "throughput": ("collector",),
    "exit": ("up", "down", "hung"),
}
STDLIB_PEER = (
    "stdlib queue = QueueHandler -> QueueListener -> a handler that JSON-encodes records and "
    "POSTs gzip'd batches of <= 500 with requests (partial batch when the queue runs empty); "
    "queue floor = the same QueueHandler -> QueueListener with a handler that does nothing"
)
#: The package's defaults that the latency targets follow.
FLUSH_INTERVAL, ERROR_DELAY = 3.0, 0.25

Key = tuple[str, str, str]  # case, peer, variant
Results = dict[Key, dict[str, Any]]


# -- running -------------------------------------------------------------------------------------


def run_one(case: str, peer: str, variant: str, quick: bool, timeout: float) -> dict[str, Any]:
    """Run one case for one peer in a fresh process; its ``RESULT`` line, or an error."""
    command = [sys.executable, str(HERE / "cases.py"), case, peer, "--variant", variant]
    if quick:
        command.append("--quick")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    )
    try:
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            cwd=str(REPO),
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"no result within {timeout:g} s"}
    for line in reversed(done.stdout.splitlines()):
        if line.startswith("RESULT "):
            result: dict[str, Any] = json.loads(line[len("RESULT ") :])
            return result
    tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
    return {"error": f"exit {done.returncode}: " + " | ".join(tail)}


def combine(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians of the numeric figures of repeated runs (``None``, "never", sorts last)."""
    for result in results:
        if "error" in result or "na" in result:
            return result
    combined: dict[str, Any] = dict(results[0])
    for key, value in results[0].items():
        if key in (
            "logged",
            "planned",
            "stats",
            "pending",
            "shutdown_timeout",
            "killed_after",
            "burst_runs",
            "planned_runs",
        ):
            continue
        if value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)):
            numbers = [math.inf if r.get(key) is None else float(r[key]) for r in results]
            middle = median(numbers)
            combined[key] = None if math.isinf(middle) else middle
    if "logged" in combined:
        combined["logged"] = min(int(r.get("logged") or 0) for r in results)
    combined["runs"] = len(results)
    return combined


def run_all(cases: list[str], peers: list[str], repeat: int, quick: bool, jobs: int) -> Results:
    tasks: list[tuple[Key, int]] = []
    for rep in range(repeat):
        for case in cases:
            for variant in VARIANTS.get(case, ("",)):
                for peer in peers:
                    tasks.append(((case, peer, variant), rep))
    raw: dict[Key, list[dict[str, Any]]] = {}
    timeout = 90.0 if quick else 900.0

    def work(task: tuple[Key, int]) -> tuple[Key, dict[str, Any], float]:
        (case, peer, variant), _rep = task
        if not PEERS[peer].available():
            return task[0], {"na": "not installed"}, 0.0
        start = time.monotonic()
        result = run_one(case, peer, variant, quick, timeout)
        return task[0], result, time.monotonic() - start

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for number, (key, result, seconds) in enumerate(pool.map(work, tasks), 1):
            raw.setdefault(key, []).append(result)
            label = "/".join(filter(None, key))
            status = "error" if "error" in result else "n/a" if "na" in result else "ok"
            print(
                f"[{number}/{len(tasks)}] {label}: {status} ({seconds:.1f} s)",
                file=sys.stderr,
                flush=True,
            )
    return {key: combine(results) for key, results in raw.items()}


# -- the table -----------------------------------------------------------------------------------


def code_version() -> str:
    """The package's version, and the commit of the work tree when it is a git checkout."""
    version = "?"
    try:
        text = (REPO / "eventlog_handler" / "_version.py").read_text()
        version = text.split("=", 1)[1].strip().strip("\"'")
    except (OSError, IndexError):
        pass
    try:
        commit = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(REPO), "status", "--porcelain", "--", "eventlog_handler"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = dirty = ""
    if commit:
        version += f", commit {commit}" + (" with uncommitted changes" if dirty else "")
    return version


def _n(value: float, digits: int = 1) -> str:
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:,.{digits}f}"


def _seconds(value: float | None, never: str) -> str:
    return never if value is None else f"{value:.2f} s"


def _exit_figure(result: dict[str, Any]) -> str:
    if result.get("exit_s") is None:
        return f"> {result['killed_after']:g} s (killed)"
    return f"{result['exit_s']:.2f} s"


Figure = Callable[[dict[str, Any]], str]


def rows(size: dict[str, Any]) -> list[tuple[str, str, str, Figure]]:
    """(label, case, variant, figure) of every row of the table."""
    burst, big, memory = size["burst"], size["big_burst"], size["memory"]
    runs, pending, idle = size["burst_runs"], size["exit_pending"], size["idle_s"]
    never = f"> {size['burst_timeout']:g} s"
    return [
        ("1 caller: warning(extra=), mean us", "caller", "", lambda r: _n(r["warning_us"])),
        ("1 caller: warning, p50 us", "caller", "", lambda r: _n(r["warning_p50_us"])),
        ("1 caller: warning, p99 us", "caller", "", lambda r: _n(r["warning_p99_us"])),
        ("1 caller: exception, 10 frames, mean us", "caller", "", lambda r: _n(r["exception_us"])),
        ("1 caller: exception, p99 us", "caller", "", lambda r: _n(r["exception_p99_us"])),
        (
            f"2 burst {burst:,} x{runs}: runs fully delivered",
            "burst",
            "20k",
            lambda r: f"{r['complete_runs']:.0f}/{r['burst_runs']}",
        ),
        (
            f"2 burst {burst:,}: worst run delivered",
            "burst",
            "20k",
            lambda r: f"{r['fraction']:.1%}",
        ),
        (
            f"2 burst {burst:,}: s until the sink has all (worst)",
            "burst",
            "20k",
            lambda r: _seconds(r["all_s"], never),
        ),
        (f"2 burst {burst:,}: s to log it", "burst", "20k", lambda r: _seconds(r["burst_s"], "")),
        (f"3 flat out {big:,}: delivered", "burst", "200k", lambda r: f"{r['fraction']:.1%}"),
        (
            f"3 flat out {big:,}: events/s into the sink",
            "burst",
            "200k",
            lambda r: _n(r["events_per_s"]),
        ),
        (
            f"3 flat out {big:,}: s until the sink has all",
            "burst",
            "200k",
            lambda r: _seconds(r["all_s"], "not all"),
        ),
        (
            f"3 flat out {big:,} -> local collector: events/s",
            "throughput",
            "collector",
            lambda r: _n(r["events_per_s"]),
        ),
        (
            f"4 idle {idle:g} s, then a warning: s to the sink",
            "idle",
            "",
            lambda r: _seconds(r["warning_s"], "never"),
        ),
        (
            f"4 idle {idle:g} s, then an error: s to the sink",
            "idle",
            "",
            lambda r: _seconds(r["error_s"], "never"),
        ),
        (f"5 memory {memory:,}, dead server: RSS MB", "memory", "", lambda r: _n(r["growth_mb"])),
        (f"6 exit, {pending:,} pending, server up", "exit", "up", _exit_figure),
        ("6 exit, server up: delivered", "exit", "up", lambda r: f"{r['fraction']:.1%}"),
        ("6 exit, server down (port closed)", "exit", "down", _exit_figure),
        ("6 exit, server hung (never answers)", "exit", "hung", _exit_figure),
    ]


def table(results: Results, peers: list[str], size: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The table's lines and its footnotes."""
    notes: list[str] = []
    header = ["case / figure (median)"] + [PEERS[p].title for p in peers]
    body: list[list[str]] = []
    for label, case, variant, figure in rows(size):
        line = [label]
        present = False
        for peer in peers:
            result = results.get((case, peer, variant))
            if result is None:
                line.append("")
                continue
            present = True
            if "error" in result:
                line.append("ERR")
                notes.append(f"ERR {PEERS[peer].title}, {case} {variant}: {result['error']}")
                continue
            if "na" in result:
                line.append("n/a" if result["na"] == "not installed" else "-")
                continue
            try:
                text = figure(result)
            except (KeyError, TypeError, ValueError) as exc:
                line.append("ERR")
                notes.append(f"ERR {PEERS[peer].title}, {label}: no figure ({exc!r})")
                continue
            planned, logged = result.get("planned"), result.get("logged")
            if planned and logged is not None and logged < planned:
                text += "*"
                note = (
                    f"* {PEERS[peer].title}, {case}: logged {logged:,} of {planned:,} records "
                    "within the case's time budget"
                )
                if note not in notes:
                    notes.append(note)
            line.append(text)
        if present:
            body.append(line)
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]
    lines = []
    for number, row in enumerate([header, *body]):
        cells = [row[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)
        ]
        lines.append("  ".join(cells).rstrip())
        if number == 0:
            lines.append("  ".join("-" * w for w in widths))
    for variant in VARIANTS["exit"]:
        pending = [
            f"{PEERS[p].title} {results[('exit', p, variant)]['pending']:,}"
            for p in peers
            if isinstance((results.get(("exit", p, variant)) or {}).get("pending"), int)
        ]
        if pending:
            notes.append(
                f"exit, server {variant}: events held at the exit mark: " + ", ".join(pending)
            )
    for case in ("burst", "throughput"):
        for variant in VARIANTS.get(case, ("",)):
            result = results.get((case, "eventlog", variant)) or {}
            dropped = {
                k: v for k, v in ((result.get("stats") or {}).get("dropped") or {}).items() if v
            }
            if dropped:
                notes.append(f"eventlog {case} {variant}: dropped {dropped}".replace("  ", " "))
    return lines, notes


# -- the targets ---------------------------------------------------------------------------------


def targets(results: Results, size: dict[str, Any]) -> list[list[str]]:
    """[target, figure, verdict] for each target, from this run's figures."""

    def get(case: str, peer: str, variant: str = "") -> dict[str, Any] | None:
        result = results.get((case, peer, variant))
        if result is None or "error" in result or "na" in result:
            return None
        return result

    out: list[list[str]] = []

    def check(name: str, figure: str | None, ok: bool | None) -> None:
        verdict = "n/a" if ok is None else "PASS" if ok else "FAIL"
        out.append([name, figure or "-", verdict])

    ours = get("caller", "eventlog")
    for kind, label in (("warning", "warning"), ("exception", "exception")):
        for peer, limit, figure_key, what in (
            ("stdlib", 1.3, f"{kind}_us", "mean"),
            ("stdlib", 1.3, f"{kind}_p99_us", "p99"),
            ("sentry", 0.1, f"{kind}_us", "mean"),
        ):
            other = get("caller", peer)
            name = f"caller cost, {label} {what}: <= {limit:g}x {PEERS[peer].title}"
            if ours is None or other is None:
                check(name, None, None)
                continue
            ratio = ours[figure_key] / other[figure_key]
            figure = f"{ratio:.3g}x ({_n(ours[figure_key])} / {_n(other[figure_key])} us)"
            check(name, figure, ratio <= limit)
    burst = get("burst", "eventlog", "20k")
    if burst is None:
        check("burst 20,000: every run fully delivered", None, None)
        check("burst: drained in < 1 s", None, None)
    else:
        check(
            f"burst {size['burst']:,}: every run fully delivered",
            f"{burst['complete_runs']:.0f} of {burst['planned_runs']} runs",
            burst["complete_runs"] == burst["planned_runs"],
        )
        all_s = burst["all_s"]
        check(
            "burst: drained in < 1 s from its first record (worst run)",
            _seconds(all_s, f"> {size['burst_timeout']:g} s"),
            all_s is not None and all_s < 1,
        )
    big = get("burst", "eventlog", "200k")
    check(
        f"flat out {size['big_burst']:,}: >= 99% delivered",
        None if big is None else f"{big['fraction']:.2%}",
        None if big is None else big["fraction"] >= 0.99,
    )
    stdlib_big = get("burst", "stdlib", "200k")
    check(
        "flat out: events/s >= 1.5x stdlib queue",
        None
        if big is None or stdlib_big is None
        else f"{big['events_per_s'] / stdlib_big['events_per_s']:.3g}x "
        f"({_n(big['events_per_s'])} / {_n(stdlib_big['events_per_s'])})",
        None
        if big is None or stdlib_big is None
        else big["events_per_s"] >= 1.5 * stdlib_big["events_per_s"],
    )
    idle = get("idle", "eventlog")
    for kind, delay in (("warning", FLUSH_INTERVAL), ("error", ERROR_DELAY)):
        check(
            f"idle, then {kind}: <= {'flush_interval' if kind == 'warning' else 'error_delay'}"
            f" + 1 = {delay + 1:g} s",
            None if idle is None else _seconds(idle[f"{kind}_s"], "never"),
            None if idle is None else idle[f"{kind}_s"] <= delay + 1,
        )
    memory = get("memory", "eventlog")
    check(
        f"RSS growth <= 50 MB for {size['memory']:,} records, dead server",
        None if memory is None else f"{memory['growth_mb']:.1f} MB",
        None
        if memory is None
        else (memory["growth_mb"] <= 50 and memory["logged"] >= size["memory"]),
    )
    for variant, extra in (("up", ""), ("down", ""), ("hung", " (extra)")):
        result = get("exit", "eventlog", variant)
        if result is None:
            check(f"exit, server {variant}{extra}", None, None)
            continue
        limit = float(result["shutdown_timeout"]) + 0.5
        exit_s = result.get("exit_s")
        ok = exit_s is not None and exit_s <= limit
        if variant == "up":
            ok = ok and result.get("fraction", 0) >= 1
        check(
            f"exit, server {variant}{extra}: <= shutdown_timeout + 0.5 = {limit:g} s",
            _exit_figure(result),
            ok,
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes (a smoke run)")
    parser.add_argument("--repeat", type=int, default=1, help="runs per figure (medians shown)")
    parser.add_argument("--cases", default=",".join(CASES), help="among " + ",".join(CASES))
    parser.add_argument(
        "--peers", default=",".join(PEER_ORDER), help="among " + ",".join(ALL_PEERS)
    )
    parser.add_argument(
        "--jobs", type=int, default=1, help="cases run at once (default 1; more skews timings)"
    )
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    args = parser.parse_args(argv)
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    peers = [p.strip() for p in args.peers.split(",") if p.strip()]
    for name, given, known in (("case", cases, CASES), ("peer", peers, ALL_PEERS)):
        unknown = [item for item in given if item not in known]
        if unknown or not given:
            parser.error(f"unknown {name}(s): {', '.join(unknown) or '(none)'}")
    peers = [p for p in ALL_PEERS if p in peers]
    size = SIZES["quick" if args.quick else "full"]
    command = shlex.join(["python", *sys.argv[:1], *(sys.argv[1:] if argv is None else argv)])
    results = run_all(cases, peers, max(1, args.repeat), args.quick, args.jobs)

    lines, notes = table(results, peers, size)
    out = [
        "eventlog-handler benchmarks "
        + datetime.datetime.now().isoformat(timespec="seconds")
        + (" (quick sizes: figures are not comparable to the targets)" if args.quick else ""),
        f"machine: {machine()}",
        f"eventlog-handler {code_version()}",
        f"command: {command}",
        f"runs: {max(1, args.repeat)} per figure (median); each case in its own process; "
        "sinks in another process on 127.0.0.1",
        STDLIB_PEER,
        "",
        *lines,
    ]
    if notes:
        out += ["", *notes]
    checks = targets(results, size)
    if checks:
        widths = [max(len(row[i]) for row in checks) for i in range(3)]
        out += ["", "targets (eventlog, this run)"]
        out += [f"  {a.ljust(widths[0])}  {b.rjust(widths[1])}  {c}" for a, b, c in checks]
    print("\n".join(out), flush=True)
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "command": command,
                    "machine": machine(),
                    "results": [
                        {"case": k[0], "peer": k[1], "variant": k[2], **v}
                        for k, v in results.items()
                    ],
                    "targets": checks,
                },
                indent=2,
                default=str,
            )
        )
    errors = [key for key, result in results.items() if "error" in result]
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
