"""Small applications that report their 404 answers (``report_not_found=True``): a FastAPI one
(run under uvicorn: ``python -m uvicorn tests.web.notfound_app:asgi``) and a Flask one.

Under uvicorn the module calls ``eventlog_handler.setup()`` (``EVENTLOG_*`` from the
environment)."""

from __future__ import annotations

import os
from typing import Any

import eventlog_handler
from eventlog_handler.asgi import EventLogMiddleware


def create_asgi() -> Any:
    from fastapi import FastAPI

    app = FastAPI()
    app.add_middleware(EventLogMiddleware, report_not_found=True)

    @app.get("/hello")
    async def hello() -> dict[str, str]:
        return {"hello": "world"}

    @app.get("/items/{name}")
    def item(name: str) -> Any:  # run in a thread pool, in a copy of the request's context
        from fastapi.responses import JSONResponse

        eventlog_handler.submit_not_found(f"/items/{name} (the application's)")
        return JSONResponse({"missing": name}, status_code=404)

    return app


def create_flask() -> Any:
    from flask import Flask

    from eventlog_handler.wsgi import init_flask

    app = Flask("notfound")

    @app.get("/hello")
    def hello() -> str:
        return "hello"

    @app.get("/items/<name>")
    def item(name: str) -> Any:
        eventlog_handler.submit_not_found(f"/items/{name} (the application's)")
        return {"missing": name}, 404

    return init_flask(app, report_not_found=True)


if os.environ.get("NOTFOUND_TEST_SETUP") == "1":
    eventlog_handler.setup(flush_interval=0.05)
    asgi = create_asgi()
