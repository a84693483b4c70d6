"""The Python interpreters installed here, and throwaway virtual environments made from them
that import this checkout of the package (and its dependencies) without installing anything
from the network."""

from __future__ import annotations

import functools
import glob
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import eventlog_handler

#: The versions the package supports.
SUPPORTED = ((3, 10), (3, 11), (3, 12), (3, 13))
#: What the package imports at run time (import names).
DEPENDENCIES = ("requests", "urllib3", "idna", "certifi", "charset_normalizer", "pythonjsonlogger")
#: The directory that holds the ``eventlog_handler`` package in use.
PROJECT_ROOT = Path(eventlog_handler.__file__).resolve().parent.parent


@functools.lru_cache(maxsize=1)
def interpreters() -> dict[tuple[int, int], str]:
    """``{(3, 10): "/path/to/python3.10", ...}`` for each supported version that runs here,
    the running interpreter's version included."""
    found: dict[tuple[int, int], str] = {sys.version_info[:2]: sys.executable}
    for major, minor in SUPPORTED:
        if (major, minor) in found:
            continue
        name = f"python{major}.{minor}"
        candidates = [shutil.which(name), f"/usr/bin/{name}", f"/usr/local/bin/{name}"]
        candidates += sorted(
            glob.glob(os.path.expanduser(f"~/.pyenv/versions/{major}.{minor}.*/bin/{name}"))
        )
        for candidate in candidates:
            if candidate and _runs_as(candidate, (major, minor)):
                found[(major, minor)] = candidate
                break
    return found


def _runs_as(executable: str, version: tuple[int, int]) -> bool:
    try:
        result = subprocess.run(
            [executable, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return result.returncode == 0 and result.stdout.strip() == f"{version[0]}.{version[1]}"


def link_dependencies(directory: Path) -> Path:
    """``directory`` holding links to the pure-Python packages the package needs, taken from
    the running environment (their compiled speed-ups for another version are ignored by the
    interpreter that doesn't match them)."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in DEPENDENCIES:
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.submodule_search_locations, name
        source = Path(next(iter(spec.submodule_search_locations)))
        (directory / source.name).symlink_to(source, target_is_directory=True)
    return directory


def make_venv(python: str, directory: Path, paths: list[Path]) -> tuple[Path, Path]:
    """A virtual environment of ``python`` at ``directory`` whose site-packages also sees
    ``paths`` (a ``.pth`` file): returns its interpreter and its site-packages directory."""
    subprocess.run([python, "-m", "venv", "--without-pip", str(directory)], check=True)
    executable = directory / "bin" / "python"
    site_packages = Path(
        subprocess.run(
            [str(executable), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    (site_packages / "eventlog_tests.pth").write_text(
        "".join(f"{path}\n" for path in paths), encoding="utf-8"
    )
    return executable, site_packages


def clean_environment(**extra: str) -> dict[str, str]:
    """The current environment without Python or package settings that would leak into a
    child, plus ``extra``."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PYTHON", "EVENTLOG_", "VIRTUAL_ENV"))
        and key.lower() not in ("http_proxy", "https_proxy", "all_proxy")
    }
    env["NO_PROXY"] = "127.0.0.1,localhost"
    env.update(extra)
    return env
