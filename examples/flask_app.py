"""A Flask app wired with one line: ``init_flask(app)``.

Every request gets its own user (set in ``before_request``; a real app takes it from its
session) and an unhandled exception arrives once, with ``@request`` (no cookies, no
``Authorization``, ``?token=`` masked), while Flask answers with its usual 500 page. The
example serves on 127.0.0.1 (a free port), makes a few requests to itself, and exits.

    pip install flask
    python examples/flask_app.py
"""

from __future__ import annotations

import logging
import threading

import requests
from flask import Flask, request
from werkzeug.serving import make_server

import eventlog_handler
from eventlog_handler.wsgi import init_flask

eventlog_handler.setup(tags=["example", "flask"])

app = Flask(__name__)
init_flask(app)
log = logging.getLogger("examples.flask")


@app.before_request
def identify() -> None:
    user = request.headers.get("X-User")
    if user:
        eventlog_handler.set_user(user, name=request.headers.get("X-User-Name"))


@app.get("/")
def index() -> str:
    return "hello\n"


@app.get("/orders/<int:order_id>")
def order(order_id: int) -> str:
    log.info("order %s viewed", order_id, extra={"order_id": order_id})
    return f"order {order_id}\n"


@app.get("/checkout")
def checkout() -> str:
    raise RuntimeError("the payment service is unreachable")


def main() -> None:
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.port}"
    try:
        for path, user, name in (
            ("/", "u-1", "Ann"),
            ("/orders/7", "u-2", "Bob"),
            ("/checkout?token=s3cr3t&step=2", "u-1", "Ann"),
            ("/orders/8", None, None),
        ):
            headers = {"X-User": user, "X-User-Name": name} if user else {}
            headers["Authorization"] = "Bearer example-secret"
            response = requests.get(base + path, headers=headers, timeout=5)
            print(path.split("?")[0], response.status_code)
    finally:
        server.shutdown()
        thread.join()


if __name__ == "__main__":
    main()
