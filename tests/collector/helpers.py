"""Moved to :mod:`tests.support.collector`; these names stay importable from here."""

from tests.support.collector import Client, assert_problem

__all__ = ["Client", "assert_problem"]
