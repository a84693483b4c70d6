"""The handlers compared, each attached to one logger and pointed at one target.

- ``noop``: a :class:`logging.Handler` whose ``emit`` does nothing: the floor, what the logging
  call itself costs.
- ``floor``: :class:`logging.handlers.QueueHandler` → :class:`logging.handlers.QueueListener`
  whose handler does nothing: the cost of handing a record to another thread at all.
- ``stdlib``: :class:`logging.handlers.QueueHandler` → :class:`logging.handlers.QueueListener`,
  whose handler (:class:`JsonBatchHandler`) turns each record into a JSON object and POSTs them to
  ``/api/v2/events`` in gzip'd batches of up to 500 with ``requests`` (one session, keep-alive),
  sending a partial batch as soon as the queue runs empty. That is the same work eventlog-handler's
  worker does, so the comparison is fair; a stdlib ``HTTPHandler`` (one request per record) would
  be far slower. It has no retry: a failed batch is dropped and counted.
- ``eventlog``: :class:`eventlog_handler.EventLogHandler` with its default settings.
- ``eventlog-spool`` / ``eventlog-spool-all`` (only with ``--peers``): the same with the durable
  spool, events going to disk when they can't be sent / every event written before it is sent.
- ``sentry``: sentry-sdk with ``LoggingIntegration(event_level=WARNING)`` (every warning is an
  event) and its default integrations; its DSN points at the sink.
- ``logstash``: python-logstash-async's ``AsynchronousLogstashHandler`` over TCP with the
  in-memory cache (``database_path=None``).
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import logging
import logging.handlers
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any

API_KEY = "bench-api-key-0123456789abcdef0123456789ab"

# What a fresh record has; everything else on a record came from ``extra=``.
_RESERVED = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "taskName",
}


@dataclass
class Target:
    """Where a peer sends: an HTTP base URL and a TCP port on 127.0.0.1."""

    http_url: str
    tcp_port: int
    api_key: str = API_KEY

    @property
    def http_port(self) -> int:
        return int(self.http_url.rsplit(":", 1)[1].split("/", 1)[0])


class NoopHandler(logging.Handler):
    """Does nothing with a record: the floor of the caller's cost."""

    def emit(self, record: logging.LogRecord) -> None:
        pass


class Peer:
    """One compared handler. ``counter`` names the sink count that is its delivered events."""

    name = ""
    title = ""
    module: str | None = None
    counter: str | None = None

    def available(self) -> bool:
        return self.module is None or importlib.util.find_spec(self.module) is not None

    def attach(self, logger: logging.Logger, target: Target, options: dict[str, Any]) -> None:
        raise NotImplementedError

    def settle(self, timeout: float) -> None:
        """Best effort: let whatever is queued in this process go out."""

    def pending(self) -> int | None:
        """Events still held in this process, when the peer can tell."""
        return None

    def stats(self) -> dict[str, Any]:
        return {}

    def shutdown_timeout(self) -> float | None:
        """The exit deadline the peer promises, when it has one."""
        return None


class Noop(Peer):
    name, title = "noop", "no-op"

    def attach(self, logger: logging.Logger, target: Target, options: dict[str, Any]) -> None:
        logger.addHandler(NoopHandler())


class Floor(Peer):
    """``QueueHandler`` → ``QueueListener`` → a handler that does nothing."""

    name, title = "floor", "queue floor"

    def attach(self, logger: logging.Logger, target: Target, options: dict[str, Any]) -> None:
        import atexit

        self.queue: queue.Queue[Any] = queue.Queue()
        self.listener = logging.handlers.QueueListener(self.queue, NoopHandler())
        self.listener.start()
        atexit.register(self.listener.stop)
        logger.addHandler(logging.handlers.QueueHandler(self.queue))

    def settle(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.005)


class JsonBatchHandler(logging.Handler):
    """JSON-encodes records and POSTs them in gzip'd batches (the stdlib peer's sender)."""

    def __init__(self, url: str, api_key: str, batch_size: int = 500) -> None:
        super().__init__()
        import requests

        self._requests = requests
        self.url = url.rstrip("/") + "/api/v2/events"
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {api_key}"
        self.batch_size = batch_size
        self.batch: list[dict[str, Any]] = []
        self.failed = 0
        self._send_lock = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        data = {key: value for key, value in vars(record).items() if key not in _RESERVED}
        data["@level"] = record.levelname
        self.batch.append(
            {
                "type": "log",
                "message": record.getMessage(),
                "date": record.created,
                "source": record.name,
                "data": data,
            }
        )
        if len(self.batch) >= self.batch_size:
            self.flush()

    def flush(self) -> None:
        with self._send_lock:
            batch, self.batch = self.batch, []
            if not batch:
                return
            body = json.dumps(batch, default=str).encode()
            headers = {"Content-Type": "application/json"}
            if len(body) > 1024:
                body = gzip.compress(body, compresslevel=6, mtime=0)
                headers["Content-Encoding"] = "gzip"
            try:
                response = self.session.post(self.url, data=body, headers=headers, timeout=(5, 10))
                if response.status_code >= 300:
                    self.failed += len(batch)
            except self._requests.RequestException:
                self.failed += len(batch)

    def close(self) -> None:
        try:
            self.flush()
        finally:
            super().close()


class _FlushWhenIdle(logging.handlers.QueueListener):
    """Sends a partial batch as soon as the queue runs empty."""

    def handle(self, record: logging.LogRecord) -> None:
        super().handle(record)
        if self.queue.empty():  # type: ignore[attr-defined]
            for handler in self.handlers:
                handler.flush()


class Stdlib(Peer):
    name, title = "stdlib", "stdlib queue"
    counter = "events"

    def attach(self, logger: logging.Logger, target: Target, options: dict[str, Any]) -> None:
        import atexit

        self.queue: queue.Queue[Any] = queue.Queue()
        self.sender = JsonBatchHandler(target.http_url, target.api_key)
        self.listener = _FlushWhenIdle(self.queue, self.sender)
        self.listener.start()
        atexit.register(self.listener.stop)
        logger.addHandler(logging.handlers.QueueHandler(self.queue))

    def settle(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.005)

    def pending(self) -> int | None:
        return self.queue.qsize() + len(self.sender.batch)

    def stats(self) -> dict[str, Any]:
        return {"failed": self.sender.failed}


class EventLog(Peer):
    name, title = "eventlog", "eventlog"
    counter = "events"

    def attach(self, logger: logging.Logger, target: Target, options: dict[str, Any]) -> None:
        import eventlog_handler

        self.handler = eventlog_handler.EventLogHandler(
            api_key=target.api_key, server_url=target.http_url, **options
        )
        logger.addHandler(self.handler)

    def settle(self, timeout: float) -> None:
        self.handler.engine.flush(timeout)

    def pending(self) -> int | None:
        stats = self.handler.engine.stats()
        return int(stats["queued"]) + int(stats["in_flight"])

    def stats(self) -> dict[str, Any]:
        stats = self.handler.stats()
        return {
            "delivered": stats["delivered"],
            "dropped": {k: v for k, v in stats["dropped"].items() if v},
            "retries": stats["retries"],
            "batches": stats["batches"],
            "emit_errors": stats["emit_errors"],
        }

    def shutdown_timeout(self) -> float | None:
        return float(self.handler.settings.shutdown_timeout)


class Sentry(Peer):
    name, title = "sentry", "sentry-sdk"
    module = "sentry_sdk"
    counter = "sentry_events"

    def attach(self, logger: logging.Logger, target: Target, options: dict[str, Any]) -> None:
        import sentry_sdk
        from sentry_sdk.integrations.logging import LoggingIntegration

        extra = {}
        if "shutdown_timeout" in options:
            extra["shutdown_timeout"] = options["shutdown_timeout"]
        sentry_sdk.init(
            dsn=f"http://public@127.0.0.1:{target.http_port}/1",
            integrations=[LoggingIntegration(level=logging.INFO, event_level=logging.WARNING)],
            **extra,
        )
        self._timeout = float(extra.get("shutdown_timeout", 2.0))
        # sentry-sdk hooks Logger.callHandlers; a handler on the logger keeps logging's
        # "last resort" printing to stderr out of the picture, so sentry's cost is on top of the
        # floor.
        logger.addHandler(NoopHandler())

    def settle(self, timeout: float) -> None:
        import sentry_sdk

        sentry_sdk.flush(timeout=timeout)

    def shutdown_timeout(self) -> float | None:
        return self._timeout


class Logstash(Peer):
    name, title = "logstash", "logstash-async"
    module = "logstash_async"
    counter = "lines"

    def attach(self, logger: logging.Logger, target: Target, options: dict[str, Any]) -> None:
        from logstash_async.handler import AsynchronousLogstashHandler

        self.handler = AsynchronousLogstashHandler("127.0.0.1", target.tcp_port, database_path=None)
        logger.addHandler(self.handler)

    def settle(self, timeout: float) -> None:
        self.handler.flush()
        time.sleep(min(timeout, 0.05))


class EventLogSpool(EventLog):
    """eventlog-handler with the durable spool: events go to disk when they can't be sent."""

    name, title = "eventlog-spool", "eventlog+spool"
    spool_all = False

    def attach(self, logger: logging.Logger, target: Target, options: dict[str, Any]) -> None:
        import tempfile

        self.folder = tempfile.mkdtemp(prefix="eventlog-bench-spool-")
        options = {**options, "spool_path": self.folder, "spool_all": self.spool_all}
        super().attach(logger, target, options)


class EventLogSpoolAll(EventLogSpool):
    """eventlog-handler writing every event to the spool before sending it."""

    name, title = "eventlog-spool-all", "eventlog+spool_all"
    spool_all = True


PEERS: dict[str, Peer] = {
    peer.name: peer
    for peer in (
        Noop(),
        Floor(),
        Stdlib(),
        EventLog(),
        EventLogSpool(),
        EventLogSpoolAll(),
        Sentry(),
        Logstash(),
    )
}


def bench_logger(name: str = "bench") -> logging.Logger:
    """A logger of its own: every level, no propagation to the root's handlers."""
    logger = logging.getLogger(name)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    return logger
