"""detect_version(): the version of the distribution that owns ``__main__``.

A real distribution (``shop-app 3.1.4``: a package, a ``__main__`` and a console script) is
built as a wheel and installed by pip into throwaway virtual environments of each installed
Python; its programs are run as real processes in every way a program starts, and print what
``detect_version()`` found.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
import types
import zipfile
from pathlib import Path

import pytest

import eventlog_handler
from eventlog_handler.wire import _appversion as appversion

from .pythons import clean_environment, make_venv

APPVERSION = Path(appversion.__file__).resolve()
#: Prints what detect_version() finds, loading the module from this checkout by its path (it
#: needs nothing but the standard library, so the environment needs no other package).
PROBE = """\
import importlib.util, json, os
_spec = importlib.util.spec_from_file_location("appversion", os.environ["APPVERSION"])
_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_module)
print(json.dumps(_module.detect_version()))
"""
WHEEL_FILES = {
    "shopapp/__init__.py": '"""The shop application."""\n',
    "shopapp/cli.py": f"def main():\n{textwrap.indent(PROBE, '    ')}\n\n"
    'if __name__ == "__main__":\n    main()\n',
    "shopapp/__main__.py": "from shopapp.cli import main\n\nmain()\n",
    "shop_app-3.1.4.dist-info/METADATA": "Metadata-Version: 2.1\nName: shop-app\nVersion: 3.1.4\n",
    "shop_app-3.1.4.dist-info/WHEEL": (
        "Wheel-Version: 1.0\nGenerator: eventlog-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    ),
    "shop_app-3.1.4.dist-info/entry_points.txt": "[console_scripts]\nshop-app = shopapp.cli:main\n",
}


def build_wheel(directory: Path) -> Path:
    """``shop_app-3.1.4-py3-none-any.whl``, a valid wheel with hashes in its ``RECORD``."""
    path = directory / "shop_app-3.1.4-py3-none-any.whl"
    record = []
    with zipfile.ZipFile(path, "w") as wheel:
        for name, text in WHEEL_FILES.items():
            data = text.encode()
            wheel.writestr(name, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            record.append(f"{name},sha256={digest.decode()},{len(data)}")
        record.append("shop_app-3.1.4.dist-info/RECORD,,")
        wheel.writestr("shop_app-3.1.4.dist-info/RECORD", "\n".join(record) + "\n")
    return path


@pytest.fixture(scope="module")
def installs(tmp_path_factory, pythons):
    """``{version: (venv python, site-packages)}`` with ``shop-app`` installed by pip."""
    base = tmp_path_factory.mktemp("appversion")
    wheel = build_wheel(base)
    found = {}
    for version, python in sorted(pythons.items()):
        venv = base / f"venv{version[0]}{version[1]}"
        executable, site_packages = make_venv(python, venv, [])
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "--python",
                str(executable),
                "install",
                "--quiet",
                "--no-index",
                "--no-deps",
                "--disable-pip-version-check",
                str(wheel),
            ],
            check=True,
            env=clean_environment(),
        )
        found[version] = (executable, site_packages)
    return found


def detected(command: list[str], cwd: Path) -> str | None:
    result = subprocess.run(
        command,
        cwd=cwd,
        env=clean_environment(APPVERSION=str(APPVERSION)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_installed_distribution_is_found_however_it_runs(installs, tmp_path):
    for version, (python, site_packages) in installs.items():
        assert detected([str(python), "-m", "shopapp"], tmp_path) == "3.1.4", version
        assert detected([str(python), "-m", "shopapp.cli"], tmp_path) == "3.1.4", version
        script = python.parent / "shop-app"
        assert script.exists()
        assert detected([str(script)], tmp_path) == "3.1.4", version
        module_file = site_packages / "shopapp" / "cli.py"
        assert detected([str(python), str(module_file)], tmp_path) == "3.1.4", version


def test_a_copy_outside_the_installation_has_no_version(installs, tmp_path):
    """An unrelated copy of the same package (a checkout next to an installed release) must
    not borrow the installed version."""
    for version, (python, site_packages) in installs.items():
        checkout = tmp_path / f"checkout{version[1]}"
        shutil.copytree(site_packages / "shopapp", checkout / "shopapp")
        assert detected([str(python), str(checkout / "shopapp" / "cli.py")], tmp_path) is None
        assert detected([str(python), "-m", "shopapp"], checkout) is None, version


def test_plain_scripts_and_commands_have_no_version(installs, tmp_path):
    script = tmp_path / "tool.py"
    script.write_text(PROBE, encoding="utf-8")
    for python, _ in installs.values():
        assert detected([str(python), str(script)], tmp_path) is None
        assert detected([str(python), "-c", PROBE], tmp_path) is None


# -- in this process: runners, this package, never raising ------------------------------------


def fake_main(file: str | None = None, spec_name: str | None = None) -> types.ModuleType:
    module = types.ModuleType("__main__")
    if file is not None:
        module.__file__ = file
    if spec_name is not None:
        import importlib.util

        module.__spec__ = importlib.util.find_spec(spec_name)
    else:
        module.__spec__ = None
    return module


def test_runners_are_not_the_application():
    """``python -m pytest`` or a ``pytest`` command: pytest's version is not the app's."""
    assert appversion._detect(fake_main(spec_name="pytest.__main__")) is None
    pytest_command = shutil.which("pytest", path=os.path.dirname(sys.executable))
    if pytest_command is None:
        pytest.fail("the pytest command should be installed next to this interpreter")
    assert appversion._detect(fake_main(file=pytest_command)) is None


def test_a_pytest_xdist_worker_is_a_test_tool_and_its_checkout_no_version(monkeypatch):
    """An xdist worker's ``__main__`` is execnet's ``python -c``: without the rule, tests run
    with ``-n`` would send the commit of the working directory as ``@version`` where a plain
    ``pytest`` run sends none. A program the tests start inherits the variable but does not
    load pytest: it is not a test tool."""
    command = fake_main()  # python -c
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    assert appversion._checkout_directories(command) == [os.getcwd()]
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    assert appversion._checkout_directories(command) == []
    program = (  # a program started by the tests, with the variable in its environment
        "import json, sys; from eventlog_handler.wire import _appversion as a; "
        "print(json.dumps(a._checkout_directories(sys.modules['__main__'])))"
    )
    child = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=True
    )
    assert json.loads(child.stdout) == [os.getcwd()]


def test_this_package_is_found_from_its_own_files():
    """Installed normally (its files in the RECORD) or editable (its source directory)."""
    package = Path(eventlog_handler.__file__).resolve().parent
    assert appversion._detect(fake_main(spec_name="eventlog_handler.cli")) == (
        eventlog_handler.__version__
    )
    demo = str(package / "cli" / "_demo.py")
    assert appversion._detect(fake_main(file=demo)) == eventlog_handler.__version__


def test_cached_and_never_raising(monkeypatch, tmp_path):
    appversion.clear_cache()
    # outside any git checkout and without deployment variables (their own fallbacks)
    monkeypatch.chdir(tmp_path)
    for name in appversion.DEPLOY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    try:
        monkeypatch.setitem(sys.modules, "__main__", fake_main(file="/no/such/dir/app.py"))
        assert appversion.detect_version() is None

        def broken(*args, **kwargs):
            raise OSError("metadata is unreadable")

        appversion.clear_cache()
        monkeypatch.setattr(appversion.metadata, "distributions", broken)
        monkeypatch.setattr(appversion.metadata, "entry_points", broken)
        monkeypatch.setitem(sys.modules, "__main__", fake_main(spec_name="eventlog_handler.cli"))
        monkeypatch.setattr(appversion.metadata, "packages_distributions", broken)
        assert appversion.detect_version() is None
        monkeypatch.undo()
        assert appversion.detect_version() is None  # cached until cleared
    finally:
        appversion.clear_cache()
