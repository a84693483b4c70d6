"""Fixtures for the local collector's tests (everything on 127.0.0.1): ``collector`` and its
HTTP ``client``, from :mod:`tests.support.fixtures`."""

from __future__ import annotations

from tests.support.fixtures import collector as collector
from tests.support.fixtures import collector_client as client  # noqa: F401 - a fixture
