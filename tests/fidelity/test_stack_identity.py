"""The same bug gives byte-identical ``stack_trace`` text wherever it runs.

One program (``program/``: a script, a package and a library installed in site-packages) is
copied to several directories that look like release and checkout directories, each with its
own virtual environment, and run as a real process against a collector on 127.0.0.1: with
this interpreter in two places, as ``python -m``, and with every other supported Python that
is installed here. The stored events' stack traces are compared byte for byte; the service
hashes exactly that text to decide which stack an error belongs to.
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .pythons import PROJECT_ROOT, clean_environment, make_venv

PROGRAM = Path(__file__).parent / "program"
#: The three failures of the program, by exception type.
CHAINED = "shop.pricing.PaymentDeclined"
STDLIB = "json.decoder.JSONDecodeError"
UNCAUGHT = "shop.inventory.NoWarehouse"


@dataclasses.dataclass
class Run:
    name: str
    version: tuple[int, int]
    module: bool = False  # python -m shop (else: python run_shop.py)
    depth: int = 3


def place(tmp: Path, run: Run, python: str, dependencies: Path) -> tuple[list[str], Path]:
    """Copy the program to a directory of its own, make its virtualenv (with ``tinylib``
    installed in site-packages), and return the command that runs it and where."""
    root = tmp / run.name / "srv" / f"shop-release-{run.name}"
    shutil.copytree(PROGRAM / "shop", root / "shop")
    shutil.copy(PROGRAM / "run_shop.py", root / "run_shop.py")
    executable, site_packages = make_venv(
        python, tmp / run.name / "venv", [dependencies, PROJECT_ROOT]
    )
    shutil.copytree(PROGRAM / "site" / "tinylib", site_packages / "tinylib")
    if run.module:
        return [str(executable), "-m", "shop"], root
    return [str(executable), str(root / "run_shop.py")], root


def run_all(
    tmp: Path,
    runs: list[Run],
    pythons: dict[tuple[int, int], str],
    dependencies: Path,
    collector: Any,
) -> dict[str, dict[str, dict[str, Any]]]:
    """Run the program once per run (in parallel), then return each run's errors by type."""
    processes = []
    for run in runs:
        command, cwd = place(tmp, run, pythons[run.version], dependencies)
        env = clean_environment(
            EVENTLOG_SERVER_URL=collector.url,
            EVENTLOG_API_KEY=collector.project_token,
            SHOP_RUN=run.name,
            SHOP_DEPTH=str(run.depth),
        )
        processes.append(
            (
                run,
                subprocess.Popen(
                    command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
                ),
            )
        )
    for run, process in processes:
        _, err = process.communicate(timeout=60)
        text = err.decode("utf-8", "replace")
        assert process.returncode == 1, (run, text)  # the uncaught error ends it
        assert "NoWarehouse: the reservation chain ended" in text  # the traceback still prints
    collector.wait_for_events(3 * len(runs), timeout=30, type="error")
    found: dict[str, dict[str, dict[str, Any]]] = {run.name: {} for run in runs}
    for event in collector.events(type="error"):
        for tag in event["tags"]:
            if tag in found:
                error = event["data"]["@simple_error"]
                found[tag][error["type"]] = error
    for run in runs:
        assert set(found[run.name]) == {CHAINED, STDLIB, UNCAUGHT}, run
    return found


def texts(error: dict[str, Any]) -> list[str]:
    """The stack traces of an error and of its chain."""
    chain = [error["stack_trace"]]
    while "inner" in error:
        error = error["inner"]
        chain.append(error["stack_trace"])
    return chain


def check_host_free(text: str, tmp: Path) -> None:
    assert text.startswith("Traceback (most recent call last):\n"), text
    assert str(tmp) not in text and "/srv/" not in text and "site-packages" not in text, text
    assert not any(set(line.strip()) <= set("~^") for line in text.splitlines()), text
    assert "<listcomp>" not in text and "<dictcomp>" not in text, text


def test_two_directories_two_virtualenvs_and_recursion_depths(
    tmp_path: Path, pythons: dict[tuple[int, int], str], dependencies: Path, collector: Any
):
    here = sys.version_info[:2]
    runs = [Run("alpha", here, depth=3), Run("beta", here, depth=11)]
    found = run_all(tmp_path, runs, pythons, dependencies, collector)
    alpha, beta = found["alpha"], found["beta"]
    for kind in (CHAINED, STDLIB, UNCAUGHT):
        assert texts(alpha[kind]) == texts(beta[kind]), kind
        for text in texts(alpha[kind]):
            check_host_free(text, tmp_path)
    chained = alpha[CHAINED]
    assert chained["message"] == "payment of 30.0 for c-42 declined"
    assert chained["inner"]["type"] == "tinylib.GatewayError"
    inner = chained["inner"]["stack_trace"]
    # the library's frames are named from site-packages, the program's from its directory
    assert 'File "tinylib/__init__.py", line 9, in charge' in inner
    assert 'File "shop/pricing.py", line 50, in limit_check' in inner
    assert alpha[UNCAUGHT]["stack_trace"].endswith(
        '  File "shop/inventory.py", line 18, in reserve\n'
        '    return reserve(node["next"])\n'
        "  [previous frame repeated]\n"
        '  File "shop/inventory.py", line 17, in reserve\n'
        '    raise NoWarehouse("the reservation chain ended without a warehouse")\n'
        "shop.inventory.NoWarehouse"
    )
    assert 'File "json/decoder.py"' in alpha[STDLIB]["stack_trace"]


def test_every_installed_python_gives_the_same_text(
    tmp_path: Path, pythons: dict[tuple[int, int], str], dependencies: Path, collector: Any
):
    versions = sorted(pythons)
    if len(versions) < 2:
        pytest.skip(f"only Python {versions[0]} is installed here; another version is needed")
    runs = [Run(f"py{major}{minor}", (major, minor), depth=3 + minor) for major, minor in versions]
    runs += [Run(f"py{major}{minor}m", (major, minor), module=True) for major, minor in versions]
    found = run_all(tmp_path, runs, pythons, dependencies, collector)
    scripts = [found[run.name] for run in runs if not run.module]
    modules = [found[run.name] for run in runs if run.module]
    for group in (scripts, modules):
        for kind in (CHAINED, UNCAUGHT):  # the program's and the library's own frames
            assert all(texts(errors[kind]) == texts(group[0][kind]) for errors in group), kind
    # python -m: the interpreter's runpy frames (files on 3.10, frozen later) are left out
    uncaught = modules[0][UNCAUGHT]["stack_trace"]
    assert "runpy" not in uncaught
    assert uncaught.startswith(
        'Traceback (most recent call last):\n  File "shop/__main__.py", line 9, in <module>\n'
    )
    # the standard library's own frames differ between versions, never the path form
    for errors in scripts:
        assert 'File "json/__init__.py"' in errors[STDLIB]["stack_trace"]
