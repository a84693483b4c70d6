"""Fixtures of the logging integration tests: a loopback capture server and isolation.

Everything comes from :mod:`tests.support`; the names are re-exported here so that older
imports (``from tests.integrations.conftest import ...``) keep working.
"""

from __future__ import annotations

from tests.support.capture import CaptureServer, deliver
from tests.support.constants import API_KEY, EXAMPLES, FAST, REPO
from tests.support.fixtures import capture_server as server  # noqa: F401 - a CaptureServer
from tests.support.fixtures import collector as collector
from tests.support.fixtures import isolation as isolation  # autouse
from tests.support.fixtures import make_handler as make_handler
from tests.support.processes import child_env, run_python

__all__ = [
    "API_KEY",
    "EXAMPLES",
    "FAST",
    "REPO",
    "CaptureServer",
    "child_env",
    "deliver",
    "run_python",
]
