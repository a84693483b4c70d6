"""A small Django project for the tests: settings, a user middleware, views and URLs."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from eventlog_handler import add_tags, get_user, set_user

OURS = "eventlog_handler.django.EventLogMiddleware"
IDENTIFY = "tests.web.djangoapp.identify"


def configure() -> None:
    """Configure Django once for this process (DEBUG off, as in production)."""
    import django
    from django.conf import settings

    if settings.configured:
        return
    settings.configure(
        DEBUG=False,
        SECRET_KEY="tests-only-" + "x" * 40,
        ROOT_URLCONF="tests.web.djangoapp",
        ALLOWED_HOSTS=["testserver", "127.0.0.1", "localhost"],
        INSTALLED_APPS=[],
        MIDDLEWARE=[OURS, IDENTIFY],
        USE_TZ=True,
    )
    django.setup()


def identify(get_response: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """The application's own middleware: the user from a header (a real app: its session)."""

    def middleware(request: Any) -> Any:
        user = request.headers.get("X-User")
        if user:
            set_user(user, name=request.headers.get("X-User-Name"))
        if request.GET.get("tag"):
            add_tags(request.GET["tag"])
        return get_response(request)

    return middleware


def fail(request: Any) -> Any:
    raise RuntimeError("the /fail view is broken")


async def async_fail(request: Any) -> Any:
    raise RuntimeError("the async view is broken")


def hello(request: Any) -> Any:
    from django.http import HttpResponse

    logging.getLogger("djangoapp.views").warning("hello from %s", get_user())
    return HttpResponse("hello")


def missing(request: Any) -> Any:
    from django.http import Http404

    raise Http404("no such order")


def denied(request: Any) -> Any:
    from django.core.exceptions import PermissionDenied

    raise PermissionDenied("not your order")


def stream(request: Any) -> Any:
    """A streamed body whose generator logs, and fails when asked (``?fail=1``)."""
    from django.http import StreamingHttpResponse

    def body() -> Any:
        yield b"first part"
        logging.getLogger("djangoapp.views").info("streaming for %s", get_user())
        if request.GET.get("fail"):
            raise RuntimeError("the stream broke")
        yield b"last part"

    response = StreamingHttpResponse(body())
    response["ETag"] = '"v1"'
    return response


def download(request: Any) -> Any:
    """A file, which a WSGI server sends with its ``wsgi.file_wrapper``."""
    from django.http import FileResponse

    return FileResponse(open(__file__, "rb"))  # the response closes it


def _urlpatterns() -> list[Any]:
    from django.urls import path

    return [
        path("fail", fail),
        path("async-fail", async_fail),
        path("hello", hello),
        path("missing", missing),
        path("denied", denied),
        path("stream", stream),
        path("download", download),
    ]


urlpatterns = _urlpatterns()
