"""WSGI middleware: a scope of its own for every request, and its unhandled exceptions reported.

Any WSGI application::

    from eventlog_handler.wsgi import EventLogMiddleware

    application = EventLogMiddleware(application)

Flask, in one line (it also reports the exceptions Flask turns into a 500 page itself)::

    from eventlog_handler.wsgi import init_flask

    init_flask(app)

For every request the middleware:

- opens a :class:`~eventlog_handler.capture._context.RequestScope`: the user and tags set while the
  request runs (``set_user`` in a ``before_request`` hook, ``add_tags`` in a view) belong to
  this request only and are gone when its response is closed, so they never reach the next
  request served by the same thread. Those set by code around the middleware (an auth
  wrapper outside it) count for the request too, not those it left from an earlier one;
- gives the request's error events ``@request`` (method, URL, headers and query after the
  data exclusions, client address, user agent; see :mod:`eventlog_handler.integrations._request`), also
  to the errors the application logs itself with ``logger.exception``;
- reports an exception that escapes the application, or its response iterator, as an error
  event (``@submission_method`` ``unhandled_request_exception``), then re-raises it, so the
  server answers and logs exactly as it did before. A framework or server that logs the same
  exception afterwards (gunicorn's ``Error handling request``, Flask's ``Exception on ...``)
  does not send it a second time;
- with ``report_not_found=True``, sends a not-found event (``type: "404"``, ``source`` = the
  path, with ``@request``) for every response whose status is 404, unless the request's user
  agent is a crawler's by the service's ``@@UserAgentBotPatterns``
  (:func:`~eventlog_handler.submit_not_found`).

Events go to the current :func:`~eventlog_handler.setup` (or an
:class:`~eventlog_handler.EventLogHandler` on the root logger); without either the middleware
only keeps requests apart. It never raises an error of its own into the request.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from eventlog_handler.capture._context import RequestScope
from eventlog_handler.capture._typed import report_not_found
from eventlog_handler.delivery._stderr import say_once
from eventlog_handler.integrations import _server_loggers as server_loggers
from eventlog_handler.integrations._request import (
    active_exclusions,
    from_environ,
    not_found_switch,
    report,
)

StartResponse = Callable[..., Any]
WSGIApplication = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]

__all__ = ["EventLogMiddleware", "init_flask"]


class EventLogMiddleware:
    """Wrap a WSGI application (see the module docstring)."""

    def __init__(self, app: WSGIApplication, *, report_not_found: bool = False) -> None:
        self.app = app
        self.report_not_found = not_found_switch("report_not_found", report_not_found)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.app!r}>"

    def __call__(
        self, environ: dict[str, Any], *start: StartResponse, **named: StartResponse
    ) -> Iterable[bytes]:
        start = (*start, *named.values())
        if len(start) != 1:  # an ASGI call (scope, receive, send), or Django's (request)
            raise _wrong_kind(environ, start[1:])
        start_response = start[0]
        scope = RequestScope(_request_info(environ), keep_outer=True)
        server_loggers.ensure_attached()
        if self.report_not_found:
            start_response = _noting_not_found(start_response, environ)
        try:
            result = self.app(environ, start_response)
            if type(result) is list or type(result) is tuple or _is_file(result, environ):
                scope.close()  # nothing of the application runs while these are sent
                return result
            return _ScopedResponse(result, iter(result), scope)
        except Exception as exc:
            report(exc)
            scope.close()
            raise
        except BaseException:
            scope.close()
            raise


def _wrong_kind(first: Any, more: tuple[Any, ...]) -> TypeError:
    """The error of a call that is not WSGI's: this middleware around an ASGI application
    (``app.add_middleware``: the README's import line names both), or in Django's
    ``MIDDLEWARE``. Said once on stderr too: the server may only log the request's 500."""
    if more or (isinstance(first, dict) and "type" in first and "asgi" in first):
        other = "an ASGI application: use eventlog_handler.asgi.EventLogMiddleware"
    else:
        other = "Django's MIDDLEWARE: use 'eventlog_handler.django.EventLogMiddleware'"
    text = f"eventlog_handler.wsgi.EventLogMiddleware wraps a WSGI application, not {other}"
    say_once(text, f"eventlog_handler: {text}")
    return TypeError(text)


class _ScopedResponse:
    """The application's response iterable, with its request scope open until it is closed.

    Iterating runs the application's code (a streamed body); an exception raised there is
    reported like one raised by the call.
    """

    __slots__ = ("_iterator", "_result", "_scope")

    def __init__(self, result: Iterable[bytes], iterator: Iterator[bytes], scope: RequestScope):
        self._result = result
        self._iterator = iterator
        self._scope = scope

    def __iter__(self) -> Iterator[bytes]:
        return self

    def __next__(self) -> bytes:
        try:
            return next(self._iterator)
        except StopIteration:
            raise
        except Exception as exc:
            report(exc)
            raise

    def close(self) -> None:
        try:
            close = getattr(self._result, "close", None)
            if close is not None:
                close()
        except Exception as exc:
            report(exc)
            raise
        finally:
            self._scope.close()


def _noting_not_found(start_response: StartResponse, environ: dict[str, Any]) -> StartResponse:
    """``start_response`` that reports a 404 answer (in the request's scope) first."""

    def start(status: str, headers: Any, *exc_info: Any) -> Any:
        if isinstance(status, str) and status[:4] == "404 ":
            path = f"{environ.get('SCRIPT_NAME', '')}{environ.get('PATH_INFO', '')}" or "/"
            report_not_found(_latin1_path(path))
        return start_response(status, headers, *exc_info)

    return start


def _latin1_path(path: Any) -> str:
    """A WSGI path (bytes as latin-1 characters) as the text the client asked for."""
    try:
        return str(path).encode("latin-1").decode("utf-8", "replace")
    except UnicodeError:
        return str(path)


def _request_info(environ: dict[str, Any]) -> dict[str, Any] | None:
    try:
        return from_environ(environ, active_exclusions())
    except Exception:  # pragma: no cover - from_environ never raises
        return None


def _is_file(result: Any, environ: dict[str, Any]) -> bool:
    """Whether ``result`` is the server's ``wsgi.file_wrapper`` (left as is, so the server can
    send the file its fast way)."""
    wrapper = environ.get("wsgi.file_wrapper")
    return isinstance(wrapper, type) and isinstance(result, wrapper)


# -- Flask -----------------------------------------------------------------------------------


def init_flask(app: Any, *, report_not_found: bool = False) -> Any:
    """Report a Flask application's unhandled exceptions with ``@request``, and give every
    request its own user and tags (``report_not_found=True``: its 404 answers too, as
    :class:`EventLogMiddleware` does). Returns ``app``. Calling it twice does nothing more.

    Wraps ``app.wsgi_app`` in :class:`EventLogMiddleware` and listens to Flask's
    ``got_request_exception`` signal: in production Flask catches a view's exception itself,
    logs it on ``app.logger`` and answers with its 500 page, so no exception reaches a WSGI
    middleware. The signal's report comes first; the log record that follows is recognised and
    not sent again. Exceptions that an ``errorhandler`` of the application handles are not
    reported, as Flask does not log them either.
    """
    if not hasattr(app, "wsgi_app"):  # FastAPI or Starlette (ASGI): left as it is
        text = (
            f"init_flask() takes a Flask application, not {type(app).__name__}; for an ASGI "
            "one (FastAPI, Starlette) use app.add_middleware(eventlog_handler.asgi."
            "EventLogMiddleware)"
        )
        say_once(text, f"eventlog_handler: {text}")
        return app
    wanted = not_found_switch("report_not_found", report_not_found)
    if not isinstance(app.wsgi_app, EventLogMiddleware):
        app.wsgi_app = EventLogMiddleware(app.wsgi_app, report_not_found=wanted)
    elif wanted:
        app.wsgi_app.report_not_found = True
    signals = importlib.import_module("flask.signals")
    signals.got_request_exception.connect(_flask_exception, app, weak=False)
    return app


def _flask_exception(sender: Any, exception: BaseException | None = None, **extra: Any) -> None:
    if exception is not None:
        report(exception)
