"""Fixtures of the transport tests: a fault-injecting loopback server and engines to it.

Everything comes from :mod:`tests.support`; the names are re-exported here so that older
imports (``from tests.transport.conftest import ...``) keep working.
"""

from __future__ import annotations

from tests.support.accounting import accounted_in_memory as accounted
from tests.support.constants import TRANSPORT_API_KEY as API_KEY
from tests.support.constants import TRANSPORT_FAST as FAST
from tests.support.fixtures import fault_server as server  # noqa: F401 - a FaultServer
from tests.support.fixtures import make_engine as make_engine

__all__ = ["API_KEY", "FAST", "accounted"]
