"""Fixtures the test directories share. A ``conftest.py`` imports those it wants::

    from tests.support.fixtures import fault_server  # noqa: F401  (the fixture ``server``)

Two fixtures are named ``server``: :func:`capture_server` (a :class:`CaptureServer`) and
:func:`fault_server` (a :class:`FaultServer`); a directory imports one of them. Fixtures that
take ``server`` (``make_handler``, ``make_engine``) use the one their directory has. Two are
named ``small_disk`` likewise: :func:`small_disk_or_fsize` (for a program in its own
process) and :func:`small_tmpfs` (for this process: skipped where no tmpfs can be mounted).
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from eventlog_handler import EventLogHandler
from eventlog_handler import _setup as configure
from eventlog_handler.capture import _context as capture_context
from eventlog_handler.collector import Collector
from eventlog_handler.delivery import _engine as transport
from eventlog_handler.integrations import _server_loggers as server_loggers
from eventlog_handler.settings import Settings
from tests.support.capture import CaptureServer
from tests.support.collector import Client
from tests.support.constants import API_KEY, FAST, TRANSPORT_API_KEY, TRANSPORT_FAST
from tests.support.faultserver import FaultServer

# -- loopback servers --------------------------------------------------------------------------


@pytest.fixture(name="server")
def capture_server() -> Iterator[CaptureServer]:
    """``server``: a running :class:`CaptureServer`."""
    capture = CaptureServer().start()
    yield capture
    capture.stop()


@pytest.fixture(name="server")
def fault_server() -> Iterator[FaultServer]:
    """``server``: a running :class:`FaultServer`."""
    with FaultServer() as running:
        yield running


# -- the local collector -----------------------------------------------------------------------


@pytest.fixture
def collector() -> Iterator[Collector]:
    """The local collector (the service's API and storage) on 127.0.0.1, in memory."""
    with Collector() as running:
        yield running


@pytest.fixture(name="collector", scope="module")
def module_collector() -> Iterator[Collector]:
    """``collector``, one for all the tests of a module."""
    with Collector() as running:
        yield running


@pytest.fixture(name="client")
def collector_client(collector: Collector) -> Iterator[Client]:
    """``client``: an HTTP :class:`Client` of ``collector``."""
    http = Client(collector)
    yield http
    http.close()


# -- isolation ---------------------------------------------------------------------------------


#: Loggers the tests, the frameworks and the servers under test configure: their handlers,
#: level, propagation and ``disabled`` flag are restored after each test.
WATCHED = (
    "urllib3",
    "app",
    "uvicorn",
    "uvicorn.error",
    "uvicorn.access",
    "gunicorn.error",
    "gunicorn.access",
    "django",
    "django.request",
    "flask_app",
    "werkzeug",
)


@pytest.fixture(autouse=True)
def isolation(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Restore logging, the exception hooks and the engines after each test."""
    monkeypatch.delenv("EVENTLOG_API_KEY", raising=False)
    monkeypatch.delenv("EVENTLOG_SERVER_URL", raising=False)
    root = logging.getLogger()
    saved_handlers = list(root.handlers)
    saved_level = root.level
    watched = [logging.getLogger(name) for name in WATCHED]
    saved_loggers = [(lg, list(lg.handlers), lg.level, lg.propagate, lg.disabled) for lg in watched]
    saved_hooks = (sys.excepthook, threading.excepthook)
    transport._forget_engines_for_tests()
    yield
    current = configure._CURRENT
    if current is not None:
        current.detach()
        configure._CURRENT = None
    for handler in server_loggers.attached_handlers():
        server_loggers.detach(handler)
    capture_context.user_listener = None  # a session that follows the user (close() ends it)
    sys.excepthook, threading.excepthook = saved_hooks
    for handler in root.handlers:
        if handler not in saved_handlers:  # a dictConfig handler: its hooks and SIGTERM flush go
            handler.close()
    root.handlers[:] = saved_handlers
    root.setLevel(saved_level)
    for logger, handlers, level, propagate, disabled in saved_loggers:
        logger.handlers[:] = handlers
        logger.setLevel(level)
        logger.propagate = propagate
        logger.disabled = disabled
    if "structlog" in sys.modules:
        import structlog

        structlog.reset_defaults()
    transport._forget_engines_for_tests()


@pytest.fixture(autouse=True)
def fresh_engines() -> Iterator[None]:
    """Autouse where imported: no delivery engine of another test is reused by this one, nor
    kept after it (:func:`isolation` does the same among the rest it restores)."""
    transport._forget_engines_for_tests()
    yield
    transport._forget_engines_for_tests()


@pytest.fixture(autouse=True)
def restore_loggers() -> Iterator[None]:
    """Loggers come out of a test as they went in (new ones: no handlers, propagating)."""
    manager = logging.root.manager
    before = {
        name: (list(logger.handlers), logger.propagate, logger.level)
        for name, logger in manager.loggerDict.items()
        if isinstance(logger, logging.Logger)
    }
    yield
    for name, logger in list(manager.loggerDict.items()):
        if not isinstance(logger, logging.Logger):
            continue
        handlers, propagate, level = before.get(name, ([], True, logging.NOTSET))
        logger.handlers[:] = handlers
        logger.propagate = propagate
        logger.setLevel(level)


# -- handlers and engines ----------------------------------------------------------------------


@pytest.fixture
def make_handler(server: Any) -> Callable[..., tuple[logging.Logger, EventLogHandler]]:
    """A handler to ``server`` with fast timings, on the logger ``app`` (not propagating)."""

    def make(**options: Any) -> tuple[logging.Logger, EventLogHandler]:
        merged: dict[str, Any] = {"api_key": API_KEY, "server_url": server.url, **FAST}
        merged.update(options)
        handler = EventLogHandler(**merged)
        logger = logging.getLogger("app")
        logger.handlers.clear()
        logger.propagate = False
        logger.setLevel(1)
        logger.addHandler(handler)
        return logger, handler

    return make


@pytest.fixture
def make_engine(server: Any) -> Iterator[Any]:
    """``make(url=None, **options)``: an engine to ``server`` (or ``url``) with the transport
    tests' fast timings; every engine made is shut down after the test."""
    made: list[transport.Engine] = []

    def make(url: str | None = None, **options: Any) -> transport.Engine:
        values = {**TRANSPORT_FAST, **options}
        settings = Settings.from_options(
            {"server_url": url or server.url, "api_key": TRANSPORT_API_KEY, **values}, environ={}
        )
        engine = transport.Engine(settings)
        made.append(engine)
        return engine

    yield make
    for engine in made:
        engine.shutdown(0.5)


# -- a small disk ------------------------------------------------------------------------------


@contextlib.contextmanager
def tmpfs(mount: Path, options: str = "size=1m") -> Iterator[str | None]:
    """Mount a tmpfs with ``options`` on the empty directory ``mount`` for the block, and
    unmount it after (lazily if it is still busy). Yields ``None`` once mounted, else why it
    could not be (nothing is mounted then)."""
    if not sys.platform.startswith("linux") or shutil.which("mount") is None:
        yield "a tmpfs mount needs Linux"
        return
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        yield f"mounting a tmpfs is not allowed here ({done.stderr.strip()})"
        return
    try:
        yield None
    finally:
        if subprocess.run(["umount", str(mount)], check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.fixture(name="small_disk")
def small_disk_or_fsize(tmp_path: Path) -> Iterator[tuple[Path, dict[str, str]]]:
    """``small_disk``: ``(directory, environment)`` for a program in a process of its own. The
    directory is a real 1 MB file system (tmpfs) when this machine lets us mount one; else the
    environment sets a 1 MB file-size limit for the program (``EVENTLOG_TEST_FSIZE``), which
    fails writes the same way (``EFBIG``, which SQLite reports as an I/O error)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    with tmpfs(mount, "size=1m,mode=0700") as failure:
        yield mount, ({} if failure is None else {"EVENTLOG_TEST_FSIZE": "1000000"})


@pytest.fixture(name="small_disk")
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """``small_disk``: a real 1 MB file system (tmpfs), mounted for the test and unmounted
    after it; the test is skipped where none can be mounted."""
    mount = tmp_path / "disk"
    mount.mkdir()
    with tmpfs(mount) as failure:
        if failure is not None:
            pytest.skip(f"{failure}; the file-size-limit tests cover the same code")
        yield mount
