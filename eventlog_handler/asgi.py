"""ASGI middleware: a scope of its own for every request, and its unhandled exceptions reported.

FastAPI or Starlette, in one line::

    from eventlog_handler.asgi import EventLogMiddleware

    app.add_middleware(EventLogMiddleware)

Any ASGI 3 application (Quart, Django's ASGI handler, a bare callable)::

    application = EventLogMiddleware(application)

For every ``http`` and ``websocket`` connection the middleware opens a
:class:`~eventlog_handler.capture._context.RequestScope` (the user and tags set while it runs belong to
it only; as every connection runs in an asyncio task of its own, the user and tags set by code
around the middleware, such as an outer middleware, are kept), gives its error events ``@request`` (see :mod:`eventlog_handler.integrations._request`), and
reports an exception that escapes the application as an error event (``@submission_method``
``unhandled_request_exception``) before re-raising it unchanged: Starlette's 500 page and
uvicorn's ``Exception in ASGI application`` log stay as they were, and that log record is not
sent a second time.

It does not change ``receive`` or ``send``: request bodies, streamed responses and websocket
messages pass through as they are, and ``lifespan`` events go straight to the application. An
exception of the application's startup or shutdown is reported as an error event
(``unhandled_lifespan_exception``): uvicorn logs only its traceback's text, as a line. Its
own work per request is a few microseconds on the event loop, with no I/O and no waiting (the
report is queued; the delivery thread sends it). It also puts back the forwarding of
``uvicorn.error`` to the handler of :func:`~eventlog_handler.setup` when ``uvicorn.run``
configured logging after ``setup()`` (see :mod:`eventlog_handler.integrations._server_loggers`).

With ``report_not_found=True`` (``app.add_middleware(EventLogMiddleware, report_not_found=True)``)
it watches ``send`` for a response that starts with status 404 and sends a not-found event
(``type: "404"``, ``source`` = the path, with ``@request``), unless the user agent is a
crawler's by the service's ``@@UserAgentBotPatterns`` (:func:`~eventlog_handler.submit_not_found`).
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from eventlog_handler.capture._context import RequestScope
from eventlog_handler.capture._typed import report_not_found
from eventlog_handler.integrations import _server_loggers as server_loggers
from eventlog_handler.integrations._request import (
    active_exclusions,
    from_scope,
    not_found_switch,
    report,
    scope_path,
)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApplication = Callable[[Scope, Receive, Send], Awaitable[None]]

__all__ = ["EventLogMiddleware"]

_REQUEST_TYPES = ("http", "websocket")
LIFESPAN_METHOD = "unhandled_lifespan_exception"


class EventLogMiddleware:
    """Wrap an ASGI 3 application (see the module docstring)."""

    def __init__(self, app: ASGIApplication, *, report_not_found: bool = False) -> None:
        self.app = app
        self.report_not_found = not_found_switch("report_not_found", report_not_found)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.app!r}>"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        server_loggers.ensure_attached()
        if scope.get("type") == "lifespan":
            await _lifespan(self.app, scope, receive, send)
            return
        if scope.get("type") not in _REQUEST_TYPES:  # types to come
            await self.app(scope, receive, send)
            return
        # Each connection runs in a task of its own, with a copy of the server's context: the
        # user and tags that code around the middleware set (an outer middleware) are kept.
        request = RequestScope(_request_info(scope), keep_outer=True)
        if self.report_not_found and scope.get("type") == "http":
            send = _noting_not_found(send, scope)
        try:
            await self.app(scope, receive, send)
        except Exception as exc:
            report(exc)
            raise
        finally:
            request.close()


async def _lifespan(app: ASGIApplication, scope: Scope, receive: Receive, send: Send) -> None:
    """Run the application's lifespan, reporting the exception of a startup or shutdown that
    failed. An application that raises before it took a lifespan message does not support the
    protocol (Django's, a bare one): the server goes on without it, and nothing is reported.
    Starlette says the failure in a message, from the ``except`` block of it, then raises it:
    reported there, before the server logs the message's text (uvicorn ends the exception)."""
    began = False

    async def receiving() -> Message:
        nonlocal began
        began = True
        return await receive()

    async def sending(message: Message) -> None:
        if str(message.get("type", "")).endswith(".failed"):
            failure = sys.exc_info()[1]
            if failure is not None:
                report(failure, LIFESPAN_METHOD)
                server_loggers.reported_as(message.get("message"))  # uvicorn logs its text
        await send(message)

    try:
        await app(scope, receiving, sending)
    except Exception as exc:
        if began:
            report(exc, LIFESPAN_METHOD)
        raise


def _noting_not_found(send: Send, scope: Scope) -> Send:
    """``send`` that reports a response starting with status 404 (in the request's task)."""

    async def noting(message: Message) -> None:
        if message.get("type") == "http.response.start" and message.get("status") == 404:
            path = scope_path(scope) or "/"
            report_not_found(path)
        await send(message)

    return noting


def _request_info(scope: Scope) -> dict[str, Any] | None:
    try:
        return from_scope(scope, active_exclusions())
    except Exception:  # pragma: no cover - from_scope never raises
        return None
