"""A small program with an application module, run in a process of its own against a
collector: an error that passes through library frames (``json``), locals that hold secrets, and
a ``log.error`` without an exception. The dashboard's tests look at what it sent."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.support.constants import REPO

CHECKOUT = """
import json
import logging

log = logging.getLogger("shop.checkout")


def parse_order(text):
    return json.loads(text, object_hook=check_item)


def check_item(item):
    password = "hunter2-secret"
    token = "Bearer abcdefghijklmnopqrstuvwxyz012345"
    count = item.get("count", 0)
    total = item["price"]
    return total / count


def fail_quietly(order):
    log.error("payment failed for order %s", order)
"""

MAIN = """
import eventlog_handler
from shop import checkout

handle = eventlog_handler.setup(include_locals=True, rollup_window=0)
try:
    checkout.parse_order('{"price": 10, "count": 0}')
except ZeroDivisionError:
    checkout.log.exception("could not total the order")
checkout.fail_quietly(1001)
assert handle.flush(10)
"""

#: The line two above the failing one, and the failing one.
ABOVE = 'count = item.get("count", 0)'
FAILING = "return total / count"


def run_shop(url: str, key: str, folder: Path) -> None:
    """Write the program under ``folder`` and run it, sending to ``url`` with ``key``."""
    (folder / "shop").mkdir(parents=True, exist_ok=True)
    (folder / "shop" / "__init__.py").write_text("")
    (folder / "shop" / "checkout.py").write_text(textwrap.dedent(CHECKOUT))
    (folder / "main.py").write_text(textwrap.dedent(MAIN))
    env = dict(os.environ)
    env.update(EVENTLOG_SERVER_URL=url, EVENTLOG_API_KEY=key, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join([str(folder), str(REPO)])
    done = subprocess.run(
        [sys.executable, "main.py"], cwd=str(folder), env=env, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
