"""The :class:`Collector`: the local collector as a Python object.

.. code-block:: python

    from eventlog_handler.collector import Collector

    with Collector() as collector:          # in-memory store, a free port on 127.0.0.1
        handler = EventLogHandler(api_key=collector.project_token, server_url=collector.url)
        ...
        events = collector.wait_for_events(1)
"""

from __future__ import annotations

import ipaddress
import logging
import os
import socket
import threading
import time
from collections import deque
from pathlib import Path
from types import TracebackType
from typing import Any

from eventlog_handler.collector._endpoints import DEFAULT_MAX_BODY_BYTES, Api
from eventlog_handler.collector._filters import EventQuery, parse_filter
from eventlog_handler.collector._server import (
    CollectorHTTPServer,
    Limits,
    RequestInfo,
    RequestRecord,
)
from eventlog_handler.collector._storage import Identity, StackQuery, Storage
from eventlog_handler.collector._throttle import Throttle

logger = logging.getLogger("eventlog_handler.collector")

__all__ = ["Collector", "is_loopback"]

_REQUEST_LOG_SIZE = 10_000


def is_loopback(host: str) -> bool:
    """Whether ``host`` names only this machine (``localhost``, ``127.0.0.0/8``, ``::1``)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False


def _shutdown_promptly(server: CollectorHTTPServer) -> None:
    """``server.shutdown()``, with connections to wake the serving loop out of its poll."""
    stopper = threading.Thread(target=server.shutdown, name="eventlog-collector-stop")
    stopper.start()
    address = server.server_address[:2]
    host = address[0].decode() if isinstance(address[0], bytes) else str(address[0])
    deadline = time.monotonic() + 5
    while stopper.is_alive() and time.monotonic() < deadline:
        try:
            with socket.create_connection((host, int(address[1])), timeout=0.5):
                pass
        except OSError:
            pass
        stopper.join(0.01)
    stopper.join()


class Collector:
    """The service's API v2 on loopback, with SQLite storage and an HTML dashboard.

    :param db_path: the SQLite file (created, with its directory, if missing); ``None`` keeps
        everything in memory for the life of this object.
    :param host: the address to bind; only loopback addresses unless ``allow_remote``.
    :param port: the port; 0 picks a free one (see :attr:`url` after :meth:`start`).
    :param throttle: refuse (429) an organization's requests beyond this many per 15 minutes;
        ``None`` never refuses (``X-RateLimit-Limit`` then reports the service's default, 3500).
    :param max_body_bytes: the request body limit (413 above it; 10x once decompressed).
    :param allow_remote: allow a non-loopback ``host`` — the API and dashboard are then open to
        the network.
    :param verbose: log each request on stderr.
    :param max_connections: connections served at once; more are answered 503 and closed.
    :param header_timeout: seconds a request's line and headers may take once it has begun.
    :param body_timeout: seconds a request's body may take.
    :param idle_timeout: seconds an open connection may wait for its next request.
    :param host_names: names besides loopback ones and IP addresses that requests may be
        addressed to (``Host``), for example the machine's name with ``allow_remote``.

    The organization, project, user token (scopes ``user`` + ``client``, no project), project
    token (scope ``client``) and user (``admin@localhost``, a random password) are created in the
    store on first use and found again with the same ``db_path``. :meth:`stop` stops serving but keeps the store readable; :meth:`start` serves
    again on the same port; :meth:`close` (or leaving a ``with`` block) stops and closes the store.
    """

    def __init__(
        self,
        db_path: str | Path | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        throttle: int | None = None,
        *,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        allow_remote: bool = False,
        verbose: bool = False,
        max_connections: int = 64,
        header_timeout: float = 10.0,
        body_timeout: float = 30.0,
        idle_timeout: float = 30.0,
        host_names: tuple[str, ...] | list[str] = (),
    ) -> None:
        if not allow_remote and not is_loopback(host):
            raise ValueError(
                f"refusing to serve on non-loopback host {host!r}: the collector has no real "
                "security; pass allow_remote=True (--allow-remote) to do it anyway"
            )
        if not 0 <= port <= 65535:
            raise ValueError(f"port must be in 0..65535, not {port}")
        if throttle is not None and throttle < 1:
            raise ValueError("throttle must be a positive number of requests per 15 minutes")
        if max_body_bytes < 1:
            raise ValueError("max_body_bytes must be positive")
        if max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        for name, value in (
            ("header_timeout", header_timeout),
            ("body_timeout", body_timeout),
            ("idle_timeout", idle_timeout),
        ):
            if not value > 0:
                raise ValueError(f"{name} must be a positive number of seconds")
        self.limits = Limits(
            max_connections=max_connections,
            idle_timeout=idle_timeout,
            header_timeout=header_timeout,
            body_timeout=body_timeout,
        )
        self.host_names = tuple(host_names)
        self.db_path = None if db_path is None else Path(db_path)
        self.host = host
        self._port = port
        self._throttle_limit = throttle
        self.max_body_bytes = max_body_bytes
        self.verbose = verbose
        self._lock = threading.RLock()
        self._events_changed = threading.Condition()
        self._storage: Storage | None = None
        self._identity: Identity | None = None
        self._throttle: Throttle | None = None
        self._api: Api | None = None
        self._server: CollectorHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._closed = False
        self._log: deque[RequestInfo] = deque(maxlen=_REQUEST_LOG_SIZE)

    # -- lifecycle ---------------------------------------------------------------------------

    def _store(self) -> Storage:
        with self._lock:
            if self._closed:
                raise RuntimeError("the collector is closed")
            if self._storage is None:
                self._storage = Storage(self.db_path)
                self._identity = self._storage.ensure_identity()
                recovered = self._storage.store_unstored()
                if recovered:
                    logger.warning(
                        "stored %d event(s) acknowledged before the collector stopped", recovered
                    )
            return self._storage

    def _ids(self) -> Identity:
        self._store()
        assert self._identity is not None
        return self._identity

    def start(self) -> Collector:
        """Serve in a daemon thread; returns self. A no-op when already serving."""
        with self._lock:
            if self._server is not None:
                return self
            storage = self._store()
            if self._throttle is None:
                self._throttle = Throttle(self._throttle_limit)
            if self._api is None:
                self._api = Api(
                    storage,
                    throttle=self._throttle,
                    max_body_bytes=self.max_body_bytes,
                    on_events=self._notify_events,
                )
            host = self.host.strip().strip("[]")
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            server = CollectorHTTPServer(
                (host, self._port),
                self._api,
                record=self._record,
                verbose=self.verbose,
                family=family,
                limits=self.limits,
                host_names=(host, *self.host_names),
            )
            self._port = server.server_port
            thread = threading.Thread(
                target=server.serve_forever,
                kwargs={"poll_interval": 0.2},
                name=f"eventlog-collector:{self._port}",
                daemon=True,
            )
            thread.start()
            self._server, self._thread = server, thread
            return self

    def stop(self) -> None:
        """Stop serving and close open connections; returns promptly. Idempotent.

        The store stays open: :meth:`events` still works, :meth:`start` serves again.
        """
        with self._lock:
            server, thread = self._server, self._thread
            self._server = self._thread = None
        if server is None:
            return
        _shutdown_promptly(server)
        server.close_connections()
        server.server_close()
        if thread is not None:
            thread.join(timeout=5)

    def close(self) -> None:
        """Stop serving, finish storing what was answered (within 30 s), close the store.
        Idempotent."""
        self.stop()
        self._settle()
        with self._lock:
            self._closed = True
            storage, self._storage = self._storage, None
        if storage is not None:
            storage.close()

    def _settle(self) -> None:
        """Wait until the posts answered so far are stored (see :mod:`._pending`)."""
        api = self._api
        if api is not None:
            api.events.pending.wait()

    def _settled(self) -> Storage:
        self._settle()
        return self._store()

    def __enter__(self) -> Collector:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        where = self.url if self.running else "not serving"
        return f"<Collector {where} db={str(self.db_path) if self.db_path else ':memory:'}>"

    @property
    def running(self) -> bool:
        """Whether the collector is serving."""
        return self._server is not None

    # -- addresses and identity --------------------------------------------------------------

    @property
    def port(self) -> int:
        """The port (the actual one once started with ``port=0``)."""
        return self._port

    @property
    def url(self) -> str:
        """The base URL, ``http://127.0.0.1:PORT`` (no trailing slash)."""
        server = self._server
        if server is None:
            raise RuntimeError("the collector is not serving; call start() first")
        return server.url

    @staticmethod
    def no_proxy() -> str:
        """``NO_PROXY`` (and ``no_proxy``) for a process that sends to a collector: what is set,
        and the loopback addresses, which a proxy from ``HTTP_PROXY`` can't reach."""
        hosts = os.environ.get("no_proxy") or os.environ.get("NO_PROXY") or ""
        if hosts.strip() == "*":  # no proxy for any host: only as the whole value
            return hosts
        return ",".join(name for name in (hosts, "127.0.0.1", "localhost") if name)

    @property
    def organization_id(self) -> str:
        """The default organization's id."""
        return self._ids().organization_id

    @property
    def project_id(self) -> str:
        """The default project's id."""
        return self._ids().project_id

    @property
    def project_token(self) -> str:
        """The default project's token (API key; scope ``client``)."""
        return self._ids().project_token

    @property
    def user_token(self) -> str:
        """The user-scoped token (scopes ``user`` and ``client``; bound to no project)."""
        return self._ids().user_token

    @property
    def admin_email(self) -> str:
        """The e-mail address of the collector's user (``POST /api/v2/auth/login``)."""
        return self._ids().admin_email

    @property
    def admin_password(self) -> str:
        """The password of the collector's user, chosen at random on first start."""
        return self._ids().admin_password

    @property
    def open_connections(self) -> int:
        """How many connections are being served (0 when not serving)."""
        server = self._server
        return 0 if server is None else server.open_connections

    @property
    def refused_connections(self) -> int:
        """How many connections were refused (503) for being over ``max_connections``."""
        server = self._server
        return 0 if server is None else server.refused_connections

    # -- managing the store ------------------------------------------------------------------

    def create_project(self, name: str, organization_id: str | None = None) -> dict[str, Any]:
        """Add a project (to the default organization unless told); returns it as the API does."""
        return self._store().create_project(organization_id or self.organization_id, name)

    def create_organization(self, name: str) -> str:
        """Add an organization; returns its id."""
        return self._store().create_organization(name)

    def create_token(
        self,
        project_id: str | None = None,
        scopes: tuple[str, ...] | list[str] = ("client",),
        *,
        organization_id: str | None = None,
        notes: str | None = None,
    ) -> str:
        """Add a token (for the default project unless told); returns the key.

        ``project_id=None`` with ``organization_id`` given makes a token bound to no project.
        """
        storage = self._store()
        if project_id is None and organization_id is None:
            project_id = self.project_id
        if project_id is not None:
            project = storage.get_project(project_id)
            if project is None:
                raise KeyError(f"no project {project_id!r}")
            organization_id = project["organization_id"]
        assert organization_id is not None
        created = storage.create_token(organization_id, project_id, list(scopes), notes)
        return str(created["id"])

    def disable_token(self, token: str, disabled: bool = True) -> None:
        """Disable a token (requests with it then get 401), or enable it again."""
        self._store().set_token_disabled(token, disabled)

    def set_project_setting(
        self, key: str, value: str | None, project_id: str | None = None
    ) -> int:
        """Set a client configuration setting (None removes it); returns the new version."""
        return self._store().set_project_setting(project_id or self.project_id, key, value)

    def create_user(self, email: str, password: str, name: str = "") -> str:
        """Add a user to the default organization; returns the user's id."""
        return self._store().create_user(self.organization_id, email, password, name).id

    def stacks(
        self, project_id: str | None = None, status: str | None = None, limit: int = 1000
    ) -> list[dict[str, Any]]:
        """Stacks, most recently seen first: ``id``, ``title``, ``type``, ``status``,
        ``total_occurrences``, ``event_count``, ``users``, ``first_occurrence``,
        ``last_occurrence``, ``signature_info``..."""
        query = StackQuery(
            project_ids=[project_id] if project_id else [],
            statuses=[status] if status else [],
            limit=max(1, limit),
        )
        stacks, _, _ = self._settled().page_stacks(query)
        return stacks

    def set_stack_status(self, stack_id: str, status: str) -> dict[str, Any]:
        """Set a stack's status (``open``, ``fixed``, ``regressed``, ``ignored``)."""
        return self._settled().set_stack_status(stack_id, status)

    def projects(self) -> list[dict[str, Any]]:
        """Every project, as ``GET /api/v2/projects`` returns them."""
        projects, _ = self._settled().list_projects(None, 0, 1_000_000)
        return projects

    # -- what was received -------------------------------------------------------------------

    def events(
        self,
        project_id: str | None = None,
        type: str | None = None,
        level: str | None = None,
        limit: int = 1000,
        *,
        filter: str | None = None,
    ) -> list[dict[str, Any]]:
        """Stored events, newest first (by event date), as stored.

        Each is a dict with ``id``, ``organization_id``, ``project_id``, ``stack_id``,
        ``is_first_occurrence``, ``created_utc`` and the event's fields ``type``, ``source``,
        ``date``, ``tags``, ``message``, ``geo``, ``value``, ``count``, ``data`` and
        ``reference_id`` (None, ``[]`` or ``{}`` when absent). ``level`` compares with
        ``data["@level"]`` case-insensitively; ``filter`` takes the API's filter syntax.
        """
        self._settle()
        return self._query(project_id, type, level, limit, filter)

    def _query(
        self,
        project_id: str | None,
        type: str | None,
        level: str | None,
        limit: int,
        filter: str | None = None,
    ) -> list[dict[str, Any]]:
        query = EventQuery(limit=max(0, limit))
        if project_id is not None:
            query.project_ids.append(project_id)
        if type is not None:
            query.types.append(type)
        if level is not None:
            query.levels.append(level.lower())
        if filter:
            parse_filter(filter, query)
        events, _ = self._store().query_events(query)
        return events

    def event(self, event_id: str) -> dict[str, Any] | None:
        """One stored event by id, or None."""
        return self._settled().get_event(event_id)

    def wait_for_events(
        self,
        count: int = 1,
        timeout: float = 5.0,
        *,
        project_id: str | None = None,
        type: str | None = None,
        level: str | None = None,
    ) -> list[dict[str, Any]]:
        """Wait until at least ``count`` matching events are stored; returns them newest first.

        Raises :class:`TimeoutError` (saying how many arrived) after ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        while True:
            self._settle()  # outside the condition: a store notifies it when done
            with self._events_changed:
                events = self._query(project_id, type, level, max(count, 1000))
                if len(events) >= count:
                    return events
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(
                        f"{len(events)} of {count} expected events arrived in {timeout} s"
                    )
                self._events_changed.wait(remaining)

    def clear_events(self) -> None:
        """Delete all stored events and stacks (and the reference ids seen)."""
        self._settled().clear_events()

    @property
    def requests(self) -> list[RequestRecord]:
        """The requests answered, oldest first, as ``(method, path, status)`` named tuples."""
        return [info.record for info in list(self._log)]

    @property
    def request_log(self) -> list[RequestInfo]:
        """The requests answered in detail (headers, body size, events stored/discarded)."""
        return list(self._log)

    def clear_requests(self) -> None:
        """Forget the requests seen so far."""
        self._log.clear()

    def _record(self, info: RequestInfo) -> None:
        self._log.append(info)

    def _notify_events(self) -> None:
        with self._events_changed:
            self._events_changed.notify_all()
