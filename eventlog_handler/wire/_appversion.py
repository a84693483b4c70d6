"""The application's version: the installed distribution that owns ``__main__``, a deployment
variable, or the commit of the application's git checkout.

The service tracks regressions and "fixed in version" by ``@version``. When a program gives no
version (``setup(version=...)`` or ``EVENTLOG_VERSION``), :func:`detect_version` finds it the
way a person would: the program that is running is ``__main__``, and the distribution that
installed it knows its version.

- ``python -m shop.worker``: the distribution that provides the ``shop`` package.
- ``shop-worker`` (a console script): the distribution that declared that entry point.
- ``python /srv/venv/lib/python3.12/site-packages/shop/worker.py`` (or a file of an editable
  install): the distribution whose package holds the file.

A distribution only counts when it really owns the file that runs (its installed files list
it, or it is an editable install of the directory holding it), so an unrelated installed copy
of the same name never lends its version. Programs started by a server, task runner, test
runner or debugger (``uvicorn``, ``gunicorn``, ``celery``, ``pytest``, ...) have that tool as
``__main__``: no version is detected for them (:data:`RUNNERS`); pass ``version=`` instead.

When no distribution owns the program (a script, a checkout run in place, a server or runner
as ``__main__``), the version is the commit being run: a deployment variable
(:data:`DEPLOY_VARIABLES`: ``SOURCE_VERSION``, ``GIT_COMMIT``, ``GITHUB_SHA``,
``CI_COMMIT_SHA``, ``HEROKU_SLUG_COMMIT``), else the commit of the git checkout that holds the
script (or the working directory), read from ``.git/HEAD`` and the ref files (``git`` is never
run). The order is ``setup(version=)``, ``EVENTLOG_VERSION``, the distribution, the deployment
variables, git.

The answer is computed on the first call and cached; nothing happens at import. A first call
reads a few metadata files (milliseconds); when the distribution's name differs from its
package's, every installed distribution's package list is read once (up to about 0.1 s with
hundreds installed), so call it from a background thread when that matters. It never raises.
"""

from __future__ import annotations

import functools
import importlib.metadata as metadata
import json
import os
import re
import sys
import sysconfig
from collections.abc import Iterable, Iterator, Mapping
from types import ModuleType
from urllib.parse import unquote, urlsplit

#: Distributions that run other people's code as ``__main__``: their version is not the
#: application's (normalized names).
RUNNERS = frozenset(
    {
        "arq",
        "celery",
        "coverage",
        "daphne",
        "debugpy",
        "django",
        "dramatiq",
        "flask",
        "granian",
        "gunicorn",
        "huey",
        "hupper",
        "hypercorn",
        "ipykernel",
        "ipython",
        "jupyter-client",
        "jupyter-core",
        "jupyterlab",
        "locust",
        "notebook",
        "nox",
        "pip",
        "py-spy",
        "pyinstrument",
        "pytest",
        "rq",
        "scalene",
        "setuptools",
        "streamlit",
        "tox",
        "uvicorn",
        "viztracer",
        "waitress",
        "watchfiles",
    }
)


def detect_version() -> str | None:
    """The application's version when the program gives none, or ``None``: the version of
    the installed distribution that owns ``__main__``, else a deployment variable
    (:data:`DEPLOY_VARIABLES`), else the commit of the application's git checkout
    (:func:`git_commit`).

    Cached after the first call (:func:`clear_cache` forgets it); never raises. Call it from
    the delivery worker: the first call reads files.
    """
    return _cached()


#: Variables that deployment platforms and CI set to the commit being run, in order.
DEPLOY_VARIABLES = (
    "SOURCE_VERSION",
    "GIT_COMMIT",
    "GITHUB_SHA",
    "CI_COMMIT_SHA",
    "HEROKU_SLUG_COMMIT",
)


def deployment_version(environ: Mapping[str, str] | None = None) -> str | None:
    """The first of :data:`DEPLOY_VARIABLES` that is set (stripped, at most 100 characters)."""
    env = os.environ if environ is None else environ
    for name in DEPLOY_VARIABLES:
        value = (env.get(name) or "").strip()
        if value and len(value) <= 100 and value.isprintable():
            return value
    return None


_SHA = re.compile(r"[0-9a-f]{40}([0-9a-f]{24})?")


def git_commit(start: str) -> str | None:
    """The commit checked out in the git work tree that holds ``start`` (a directory), read
    from ``.git`` files (``HEAD``, the branch's ref file or ``packed-refs``; a ``.git`` file
    of a worktree or submodule is followed). Never runs ``git``; ``None`` when there is no
    checkout or it can't be read."""
    try:
        directory = os.path.abspath(start)
        while True:
            dot_git = os.path.join(directory, ".git")
            if os.path.exists(dot_git):
                return _commit_of(dot_git)
            parent = os.path.dirname(directory)
            if parent == directory:
                return None
            directory = parent
    except (OSError, ValueError, UnicodeError):
        return None


def _commit_of(dot_git: str) -> str | None:
    git_dir = dot_git
    if os.path.isfile(dot_git):
        text = _read(dot_git)
        if not text.startswith("gitdir:"):
            return None
        git_dir = os.path.join(os.path.dirname(dot_git), text[len("gitdir:") :].strip())
    head = _read(os.path.join(git_dir, "HEAD"))
    if _SHA.fullmatch(head):
        return head  # a detached HEAD
    if not head.startswith("ref:"):
        return None
    ref = head[len("ref:") :].strip()
    common = git_dir
    common_file = os.path.join(git_dir, "commondir")
    if os.path.isfile(common_file):  # a worktree: refs live in the main repository
        common = os.path.join(git_dir, _read(common_file))
    for base in dict.fromkeys((git_dir, common)):
        value = _read(os.path.join(base, *ref.split("/")))
        if _SHA.fullmatch(value):
            return value
    for line in _read(os.path.join(common, "packed-refs")).splitlines():
        sha, _, name = line.partition(" ")
        if name.strip() == ref and _SHA.fullmatch(sha):
            return sha
    return None


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as file:
            return file.read(1_000_000).strip()
    except (OSError, ValueError, UnicodeError):
        return ""


#: Tools whose runs are not the application's deployments: no commit is looked for under them
#: (a test suite run from a checkout is not a release of it).
TEST_TOOLS = frozenset({"pytest", "py.test", "_pytest", "tox", "nox", "pip", "setuptools"})


def _is_test_tool(main: ModuleType | None) -> bool:
    if os.environ.get("PYTEST_XDIST_WORKER") and "_pytest" in sys.modules:
        return True  # a pytest-xdist worker: its ``__main__`` is execnet's ``python -c``
    spec = getattr(main, "__spec__", None)
    name = getattr(spec, "name", None)
    if isinstance(name, str) and name.partition(".")[0] in TEST_TOOLS:
        return True
    main_file = getattr(main, "__file__", None)
    if isinstance(main_file, str):
        base = os.path.basename(main_file)
        return os.path.splitext(base)[0] in TEST_TOOLS
    return False


def _checkout_directories(main: ModuleType | None) -> list[str]:
    """Where the application's checkout may be: the directory of the file ``__main__`` runs
    (unless it is an installed tool's: a server or runner), then the working directory; none
    under a test tool (:data:`TEST_TOOLS`, or a pytest-xdist worker)."""
    places: list[str] = []
    if _is_test_tool(main):
        return places
    main_file = getattr(main, "__file__", None) if main is not None else None
    if isinstance(main_file, str):
        real = os.path.realpath(main_file)
        parts = set(real.split(os.sep))
        if not parts & {"site-packages", "dist-packages"} and not _in_scripts_directory(real):
            places.append(os.path.dirname(real))
    try:
        places.append(os.getcwd())
    except OSError:  # removed since: the working directory when the package was imported
        if _AT_IMPORT[1] is not None:
            places.append(_AT_IMPORT[1])
    return places


def clear_cache() -> None:
    """Forget the detected version (the next call looks again)."""
    _cached.cache_clear()


def _snapshot() -> tuple[ModuleType | None, str | None]:
    """What is known of ``__main__`` (its file and spec) and the working directory now: at
    interpreter exit, when the last events may be sent, ``__main__`` may be emptied."""
    main = sys.modules.get("__main__")
    copy: ModuleType | None = None
    if main is not None:
        copy = ModuleType("__main__")
        main_file = getattr(main, "__file__", None)
        if isinstance(main_file, str):
            copy.__file__ = main_file
        copy.__spec__ = getattr(main, "__spec__", None)
    try:
        cwd: str | None = os.getcwd()
    except OSError:
        cwd = None
    return copy, cwd


#: ``__main__`` and the working directory when the package was imported.
_AT_IMPORT = _snapshot()


def main_module() -> ModuleType | None:
    """``__main__``, or what was known of it when the package was imported (its file and
    spec), when Python has emptied it since (at exit)."""
    main = sys.modules.get("__main__")
    if main is not None and (
        getattr(main, "__file__", None) is not None or getattr(main, "__spec__", None) is not None
    ):
        return main
    return _AT_IMPORT[0] if _AT_IMPORT[0] is not None else main


@functools.lru_cache(maxsize=1)
def _cached() -> str | None:
    main = main_module()
    try:
        version = _detect(main)
    except Exception:  # broken metadata, an odd loader, a file system error
        version = None
    if version is None:
        version = deployment_version()
    if version is None:
        for place in _checkout_directories(main):
            version = git_commit(place)
            if version is not None:
                break
    return version


def _detect(main: ModuleType | None) -> str | None:
    if main is None:
        return None
    main_file = getattr(main, "__file__", None)
    main_file = os.path.realpath(main_file) if isinstance(main_file, str) else None
    spec = getattr(main, "__spec__", None)
    module = getattr(spec, "name", None)
    if isinstance(module, str) and module and module != "__main__":
        # python -m package.module
        top = module.partition(".")[0]
        origin = getattr(spec, "origin", None)
        path = os.path.realpath(origin) if isinstance(origin, str) else main_file
        return _version(_first_owner(_by_package(top), path)) if path else None
    if main_file is None:
        return None  # python -c, the interactive interpreter
    package = _package_of(main_file)
    candidates = _chain(_by_script(main_file), _by_package(package) if package else ())
    owner = _first_owner(candidates, main_file)
    if owner is None:
        owner = _first_owner(_editable_installs(main_file), main_file)
    if owner is None and _in_scripts_directory(main_file):
        owner = _first_owner(metadata.distributions(), main_file)
    return _version(owner)


def _chain(*groups: Iterable[metadata.Distribution]) -> Iterator[metadata.Distribution]:
    for group in groups:
        yield from group


def _version(dist: metadata.Distribution | None) -> str | None:
    """The version of ``dist``, unless it is a runner."""
    if dist is None or _normalize(dist.metadata["Name"] or "") in RUNNERS:
        return None
    version = dist.version
    return version.strip() if isinstance(version, str) and version.strip() else None


def _first_owner(
    candidates: Iterable[metadata.Distribution], real_path: str
) -> metadata.Distribution | None:
    seen: set[tuple[str, str]] = set()
    for dist in candidates:
        key = (_normalize(dist.metadata["Name"] or ""), str(dist.locate_file("")))
        if key not in seen:
            seen.add(key)
            if _owns(dist, real_path):
                return dist
    return None


def _owns(dist: metadata.Distribution, real_path: str) -> bool:
    """Whether ``dist`` installed the file at ``real_path`` (or is an editable install of the
    directory that holds it)."""
    base = os.path.basename(real_path)
    for item in dist.files or ():
        if item.name == base and os.path.realpath(str(dist.locate_file(item))) == real_path:
            return True
    return _editable_holds(dist, real_path)


def _editable_installs(real_path: str) -> Iterator[metadata.Distribution]:
    """Editable installs whose source directory holds the file (reads each distribution's
    ``direct_url.json``, a small file, and nothing else)."""
    for dist in metadata.distributions():
        if _editable_holds(dist, real_path):
            yield dist


def _editable_holds(dist: metadata.Distribution, real_path: str) -> bool:
    source = _editable_directory(dist)
    if source is None or not real_path.startswith(source + os.sep):
        return False
    # a virtualenv inside the source tree holds other distributions' files, not this one's
    environment = os.path.realpath(sys.prefix)
    inside_environment = real_path.startswith(environment + os.sep)
    return not inside_environment or source.startswith(environment + os.sep)


def _editable_directory(dist: metadata.Distribution) -> str | None:
    text = dist.read_text("direct_url.json")
    if not text:
        return None
    try:
        info = json.loads(text)
    except ValueError:
        return None
    if not isinstance(info, dict) or not (info.get("dir_info") or {}).get("editable"):
        return None
    url = urlsplit(str(info.get("url", "")))
    if url.scheme != "file" or not url.path:
        return None
    return os.path.realpath(unquote(url.path))


def _by_package(top: str) -> Iterator[metadata.Distribution]:
    """Distributions that may provide the import package ``top``: those named like it first,
    then every one that lists it (read only when needed); installed ones before metadata
    left in a source tree."""
    yield from _installed_first(metadata.distributions(name=top))
    yield from _installed_first(
        dist for dist in metadata.distributions() if top in _top_level_names(dist)
    )


def _top_level_names(dist: metadata.Distribution) -> set[str]:
    """The import names a distribution provides: its ``top_level.txt``, else the first part
    of each Python file it installed (wheels built without setuptools have no
    ``top_level.txt``; Python 3.10's ``packages_distributions`` would miss them)."""
    listed = dist.read_text("top_level.txt")
    if listed is not None:
        return {line.strip() for line in listed.splitlines() if line.strip()}
    names: set[str] = set()
    for item in dist.files or ():
        parts = item.parts
        if item.suffix in (".py", ".pyc", ".so", ".pyd") and parts[0] != "..":
            name = parts[0] if len(parts) > 1 else item.stem.partition(".")[0]
            if name.isidentifier():
                names.add(name)
    return names


def _installed_first(dists: Iterable[metadata.Distribution]) -> list[metadata.Distribution]:
    return sorted(dists, key=lambda dist: dist.read_text("INSTALLER") is None)


def _by_script(path: str) -> Iterator[metadata.Distribution]:
    """Distributions that declare a console or GUI script named like the file."""
    name = os.path.basename(path)
    for suffix in ("-script.pyw", "-script.py", ".exe"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    for group in ("console_scripts", "gui_scripts"):
        for entry in metadata.entry_points(group=group, name=name):
            dist = getattr(entry, "dist", None)
            if isinstance(dist, metadata.Distribution):
                yield dist


def _package_of(path: str) -> str | None:
    """The top-level package holding the file (the outermost directory of a chain of
    directories with ``__init__.py``), or ``None`` for a file outside a package."""
    directory = os.path.dirname(path)
    top: str | None = None
    while os.path.isfile(os.path.join(directory, "__init__.py")):
        top = os.path.basename(directory)
        parent = os.path.dirname(directory)
        if parent == directory:
            break
        directory = parent
    return top if top and top.isidentifier() else None


def _in_scripts_directory(path: str) -> bool:
    try:
        scripts = sysconfig.get_path("scripts")
    except (KeyError, ValueError):
        return False
    return os.path.realpath(os.path.dirname(path)) == os.path.realpath(scripts)


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()
