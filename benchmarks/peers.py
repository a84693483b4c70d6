"""The handlers compared, each attached to one logger and pointed at one target.

- ``noop``: a :class:`logging.Handler` whose ``emit`` does nothing: the floor, what the logging
  call itself costs.
- ``floor`` (queue floor): :class:`logging.handlers.QueueHandler` on a :class:`queue.SimpleQueue`
  → :class:`logging.handlers.QueueListener` whose handler does nothing: the cost of handing a
  record to another thread at all.
- ``stdlib`` (stdlib pipeline): the same ``QueueHandler`` (its own ``prepare``: the message
  formatted, one ``copy.copy`` of the record) on a ``SimpleQueue`` → a ``QueueListener`` →
  :class:`BatchPoster`, which builds per record the event dict a user would build (``type``,
  ``message``, ``date``, ``source``, ``@level``, ``data`` from the extras), JSON-encodes
  (:mod:`json`), gzips (level 6) and POSTs full batches of 500 with one ``requests.Session``,
  and a partial batch once its oldest record is ``flush_interval`` (3 s, the package's default)
  old: the package's batching policy, written with the standard library and ``requests``. No
  retry, scrubbing, roll-up, reference ids or trace log.
- ``eventlog``: :class:`eventlog_handler.EventLogHandler` with its default settings, driven through
  its public methods only (``flush``, ``stats``).
- ``eventlog-spool`` / ``eventlog-spool-all`` (only with ``--peers``): the same with the durable
  spool, events going to disk when they can't be sent / every event written before it is sent.
- ``sentry``: sentry-sdk with ``LoggingIntegration(event_level=WARNING)`` (every warning is an
  event) and its default integrations; its DSN points at the sink.
- ``logstash``: python-logstash-async's ``AsynchronousLogstashHandler`` over TCP with the
  in-memory cache (``database_path=None``).
"""

from __future__ import annotations

import datetime
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

UTC = datetime.timezone.utc
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


class _Marker(logging.LogRecord):
    """A record the stdlib listener recognises by identity: "send what you hold now"."""


class Floor(Peer):
    """``QueueHandler`` on a ``SimpleQueue`` → ``QueueListener`` → a handler that does nothing."""

    name, title = "floor", "queue floor"

    def attach(self, logger: logging.Logger, target: Target, options: dict[str, Any]) -> None:
        import atexit

        self.queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.listener = logging.handlers.QueueListener(self.queue, NoopHandler())
        self.listener.start()
        atexit.register(self.listener.stop)
        logger.addHandler(logging.handlers.QueueHandler(self.queue))

    def settle(self, timeout: float) -> None:
        # A SimpleQueue has no task counts: wait until it is empty, then a little for the
        # listener to finish the record it took last.
        wait_until(self.queue.empty, timeout)
        time.sleep(0.01)

    def pending(self) -> int | None:
        return self.queue.qsize()


#: The service's level names (what the event's ``@level`` carries).
_LEVEL_NAMES = {
    logging.DEBUG: "Debug",
    logging.INFO: "Info",
    logging.WARNING: "Warn",
    logging.ERROR: "Error",
    logging.CRITICAL: "Fatal",
}


class BatchPoster(logging.Handler):
    """The stdlib pipeline's sender, run by the listener's thread only.

    Per record it builds the event a user would write by hand (``type``, ``message``, ``date``,
    ``source``, ``@level``, and ``data`` from the record's extras); a full batch of
    ``batch_size`` is JSON-encoded with :mod:`json`, gzip'd (level 6, as the package does,
    when over 1 KB) and POSTed with one ``requests.Session`` (keep-alive). A partial batch goes
    out once its oldest record is ``flush_interval`` seconds old (see :class:`BatchingListener`).
    No retry: a failed batch is dropped and counted.
    """

    def __init__(
        self, url: str, api_key: str, batch_size: int = 500, flush_interval: float = 3.0
    ) -> None:
        super().__init__()
        import requests

        self._requests = requests
        self.url = url.rstrip("/") + "/api/v2/events"
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {api_key}"
        self.batch_size = batch_size
        self.flush_interval = flush_interval
        self.batch: list[dict[str, Any]] = []
        self.oldest = 0.0  # ``created`` of the batch's first record
        self.failed = 0
        self.sent = 0

    def emit(self, record: logging.LogRecord) -> None:
        data = {key: value for key, value in vars(record).items() if key not in _RESERVED}
        event: dict[str, Any] = {
            "type": "log",
            "message": record.getMessage(),
            "date": datetime.datetime.fromtimestamp(record.created, UTC).isoformat(),
            "source": record.name,
            "@level": _LEVEL_NAMES.get(record.levelno, record.levelname),
        }
        if data:
            event["data"] = data
        if not self.batch:
            self.oldest = record.created
        self.batch.append(event)
        if len(self.batch) >= self.batch_size:
            self.send()

    def due(self) -> float | None:
        """When the partial batch must go (a ``time.time()``), or ``None`` when there is none."""
        return self.oldest + self.flush_interval if self.batch else None

    def send(self) -> None:
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
            else:
                self.sent += len(batch)
        except self._requests.RequestException:
            self.failed += len(batch)

    def flush(self) -> None:
        # logging.shutdown() calls this after the listener has stopped (its atexit hook was
        # registered later, so it runs first): nothing else touches the batch then.
        self.send()


class BatchingListener(logging.handlers.QueueListener):
    """``QueueListener`` whose wait for the next record ends when the partial batch is due
    (then the records already in the queue are taken first, up to a full batch: with a backlog,
    batches stay full).

    Everything else is the stdlib's: ``_monitor``, ``prepare`` (a no-op), ``handle`` (the
    handler's ``handle``, which takes its lock and calls ``emit``).
    """

    def __init__(self, q: queue.SimpleQueue[Any], poster: BatchPoster) -> None:
        super().__init__(q, poster)
        self.poster = poster
        self.marker = _Marker("", 0, "", 0, "", None, None)
        self.settled = threading.Event()

    def dequeue(self, block: bool) -> Any:
        while True:
            due = self.poster.due()
            if due is None:
                return self.queue.get()
            wait = due - time.time()
            try:
                if wait > 0:
                    return self.queue.get(timeout=wait)
                # Due: records already waiting join the batch first (up to a full one), as
                # the package's worker takes what its queue holds; then the partial batch goes.
                return self.queue.get_nowait()
            except queue.Empty:
                self.poster.send()

    def handle(self, record: logging.LogRecord) -> None:
        if record is self.marker:  # settle(): send the partial batch now
            self.poster.send()
            self.settled.set()
            return
        super().handle(record)


class Stdlib(Peer):
    """The stdlib pipeline: ``QueueHandler`` → ``SimpleQueue`` → :class:`BatchingListener` →
    :class:`BatchPoster`."""

    name, title = "stdlib", "stdlib pipeline"
    counter = "events"

    def attach(self, logger: logging.Logger, target: Target, options: dict[str, Any]) -> None:
        import atexit

        self.queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.sender = BatchPoster(
            target.http_url,
            target.api_key,
            flush_interval=float(options.get("flush_interval", 3.0)),
        )
        self.listener = BatchingListener(self.queue, self.sender)
        self.listener.start()
        atexit.register(self.listener.stop)
        logger.addHandler(logging.handlers.QueueHandler(self.queue))

    def settle(self, timeout: float) -> None:
        """Have the listener send what it holds once it reaches this point of the queue."""
        self.listener.settled.clear()
        self.queue.put(self.listener.marker)
        self.listener.settled.wait(timeout)

    def pending(self) -> int | None:
        return self.queue.qsize() + len(self.sender.batch)

    def stats(self) -> dict[str, Any]:
        return {"sent": self.sender.sent, "failed": self.sender.failed}


class EventLog(Peer):
    """``eventlog_handler.EventLogHandler`` with default settings; public API only."""

    name, title = "eventlog", "eventlog"
    counter = "events"

    def attach(self, logger: logging.Logger, target: Target, options: dict[str, Any]) -> None:
        import eventlog_handler

        self.handler = eventlog_handler.EventLogHandler(
            api_key=target.api_key, server_url=target.http_url, **options
        )
        self._shutdown_timeout = float(options.get("shutdown_timeout", 2.0))  # its default
        logger.addHandler(self.handler)

    def settle(self, timeout: float) -> None:
        self.handler.flush(timeout)

    def pending(self) -> int | None:
        stats = self.handler.stats()
        return int(stats["queued"]) + int(stats["in_flight"])

    def stats(self) -> dict[str, Any]:
        stats = self.handler.stats()
        return {
            key: ({k: v for k, v in stats[key].items() if v} if key == "dropped" else stats[key])
            for key in ("delivered", "dropped", "retries", "batches", "emit_errors")
            if key in stats
        }

    def shutdown_timeout(self) -> float | None:
        return self._shutdown_timeout


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


def wait_until(predicate: Any, timeout: float, interval: float = 0.002) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)
    return True
