"""Which installed packages are the program itself.

A program installed with ``pip install .`` (the usual container image) has its own modules
under ``site-packages``, where every frame is a library's: only the launcher's frame was left
as the application's, and every bug of the program was one stack. The program's own top-level
packages are found once, from how it was started:

- ``python -m shop`` (or ``python -m shop.main``): ``shop``;
- a console script (``shop``, ``/usr/local/bin/shop``) as pip, uv and pipx write it: the
  package its entry point is imported from (``from shop.cli import main`` ...
  ``sys.exit(main())``), not the other imports of a script;
- a server or worker of :data:`SERVERS` given the program's object: ``gunicorn
  shop.wsgi:app``, ``uvicorn shop.main:app``, ``celery -A shop worker``: ``shop``;
- a script of its own (``python /app/run.py``, a container's command): the packages it imports
  that were installed from a local directory (``pip install /app``; their ``direct_url.json``
  says so, PEP 610), not from an index nor from wheel files.

Launchers themselves (``gunicorn``, ``celery``, ``pytest``, ...) and the standard library are
never the program. A tool run by its own console script (``alembic``, ``black``) is the
program of that process: its frames are then application frames too. ``in_app_include`` and
``in_app_exclude`` still decide first.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any

#: Packages that start programs, never the program itself.
LAUNCHERS = frozenset(
    {
        "arq", "celery", "click", "coverage", "daphne", "debugpy", "django", "dramatiq",
        "eventlog_handler", "fastapi", "fastapi_cli", "flask", "granian", "gunicorn", "huey",
        "hypercorn", "IPython", "ipykernel", "jupyter", "pip", "pydevd", "pytest", "_pytest",
        "pyuwsgi", "rq", "setuptools", "sphinx", "streamlit", "typer", "uvicorn", "uwsgi",
        "waitress",
    }
)  # fmt: skip
#: Servers and workers whose arguments name the program's object (``module:attribute``,
#: ``-A module``).
SERVERS = frozenset(
    {"celery", "daphne", "granian", "gunicorn", "hypercorn", "rq", "uvicorn", "waitress-serve"}
)
#: ``module.path:attribute`` (a server's application, maybe called: ``shop.app:create()``).
_OBJECT = re.compile(r"([A-Za-z_]\w*)(?:\.[A-Za-z_]\w*)*:[A-Za-z_][\w.]*(?:\(.*\))?")

#: ``from shop.cli import main`` at the start of a line (a console script's entry point).
_IMPORT = re.compile(r"^from ([A-Za-z_]\w*)[\w.]* import ([A-Za-z_]\w*)\s*$", re.MULTILINE)
#: The top-level package of an ``import`` or ``from ... import`` line.
_ANY_IMPORT = re.compile(r"^[ \t]*(?:from|import)[ \t]+([A-Za-z_]\w*)", re.MULTILINE)

_found: frozenset[str] | None = None


def program_packages() -> frozenset[str]:
    """The program's own top-level packages (see the module docstring); found on first use.
    Never raises."""
    global _found
    if _found is None:
        try:
            names = _from_main() | _from_console_script() | _from_arguments() | _from_script()
        except Exception:  # pragma: no cover - an odd interpreter state: none found
            names = set()
        stdlib: frozenset[str] = getattr(sys, "stdlib_module_names", frozenset())
        _found = frozenset(name for name in names if name not in LAUNCHERS and name not in stdlib)
    return _found


def _from_main() -> set[str]:
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    name = getattr(spec, "name", None)
    return {name.partition(".")[0]} if isinstance(name, str) and name else set()


def _arguments() -> list[str]:
    argv: Any = getattr(sys, "argv", None)
    return [arg for arg in argv if isinstance(arg, str)] if isinstance(argv, list) else []


def _from_console_script() -> set[str]:
    """The packages a console script imports its entry point from: the file pip (or uv,
    pipx) writes holds ``from shop.cli import main``. Read from the file (a few hundred
    bytes), not from every distribution's metadata, which takes tens of milliseconds."""
    arguments = _arguments()
    if not arguments or arguments[0].endswith(".py"):
        return set()
    try:
        with open(arguments[0], "rb") as script:
            head = script.read(4096)
    except OSError:
        return set()
    if not head.startswith(b"#!"):
        return set()
    text = head.decode("utf-8", "replace")
    return {
        match.group(1)
        for match in _IMPORT.finditer(text)
        # the entry point (``main``, or ``app.run`` for ``shop.cli:app.run``), not any import
        if re.search(rf"sys\.exit\({match.group(2)}(?:\.\w+)*\(\)\)", text)
    }


def _from_script() -> set[str]:
    """The packages the program's script (``python /app/run.py``) imports that were installed
    from a local directory or file: the program, installed by its own image's build."""
    arguments = _arguments()
    if not arguments or not arguments[0].endswith(".py"):
        return set()
    try:
        with open(arguments[0], "rb") as script:
            text = script.read(65536).decode("utf-8", "replace")
    except OSError:
        return set()
    return {
        name
        for name in {match.group(1) for match in _ANY_IMPORT.finditer(text)}
        if _installed_locally(name)
    }


def _installed_locally(name: str) -> bool:
    """Whether the top-level package ``name`` lives in a ``site-packages`` (or
    ``dist-packages``) where a distribution installed from a local directory holds it (not in
    edit mode; not from a wheel file: a wheelhouse, ``pip install /wheels/*.whl``, installs the
    libraries too)."""
    import importlib.util

    module = sys.modules.get(name)
    origin = getattr(module, "__file__", None)
    if origin is None:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            return False
        origin = getattr(spec, "origin", None)
    if not isinstance(origin, str) or not os.path.isabs(origin):
        return False
    site = os.path.dirname(origin)
    if os.path.basename(origin).startswith("__init__."):
        site = os.path.dirname(site)
    if os.path.basename(site) not in ("site-packages", "dist-packages"):
        return False
    found = _LOCAL_NAMES.get(site)
    if found is None:
        found = _LOCAL_NAMES[site] = _local_names(site)
    return name in found


_LOCAL_NAMES: dict[str, frozenset[str]] = {}


def _local_names(site: str) -> frozenset[str]:
    """The top-level names of the distributions in ``site`` installed from a local directory
    (their ``direct_url.json``, PEP 610, has ``dir_info`` and a ``file:`` URL). One look at
    the directory: a ``direct_url.json`` is read only where one exists."""
    import json

    names: set[str] = set()
    try:
        entries = [entry for entry in os.scandir(site) if entry.name.endswith(".dist-info")]
    except OSError:
        return frozenset()
    for entry in entries:
        path = os.path.join(entry.path, "direct_url.json")
        if not os.path.exists(path):
            continue  # from an index
        try:
            with open(path, encoding="utf-8") as file:
                direct = json.load(file)
        except (OSError, ValueError):
            continue
        if not isinstance(direct, dict) or not str(direct.get("url", "")).startswith("file:"):
            continue
        info = direct.get("dir_info")
        if not isinstance(info, dict) or info.get("editable"):
            continue  # a wheel or an archive, or in edit mode (not in site-packages)
        names |= _top_level_names(entry.path)
    return frozenset(names)


def _top_level_names(info: str) -> set[str]:
    """The top-level packages and modules a distribution installed (from its ``RECORD``)."""
    try:
        with open(os.path.join(info, "RECORD"), encoding="utf-8") as file:
            lines = file.read(1_000_000).splitlines()
    except OSError:
        return set()
    names = set()
    for line in lines:
        first = line.partition(",")[0].replace("\\", "/").split("/")[0]
        if first.endswith(".py"):
            first = first[:-3]
        if first.isidentifier():
            names.add(first)
    return names


def _from_arguments() -> set[str]:
    found: set[str] = set()
    arguments = _arguments()
    runners = {os.path.basename(arguments[0]) if arguments else "", *_from_main()}
    if not runners & SERVERS:
        return found  # another program's "name:word" arguments are its own business
    arguments = arguments[1:]
    for index, argument in enumerate(arguments):
        match = _OBJECT.fullmatch(argument)
        if match:
            found.add(match.group(1))
        elif argument.startswith("--app="):
            found.add(argument[6:].partition(".")[0].partition(":")[0])
        elif argument in ("-A", "--app") and index + 1 < len(arguments):
            found.add(arguments[index + 1].partition(".")[0].partition(":")[0])
    return {name for name in found if name.isidentifier()}
