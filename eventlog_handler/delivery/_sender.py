"""The delivery worker's HTTP client: batches posted with urllib3, requests' own transport.

:class:`Sender` is a :class:`~eventlog_handler.api._client.Client` (so the settings fetch and
the other API calls still go through ``requests``) whose ``post_payload`` talks to a urllib3
connection pool directly. What a ``requests.Session`` works out for every request (proxies from
``HTTPS_PROXY``/``NO_PROXY``, the CA bundle from ``verify``, ``REQUESTS_CA_BUNDLE`` or
``CURL_CA_BUNDLE``) is read once per process with requests' own function, and the pool is made
from it; each batch is then one ``urlopen`` with no redirects and no retries (the retry policy
is the engine's). That skips requests' per-request work (settings merge, cookies, hooks, the
``Response`` object), the biggest share of the worker's time per batch after encoding.
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import io
import logging
import os
import threading
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote, urlsplit

import urllib3
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.util import make_headers

from eventlog_handler.api._answers import (
    Answer,
    SubmitResult,
    api_error,
    check_event_answer,
    submit_result,
    transport_error,
)
from eventlog_handler.api._client import EVENTS_PATH, USER_AGENT, Client


class _NotOwnTraffic(logging.Filter):
    """Drops the records urllib3 makes of the package's own requests (see :func:`own_traffic`):
    a program whose console shows ``DEBUG`` got a "Starting new HTTP connection" and a
    ``"POST /api/v2/events HTTP/1.1" 202`` line per batch, which are not the program's; its
    own requests' lines stay."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(_OWN, "active", False)


_OWN = threading.local()
_NOT_OWN = _NotOwnTraffic()
#: The loggers urllib3 makes records of a request with.
_URLLIB3_LOGGERS = (
    "urllib3.connection",
    "urllib3.connectionpool",
    "urllib3.poolmanager",
    "urllib3.response",
    "urllib3.util.retry",
)
for _name in _URLLIB3_LOGGERS:
    logging.getLogger(_name).addFilter(_NOT_OWN)


@contextlib.contextmanager
def own_traffic() -> Iterator[None]:
    """A request of the package's own runs on this thread meanwhile (see
    :class:`_NotOwnTraffic`)."""
    before = getattr(_OWN, "active", False)
    _OWN.active = True
    try:
        yield
    finally:
        _OWN.active = before


#: The most of an answer's body read: the service answers with a few bytes; the rest of a
#: larger body (not the service's answer) is left unread and its connection closed.
MAX_ANSWER = 256 * 1024


class Sender(Client):
    """A :class:`Client` for the worker (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._pool_pid: int | None = None
        self._pool: urllib3.PoolManager | None = None
        self._events_url = self.server_url + EVENTS_PATH
        self._headers: dict[str, str] = {}
        self._timeout: urllib3.Timeout | None = None

    def _make_pool(self) -> urllib3.PoolManager:
        url = self._events_url
        # requests' own reading of the environment: proxies (with NO_PROXY) and the CA bundle.
        environment = self.session.merge_environment_settings(url, {}, None, self.verify, None)
        verify = environment.get("verify", self.verify)
        options: dict[str, Any] = {"maxsize": 2, "block": False}
        if verify is False:
            options["cert_reqs"] = "CERT_NONE"
        else:
            options["cert_reqs"] = "CERT_REQUIRED"
            options["ca_certs"] = verify if isinstance(verify, str) else _default_ca_bundle()
            if isinstance(verify, str) and os.path.isdir(verify):
                options["ca_cert_dir"] = options.pop("ca_certs")
        proxy = (environment.get("proxies") or {}).get(urlsplit(url).scheme)
        pool = _proxy_pool(proxy, options) if proxy else urllib3.PoolManager(num_pools=2, **options)
        if not proxy or not proxy.startswith("socks"):
            pool.pool_classes_by_scheme = {"http": _HTTPPool, "https": _HTTPSPool}
        self._headers = {
            "User-Agent": USER_AGENT,
            "Accept": "application/json",
            "Accept-Encoding": "gzip, deflate",
            "Authorization": f"Bearer {self._token}",
            "Content-Type": "application/json",
        }
        timeout = self.timeout
        connect, read = timeout if isinstance(timeout, tuple) else (timeout, timeout)
        self._timeout = urllib3.Timeout(connect=connect, read=read)
        self._pool_pid = os.getpid()
        return pool

    def post_payload(self, payload: bytes, gzipped: bool, count: int = 1) -> SubmitResult:
        """Post a body made by :func:`~eventlog_handler.api._client.compress`; 202 on success."""
        pool = self._pool
        if pool is None or self._pool_pid != os.getpid():
            pool = self._pool = self._make_pool()
        headers = self._headers.copy()
        if gzipped:
            headers["Content-Encoding"] = "gzip"
        url = self._events_url
        try:
            with own_traffic():
                response = pool.urlopen(
                    "POST",
                    url,
                    body=payload,
                    headers=headers,
                    retries=False,
                    redirect=False,
                    timeout=self._timeout,
                    preload_content=False,
                )
                body = _body(response)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise transport_error(exc, url) from None
        answer = Answer(response.status, response.reason or "", response.headers, body, url)
        if answer.status >= 300:
            raise api_error(answer)
        check_event_answer(answer)
        return submit_result(answer, count, len(payload))

    def _request(self, *args: Any, **kwargs: Any) -> Any:
        """The engine's other requests (the settings, heartbeats, feedback): as the client's,
        as its own traffic (see :class:`_NotOwnTraffic`)."""
        with own_traffic():
            return super()._request(*args, **kwargs)

    def close(self) -> None:
        """Close the pool's and the session's connections."""
        if self._pool is not None and self._pool_pid == os.getpid():
            self._pool.clear()
        self._pool = None
        super().close()


def _body(response: Any) -> bytes:
    """The answer's body, at most :data:`MAX_ANSWER` bytes (by the answer's deadline: see
    :class:`_TimedConnection`). The connection goes back to the pool only when the body was
    read whole."""
    read = response.read1  # what has arrived, at most the size asked (urllib3 2.2 and later)
    chunks: list[bytes] = []
    size = 0
    whole = False
    try:
        while size <= MAX_ANSWER:
            chunk = read(64 * 1024)
            if not chunk:
                whole = True
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        if whole:
            response.release_conn()
        else:
            response.close()  # unread bytes: the connection can't carry another request
    return b"".join(chunks)[:MAX_ANSWER]


class _TimedConnection(HTTPConnection):
    """A connection whose answer (status line, headers and body) must come whole within the
    read timeout of its request. A read timeout alone restarts with every byte: a server that
    drips its answer, its headers included, would hold the worker, and every event, for ever."""

    def getresponse(self) -> Any:
        seconds = self.timeout if isinstance(self.timeout, int | float) else 10.0
        by = time.monotonic() + seconds  # http.client calls it as the class of its answers:
        self.response_class = functools.partial(_TimedAnswer, by=by)  # type: ignore[assignment]
        try:
            return super().getresponse()
        finally:  # for this answer only: not the proxy's to a later tunnel on this connection
            del self.response_class


class _TimedHTTPSConnection(_TimedConnection, HTTPSConnection):
    pass


class _HTTPPool(HTTPConnectionPool):
    ConnectionCls = _TimedConnection


class _HTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _TimedHTTPSConnection


class _TimedAnswer(http.client.HTTPResponse):
    """An answer read from the socket through :class:`_ByDeadline`."""

    def __init__(self, sock: Any, *args: Any, by: float, **kwargs: Any) -> None:
        super().__init__(sock, *args, **kwargs)
        self.fp = io.BufferedReader(_ByDeadline(self.fp.detach(), sock, by))


class _ByDeadline(io.RawIOBase):
    """The reads of a socket, each waiting at most until ``by`` (monotonic); past it, a
    timeout, as when one read waits too long."""

    def __init__(self, raw: Any, sock: Any, by: float) -> None:
        super().__init__()
        self._raw = raw
        self._sock = sock
        self._by = by

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int | None:
        left = self._by - time.monotonic()
        if left <= 0:
            raise TimeoutError("the answer took too long")
        self._sock.settimeout(left)
        read: int | None = self._raw.readinto(buffer)
        return read

    def close(self) -> None:
        self._raw.close()
        super().close()


def _default_ca_bundle() -> str:
    """The CA bundle requests verifies with by default: certifi's (a dependency of requests)."""
    import certifi

    return certifi.where()


def _proxy_pool(proxy: str, options: dict[str, Any]) -> urllib3.PoolManager:
    """A pool through ``proxy``, with its credentials (if any) as a Proxy-Authorization header."""
    if "://" not in proxy:
        proxy = "http://" + proxy
    parts = urlsplit(proxy)
    if parts.scheme.startswith("socks"):
        from urllib3.contrib.socks import SOCKSProxyManager  # needs PySocks, as requests does

        return SOCKSProxyManager(proxy, num_pools=2, **options)
    proxy_headers: dict[str, str] = {}
    if parts.username is not None:
        credentials = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        proxy_headers = make_headers(proxy_basic_auth=credentials)
        proxy = proxy.replace(parts.netloc, parts.netloc.rpartition("@")[2], 1)
    return urllib3.ProxyManager(proxy, num_pools=2, proxy_headers=proxy_headers, **options)
