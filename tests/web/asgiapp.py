"""A FastAPI application for the ASGI tests (in process, and under a real uvicorn).

Run under uvicorn (``python -m uvicorn tests.web.asgiapp:app``), the module calls
``eventlog_handler.setup()`` (``EVENTLOG_*`` from the environment) when ``WEB_TEST_SETUP`` is
``1``, and wires the middleware when ``WEB_TEST_MIDDLEWARE`` is ``1``.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request, WebSocket, WebSocketDisconnect
from fastapi.responses import PlainTextResponse, StreamingResponse

import eventlog_handler
from eventlog_handler import add_tags, get_user, set_user
from eventlog_handler.asgi import EventLogMiddleware

log = logging.getLogger("asgiapp")


def create_app(*, wired: bool) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if os.environ.get("WEB_TEST_STARTUP_FAILS") == "1":
            log.info("connecting to the database")
            raise ConnectionError("the database is down at startup")
        app.state.started = True
        app.state.release = asyncio.Event()
        yield
        app.state.started = False

    app = FastAPI(lifespan=lifespan)

    @app.middleware("http")
    async def identify(request: Request, call_next: Callable[[Request], Awaitable[Any]]) -> Any:
        user = request.headers.get("x-user")
        if user:
            set_user(user, name=request.headers.get("x-user-name"))
        if request.query_params.get("tag"):
            add_tags(request.query_params["tag"])
        return await call_next(request)

    @app.get("/fail")
    async def fail() -> None:
        raise RuntimeError("the /fail endpoint is broken")

    @app.get("/fail-after-work")
    async def fail_after_work(order: str = "") -> None:
        log.info("loading order %s", order)
        await asyncio.sleep(0)
        log.info("charging order %s", order)
        raise RuntimeError(f"order {order} could not be charged")

    @app.get("/sync-fail-after-work")
    def sync_fail_after_work(order: str = "") -> None:  # run in a thread pool by FastAPI
        log.info("loading order %s", order)
        log.info("charging order %s", order)
        raise RuntimeError(f"order {order} could not be charged")

    @app.get("/hello")
    async def hello() -> dict[str, Any]:
        log.warning("hello from %s", get_user())
        return {"hello": "world"}

    @app.get("/state")
    async def state(request: Request) -> dict[str, Any]:
        return {"started": request.app.state.started}

    @app.get("/stream")
    async def stream() -> StreamingResponse:
        async def body() -> AsyncIterator[str]:
            for index in range(5):
                yield f"chunk {index}\n"
                await asyncio.sleep(0)

        return StreamingResponse(body(), media_type="text/plain")

    @app.get("/stream-fail")
    async def stream_fail() -> StreamingResponse:
        async def body() -> AsyncIterator[str]:
            yield "first\n"
            raise ValueError("the stream broke")

        return StreamingResponse(body(), media_type="text/plain")

    @app.get("/wait")
    async def wait(request: Request) -> StreamingResponse:
        """Streams until /release is requested: the server must serve both at once."""
        event: asyncio.Event = request.app.state.release

        async def body() -> AsyncIterator[str]:
            yield "waiting\n"
            await event.wait()
            yield "released\n"

        return StreamingResponse(body(), media_type="text/plain")

    @app.get("/release")
    async def release(request: Request) -> PlainTextResponse:
        request.app.state.release.set()
        return PlainTextResponse("ok")

    @app.get("/log-server-error")
    async def log_server_error() -> PlainTextResponse:
        logging.getLogger("uvicorn.error").error("logged on uvicorn.error")
        return PlainTextResponse("ok")

    @app.websocket("/ws")
    async def echo(websocket: WebSocket) -> None:
        await websocket.accept()
        while True:
            try:
                text = await websocket.receive_text()
            except WebSocketDisconnect:
                return
            if text == "boom":
                raise RuntimeError("the websocket handler broke")
            if text == "bye":
                await websocket.close()
                return
            await websocket.send_text(f"echo: {text}")

    if wired:
        app.add_middleware(EventLogMiddleware)  # added last: the outermost
    return app


def _from_environment() -> FastAPI:
    if os.environ.get("WEB_TEST_SETUP") == "1":
        eventlog_handler.setup(flush_interval=0.05, error_delay=0.01)
    return create_app(wired=os.environ.get("WEB_TEST_MIDDLEWARE") == "1")


app = _from_environment() if "WEB_TEST_MIDDLEWARE" in os.environ else None


def main() -> None:
    """``python -m tests.web.asgiapp``: ``setup()`` first, then ``uvicorn.run`` (which applies
    its logging configuration after ``setup()``); ``WEB_TEST_LOG_CONFIG=none`` leaves logging
    alone (uvicorn's loggers then propagate to the root logger)."""
    import uvicorn

    options: dict[str, Any] = {}
    if os.environ.get("WEB_TEST_LOG_CONFIG") == "none":
        options["log_config"] = None
        logging.basicConfig(level=logging.INFO)  # the console output uvicorn would give
    eventlog_handler.setup(flush_interval=0.05, error_delay=0.01)
    uvicorn.run(create_app(wired=True), host="127.0.0.1", port=0, **options)


if __name__ == "__main__":
    main()
