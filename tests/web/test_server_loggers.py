"""``setup()`` and the servers' non-propagating loggers; the chatty loggers that are never sent."""

from __future__ import annotations

import logging
import logging.config
import signal
import socket
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from eventlog_handler.integrations import _server_loggers as server_loggers
from eventlog_handler.integrations._server_loggers import ServerLogForwarder
from tests.support.capture import CaptureServer
from tests.support.faultserver import FaultServer

from .conftest import Setup, settle

#: How uvicorn (and, alike, gunicorn) configures its loggers.
UVICORN_LOGGING: dict[str, Any] = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"default": {"class": "logging.NullHandler"}},
    "loggers": {
        "uvicorn": {"handlers": ["default"], "level": "INFO", "propagate": False},
        "uvicorn.error": {"level": "INFO"},
        "uvicorn.access": {"handlers": ["default"], "level": "INFO", "propagate": False},
    },
}


def forwarders(name: str) -> list[logging.Handler]:
    return [h for h in logging.getLogger(name).handlers if isinstance(h, ServerLogForwarder)]


def test_error_loggers_are_sent_and_access_loggers_are_not(
    setup_eventlog: Setup, server: CaptureServer
) -> None:
    logging.config.dictConfig(UVICORN_LOGGING)
    gunicorn = logging.getLogger("gunicorn.error")
    for logger in (gunicorn, logging.getLogger("gunicorn.access")):
        logger.propagate = False  # as gunicorn sets them
    handle = setup_eventlog()
    # A server's routine INFO lines are not events (they stay in the trace log).
    logging.getLogger("uvicorn.error").info("Application startup complete.")
    logging.getLogger("uvicorn.error").warning("Invalid HTTP request received.")
    logging.getLogger("uvicorn.access").info('127.0.0.1:5000 - "GET / HTTP/1.1" 200')
    gunicorn.error("Worker (pid:%s) was sent SIGKILL!", 42)
    logging.getLogger("gunicorn.access").info("an access line")
    events = settle(handle, server, 2)
    assert sorted((e["source"], e["message"]) for e in events) == [
        ("gunicorn.error", "Worker (pid:42) was sent SIGKILL!"),
        ("uvicorn.error", "Invalid HTTP request received."),
    ]


def test_the_handler_level_applies(setup_eventlog: Setup, server: CaptureServer) -> None:
    logging.config.dictConfig(UVICORN_LOGGING)
    handle = setup_eventlog(level="WARNING")
    logging.getLogger("uvicorn.error").info("not sent")
    logging.getLogger("uvicorn.error").warning("sent")
    assert [e["message"] for e in settle(handle, server, 1)] == ["sent"]


def test_propagating_server_loggers_are_sent_once(
    setup_eventlog: Setup, server: CaptureServer
) -> None:
    """``uvicorn.run(app, log_config=None)``: uvicorn's loggers propagate to the root."""
    for name in ("uvicorn", "uvicorn.error"):
        logging.getLogger(name).propagate = True
        logging.getLogger(name).handlers.clear()
    handle = setup_eventlog()
    logging.getLogger("uvicorn.error").error("once")
    assert [e["message"] for e in settle(handle, server, 1)] == ["once"]


def test_setup_again_and_close_leave_no_forwarder(
    setup_eventlog: Setup, server: CaptureServer
) -> None:
    logging.config.dictConfig(UVICORN_LOGGING)
    setup_eventlog()
    handle = setup_eventlog()  # replaces the first
    assert len(forwarders("uvicorn.error")) == 1
    logging.getLogger("uvicorn.error").error("one event")
    assert len(settle(handle, server, 1)) == 1
    handle.close(2)
    assert forwarders("uvicorn.error") == []
    assert server_loggers.attached_handlers() == []


def test_a_server_configuring_logging_after_setup(
    setup_eventlog: Setup, server: CaptureServer
) -> None:
    """A dictConfig that names the logger removes its handlers: the setup puts the forwarder
    back when the configuration ends (and the middlewares call ``ensure_attached()`` at each
    request and at the ASGI lifespan, once each)."""
    handle = setup_eventlog()
    logging.config.dictConfig(UVICORN_LOGGING)
    assert len(forwarders("uvicorn.error")) == 1
    logging.getLogger("uvicorn.error").error("sent at once")
    server_loggers.ensure_attached()
    server_loggers.ensure_attached()
    assert len(forwarders("uvicorn.error")) == 1
    logging.getLogger("uvicorn.error").error("sent")
    assert [e["message"] for e in settle(handle, server, 2)] == ["sent at once", "sent"]


def test_loggers_that_do_not_exist_are_not_created(
    setup_eventlog: Setup, server: CaptureServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = "tests.web.not.yet.a.logger"
    monkeypatch.setattr(server_loggers, "SERVER_LOGGERS", (name,))
    handle = setup_eventlog()
    assert name not in logging.Logger.manager.loggerDict
    logger = logging.getLogger(name)  # the server is imported later
    logger.propagate = False
    try:
        server_loggers.ensure_attached()
        logger.error("sent once it exists")
        assert [e["message"] for e in settle(handle, server, 1)] == ["sent once it exists"]
    finally:
        handle.close(2)
        assert logger.handlers == []


def test_secret_query_values_in_forwarded_urls_are_masked(
    setup_eventlog: Setup, server: CaptureServer
) -> None:
    gunicorn = logging.getLogger("gunicorn.error")
    gunicorn.propagate = False
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    gunicorn.addHandler(Keep())
    handle = setup_eventlog()
    gunicorn.error("Error handling request %s %s", "GET", "/a?token=t0k&page=2")
    [event] = settle(handle, server, 1)
    assert event["message"] == "Error handling request GET /a?token=[excluded]&page=2"
    # the server's own output is the server's business: its record is unchanged
    assert records[0].getMessage() == "Error handling request GET /a?token=t0k&page=2"


def test_http_client_and_dev_server_loggers_are_never_sent(
    setup_eventlog: Setup, server: CaptureServer
) -> None:
    httpx = pytest.importorskip("httpx")
    handle = setup_eventlog()
    with httpx.Client() as client:  # logs "HTTP Request: GET ..." at INFO on "httpx"
        client.get(server.url + "/not-an-endpoint", timeout=5)
    for name in ("httpcore.http11", "hpack.hpack", "werkzeug", "multipart.multipart"):
        logging.getLogger(name).warning("from %s", name)
    logging.getLogger("app.after").warning("the last record")
    events = settle(handle, server, 1)
    assert [e["message"] for e in events] == ["the last record"]


def test_the_startup_lines_of_other_servers_are_not_events(
    setup_eventlog: Setup, server: CaptureServer
) -> None:
    # hypercorn's "Running on", waitress's "Serving on" (one per worker): events, before.
    handle = setup_eventlog()
    logging.getLogger("hypercorn.error").info("Running on http://127.0.0.1:8000 (CTRL + C to quit)")
    logging.getLogger("waitress").info("Serving on http://127.0.0.1:8080")
    logging.getLogger("daphne.server").info("Listening on TCP address 127.0.0.1:8000")
    logging.getLogger("waitress.queue").warning("Task queue depth is 5")
    assert [e["message"] for e in settle(handle, server, 1)] == ["Task queue depth is 5"]


GUNICORN_ASGI_APP = """
import logging
import os
import eventlog_handler
from eventlog_handler.asgi import EventLogMiddleware

eventlog_handler.setup()
open(f"booted-{os.getpid()}", "w").close()


async def bare(scope, receive, send):
    if scope["type"] == "http":
        logging.getLogger("gunicorn.error").warning("gunicorn line for %s", scope["path"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


app = EventLogMiddleware(bare)
"""


def test_under_gunicorns_uvicorn_worker_each_server_line_is_sent_once(tmp_path: Path) -> None:
    """uvicorn's worker for gunicorn gives ``uvicorn.error`` the very list of handlers of
    ``gunicorn.error``: both forwarders saw every record of each, and each line was sent
    twice (its roll-up counting two)."""
    pytest.importorskip("uvicorn")
    from tests.signals.test_servers import GUNICORN, requests_then_signal, serve

    with FaultServer() as sink:
        command = [*GUNICORN, "--worker-class", "uvicorn.workers.UvicornWorker"]
        process, port = serve(command, GUNICORN_ASGI_APP, tmp_path, sink.url)
        for _ in range(3):  # uvicorn says "Invalid HTTP request received." on uvicorn.error
            with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
                connection.sendall(b"NOT HTTP AT ALL\r\n\r\n")
                connection.recv(1024)
        returncode, stderr = requests_then_signal(process, port, signal.SIGTERM)
    assert returncode == 0, stderr
    counts: dict[str, int] = {}
    for event in sink.accepted:
        key = f"{event.get('source')}: {event.get('message')}"
        counts[key] = counts.get(key, 0) + int(event.get("count", 1))
    assert counts["uvicorn.error: Invalid HTTP request received."] == 3, counts
    assert counts["gunicorn.error: gunicorn line for /r7"] == 1, counts
    assert sum(1 for key in counts if key.startswith("gunicorn.error: gunicorn line")) == 51
    assert sum(counts.values()) == 3 + 51, counts


PRELOADED_BARE_APP = """
import os
import eventlog_handler

eventlog_handler.setup()
open(f"booted-{os.getpid()}", "w").close()


async def app(scope, receive, send):  # no middleware of the package
    if scope["type"] == "http" and scope["path"] != "/health":
        raise RuntimeError("boom in a bare app")
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})
"""


def test_preloaded_under_gunicorns_uvicorn_worker_the_apps_exception_is_sent(
    tmp_path: Path,
) -> None:
    """``--preload``: ``setup()`` ran in gunicorn's master, and in the worker ``uvicorn.error``
    took ``gunicorn.error``'s handler list, with only that logger's forwarder in it, which
    passed on its own logger's records only: "Exception in ASGI application" was never sent."""
    pytest.importorskip("uvicorn")
    from tests.signals.test_servers import GUNICORN, serve

    with FaultServer() as sink:
        command = [*GUNICORN, "--preload", "--worker-class", "uvicorn.workers.UvicornWorker"]
        process, port = serve(command, PRELOADED_BARE_APP, tmp_path, sink.url)
        try:
            for _ in range(2):
                with pytest.raises(urllib.error.HTTPError) as failed:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/x", timeout=10)
                assert failed.value.code == 500
        finally:
            process.send_signal(signal.SIGTERM)
            _, stderr = process.communicate(timeout=30)
    assert process.returncode == 0, stderr
    assert stderr.count("Exception in ASGI application") == 2, stderr  # the console, as before
    errors = [e for e in sink.accepted if e.get("type") == "error"]
    assert sum(int(e.get("count", 1)) for e in errors) == 2, sink.accepted
    assert {e["@simple_error"]["message"] for e in errors} == {"boom in a bare app"}
