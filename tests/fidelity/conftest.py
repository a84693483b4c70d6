"""Fixtures of the fidelity tests: interpreters, linked dependencies, a collector."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.fixtures import module_collector as collector  # noqa: F401 - one per module

from .pythons import interpreters, link_dependencies


@pytest.fixture(scope="session")
def pythons() -> dict[tuple[int, int], str]:
    return interpreters()


@pytest.fixture(scope="session")
def dependencies(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return link_dependencies(tmp_path_factory.mktemp("deps"))
