"""``ignore_exceptions`` holds at every entry point, not only in logging calls: the WSGI and
ASGI middleware, ``capture_exception`` (which RQ's integration uses), and the hooks of uncaught
exceptions. Observed as a user would: the program in its own process, the events counted where
they arrive."""

from __future__ import annotations

import json

from tests.support.capture import CaptureServer
from tests.support.processes import run_python

PROGRAM = r"""
import asyncio, json, logging, threading
import eventlog_handler
from eventlog_handler import asgi, wsgi

logging.getLogger().addHandler(logging.NullHandler())  # no console copy of each line
handle = eventlog_handler.setup(ignore_exceptions=["PaymentDeclined"])


class PaymentDeclined(Exception):
    pass


def fail(kind):
    raise (PaymentDeclined if kind == "ignored" else ValueError)(kind)


def call_wsgi(kind):
    app = wsgi.EventLogMiddleware(lambda environ, start_response: fail(kind))
    try:
        app({"PATH_INFO": "/w/" + kind, "REQUEST_METHOD": "GET"}, None)
    except Exception:
        pass


def call_asgi(kind):
    async def app(scope, receive, send):
        fail(kind)

    async def call():
        scope = {"type": "http", "method": "GET", "path": "/a/" + kind, "headers": []}
        await asgi.EventLogMiddleware(app)(scope, None, None)

    try:
        asyncio.run(call())
    except Exception:
        pass


def in_a_thread(kind):
    thread = threading.Thread(target=fail, args=(kind,))
    thread.start()
    thread.join()


queued = {}
for kind in ("ignored", "reported"):
    call_wsgi(kind)
    call_asgi(kind)
    queued[kind] = eventlog_handler.capture_exception(
        PaymentDeclined(kind) if kind == "ignored" else ValueError(kind)
    )
    in_a_thread(kind)
assert handle.flush(10), handle.stats()
print(json.dumps({"queued": queued, "dropped": handle.stats()["dropped"]}))
"""


def test_ignored_exceptions_are_not_sent_from_any_entry_point(server: CaptureServer) -> None:
    done = run_python(server.url, ["-c", PROGRAM])
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["queued"] == {"ignored": False, "reported": True}
    # Four entry points: WSGI and ASGI middleware, capture_exception, a thread's hook.
    assert result["dropped"]["filtered"] == 4, result
    events = server.wait_for(4)
    types = sorted(event["@simple_error"]["type"].rpartition(".")[2] for event in events)
    assert types == ["ValueError"] * 4, json.dumps(events)[:2000]
    # The source line that raises names both types (Python 3.13 shows it in the trace of a
    # ``-c`` program): the exception itself is what must be the reported one.
    assert [event["@simple_error"]["message"] for event in events] == ["reported"] * 4
