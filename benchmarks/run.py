"""Run the benchmarks: eventlog-handler against the stdlib pipeline, in interleaved rounds.

    python benchmarks/run.py                 # 5 rounds of the headline cases, the rest once
    python benchmarks/run.py --rounds 9      # more rounds, steadier medians
    python benchmarks/run.py --quick         # tiny sizes, 2 rounds: checks that everything runs
    python benchmarks/run.py --cases caller,throughput --peers stdlib,eventlog

The headline cases (caller, errors, throughput) run in rounds: in each round every peer's case
runs once, each in a process of its own (``benchmarks/cases.py``), then the next round; the
order of the peers alternates from round to round. eventlog / stdlib pipeline is computed per
round, and the targets are checked against the median of those ratios. The other cases, and the
sentry-sdk and logstash-async columns, run once, after the rounds. Every peer sends to a counting
sink in another process (``benchmarks/sink.py``) on 127.0.0.1. Progress goes to stderr; the
report goes to stdout and to ``--output`` (``benchmarks/results.txt``). See
``benchmarks/README.md``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import importlib.util
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
#: Peers that run in every round; the others (slow: seconds per call) run once.
ROUND_PEERS = ("noop", "floor", "stdlib", "eventlog", *EXTRA_PEERS)
#: (case, variant) run in rounds.
HEADLINE: tuple[tuple[str, str], ...] = (("caller", ""), ("errors", ""), ("throughput", ""))
#: (case, peer) of the rounds run in the first round only: context, not compared (saves ~1 min).
FIRST_ROUND_ONLY = {("throughput", "noop"), ("throughput", "floor")}
#: (case, variant) run once, after the rounds.
ONCE: tuple[tuple[str, str], ...] = (
    ("throughput", "collector"),
    ("burst", ""),
    ("idle", ""),
    ("memory", ""),
    ("exit", "up"),
    ("exit", "down"),
    ("exit", "hung"),
)
DELIVERING = ("stdlib", "eventlog", *EXTRA_PEERS, "sentry", "logstash")
#: Which peers a (case, variant) is run for; the rest show "-".
APPLIES: dict[tuple[str, str], tuple[str, ...]] = {
    ("caller", ""): ALL_PEERS,
    # The queue floor's exception cost is the stdlib pipeline's (the same QueueHandler.prepare).
    ("errors", ""): tuple(p for p in ALL_PEERS if p != "floor"),
    ("throughput", ""): ALL_PEERS,
    ("throughput", "collector"): ("eventlog",),
    ("burst", ""): DELIVERING,
    ("idle", ""): DELIVERING,
    ("memory", ""): DELIVERING,
    ("exit", "up"): DELIVERING,
    ("exit", "down"): DELIVERING,
    ("exit", "hung"): DELIVERING,
}
TITLES = {**{name: peer.title for name, peer in PEERS.items()}}
PEER_NOTES = (
    "stdlib pipeline = QueueHandler (stdlib prepare) on a SimpleQueue -> QueueListener -> a "
    "handler that builds the event dict per record (message, level, source, date, data from "
    "extras), json-encodes, gzips (level 6) and POSTs with one requests.Session full batches "
    "of 500, and a partial batch once its oldest record is flush_interval (3 s) old; no retry",
    "queue floor = the same QueueHandler -> SimpleQueue -> QueueListener, handler does nothing; "
    "no-op = logger.warning into a handler that does nothing, on the caller's thread",
)
#: The package's defaults that the latency targets follow.
FLUSH_INTERVAL, ERROR_DELAY = 3.0, 0.25
#: Headline targets: (label, case, figure key, "<=" or ">=", limit).
HEADLINE_TARGETS = (
    ("caller mean, warning(extra=)", "caller", "warning_us", "<=", 1.0),
    ("caller p99, warning(extra=)", "caller", "warning_p99_us", "<=", 1.0),
    ("flat out: events/s into the sink", "throughput", "events_per_s", ">=", 1.3),
)
#: Headline figures shown as ratios without a target.
HEADLINE_INFO = (
    ("caller p50, warning(extra=)", "caller", "warning_p50_us"),
    ("flat out: CPU us/event, caller thread", "throughput", "caller_cpu_us"),
    ("flat out: CPU us/event, delivery threads", "throughput", "delivery_cpu_us"),
    ("flat out: CPU us/event, both", "throughput", "cpu_us"),
)

Key = tuple[str, str, str]  # case, peer, variant
Results = dict[Key, dict[str, Any]]
Rounds = dict[Key, list[dict[str, Any]]]  # every round's result, in order


# -- running -------------------------------------------------------------------------------------


#: Where the measured package is imported from (``--package-dir``; the work tree by default).
PACKAGE_DIR = REPO


def run_one(case: str, peer: str, variant: str, quick: bool, timeout: float) -> dict[str, Any]:
    """Run one case for one peer in a fresh process; its ``RESULT`` line, or an error."""
    command = [sys.executable, str(HERE / "cases.py"), case, peer, "--variant", variant]
    if quick:
        command.append("--quick")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(PACKAGE_DIR), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
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


_KEEP = ("logged", "planned", "stats", "pending", "shutdown_timeout", "killed_after")
_KEEP += ("burst_runs", "planned_runs", "threads")


def combine(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians of the numeric figures of the rounds (``None``, "never", sorts last), over the
    rounds that gave figures; a round that failed is counted in ``failed_rounds``."""
    good = [r for r in results if "error" not in r and "na" not in r]
    if not good:
        return results[0]
    failed = [r for r in results if "error" in r]
    results = good
    combined: dict[str, Any] = dict(results[0])
    for key, value in results[0].items():
        if key in _KEEP:
            continue
        if value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)):
            numbers = [math.inf if r.get(key) is None else float(r[key]) for r in results]
            middle = median(numbers)
            combined[key] = None if math.isinf(middle) else middle
    if "logged" in combined:
        combined["logged"] = min(int(r.get("logged") or 0) for r in results)
    combined["runs"] = len(results)
    if failed:
        combined["failed_rounds"] = len(failed)
        combined["failed_error"] = failed[0]["error"]
    return combined


def schedule(cases: list[str], peers: list[str], rounds: int) -> list[tuple[Key, int]]:
    """The tasks in the order they run: the rounds (peers alternating direction), then the
    cases and peers that run once."""
    tasks: list[tuple[Key, int]] = []
    in_rounds = [p for p in peers if p in ROUND_PEERS]
    for number in range(rounds):
        order = in_rounds if number % 2 == 0 else in_rounds[::-1]
        for case, variant in HEADLINE:
            if case in cases:
                tasks += [
                    ((case, p, variant), number)
                    for p in order
                    if p in APPLIES[(case, variant)]
                    and (number == 0 or (case, p) not in FIRST_ROUND_ONLY)
                ]
    for case, variant in HEADLINE:
        if case in cases:
            tasks += [
                ((case, p, variant), 0)
                for p in peers
                if p not in ROUND_PEERS and p in APPLIES[(case, variant)]
            ]
    for case, variant in ONCE:
        if case in cases:
            tasks += [((case, p, variant), 0) for p in peers if p in APPLIES[(case, variant)]]
    return tasks


def run_all(cases: list[str], peers: list[str], rounds: int, quick: bool, jobs: int) -> Rounds:
    tasks = schedule(cases, peers, rounds)
    raw: Rounds = {}
    timeout = 90.0 if quick else 900.0

    def work(task: tuple[Key, int]) -> tuple[Key, int, dict[str, Any], float]:
        (case, peer, variant), number = task
        if not PEERS[peer].available():
            return task[0], number, {"na": "not installed"}, 0.0
        start = time.monotonic()
        result = run_one(case, peer, variant, quick, timeout)
        return task[0], number, result, time.monotonic() - start

    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for count, (key, number, result, seconds) in enumerate(pool.map(work, tasks), 1):
            raw.setdefault(key, []).append(result)
            label = "/".join(filter(None, key))
            status = "error" if "error" in result else "n/a" if "na" in result else "ok"
            where = (
                f"round {number + 1}"
                if key[1] in ROUND_PEERS and (key[0], key[2]) in HEADLINE
                else "once"
            )
            print(
                f"[{count}/{len(tasks)} {time.monotonic() - started:5.0f} s] {where}: {label}: "
                f"{status} ({seconds:.1f} s)"
                + (f" {result['error']}" if "error" in result else ""),
                file=sys.stderr,
                flush=True,
            )
    return raw


# -- formatting ----------------------------------------------------------------------------------


def code_version() -> str:
    """The package's version, and the commit of the work tree when it is a git checkout."""
    version = "?"
    if PACKAGE_DIR != REPO:
        try:
            text = (PACKAGE_DIR / "eventlog_handler" / "_version.py").read_text()
            version = text.split("=", 1)[1].strip().strip("\"'")
        except (OSError, IndexError):
            pass
        return f"{version}, imported from {PACKAGE_DIR}"
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


def _align(rows: list[list[str]], header_rule: bool = True) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for number, row in enumerate(rows):
        cells = [row[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)
        ]
        lines.append("  ".join(cells).rstrip())
        if number == 0 and header_rule:
            lines.append("  ".join("-" * w for w in widths))
    return lines


Figure = Callable[[dict[str, Any]], str]


def rows(size: dict[str, Any]) -> list[tuple[str, str, str, Figure]]:
    """(label, case, variant, figure) of every row of the per-peer table."""
    burst, n, memory = size["burst"], size["throughput"], size["memory"]
    runs, pending, idle = size["burst_runs"], size["exit_pending"], size["idle_s"]
    never = f"> {size['burst_timeout']:g} s"
    return [
        ("1 caller: warning(extra=), mean us", "caller", "", lambda r: _n(r["warning_us"])),
        ("1 caller: warning, p50 us", "caller", "", lambda r: _n(r["warning_p50_us"])),
        ("1 caller: warning, p99 us", "caller", "", lambda r: _n(r["warning_p99_us"])),
        ("2 caller: exception, 10 frames, mean us", "errors", "", lambda r: _n(r["exception_us"])),
        ("2 caller: exception, p99 us", "errors", "", lambda r: _n(r["exception_p99_us"])),
        ("2 caller: error, no exception, mean us", "errors", "", lambda r: _n(r["error_us"])),
        ("2 caller: error, p99 us", "errors", "", lambda r: _n(r["error_p99_us"])),
        (f"3 flat out {n:,}: delivered", "throughput", "", lambda r: f"{r['fraction']:.1%}"),
        (
            f"3 flat out {n:,}: events/s into the sink",
            "throughput",
            "",
            lambda r: _n(r["events_per_s"]),
        ),
        (
            f"3 flat out {n:,}: s until the sink has all",
            "throughput",
            "",
            lambda r: _seconds(r["all_s"], "not all"),
        ),
        (
            "3 flat out: CPU us/event, caller thread",
            "throughput",
            "",
            lambda r: _n(r["caller_cpu_us"]),
        ),
        (
            "3 flat out: CPU us/event, delivery threads",
            "throughput",
            "",
            lambda r: _n(r["delivery_cpu_us"]),
        ),
        ("3 flat out: CPU us/event, both", "throughput", "", lambda r: _n(r["cpu_us"])),
        (
            f"3 flat out {n:,} -> local collector: events/s",
            "throughput",
            "collector",
            lambda r: _n(r["events_per_s"]),
        ),
        (
            f"4 burst {burst:,} x{runs}: runs fully delivered",
            "burst",
            "",
            lambda r: f"{r['complete_runs']:.0f}/{r['burst_runs']}",
        ),
        (f"4 burst {burst:,}: worst run delivered", "burst", "", lambda r: f"{r['fraction']:.1%}"),
        (
            f"4 burst {burst:,}: s until the sink has all (worst)",
            "burst",
            "",
            lambda r: _seconds(r["all_s"], never),
        ),
        (f"4 burst {burst:,}: s to log it", "burst", "", lambda r: _seconds(r["burst_s"], "")),
        (
            f"5 idle {idle:g} s, then a warning: s to the sink",
            "idle",
            "",
            lambda r: _seconds(r["warning_s"], "never"),
        ),
        (
            f"5 idle {idle:g} s, then an error: s to the sink",
            "idle",
            "",
            lambda r: _seconds(r["error_s"], "never"),
        ),
        (f"6 memory {memory:,}, dead server: RSS MB", "memory", "", lambda r: _n(r["growth_mb"])),
        (f"7 exit, {pending:,} pending, server up", "exit", "up", _exit_figure),
        ("7 exit, server up: delivered", "exit", "up", lambda r: f"{r['fraction']:.1%}"),
        ("7 exit, server down (port closed)", "exit", "down", _exit_figure),
        ("7 exit, server hung (never answers)", "exit", "hung", _exit_figure),
    ]


def peer_table(
    results: Results, peers: list[str], size: dict[str, Any], rounds: int
) -> tuple[list[str], list[str]]:
    """The per-peer table's lines and its footnotes."""
    notes: list[str] = []
    header = [
        f"case / figure (median of {rounds} rounds, + one run)"
        if rounds > 1
        else "case / figure (one run)"
    ]
    header += [TITLES[p] for p in peers]
    body: list[list[str]] = []
    for label, case, variant, figure in rows(size):
        line = [label]
        present = False
        for peer in peers:
            result = results.get((case, peer, variant))
            if result is None:
                line.append("-")
                continue
            present = True
            if "error" in result:
                line.append("ERR")
                notes.append(f"ERR {TITLES[peer]}, {case} {variant}: {result['error']}")
                continue
            if "na" in result:
                line.append("n/a" if result["na"] == "not installed" else "-")
                continue
            try:
                text = figure(result)
            except (KeyError, TypeError, ValueError):
                line.append("-")  # a figure this peer does not have (no-op: nothing delivered)
                continue
            if result.get("failed_rounds"):
                text += "!"
                note = (
                    f"! {TITLES[peer]}, {case}{' ' + variant if variant else ''}: "
                    f"{result['failed_rounds']} of {result['failed_rounds'] + result['runs']} "
                    f"rounds failed (median of the others): {result['failed_error'][:300]}"
                )
                if note not in notes:
                    notes.append(note)
            planned, logged = result.get("planned"), result.get("logged")
            if planned and logged is not None and logged < planned:
                text += "*"
                note = (
                    f"* {TITLES[peer]}, {case}: logged {logged:,} of {planned:,} records "
                    "within the case's time budget"
                )
                if note not in notes:
                    notes.append(note)
            line.append(text)
        if present:
            body.append(line)
    lines = _align([header, *body])
    if rounds > 1:
        notes.append(
            f"+ rows 1-3 are medians of {rounds} rounds for stdlib pipeline and eventlog, and "
            "rows 1-2 for no-op and queue floor; one run: their row 3 (round 1), the sentry-sdk "
            "and logstash-async columns, the local collector and rows 4-7"
        )
    for variant in ("up", "down", "hung"):
        pending = [
            f"{TITLES[p]} {results[('exit', p, variant)]['pending']:,}"
            for p in peers
            if isinstance((results.get(("exit", p, variant)) or {}).get("pending"), int)
        ]
        if pending:
            notes.append(
                f"exit, server {variant}: events held at the exit mark: " + ", ".join(pending)
            )
    for case, variant in (("throughput", ""), ("burst", ""), ("throughput", "collector")):
        result = results.get((case, "eventlog", variant)) or {}
        dropped = {k: v for k, v in ((result.get("stats") or {}).get("dropped") or {}).items() if v}
        if dropped:
            notes.append(f"eventlog {case} {variant}: dropped {dropped}".replace("  ", " "))
    return lines, notes


# -- the headline: per-round ratios ----------------------------------------------------------------


def round_ratios(raw: Rounds, case: str, key: str) -> list[float | None]:
    """eventlog / stdlib pipeline of ``key``, per round (``None`` where either is missing)."""
    ours = raw.get((case, "eventlog", ""), [])
    theirs = raw.get((case, "stdlib", ""), [])
    ratios: list[float | None] = []
    for a, b in zip(ours, theirs, strict=False):
        x, y = a.get(key), b.get(key)
        if isinstance(x, (int, float)) and isinstance(y, (int, float)) and y > 0:
            ratios.append(x / y)
        else:
            ratios.append(None)
    return ratios


def headline(raw: Rounds) -> tuple[list[str], list[list[str]]]:
    """The ratio table (a row per figure, a column per round, the median, the target) and the
    headline targets' verdicts."""
    rounds = max([1] + [len(raw.get((case, "eventlog", ""), [])) for case, _ in HEADLINE])
    header = ["eventlog / stdlib pipeline"] + [f"round {i + 1}" for i in range(rounds)]
    header += ["median", "target", "verdict"]
    body: list[list[str]] = []
    checks: list[list[str]] = []
    specs = [(label, case, key, op, limit) for label, case, key, op, limit in HEADLINE_TARGETS]
    specs += [(label, case, key, "", None) for label, case, key in HEADLINE_INFO]
    for label, case, key, op, limit in specs:
        ratios = round_ratios(raw, case, key)
        if not any(r is not None for r in ratios):
            continue
        found = [r for r in ratios if r is not None]
        middle = median(found)
        cells = [f"{r:.2f}x" if r is not None else "-" for r in ratios]
        cells += ["-"] * (rounds - len(cells))
        if limit is None:
            target = verdict = ""
        else:
            ok = middle <= limit if op == "<=" else middle >= limit
            target, verdict = f"{op} {limit:.1f}x", "PASS" if ok else "FAIL"
            checks.append(
                [
                    f"{label}: {op} {limit:.1f}x stdlib pipeline",
                    f"{middle:.2f}x",
                    verdict,
                ]
            )
        body.append([label, *cells, f"{middle:.2f}x", target, verdict])
    if not body:
        return [], checks
    return _align([header, *body]), checks


# -- the other targets ---------------------------------------------------------------------------


def other_targets(results: Results, size: dict[str, Any]) -> list[list[str]]:
    """[target, figure, verdict] for the targets beside the headline, from this run."""

    def get(case: str, peer: str, variant: str = "") -> dict[str, Any] | None:
        result = results.get((case, peer, variant))
        if result is None or "error" in result or "na" in result:
            return None
        return result

    out: list[list[str]] = []

    def check(name: str, figure: str | None, ok: bool | None) -> None:
        verdict = "n/a" if ok is None else "PASS" if ok else "FAIL"
        out.append([name, figure or "-", verdict])

    ours, sentry = get("caller", "eventlog"), get("caller", "sentry")
    if ours is not None and sentry is not None:
        ratio = ours["warning_us"] / sentry["warning_us"]
        check(
            "caller mean, warning: <= 0.1x sentry-sdk",
            f"{ratio:.3g}x ({_n(ours['warning_us'])} / {_n(sentry['warning_us'])} us)",
            ratio <= 0.1,
        )
    big = get("throughput", "eventlog")
    if big is not None:
        check(
            f"flat out {size['throughput']:,}: >= 99% delivered (median)",
            f"{big['fraction']:.2%}",
            big["fraction"] >= 0.99,
        )
    burst = get("burst", "eventlog")
    if burst is not None:
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
    idle = get("idle", "eventlog")
    if idle is not None:
        for kind, delay in (("warning", FLUSH_INTERVAL), ("error", ERROR_DELAY)):
            check(
                f"idle, then {kind}: <= "
                f"{'flush_interval' if kind == 'warning' else 'error_delay'} + 1 = {delay + 1:g} s",
                _seconds(idle[f"{kind}_s"], "never"),
                idle[f"{kind}_s"] is not None and idle[f"{kind}_s"] <= delay + 1,
            )
    memory = get("memory", "eventlog")
    if memory is not None:
        check(
            f"RSS growth <= 50 MB for {size['memory']:,} records, dead server",
            f"{memory['growth_mb']:.1f} MB",
            memory["growth_mb"] <= 50 and memory["logged"] >= size["memory"],
        )
    for variant, extra in (("up", ""), ("down", ""), ("hung", " (extra)")):
        result = get("exit", "eventlog", variant)
        if result is None:
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


def _checks(title: str, checks: list[list[str]]) -> list[str]:
    if not checks:
        return []
    widths = [max(len(row[i]) for row in checks) for i in range(3)]
    return ["", title] + [
        f"  {a.ljust(widths[0])}  {b.rjust(widths[1])}  {c}" for a, b, c in checks
    ]


def report(
    raw: Rounds,
    peers: list[str],
    size: dict[str, Any],
    rounds: int,
    quick: bool,
    command: str,
    version: str,
    when: str | None = None,
    where: str | None = None,
) -> tuple[list[str], Results, list[list[str]]]:
    results = {key: combine(values) for key, values in raw.items()}
    orjson = importlib.util.find_spec("orjson") is not None
    out = [
        "eventlog-handler benchmarks "
        + (when or datetime.datetime.now().isoformat(timespec="seconds"))
        + (" (quick sizes: figures are not comparable to the targets)" if quick else ""),
        f"machine: {where or machine()}",
        f"eventlog-handler {version}; orjson "
        + (
            "installed (the package encodes with it; the stdlib pipeline uses json)"
            if orjson
            else "not installed (both encode with json)"
        ),
        f"command: {command}",
        f"{rounds} interleaved round(s) of cases 1-3 for no-op, queue floor, stdlib pipeline "
        "and eventlog; everything else once. Each case in its own process; sinks in another "
        "process on 127.0.0.1.",
        *PEER_NOTES,
    ]
    ratio_lines, head_checks = headline(raw)
    if ratio_lines:
        out += ["", *ratio_lines]
    lines, notes = peer_table(results, peers, size, rounds)
    out += ["", *lines]
    if notes:
        out += ["", *notes]
    rest = other_targets(results, size)
    out += _checks(
        "targets (eventlog / stdlib pipeline, medians of the per-round ratios)", head_checks
    )
    out += _checks("other targets (eventlog, this run)", rest)
    return out, results, head_checks + rest


def reprint(path: Path, output: str) -> int:
    """The report of a run saved with ``--json`` (its figures, and every round's)."""
    data = json.loads(path.read_text())
    raw: Rounds = {
        (item["case"], item["peer"], item["variant"]): item["rounds"] for item in data["per_round"]
    }
    peers = data.get("peers") or [p for p in ALL_PEERS if any(k[1] == p for k in raw)]
    quick = bool(data.get("quick"))
    out, _, _ = report(
        raw,
        peers,
        SIZES["quick" if quick else "full"],
        int(data["rounds"]),
        quick,
        data["command"],
        data.get("version", "(not recorded)"),
        when=data.get("when", "(date not recorded)") + f", reprinted from {path.name}",
        where=data.get("machine"),
    )
    text = "\n".join(out) + "\n"
    sys.stdout.write(text)
    if output:
        Path(output).write_text(text)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes (a smoke run)")
    parser.add_argument(
        "--rounds",
        "--repeat",
        type=int,
        default=None,
        help="interleaved rounds of the headline cases (default 5; 2 with --quick)",
    )
    parser.add_argument("--cases", default=",".join(CASES), help="among " + ",".join(CASES))
    parser.add_argument(
        "--peers", default=",".join(PEER_ORDER), help="among " + ",".join(ALL_PEERS)
    )
    parser.add_argument(
        "--jobs", type=int, default=1, help="cases run at once (default 1; more skews timings)"
    )
    parser.add_argument(
        "--output",
        default=str(HERE / "results.txt"),
        help="also write the report here (default benchmarks/results.txt; '' for none)",
    )
    parser.add_argument("--json", metavar="PATH", help="also write every figure as JSON")
    parser.add_argument(
        "--package-dir",
        metavar="DIR",
        help="import eventlog_handler from DIR (e.g. a `git worktree` of another commit) "
        "instead of this work tree",
    )
    parser.add_argument(
        "--from-json",
        metavar="PATH",
        help="measure nothing: print the report of a run saved with --json",
    )
    args = parser.parse_args(argv)
    if args.from_json:
        return reprint(Path(args.from_json), args.output)
    global PACKAGE_DIR
    if args.package_dir:
        PACKAGE_DIR = Path(args.package_dir).resolve()
        if not (PACKAGE_DIR / "eventlog_handler" / "__init__.py").is_file():
            parser.error(f"no eventlog_handler package in {PACKAGE_DIR}")
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    peers = [p.strip() for p in args.peers.split(",") if p.strip()]
    for name, given, known in (("case", cases, CASES), ("peer", peers, ALL_PEERS)):
        unknown = [item for item in given if item not in known]
        if unknown or not given:
            parser.error(f"unknown {name}(s): {', '.join(unknown) or '(none)'}")
    peers = [p for p in ALL_PEERS if p in peers]
    rounds = max(1, args.rounds if args.rounds is not None else (2 if args.quick else 5))
    size = SIZES["quick" if args.quick else "full"]
    command = shlex.join(["python", *sys.argv[:1], *(sys.argv[1:] if argv is None else argv)])
    version = code_version()
    raw = run_all(cases, peers, rounds, args.quick, args.jobs)
    out, results, checks = report(raw, peers, size, rounds, args.quick, command, version)
    text = "\n".join(out) + "\n"
    sys.stdout.write(text)
    sys.stdout.flush()
    if args.output:
        Path(args.output).write_text(text)
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "command": command,
                    "machine": machine(),
                    "version": version,
                    "when": out[0].split("benchmarks ", 1)[1],
                    "quick": args.quick,
                    "peers": peers,
                    "rounds": rounds,
                    "results": [
                        {"case": k[0], "peer": k[1], "variant": k[2], **v}
                        for k, v in results.items()
                    ],
                    "per_round": [
                        {"case": k[0], "peer": k[1], "variant": k[2], "rounds": v}
                        for k, v in raw.items()
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
