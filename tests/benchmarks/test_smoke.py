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
    ("caller", ""): (
        "warning_us",
        "warning_p50_us",
        "warning_p99_us",
        "exception_us",
        "exception_p99_us",
    ),
    ("burst", "20k"): ("fraction", "burst_s", "complete_runs", "events_per_s"),
    ("burst", "200k"): ("fraction", "burst_s", "events_per_s"),
    ("throughput", "collector"): ("events_per_s", "delivered", "stored"),
    ("idle", ""): ("warning_s", "error_s"),
    ("memory", ""): ("growth_mb", "logged"),
    ("exit", "up"): ("delivered", "fraction"),
    ("exit", "down"): (),
    ("exit", "hung"): (),
}
PEERS = ("noop", "floor", "stdlib", "eventlog", "sentry", "logstash")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def test_quick_run_reports_every_case(tmp_path: Path) -> None:
    figures = tmp_path / "figures.json"
    done = subprocess.run(
        [sys.executable, str(RUNNER), "--quick", "--jobs", "4", "--json", str(figures)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(REPO),
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    table = done.stdout

    # The header: machine, Python, command.
    assert "machine: " in table and " cores" in table
    assert "Python" in table
    assert "command: " in table and "--quick" in table

    # One row at least per case, and no cell that failed.
    rows = [line for line in table.splitlines() if line[:2] in ("1 ", "2 ", "3 ", "4 ", "5 ", "6 ")]
    for number in "123456":
        assert any(row.startswith(number + " ") for row in rows), f"no row for case {number}"
    for row in rows:
        assert " ERR" not in row, row
    assert "targets (eventlog, this run)" in table
    verdicts = [line for line in table.splitlines() if line.rstrip().endswith(("PASS", "FAIL"))]
    assert len(verdicts) >= 9, table

    # Every case and peer has figures, or is n/a (not installed) or not applicable.
    data = json.loads(figures.read_text())
    results = {(r["case"], r["peer"], r["variant"]): r for r in data["results"]}
    for (case, variant), keys in FIGURES.items():
        for peer in PEERS:
            result = results.get((case, peer, variant))
            assert result is not None, (case, peer, variant)
            assert "error" not in result, result
            if "na" in result:
                # Only a missing peer, or a case that doesn't apply, may lack figures.
                assert (
                    result["na"] == "not installed"
                    or peer in ("noop", "floor")
                    or (variant == "collector" and peer != "eventlog")
                ), result
                continue
            for key in keys:
                assert _is_number(result.get(key)), (case, peer, variant, key, result)
            if case == "exit":
                assert _is_number(result.get("exit_s")) or result.get("killed_after"), result

    # eventlog-handler itself is always installed: it must have every figure.
    for case, variant in FIGURES:
        assert "na" not in results[(case, "eventlog", variant)], (case, variant)
