"""Moved to :mod:`tests.support.faultserver`; these names stay importable from here."""

from tests.support.faultserver import Delay, FaultServer, Reply, Seen, _Handler, _Server

__all__ = ["Delay", "FaultServer", "Reply", "Seen", "_Handler", "_Server"]
