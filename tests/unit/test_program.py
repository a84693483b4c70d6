"""Which installed packages are the program itself (``wire/_program.py``), from how it was
started."""

from __future__ import annotations

import sys

import pytest

from eventlog_handler.wire import _program


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["/venv/bin/gunicorn", "-w", "2", "shop.wsgi:application"], {"shop"}),
        (["/venv/bin/uvicorn", "shop.main:app", "--port", "8000"], {"shop"}),
        (["/venv/bin/gunicorn", "shop:create_app()"], {"shop"}),
        (["/venv/bin/celery", "-A", "shop", "worker"], {"shop"}),
        (["/venv/bin/celery", "--app=shop.tasks:app", "worker"], {"shop"}),
        (["/venv/bin/gunicorn", "gunicorn.app:x", "json.decoder:y"], set()),  # never these
        (["script.py", "-A", "3", "a:b:c"], set()),
        (["/venv/bin/worker", "--cache", "redis:default"], set()),  # not a server's argument
        ([], set()),
    ],
)
def test_the_programs_package_is_read_from_its_arguments(
    monkeypatch: pytest.MonkeyPatch, argv: list[str], expected: set[str]
) -> None:
    monkeypatch.setattr(sys, "argv", argv)
    monkeypatch.setattr(_program, "_found", None)
    monkeypatch.setattr(_program, "_from_main", set)
    assert _program.program_packages() == expected


def test_an_interpreter_without_argv_finds_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(sys, "argv")
    monkeypatch.setattr(_program, "_found", None)
    monkeypatch.setattr(_program, "_from_main", set)
    assert _program.program_packages() == frozenset()


def test_a_console_scripts_package_is_read_from_the_script(
    monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    script = tmp_path / "shop"
    script.write_text(  # as pip writes it; the other imports of a script are not the program
        "#!/venv/bin/python\nimport re\nimport sys\nfrom redis import Redis\n"
        "from shop.cli import main\nif __name__ == '__main__':\n    sys.exit(main())\n"
    )
    plain = tmp_path / "notes"
    plain.write_text("from shop.cli import main\n")  # not a script: no #! line
    monkeypatch.setattr(_program, "_from_main", set)
    for argv, expected in (([str(script)], {"shop"}), ([str(plain)], set())):
        monkeypatch.setattr(sys, "argv", argv)
        monkeypatch.setattr(_program, "_found", None)
        assert _program.program_packages() == expected
