"""Django middleware: a scope of its own for every request, and its unhandled exceptions reported.

Add it first in ``MIDDLEWARE`` (``settings.py``)::

    MIDDLEWARE = [
        "eventlog_handler.django.EventLogMiddleware",
        ...
    ]

and call :func:`eventlog_handler.setup` once (for instance at the end of ``settings.py`` or in
``wsgi.py``/``asgi.py``). It works under WSGI and ASGI (sync and async views).

For every request the middleware opens a :class:`~eventlog_handler.capture._context.RequestScope` (the
user and tags set during the request belong to it only; those set by a middleware listed
before it count for the request too, not those it left from an earlier one) whose error events carry ``@request``
(see :mod:`eventlog_handler.integrations._request`; the scheme is ``request.scheme``, which honours
``SECURE_PROXY_SSL_HEADER``).

Django catches a view's exception itself: it sends ``got_request_exception``, renders its 500
page and logs ``Internal Server Error: /path`` on ``django.request``. The middleware listens to
that signal and reports the exception there, with the request's ``@request`` and user; the
``django.request`` record that follows is recognised and not sent again. Responses, the 500
page and Django's own logging are unchanged. ``Http404``, ``PermissionDenied`` and the other
exceptions Django answers with a 4xx are not reported (Django does not send the signal for them).

With ``EVENTLOG_REPORT_NOT_FOUND = True`` in Django's settings, every response with status 404
also sends a not-found event (``type: "404"``, ``source`` = the path, with ``@request``), unless
the user agent is a crawler's by the service's ``@@UserAgentBotPatterns``.

Placed first in ``MIDDLEWARE``, it also covers exceptions raised by the other middlewares. A
streamed response (``StreamingHttpResponse``) is iterated after the middleware returned: under
WSGI the request's scope stays open until its body is done (or the response closed), so what
its generator logs belongs to the request, and an exception raised there is reported with the
request's ``@request`` and user (the server's own log of it is not sent again). Under ASGI the
body may be made in another context (asgiref copies contexts), and what it logs carries no
``@request``.
"""

from __future__ import annotations

import importlib
import sys
import threading
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import Any

from eventlog_handler.capture._context import RequestScope
from eventlog_handler.capture._typed import report_not_found
from eventlog_handler.integrations import _server_loggers as server_loggers
from eventlog_handler.integrations._request import (
    active_exclusions,
    from_environ,
    not_found_switch,
    report,
)

__all__ = ["EventLogMiddleware"]

_DISPATCH_UID = "eventlog_handler.django.got_request_exception"
_FINISHED_UID = "eventlog_handler.django.request_finished"
#: Scopes kept open for a streamed body, per thread, until Django closes the response.
_OPEN = threading.local()


class EventLogMiddleware:
    """Django middleware (sync and async capable; see the module docstring)."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[Any], Any]) -> None:
        self.get_response = get_response
        asgiref_sync = importlib.import_module("asgiref.sync")
        self._async = bool(asgiref_sync.iscoroutinefunction(get_response))
        if self._async:
            asgiref_sync.markcoroutinefunction(self)
        conf = importlib.import_module("django.conf")
        self.report_not_found = not_found_switch(
            "EVENTLOG_REPORT_NOT_FOUND", getattr(conf.settings, "EVENTLOG_REPORT_NOT_FOUND", False)
        )
        signals = importlib.import_module("django.core.signals")
        signals.got_request_exception.connect(
            _on_request_exception, weak=False, dispatch_uid=_DISPATCH_UID
        )
        signals.request_finished.connect(
            _on_request_finished, weak=False, dispatch_uid=_FINISHED_UID
        )

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {'async' if self._async else 'sync'}>"

    def __call__(self, request: Any) -> Any:
        if self._async:
            return self._acall(request)
        scope = RequestScope(request_info(request), keep_outer=True)
        try:
            server_loggers.ensure_attached()
            response = self.get_response(request)
            self._note(request, response)
        except BaseException:
            scope.close()
            raise
        _close_after(request, response, scope)
        return response

    async def _acall(self, request: Any) -> Any:
        # Under ASGI the body may be made in another context than this one (asgiref copies
        # contexts), where the scope could not be closed: it ends here.
        with RequestScope(request_info(request), keep_outer=True):
            server_loggers.ensure_attached()
            pending: Awaitable[Any] = self.get_response(request)
            response = await pending
            self._note(request, response)
            return response

    def _note(self, request: Any, response: Any) -> None:
        if self.report_not_found and getattr(response, "status_code", None) == 404:
            report_not_found(str(getattr(request, "path", "") or "/"))


def _close_after(request: Any, response: Any, scope: RequestScope) -> None:
    """Close ``scope`` now, or, for a streamed body made by the application's code, once it is
    done or the response closed (a WSGI server closes what it sends, in the same thread); an
    exception raised while the body is made is reported in the request's scope. A file is
    sent by the server itself (``wsgi.file_wrapper``), and a HEAD request or a status
    without a body makes none: closed now."""
    try:
        if (
            getattr(response, "streaming", False) is True
            and not getattr(response, "is_async", False)
            and getattr(response, "file_to_stream", None) is None
            and getattr(request, "method", "") != "HEAD"
            and getattr(response, "status_code", 200) not in _NO_BODY
        ):
            response.streaming_content = _Scoped(response.streaming_content, scope)
            _OPEN.scopes = [*getattr(_OPEN, "scopes", ()), scope]
            return
    except Exception:  # pragma: no cover - a response type of its own: closed now
        pass
    scope.close()


#: Statuses whose answer has no body (Django drops a streamed one).
_NO_BODY = frozenset((204, 304))


class _Scoped:
    """A streamed body that closes its request's scope when it ends or is closed (Django
    closes it with the response, started or not), reporting what its making raised."""

    __slots__ = ("_content", "_scope")

    def __init__(self, content: Iterable[Any], scope: RequestScope) -> None:
        self._content: Iterator[Any] = iter(content)
        self._scope = scope

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        try:
            return next(self._content)
        except StopIteration:
            self._scope.close()
            raise
        except Exception as exc:
            report(exc)
            self._scope.close()
            raise

    def close(self) -> None:
        self._scope.close()


def request_info(request: Any) -> dict[str, Any] | None:
    """``@request`` of a Django ``HttpRequest``. Never raises."""
    try:
        try:
            scheme: str | None = str(request.scheme)
        except Exception:  # a malformed SECURE_PROXY_SSL_HEADER
            scheme = None
        try:
            path: str | None = str(request.path)
        except Exception:  # pragma: no cover - every HttpRequest has a path
            path = None
        return from_environ(request.META, active_exclusions(), scheme=scheme, path=path)
    except Exception:
        return None


def _on_request_finished(sender: Any, **kwargs: Any) -> None:
    """``request_finished``: Django sends it when it closes a response, also one that replaced
    a streamed response unread (``ConditionalGetMiddleware`` placed before this one answers
    304 without closing the response it drops): the scopes still open on the thread end."""
    scopes = getattr(_OPEN, "scopes", None)
    if scopes:
        _OPEN.scopes = []
        for scope in reversed(scopes):
            scope.close()


def _on_request_exception(sender: Any, request: Any = None, **kwargs: Any) -> None:
    """``got_request_exception``: Django sends it inside its ``except`` block."""
    exc = sys.exc_info()[1]
    if exc is not None:
        report(exc)
