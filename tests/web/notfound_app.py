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

    return app


def create_flask() -> Any:
    from flask import Flask

    from eventlog_handler.wsgi import init_flask

    app = Flask("notfound")

    @app.get("/hello")
    def hello() -> str:
        return "hello"

    return init_flask(app, report_not_found=True)


if os.environ.get("NOTFOUND_TEST_SETUP") == "1":
    eventlog_handler.setup(flush_interval=0.05)
    asgi = create_asgi()
