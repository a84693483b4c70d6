"""The benchmark suite still runs: every case, every peer, at tiny sizes (``--quick``).

Only the presence of figures is checked, never their values: timings are for the full run.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
RUNNER = REPO / "benchmarks" / "run.py"

#: The figures each case must report for a peer that ran it.
FIGURES = {
    ("caller", ""): ("warning_us", "warning_p50_us", "warning_p99_us"),
    ("errors", ""): ("exception_us", "exception_p99_us", "error_us", "error_p99_us"),
    ("throughput", ""): ("log_s", "caller_cpu_us", "delivery_cpu_us", "cpu_us"),
    ("throughput", "collector"): ("events_per_s", "delivered", "stored"),
    ("burst", ""): ("fraction", "burst_s", "complete_runs", "events_per_s"),
    ("idle", ""): ("warning_s", "error_s"),
    ("memory", ""): ("growth_mb", "logged"),
    ("exit", "up"): ("delivered", "fraction"),
    ("exit", "down"): (),
    ("exit", "hung"): (),
}
#: Figures only the peers that deliver have.
DELIVERY_FIGURES = {("throughput", ""): ("events_per_s", "fraction", "delivered")}
PEERS = ("noop", "floor", "stdlib", "eventlog", "sentry", "logstash")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def run_tool(script: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run a benchmark script to its end; it must succeed."""
    done = subprocess.run(
        [sys.executable, str(script), *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(REPO),
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def test_quick_run_reports_every_case(tmp_path: Path) -> None:
    figures = tmp_path / "figures.json"
    report = tmp_path / "results.txt"
    done = run_tool(
        RUNNER, "--quick", "--jobs", "4", "--json", str(figures), "--output", str(report)
    )
    table = done.stdout
    assert report.read_text() == table

    # The header: machine, Python, command.
    assert "machine: " in table and " cores" in table
    assert "Python" in table
    assert "command: " in table and "--quick" in table

    # The headline: eventlog / stdlib pipeline per round (2 with --quick), median, verdicts.
    assert "eventlog / stdlib pipeline" in table
    ratio_rows = {
        line.split("  ")[0]: line
        for line in table.splitlines()
        if line.startswith(("caller ", "flat out: "))
    }
    for label in (
        "caller mean, warning(extra=)",
        "caller p99, warning(extra=)",
        "flat out: events/s into the sink",
        "flat out: CPU us/event, caller thread",
        "flat out: CPU us/event, delivery threads",
    ):
        row = ratio_rows.get(label)
        assert row is not None, (label, table)
        assert row.count("x") >= 3, row  # two rounds and the median
    assert "targets (eventlog / stdlib pipeline, medians of the per-round ratios)" in table
    headline = [line for line in table.splitlines() if "x stdlib pipeline" in line]
    assert len(headline) == 3 and all(line.endswith(("PASS", "FAIL")) for line in headline)

    # One row at least per case, and no cell that failed.
    rows = [line for line in table.splitlines() if line[:2] in {f"{n} " for n in "1234567"}]
    for number in "1234567":
        assert any(row.startswith(number + " ") for row in rows), f"no row for case {number}"
    for row in rows:
        assert " ERR" not in row, row
    assert "other targets (eventlog, this run)" in table

    # Every case and peer has figures, or is n/a (not installed) or not applicable.
    data = json.loads(figures.read_text())
    results = {(r["case"], r["peer"], r["variant"]): r for r in data["results"]}
    rounds = {(r["case"], r["peer"], r["variant"]): r["rounds"] for r in data["per_round"]}
    assert len(rounds[("caller", "eventlog", "")]) == 2
    assert len(rounds[("throughput", "stdlib", "")]) == 2
    for (case, variant), keys in FIGURES.items():
        for peer in PEERS:
            result = results.get((case, peer, variant))
            if result is None:  # not run for this peer: it does not apply
                assert peer in ("noop", "floor") or variant == "collector", (case, peer, variant)
                continue
            assert "error" not in result, result
            if "na" in result:
                assert result["na"] == "not installed", result
                continue
            delivering = peer not in ("noop", "floor")
            for key in keys + (DELIVERY_FIGURES.get((case, variant), ()) if delivering else ()):
                assert _is_number(result.get(key)), (case, peer, variant, key, result)
            if case == "exit":
                assert _is_number(result.get("exit_s")) or result.get("killed_after"), result

    # The saved figures print the same report again (--from-json measures nothing).
    again = subprocess.run(
        [sys.executable, str(RUNNER), "--from-json", str(figures), "--output", ""],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=str(REPO),
        stdin=subprocess.DEVNULL,
    )
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[1:] == table.splitlines()[1:]

    # eventlog-handler itself is always installed: it must have every figure.
    for case, variant in FIGURES:
        assert "na" not in results[(case, "eventlog", variant)], (case, variant)


def test_the_caller_tail_tool_reports_both_peers() -> None:
    """``benchmarks/caller_tail.py`` runs; figures are checked for presence, not value."""
    done = run_tool(REPO / "benchmarks" / "caller_tail.py", "--rounds", "1", "--calls", "300")
    rows = {line.split()[0]: line.split() for line in done.stdout.splitlines()[2:]}
    assert set(rows) == {"stdlib", "eventlog"}, done.stdout
    for cells in rows.values():
        numbers = [float(cell) for cell in cells[1:] if cell not in ("us", "%")]
        assert len(numbers) == 6 and all(_is_number(value) for value in numbers), cells


def test_the_instruction_count_tool_does_the_work_it_counts() -> None:
    """``benchmarks/instructions.py`` counts its child processes under valgrind; the children
    run here without it: each loop must do the work it stands for (the counts themselves are
    for the full run)."""
    tool = REPO / "benchmarks" / "instructions.py"
    said = {}
    for part, loop in (
        ("caller", "log"),
        ("noop", "log"),
        ("worker", "pipeline"),
        ("worker", "post"),
        ("worker", "none"),
        ("error", "post"),
        ("error", "none"),
    ):
        said[part, loop] = run_tool(tool, "--child", part, loop, "1000").stdout.split()
    assert said["caller", "log"] == ["queued", "1000"]
    assert said["noop", "log"] == ["queued", "0"]  # the package's handler is not attached
    assert said["worker", "pipeline"] == ["built", "1000", "compressed", "0"]
    assert said["worker", "post"][:3] == ["built", "1000", "compressed"]
    assert int(said["worker", "post"][3]) > 1000  # two gzip'd bodies of 500 events
    assert said["worker", "none"] == ["built", "0", "compressed", "0"]
    assert said["error", "post"][:3] == ["built", "1000", "compressed"]
    assert int(said["error", "post"][3]) > 1000
    assert said["error", "none"] == ["built", "0", "compressed", "0"]
