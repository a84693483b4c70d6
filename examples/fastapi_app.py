"""A FastAPI app under uvicorn, wired with one line: ``app.add_middleware(EventLogMiddleware)``.

Each request gets its own user (set by the app's own middleware; a real app takes it from its
authentication) and an unhandled exception arrives once, with ``@request``, while the client
gets Starlette's 500 response and uvicorn logs ``Exception in ASGI application`` as usual. The
example runs uvicorn on 127.0.0.1 (a free port), makes a few requests to itself, and exits.

    pip install fastapi uvicorn
    python examples/fastapi_app.py
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import requests
import uvicorn
from fastapi import FastAPI, Request

import eventlog_handler
from eventlog_handler.asgi import EventLogMiddleware

eventlog_handler.setup(tags=["example", "fastapi"])
log = logging.getLogger("examples.fastapi")

app = FastAPI()


@app.middleware("http")
async def identify(request: Request, call_next: Callable[[Request], Awaitable[Any]]) -> Any:
    user = request.headers.get("x-user")
    if user:
        eventlog_handler.set_user(user, name=request.headers.get("x-user-name"))
    return await call_next(request)


app.add_middleware(EventLogMiddleware)  # added last, so it is the outermost middleware


@app.get("/")
async def index() -> dict[str, str]:
    return {"hello": "world"}


@app.get("/orders/{order_id}")
async def order(order_id: int) -> dict[str, int]:
    log.info("order %s viewed", order_id, extra={"order_id": order_id})
    return {"order": order_id}


@app.get("/checkout")
async def checkout() -> None:
    raise RuntimeError("the payment service is unreachable")


def main() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]})
    thread.start()
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    try:
        while not server.started and thread.is_alive():
            time.sleep(0.01)
        for path, user, name in (
            ("/", "u-1", "Ann"),
            ("/orders/7", "u-2", "Bob"),
            ("/checkout?token=s3cr3t&step=2", "u-1", "Ann"),
            ("/orders/8", None, None),
        ):
            headers = {"X-User": user, "X-User-Name": name} if user else {}
            headers["X-Api-Key"] = "example-secret"
            response = requests.get(base + path, headers=headers, timeout=5)
            print(path.split("?")[0], response.status_code)
    finally:
        server.should_exit = True
        thread.join()


if __name__ == "__main__":
    main()
