"""One bug, one stack on the real service, across deploys, wrappers and Python versions.

Events are observed as delivered to a loopback HTTP server, and their stack is computed from
the bytes sent exactly as the service computes it (:mod:`.signature`).
"""

from __future__ import annotations

import io
import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.fidelity.pythons import PROJECT_ROOT, interpreters, link_dependencies
from tests.support.capture import CaptureServer
from tests.support.constants import API_KEY, FAST
from tests.support.processes import child_env, run_python

from .signature import server_signature

CHECKOUT = """\
import json


def total(prices, count):
    subtotal = sum(prices)
    # the line above the raise
    return subtotal / count


def lookup(stock, sku):
    return stock[sku]


def parse(body):
    return json.loads(body)
"""

RUN = """\
import logging
import eventlog_handler
from shopx import checkout

eventlog_handler.setup(flush_interval=0.05, error_delay=0.01)
log = logging.getLogger("shopx")


def main():
    for name, call in (
        ("total", lambda: checkout.total([1, 2], 0)),
        ("lookup", lambda: checkout.lookup({}, "sku-1")),
        ("parse", lambda: checkout.parse("{not json")),
    ):
        try:
            call()
        except Exception:
            log.exception("%s failed", name)


main()
"""


def write_program(root: Path, inserted: int) -> None:
    (root / "shopx").mkdir(parents=True, exist_ok=True)
    (root / "shopx" / "__init__.py").write_text("", encoding="utf-8")
    head = "".join(f"# inserted line {index}\n" for index in range(inserted))
    (root / "shopx" / "checkout.py").write_text(head + CHECKOUT, encoding="utf-8")
    (root / "run.py").write_text(RUN, encoding="utf-8")


def run(
    python: str,
    root: Path,
    server: CaptureServer,
    script: str = "run.py",
    *args: str,
    **extra: str,
) -> None:
    """``python root/script args`` in ``root``, sending to ``server``; it must succeed."""
    result = subprocess.run(
        [python, str(root / script), *args],
        cwd=root,
        env=child_env(server.url, **extra),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr


def by_message(events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {event["message"]: event for event in events}


def test_same_failures_same_stacks_after_lines_are_inserted(server, tmp_path):
    root = tmp_path / "app"
    write_program(root, inserted=0)
    run(sys.executable, root, server)
    before = by_message(server.wait_for(3))
    write_program(root, inserted=7)  # a deploy: lines added above every failure
    run(sys.executable, root, server)
    events = server.wait_for(6)
    assert len(events) == 6
    after = by_message(events[3:])
    assert set(before) == set(after) == {"total failed", "lookup failed", "parse failed"}
    for message in before:
        old, new = before[message], after[message]
        # the stack trace text moved (line numbers): the service's default stack would split
        assert old["@simple_error"]["stack_trace"] != new["@simple_error"]["stack_trace"]
        assert server_signature(old) == server_signature(new), message
    signatures = {server_signature(event) for event in before.values()}
    assert len(signatures) == 3  # three bugs, three stacks
    stack = before["total failed"]["data"]["@stack"]
    assert stack["title"] == "ZeroDivisionError in shopx.checkout.total"
    assert stack["signature_data"]["type"] == "ZeroDivisionError"
    # the source around the failing line, read on the worker
    frames = after["total failed"]["@simple_error"]["data"]["@frames"]
    inner = frames[-1]
    assert inner["module"] == "shopx.checkout" and inner["function"] == "total"
    assert inner["filename"] == "shopx/checkout.py" and inner["in_app"] is True
    assert inner["context_line"] == "    return subtotal / count"
    assert inner["pre_context"][-2:] == [
        "    subtotal = sum(prices)",
        "    # the line above the raise",
    ]
    assert len(inner["pre_context"]) == 5
    # json's own frames are there, marked as not the application's
    parse_frames = after["parse failed"]["@simple_error"]["data"]["@frames"]
    assert any(frame["module"].startswith("json") and not frame["in_app"] for frame in parse_frames)


def test_a_users_own_stack_still_wins(make_handler, server):
    from eventlog_handler.wire._stacking import stack

    logger, handler = make_handler()
    try:
        print(1 / 0)
    except ZeroDivisionError:
        logger.exception("boom", extra=stack("Payments", gateway="adyen"))
    handler.engine.flush(5)
    (event,) = server.wait_for(1)
    assert event["data"]["@stack"] == {
        "title": "Payments",
        "signature_data": {"gateway": "adyen"},
    }


WRAPLIB = """\
import functools


def traced(view):
    @functools.wraps(view)
    def wrapper(*args, **kwargs):
        return view(*args, **kwargs)

    return wrapper
"""


def test_flask_through_a_library_wrapper_is_the_same_stack(
    make_handler, server, tmp_path, monkeypatch
):
    flask = pytest.importorskip("flask")
    library = tmp_path / "venv" / "lib" / "site-packages"
    (library / "wraplib").mkdir(parents=True)
    (library / "wraplib" / "__init__.py").write_text(WRAPLIB, encoding="utf-8")
    monkeypatch.syspath_prepend(str(library))
    import wraplib  # type: ignore[import-not-found]

    _, handler = make_handler()

    def checkout() -> str:
        return str(1 / 0)

    app = flask.Flask("app")  # its logger is "app", the handler's
    app.add_url_rule("/plain", "plain", checkout)
    app.add_url_rule("/wrapped", "wrapped", wraplib.traced(checkout))
    client = app.test_client()
    assert client.get("/plain").status_code == 500
    assert client.get("/wrapped").status_code == 500
    handler.engine.flush(5)
    plain, wrapped = server.wait_for(2)
    assert plain["@simple_error"]["stack_trace"] != wrapped["@simple_error"]["stack_trace"]
    assert server_signature(plain) == server_signature(wrapped)
    frames = wrapped["@simple_error"]["data"]["@frames"]
    assert [frame["in_app"] for frame in frames if frame["module"] == "wraplib"] == [False]
    assert all(not frame["in_app"] for frame in frames if frame["module"].startswith("flask"))
    assert wrapped["data"]["@stack"]["signature_data"]["frames"].endswith(".checkout")


JSON_SCRIPT = """\
import json
import logging
import eventlog_handler

eventlog_handler.setup(flush_interval=0.05, error_delay=0.01)


def read_config(text):
    return json.loads(text)


try:
    read_config("{broken")
except ValueError:
    logging.getLogger("cfg").exception("bad config")
"""


def test_json_failure_is_one_stack_on_python_3_10_and_3_13(server, tmp_path):
    found = interpreters()
    missing = [version for version in ((3, 10), (3, 13)) if version not in found]
    if missing:
        pytest.skip(f"Python {missing} not installed here")
    dependencies = link_dependencies(tmp_path / "deps")
    signatures: dict[tuple[int, int], str] = {}
    for index, version in enumerate(((3, 10), (3, 13))):
        root = tmp_path / f"app{version[1]}"
        root.mkdir()
        (root / "config_tool.py").write_text(JSON_SCRIPT, encoding="utf-8")
        result = subprocess.run(
            [found[version], str(root / "config_tool.py")],
            cwd=root,
            env=child_env(
                server.url, PYTHONPATH=f"{dependencies}:{PROJECT_ROOT}", PYTHONNOUSERSITE="1"
            ),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr
        events = server.wait_for(index + 1)
        assert len(events) == index + 1, (version, events)
        event = events[index]
        assert event["@simple_error"]["type"] == "json.decoder.JSONDecodeError"
        signatures[version] = server_signature(event)
        assert event["data"]["@stack"]["signature_data"]["frames"] == (
            "in __main__.<module> > __main__.read_config"
        ), version
    assert signatures[(3, 10)] == signatures[(3, 13)]


def test_different_failures_are_different_stacks(make_handler, server):
    logger, handler = make_handler()

    def divide() -> float:
        return 1 / 0

    def index() -> int:
        return [][1]  # type: ignore[no-any-return]

    def divide_elsewhere() -> float:
        return 2 / 0

    for call in (divide, index, divide_elsewhere, divide):
        try:
            call()
        except Exception:
            logger.exception("failed")
    handler.engine.flush(5)
    events = server.wait_for(4)
    signatures = [server_signature(event) for event in events]
    assert signatures[0] == signatures[3]  # the same bug twice
    assert len(set(signatures[:3])) == 3  # other type, other function


def test_chained_exception_uses_the_outermost_type_and_its_frames(make_handler, server):
    logger, handler = make_handler()

    def load() -> None:
        try:
            {}["missing"]
        except KeyError as exc:
            raise RuntimeError("load failed") from exc

    try:
        load()
    except RuntimeError:
        logger.exception("failed")
    handler.engine.flush(5)
    (event,) = server.wait_for(1)
    signature = event["data"]["@stack"]["signature_data"]
    assert signature["type"] == "RuntimeError"
    assert "cause" not in signature
    assert signature["frames"].endswith(".load")
    inner = event["@simple_error"]["inner"]
    assert inner["type"] == "KeyError" and inner["data"]["@frames"][-1]["function"] == "load"


def test_frames_json_is_bounded(make_handler, server):
    logger, handler = make_handler()

    def deep(n: int) -> None:
        if n == 0:
            raise ValueError("deep")
        deep(n - 1)

    try:
        deep(60)
    except ValueError:
        logger.exception("deep failure")
    handler.engine.flush(5)
    (event,) = server.wait_for(1)
    frames = event["@simple_error"]["data"]["@frames"]
    assert len(frames) <= 20
    assert len(json.dumps(event)) < 180_000
    logging.getLogger("app").handlers.clear()


@pytest.mark.skipif(sys.version_info < (3, 11), reason="asyncio.TaskGroup is new in 3.11")
def test_task_groups_that_fail_for_different_reasons_are_different_stacks(make_handler, server):
    import asyncio

    logger, handler = make_handler()

    async def charge() -> None:
        raise ValueError("card declined")

    async def ship() -> None:
        raise KeyError("no address")

    async def checkout(*steps: Any) -> None:
        async with asyncio.TaskGroup() as group:  # type: ignore[attr-defined,unused-ignore]
            for step in steps:
                group.create_task(step())

    runs = {
        "charge": (charge,),
        "ship": (ship,),
        "charge again": (charge,),
        "both": (charge, ship),
        "both, the other way round": (ship, charge),
    }
    for name, steps in runs.items():
        try:
            asyncio.run(checkout(*steps))
        except Exception:
            logger.exception(name)
    handler.engine.flush(5)
    events = by_message(server.wait_for(len(runs)))
    signature = {name: server_signature(event) for name, event in events.items()}
    assert signature["charge"] == signature["charge again"]  # one bug, one stack
    assert signature["charge"] != signature["ship"]  # on the code before: one stack for both
    assert signature["both"] == signature["both, the other way round"]  # whatever failed first
    assert len({signature["charge"], signature["ship"], signature["both"]}) == 3
    group = events["both, the other way round"]["@simple_error"]["data"]["@ext"]["exceptions"]
    assert [member["type"] for member in group] == ["KeyError", "ValueError"]
    members = events["both"]["data"]["@stack"]["signature_data"]["members"]
    assert members.startswith("with KeyError in ") and ", ValueError in " in members
    assert all("line" not in part for part in members.split(", "))


def test_a_stack_trace_under_the_stack_key_is_data_not_a_stack(make_handler, server):
    """structlog's ``StackInfoRenderer`` (and a user's own field) puts a text under ``stack``:
    it is data, and the event keeps its own stack (a text there would change with every line
    added above the call, and split the stack on every deploy)."""
    import structlog

    from eventlog_handler.structlog import EventLogProcessor

    logger, handler = make_handler()
    trace = 'Stack (most recent call last):\n  File "app.py", line 28, in <module>'
    logger.error("plain", extra={"stack": trace})
    logger.error("plain, no field")
    slog = structlog.wrap_logger(
        structlog.PrintLogger(io.StringIO()),
        processors=[
            structlog.processors.StackInfoRenderer(),
            EventLogProcessor(API_KEY, server.url, **FAST),
            structlog.processors.KeyValueRenderer(),
        ],
    )
    slog.error("structured", stack_info=True)
    handler.engine.flush(5)
    events = by_message(server.wait_for(3))
    assert len(events) == 3
    for event in events.values():
        assert "ManualStackingKey" not in event["data"]["@stack"]["signature_data"]
    assert events["plain"]["data"]["stack"] == trace
    assert events["structured"]["data"]["stack"].startswith("Stack (most recent call last)")
    assert events["plain"]["data"]["@stack"]["signature_data"]["site"].startswith("at ")


def test_a_users_field_named_frames_is_kept_apart(make_handler, server):
    logger, handler = make_handler()
    logger.error("with my frames", extra={"@frames": "mine"})
    handler.engine.flush(5)
    (event,) = server.wait_for(1)
    assert event["data"]["_@frames"] == "mine"
    assert isinstance(event["data"]["@frames"], list)  # the call site's, the package's own


@pytest.mark.skipif(sys.version_info < (3, 11), reason="asyncio.TaskGroup is new in 3.11")
def test_nested_task_groups_that_fail_for_different_reasons_are_different_stacks(
    make_handler, server
):
    import asyncio

    logger, handler = make_handler()

    async def leaf(kind: type[Exception]) -> None:
        raise kind("failed")

    async def nest(kind: type[Exception], depth: int) -> None:
        async with asyncio.TaskGroup() as group:  # type: ignore[attr-defined,unused-ignore]
            group.create_task(nest(kind, depth - 1) if depth > 1 else leaf(kind))

    for depth in (3, 4):
        for kind in (ValueError, KeyError):
            try:
                asyncio.run(nest(kind, depth))
            except Exception:
                logger.exception("%s deep, %s", depth, kind.__name__)

    import builtins

    class Listless(builtins.ExceptionGroup):  # type: ignore[misc,name-defined,unused-ignore]
        @property
        def exceptions(self):  # type: ignore[no-untyped-def]
            return iter(super().exceptions)  # not a tuple: a subclass may make it anything

    try:
        raise Listless("odd", [ValueError(1), KeyError(2)])
    except Exception:
        logger.exception("listless")
    handler.engine.flush(5)
    events = by_message(server.wait_for(5))
    assert len(events) == 5  # the odd group's event too (it was lost)
    for depth in (3, 4):
        value, key = (
            server_signature(events[f"{depth} deep, {k}"]) for k in ("ValueError", "KeyError")
        )
        assert value != key, depth  # on the code before: one stack at depth 3 and more
    assert "ValueError" in events["listless"]["data"]["@stack"]["signature_data"]["members"]


SCRIPT = """\
import logging
import eventlog_handler

eventlog_handler.setup(flush_interval=0.05, error_delay=0.01)


def main():
    try:
        {}["missing"]
    except KeyError:
        logging.getLogger(__name__).exception("failed")
    logging.getLogger(__name__).error("could not finish")


main()
"""


def test_two_scripts_failing_alike_are_two_stacks_and_one_script_is_one(server, tmp_path):
    """Every script's frames are ``__main__``'s: two cron scripts of one project whose
    ``main()`` fail alike were one stack (for their errors and for their error logs)."""
    signatures: dict[str, list[str]] = {}
    for index, (folder, name) in enumerate(
        [("v1", "import_orders.py"), ("v1", "send_invoices.py"), ("v2", "import_orders.py")]
    ):
        root = tmp_path / folder
        root.mkdir(exist_ok=True)
        (root / name).write_text(SCRIPT, encoding="utf-8")
        run(sys.executable, root, server, name)
        events = server.wait_for(2 * (index + 1))[2 * index :]
        assert len(events) == 2, events
        signatures[f"{folder}/{name}"] = sorted(server_signature(event) for event in events)
        program = {event["data"]["@stack"]["signature_data"].get("program") for event in events}
        assert program == {f"of {name}"}
    assert signatures["v1/import_orders.py"] == signatures["v2/import_orders.py"]  # a deploy
    first, second = signatures["v1/import_orders.py"], signatures["v1/send_invoices.py"]
    assert not set(first) & set(second)  # another script: other stacks


LAUNCHER = """\
import runpy
import sys

import eventlog_handler

eventlog_handler.setup(flush_interval=0.05, error_delay=0.01)
runpy.run_path(sys.argv[1], run_name="__main__")
"""

JOB = """\
import logging
import time


def main():
    try:
        {}["missing"]
    except KeyError:
        logging.getLogger("job").exception("failed")


main()
time.sleep(1.0)  # the first event is built while this script is __main__
main()  # built after runpy has put the launcher back
"""


def test_a_script_run_by_a_launcher_is_its_own_program_for_all_its_events(server, tmp_path):
    (tmp_path / "launcher.py").write_text(LAUNCHER, encoding="utf-8")
    (tmp_path / "job.py").write_text(JOB, encoding="utf-8")
    run(sys.executable, tmp_path, server, "launcher.py", str(tmp_path / "job.py"))
    events = server.wait_for(2)
    assert len(events) == 2, events
    programs = [event["data"]["@stack"]["signature_data"].get("program") for event in events]
    assert programs == ["of job.py", "of job.py"]  # the second was "of launcher.py"
    assert server_signature(events[0]) == server_signature(events[1])


INSTALLED_CHECKOUT = """\
def lookup(stock, sku):
    return stock[sku]


def find(orders, number):
    return orders[number]
"""

INSTALLED_CLI = """\
import sys
import eventlog_handler
from shopx import checkout


def main():
    eventlog_handler.setup(flush_interval=0.05, error_delay=0.01)
    if sys.argv[-1] == "lookup":
        checkout.lookup({}, "sku-1")
    checkout.find({}, 7)


class App:
    def run(self):
        main()


app = App()
"""


def install_program(root: Path) -> Path:
    """``shopx`` installed as ``pip install .`` leaves it: its modules and its distribution's
    metadata in a ``site-packages``, and its console script ``shopx`` in ``bin``."""
    site = root / "lib" / "python3" / "site-packages"
    package = site / "shopx"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("", encoding="utf-8")
    (package / "checkout.py").write_text(INSTALLED_CHECKOUT, encoding="utf-8")
    (package / "cli.py").write_text(INSTALLED_CLI, encoding="utf-8")
    (package / "__main__.py").write_text("from shopx.cli import main\nmain()\n", encoding="utf-8")
    info = site / "shopx-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: shopx\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[console_scripts]\nshopx = shopx.cli:main\nshopx-app = shopx.cli:app.run\n"
    )
    (info / "direct_url.json").write_text('{"url": "file:///src/shopx", "dir_info": {}}')
    (info / "RECORD").write_text(
        "".join(
            f"shopx/{name}.py,sha256=x,1\n" for name in ("__init__", "checkout", "cli", "__main__")
        )
        + "shopx-1.0.dist-info/METADATA,,\n../../../bin/shopx,,\n"
    )
    (root / "bin").mkdir()
    for script, name, call in (("shopx", "main", "main()"), ("shopx-app", "app", "app.run()")):
        (root / "bin" / script).write_text(  # as pip writes it
            f"#!{sys.executable}\nimport re\nimport sys\nfrom shopx.cli import {name}\n"
            f"if __name__ == '__main__':\n    sys.exit({call})\n",
            encoding="utf-8",
        )
    (root / "run.py").write_text(  # a container's own command: python /image/run.py
        "import sys\nfrom shopx import cli\n\ncli.main()\n", encoding="utf-8"
    )
    return site


@pytest.mark.parametrize(
    "how", ["console script", "console script of an attribute", "python -m", "its own script"]
)
def test_a_program_installed_in_site_packages_keeps_one_stack_per_bug(
    server: CaptureServer, tmp_path: Path, how: str
) -> None:
    """``pip install .`` puts the program's modules in site-packages, where every frame was a
    library's: every crash of the program was one stack (``in __main__.<module>``, the
    launcher's frame alone), here two KeyErrors in two of its functions. Also when the
    console script's entry point is an attribute's method (``shopx.cli:app.run``), or the
    image runs a script of its own that imports the program (``python /image/run.py``)."""
    root = tmp_path / "image"
    site = install_program(root)
    command = {
        "console script": [str(root / "bin" / "shopx")],
        "console script of an attribute": [str(root / "bin" / "shopx-app")],
        "python -m": ["-m", "shopx"],
        "its own script": [str(root / "run.py")],
    }[how]
    env = child_env(server.url)
    env["PYTHONPATH"] = os.pathsep.join([str(site), env["PYTHONPATH"]])
    for bug in ("lookup", "find"):
        result = subprocess.run(
            [sys.executable, *command, bug],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 1 and "KeyError" in result.stderr, result.stderr
    lookup, find = server.wait_for(2)
    assert server_signature(lookup) != server_signature(find)
    assert lookup["data"]["@stack"]["title"] == "KeyError in shopx.checkout.lookup"
    frames = lookup["@simple_error"]["data"]["@frames"]
    ours = [frame for frame in frames if frame["module"].startswith("shopx")]
    # main, lookup (and App.run)
    assert len(ours) == 2 + ("attribute" in how) and all(frame["in_app"] for frame in ours), ours


def test_a_program_run_from_its_checkout_and_installed_is_one_stack_per_bug(
    server: CaptureServer, tmp_path: Path
) -> None:
    """Staging runs ``python -m shopx`` from a checkout, production from a wheel: the frame of
    ``shopx/__main__.py`` in site-packages, of the module ``__main__``, was a library's, and
    each crash of the program opened a second stack on the service."""
    site = install_program(tmp_path / "image")
    checkout = tmp_path / "checkout"
    shutil.copytree(site / "shopx", checkout / "shopx")
    for path in (site, checkout):  # installed, then from its checkout
        ours = os.pathsep.join([str(path), child_env(server.url)["PYTHONPATH"]])
        result = run_python(server.url, ["-m", "shopx", "find"], timeout=60, PYTHONPATH=ours)
        assert result.returncode == 1 and "KeyError" in result.stderr, result.stderr
    installed, from_checkout = server.wait_for(2)
    assert installed["data"]["@stack"] == from_checkout["data"]["@stack"]
    assert server_signature(installed) == server_signature(from_checkout)


def test_only_distributions_installed_from_a_local_directory_are_the_programs(
    tmp_path: Path,
) -> None:
    """A wheelhouse (``pip install /wheels/*.whl``) gives every library a ``direct_url.json``
    with a ``file:`` URL: each library a script imported was taken for the program."""
    from eventlog_handler.wire._program import _local_names

    site = tmp_path / "site-packages"
    kinds = {
        "shopx": '{"url": "file:///src/shopx", "dir_info": {}}',
        "wheellib": '{"url": "file:///wheels/wheellib-1.0-py3-none-any.whl", "archive_info": {}}',
        "editable": '{"url": "file:///src/editable", "dir_info": {"editable": true}}',
        "fromindex": None,
    }
    for name, direct in kinds.items():
        info = site / f"{name}-1.0.dist-info"
        info.mkdir(parents=True)
        (info / "RECORD").write_text(f"{name}/__init__.py,,\n{name}-1.0.dist-info/RECORD,,\n")
        if direct is not None:
            (info / "direct_url.json").write_text(direct)
    assert _local_names(str(site)) == {"shopx"}
