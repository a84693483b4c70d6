"""Fixtures of the fidelity tests: interpreters, linked dependencies, a collector."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .pythons import interpreters, link_dependencies


@pytest.fixture(scope="session")
def pythons() -> dict[tuple[int, int], str]:
    return interpreters()


@pytest.fixture(scope="session")
def dependencies(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return link_dependencies(tmp_path_factory.mktemp("deps"))


@pytest.fixture(scope="module")
def collector() -> Iterator[Any]:
    from eventlog_handler.collector import Collector

    with Collector() as running:
        yield running
