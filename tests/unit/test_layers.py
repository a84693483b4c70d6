"""The package's layers: every import (lazy ones and ``TYPE_CHECKING`` ones included) points down,
and no import closes a circle. The layers are those of the README's "How the package is built"."""

from __future__ import annotations

import ast
from pathlib import Path

import eventlog_handler

ROOT = Path(eventlog_handler.__file__).resolve().parent

#: Layer of each part, bottom up. Modules of one sub-package may import each other (no circle).
LAYERS = {
    "settings": 0,
    "_version": 0,
    "_values": 0,
    "wire": 1,
    "api": 2,
    "delivery": 3,
    "capture": 4,
    "integrations": 5,
    "handler": 6,
    "_setup": 7,
    "structlog": 7,
    "wsgi": 7,
    "asgi": 7,
    "django": 7,
    "testing": 7,
    "cli": 8,
    "__init__": 9,
}


def modules() -> dict[str, Path]:
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[0] == "collector":
            continue  # the local collector is a world of its own
        name = ".".join(parts).removesuffix(".__init__") or "__init__"
        found[name] = path
    return found


def imports(path: Path, known: dict[str, Path]) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        for name in names:
            if not name.startswith("eventlog_handler."):
                continue
            name = name.removeprefix("eventlog_handler.")
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name:
                found.add(name)
    return found


def layer(name: str) -> int:
    return LAYERS[name.split(".")[0]]


def test_every_import_points_down() -> None:
    known = modules()
    up = []
    for name, path in known.items():
        for target in imports(path, known) - {name}:
            if name.split(".")[0] != target.split(".")[0] and layer(target) > layer(name):
                up.append(f"{name} -> {target}")
    assert up == []


def test_no_import_circle() -> None:
    known = modules()
    graph = {name: imports(path, known) - {name} for name, path in known.items()}
    circles = []
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> None:
        if node in path:
            circles.append([*path[path.index(node) :], node])
            return
        if node in done:
            return
        for target in sorted(graph.get(node, ())):
            if target != "__init__" and not (
                node.startswith(target + ".") and target in ("wire", "api", "cli")
            ):
                visit(target, [*path, node])
        done.add(node)

    for name in sorted(graph):
        visit(name, [])
    assert circles == []


def test_no_module_is_over_600_lines() -> None:
    long = {name: len(path.read_text().splitlines()) for name, path in modules().items()}
    assert {name: lines for name, lines in long.items() if lines > 600} == {}
