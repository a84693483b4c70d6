"""A one-file Django project with ``eventlog_handler.django.EventLogMiddleware`` first in
``MIDDLEWARE``.

Each request gets its own user (set by the project's own middleware; a real project takes it
from ``request.user``) and an unhandled exception arrives once, with ``@request``, while Django
answers with its 500 page and logs ``Internal Server Error`` as usual. The example serves on
127.0.0.1 (a free port) with the standard library's WSGI server, makes a few requests to itself,
and exits.

    pip install django
    python examples/django_app.py
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

import django
import requests
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.urls import path

import eventlog_handler

settings.configure(
    DEBUG=False,
    SECRET_KEY="example-only-not-a-secret-" + "x" * 30,
    ROOT_URLCONF=__name__,
    ALLOWED_HOSTS=["127.0.0.1"],
    MIDDLEWARE=[
        "eventlog_handler.django.EventLogMiddleware",  # first: it sees every other middleware
        f"{__name__}.identify",
    ],
)
django.setup()
eventlog_handler.setup(tags=["example", "django"])
log = logging.getLogger("examples.django")


def identify(get_response: Callable[[HttpRequest], HttpResponse]) -> Any:
    def middleware(request: HttpRequest) -> HttpResponse:
        user = request.headers.get("X-User")
        if user:
            eventlog_handler.set_user(user, name=request.headers.get("X-User-Name"))
        return get_response(request)

    return middleware


def index(request: HttpRequest) -> HttpResponse:
    return HttpResponse("hello\n")


def order(request: HttpRequest, order_id: int) -> HttpResponse:
    log.info("order %s viewed", order_id, extra={"order_id": order_id})
    return HttpResponse(f"order {order_id}\n")


def checkout(request: HttpRequest) -> HttpResponse:
    raise RuntimeError("the payment service is unreachable")


urlpatterns = [
    path("", index),
    path("orders/<int:order_id>", order),
    path("checkout", checkout),
]


class QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def main() -> None:
    from django.core.wsgi import get_wsgi_application

    server = make_server("127.0.0.1", 0, get_wsgi_application(), handler_class=QuietHandler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    base = f"http://127.0.0.1:{server.server_port}"
    try:
        for url_path, user, name in (
            ("/", "u-1", "Ann"),
            ("/orders/7", "u-2", "Bob"),
            ("/checkout?token=s3cr3t&step=2", "u-1", "Ann"),
            ("/orders/8", None, None),
        ):
            headers = {"X-User": user, "X-User-Name": name} if user else {}
            headers["Cookie"] = "sessionid=example-secret"
            response = requests.get(base + url_path, headers=headers, timeout=5)
            print(url_path.split("?")[0], response.status_code)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


if __name__ == "__main__":
    main()
