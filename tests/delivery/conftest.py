"""Fixtures of the delivery tests: a fault-injecting loopback server and programs in their own
interpreter, observed the way a user observes them (what arrives, when, and what stderr says).

Everything comes from :mod:`tests.support`; the names are re-exported here so that older
imports (``from tests.delivery.conftest import ...``) keep working.
"""

from __future__ import annotations

from tests.support.accounting import accounted
from tests.support.constants import API_KEY, REPO
from tests.support.fixtures import fault_server as server  # noqa: F401 - a FaultServer
from tests.support.fixtures import restore_loggers as restore_loggers  # autouse
from tests.support.processes import Program, child_env, marks, run_program
from tests.support.waits import wait_until

__all__ = [
    "API_KEY",
    "REPO",
    "Program",
    "accounted",
    "child_env",
    "marks",
    "run_program",
    "wait_until",
]
