"""Fixtures of the grouping tests: the loopback capture server (the fixture ``server``),
handlers on it, and isolation, from :mod:`tests.support`."""

from __future__ import annotations

from tests.support.fixtures import capture_server as capture_server  # the fixture ``server``
from tests.support.fixtures import isolation as isolation  # autouse
from tests.support.fixtures import make_handler as make_handler
from tests.support.fixtures import restore_loggers as restore_loggers  # autouse
