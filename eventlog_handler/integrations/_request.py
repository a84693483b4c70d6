"""The ``@request`` of a web request, from a WSGI environ or an ASGI scope; what the web
middlewares share (:mod:`eventlog_handler.wsgi`, :mod:`eventlog_handler.asgi`,
:mod:`eventlog_handler.django`).

``@request`` has the service's shape (``user_agent``, ``http_method``, ``is_secure``, ``host``,
``port``, ``path``, ``referrer``, ``client_ip_address``, ``headers`` as ``{name: [values]}``,
``query_string`` as ``{name: value}``, ``data``) and keeps secrets out:

- no cookies and no body;
- ``Authorization``, ``Proxy-Authorization``, ``Cookie`` and ``Set-Cookie`` are never included,
  and neither is any header whose name says it carries a secret (``X-Api-Key``,
  ``X-Auth-Token``, ``X-CSRFToken``, ``Sec-WebSocket-Key``, ...: see :func:`is_secret_name`)
  or matches the data exclusions (``Host``, ``User-Agent`` and ``Referer`` have fields of their
  own, as in the service's official clients);
- a query value whose name says it is a secret (``?token=...``, ``?api_key=...``, ``?sig=...``)
  or matches the data exclusions is replaced by ``[excluded]``, in ``query_string`` and in the
  URL (``data["url"]``), which never carries ``user:password@``; so is the referrer.

Building it does no I/O and no encoding (tens of microseconds per request; header names and
the secrecy of names are remembered) and never raises: a request whose environ or scope is
unusual gets what could be read.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from typing import Any
from urllib.parse import unquote_plus, urlsplit, urlunsplit

from eventlog_handler._values import boolean, checked
from eventlog_handler.capture._exceptions import capture_error, current_settings
from eventlog_handler.delivery._stderr import say_once
from eventlog_handler.settings import DEFAULT_DATA_EXCLUSIONS, MASK, Settings, normalize_key
from eventlog_handler.wire._jsonsafe import is_excluded

#: ``data["@submission_method"]`` of an exception the middleware reported.
SUBMISSION_METHOD = "unhandled_request_exception"

#: Header and query names that always hold secrets, whatever the data exclusions say: a name
#: (lower case, without ``-`` and ``_``) containing one of these words...
SECRET_WORDS: tuple[str, ...] = (
    "password",
    "passwd",
    "secret",
    "token",
    "apikey",
    "accesskey",
    "privatekey",
    "authorization",
    "authentication",
    "cookie",
    "session",
    "credential",
    "signature",
    "csrf",
    "xsrf",
    "jwt",
    "bearer",
)
#: ...or equal to one of these, or ending in ``key`` or ``auth``.
SECRET_NAMES = frozenset({"auth", "key", "sig", "pwd", "pass", "sid", "codeverifier"})

#: Headers with fields of their own in ``@request``.
_OWN_FIELDS = frozenset({"host", "user-agent", "referer"})
#: Headers and query parameters kept at most (the rest is left out).
MAX_HEADERS = 100
MAX_QUERY_PARAMS = 100
#: Characters kept of a header value, a query value, the path and the URL.
MAX_VALUE = 2_000

_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}
#: Per exclusions: whether a name is a secret (names repeat endlessly: remember them).
_SECRET_CACHE: dict[tuple[str, ...], dict[str, bool]] = {}


def is_secret_name(name: str, exclusions: Collection[str] = ()) -> bool:
    """Whether a header or query parameter called ``name`` carries a secret: by the rule of
    :data:`SECRET_WORDS` and :data:`SECRET_NAMES`, or by the data ``exclusions``."""
    return _is_secret(_secret_cache(exclusions), name, exclusions)


def _secret_cache(exclusions: Collection[str]) -> dict[str, bool]:
    key = tuple(exclusions)
    cache = _SECRET_CACHE.get(key)
    if cache is None:
        if len(_SECRET_CACHE) > 16:
            _SECRET_CACHE.clear()
        cache = _SECRET_CACHE[key] = {}
    return cache


def _is_secret(cache: dict[str, bool], name: str, exclusions: Collection[str]) -> bool:
    found = cache.get(name)
    if found is None:
        normalized = normalize_key(name)
        found = (
            normalized in SECRET_NAMES
            or normalized.endswith(("key", "auth"))
            or any(word in normalized for word in SECRET_WORDS)
            or is_excluded(name, exclusions)
        )
        if len(cache) < 4_096:
            cache[name] = found
    return found


def clean_query(query: str, exclusions: Collection[str] = ()) -> tuple[str, dict[str, str]]:
    """``query`` (raw, percent-encoded) with secret values replaced by ``[excluded]``, and its
    parameters as ``{name: value}`` (decoded; a repeated name's values joined by ``,``)."""
    if not query:
        return "", {}
    kept: list[str] = []
    params: dict[str, str] = {}
    secrets = _secret_cache(exclusions)
    for index, part in enumerate(query.split("&")):
        if not part:
            continue
        if index >= MAX_QUERY_PARAMS:
            kept.append("…")
            break
        raw_name, has_value, raw_value = part.partition("=")
        name = _cut(_unquote(raw_name))
        if _is_secret(secrets, name, exclusions):
            value = MASK
            kept.append(f"{raw_name}={MASK}")
        else:
            value = _cut(_unquote(raw_value)) if has_value else ""
            kept.append(part)
        params[name] = f"{params[name]},{value}" if name in params else value
    return "&".join(kept), params


def clean_url(url: str, exclusions: Collection[str] = ()) -> str:
    """``url`` without ``user:password@``, fragment and secret query values."""
    url = url.partition("#")[0]
    if "@" not in url and "?" not in url:
        return _cut(url)
    try:
        parts = urlsplit(url)
        netloc = parts.netloc.rpartition("@")[2]
        query, _ = clean_query(parts.query, exclusions)
        return _cut(urlunsplit((parts.scheme, netloc, parts.path, query, "")))
    except Exception:
        return "[unparsable URL]"


def from_environ(
    environ: Mapping[str, Any],
    exclusions: Collection[str] = (),
    *,
    scheme: str | None = None,
    path: str | None = None,
) -> dict[str, Any]:
    """``@request`` of a WSGI request. ``scheme`` and ``path`` replace what the environ says
    (a framework that knows better, behind a proxy or under a mount point). Never raises."""
    try:
        return _from_environ(environ, exclusions, scheme, path)
    except Exception:  # pragma: no cover - a strange environ must not break the request
        return {"http_method": _text(environ.get("REQUEST_METHOD", ""))}


def _from_environ(
    environ: Mapping[str, Any],
    exclusions: Collection[str],
    scheme: str | None,
    path: str | None,
) -> dict[str, Any]:
    plan = _plan(exclusions)
    headers = _Headers()
    for key, value in environ.items():
        step = plan.get(key)
        if step is None:
            step = _classify(plan, key, exclusions)
        if step[1] != _SKIP:
            headers.add(step, value if type(value) is str else _text(value))
    if scheme is None:
        scheme = _text(environ.get("wsgi.url_scheme") or "http")
    if path is None:
        path = _wsgi_text(environ.get("SCRIPT_NAME", "")) + _wsgi_text(environ.get("PATH_INFO", ""))
    server = (_text(environ.get("SERVER_NAME", "")), _port(environ.get("SERVER_PORT")))
    return _build(
        method=_text(environ.get("REQUEST_METHOD", "")),
        scheme=scheme,
        path=path,
        query=_text(environ.get("QUERY_STRING", "")),
        headers=headers,
        server=server,
        peer=_text(environ.get("REMOTE_ADDR", "")) or None,
        exclusions=exclusions,
    )


def from_scope(scope: Mapping[str, Any], exclusions: Collection[str] = ()) -> dict[str, Any]:
    """``@request`` of an ASGI ``http`` or ``websocket`` scope. Never raises."""
    try:
        return _from_scope(scope, exclusions)
    except Exception:  # pragma: no cover - a strange scope must not break the request
        return {"http_method": _text(scope.get("method", "GET"))}


def scope_path(scope: Mapping[str, Any]) -> str:
    """The request's path as the client asked for it, ``root_path`` included once: current
    servers (uvicorn's ``--root-path``) put it in front of ``path`` already; older servers
    and frameworks leave it out."""
    root = _text(scope.get("root_path") or "")
    path = _text(scope.get("path") or "")
    return root + path if root and not path.startswith(root) else path


def _from_scope(scope: Mapping[str, Any], exclusions: Collection[str]) -> dict[str, Any]:
    plan = _plan(exclusions)
    headers = _Headers()
    for name, value in scope.get("headers") or ():
        step = plan.get(name)
        if step is None:
            step = _classify(plan, name, exclusions)
        if step[1] != _SKIP:
            headers.add(step, value.decode("latin-1") if type(value) is bytes else _text(value))
    websocket = scope.get("type") == "websocket"
    scheme = _text(scope.get("scheme") or ("ws" if websocket else "http"))
    path = scope_path(scope)
    server = scope.get("server")
    client = scope.get("client")
    return _build(
        method=_text(scope.get("method") or "GET"),
        scheme=scheme,
        path=path,
        query=_latin1(scope.get("query_string") or b""),
        headers=headers,
        server=(_text(server[0]), _port(server[1])) if server else ("", None),
        peer=_text(client[0]) if client else None,
        exclusions=exclusions,
    )


# How a header (a WSGI environ key, or an ASGI header name) is treated.
_SKIP, _KEEP, _SECRET, _OWN = 0, 1, 2, 3
_Step = tuple[str, int]
#: Per exclusions: environ key or ASGI header name -> (header name, treatment).
_PLANS: dict[tuple[str, ...], dict[Any, _Step]] = {}
_NOT_A_HEADER: _Step = ("", _SKIP)


def _plan(exclusions: Collection[str]) -> dict[Any, _Step]:
    key = tuple(exclusions)
    plan = _PLANS.get(key)
    if plan is None:
        if len(_PLANS) > 16:
            _PLANS.clear()
        plan = _PLANS[key] = {}
    return plan


def _classify(plan: dict[Any, _Step], key: Any, exclusions: Collection[str]) -> _Step:
    """How the environ key (``HTTP_X_API_KEY``) or ASGI header name (``b"x-api-key"``) ``key``
    is treated; remembered in ``plan``."""
    if isinstance(key, bytes):
        name = key.decode("latin-1").title()
    elif type(key) is str and key.startswith("HTTP_"):
        name = key[5:].replace("_", "-").title()
    elif key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
        name = key.replace("_", "-").title()
    else:
        name = ""
    if not name:
        step = _NOT_A_HEADER
    elif name.lower() in _OWN_FIELDS or name.lower() in _ADDRESS_HEADERS:
        step = (name.lower(), _OWN)
    elif is_secret_name(name, exclusions):
        step = (name, _SECRET)
    else:
        step = (name, _KEEP)
    if len(plan) < 4_096:
        plan[key] = step
    return step


#: Headers read for the client's address (and kept in ``headers`` too).
_ADDRESS_HEADERS = frozenset({"x-forwarded-for", "x-real-ip"})


class _Headers:
    """The headers of one request as they are collected: kept ones, and own fields."""

    __slots__ = ("kept", "own")

    def __init__(self) -> None:
        self.kept: dict[str, list[str]] = {}
        self.own: dict[str, str] = {}

    def add(self, step: _Step, value: str) -> None:
        name, treatment = step
        if len(value) > MAX_VALUE:
            value = _cut(value)
        if treatment == _OWN:
            self.own.setdefault(name, value)
            if name not in _ADDRESS_HEADERS:
                return
            name = name.title()
        elif treatment != _KEEP or not value:
            return
        values = self.kept.get(name)
        if values is None:
            if len(self.kept) >= MAX_HEADERS:
                return
            self.kept[name] = values = []
        values.append(value)


def _build(
    *,
    method: str,
    scheme: str,
    path: str,
    query: str,
    headers: _Headers,
    server: tuple[str, int | None],
    peer: str | None,
    exclusions: Collection[str],
) -> dict[str, Any]:
    scheme = scheme.lower()
    kept = headers.kept
    own = headers.own
    host, port = _host_and_port(own.get("host"), server, scheme)
    query, params = clean_query(query, exclusions)
    path = _cut(path)
    shown_port = "" if port is None or _DEFAULT_PORTS.get(scheme) == port else f":{port}"
    url = f"{scheme}://{_bracketed(host)}{shown_port}{path}" + (f"?{query}" if query else "")
    info: dict[str, Any] = {
        "http_method": method.upper(),
        "is_secure": scheme in ("https", "wss"),
        "host": host,
    }
    if port is not None:
        info["port"] = port
    info["path"] = path
    client = _client_ip(own.get("x-forwarded-for"), own.get("x-real-ip"), peer)
    if client:
        info["client_ip_address"] = client
    if "user-agent" in own:
        info["user_agent"] = _cut(own["user-agent"])
    if "referer" in own:
        info["referrer"] = clean_url(own["referer"], exclusions)
    if kept:
        info["headers"] = kept
    if params:
        info["query_string"] = params
    info["data"] = {"url": _cut(url)}
    return info


def _host_and_port(
    header: str | None, server: tuple[str, int | None], scheme: str
) -> tuple[str, int | None]:
    """Host and port from the ``Host`` header (without any ``user@``), else the server's."""
    if not header:
        return server[0], server[1] if server[1] is not None else _DEFAULT_PORTS.get(scheme)
    text = header.strip().rpartition("@")[2]
    if text.startswith("["):  # [::1]:8000
        end = text.find("]")
        host, rest = (text[1:end], text[end + 1 :]) if end > 0 else (text, "")
        port_text = rest[1:] if rest.startswith(":") else ""
    else:
        host, colon, port_text = text.rpartition(":")
        if not colon:
            host, port_text = text, ""
    port = _port(port_text) if port_text else None
    return _cut(host.lower()), _DEFAULT_PORTS.get(scheme) if port is None else port


def _client_ip(forwarded: str | None, real_ip: str | None, peer: str | None) -> str | None:
    """The client's address: the first of ``X-Forwarded-For``, ``X-Real-IP``, or the peer."""
    if forwarded:
        first = forwarded.split(",", 1)[0].strip()
        if first:
            return _cut(first)[:100]
    if real_ip and real_ip.strip():
        return real_ip.strip()[:100]
    return peer


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _port(value: Any) -> int | None:
    try:
        port = int(value)
    except (TypeError, ValueError):
        return None
    return port if 0 <= port <= 65_535 else None


def _text(value: Any) -> str:
    if type(value) is str:
        return value
    if isinstance(value, bytes):
        return _latin1(value)
    return "" if value is None else str(value)


def _latin1(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("latin-1")
    return _text(value)


def _wsgi_text(value: Any) -> str:
    """A WSGI path (bytes decoded as latin-1, as PEP 3333 says) as the UTF-8 text it is."""
    text = _text(value)
    if text.isascii():
        return text
    try:
        return text.encode("latin-1").decode("utf-8")
    except UnicodeError:
        return text


def _unquote(text: str) -> str:
    return unquote_plus(text) if "%" in text or "+" in text else text


def _cut(text: str) -> str:
    return text if len(text) <= MAX_VALUE else text[:MAX_VALUE] + "…"


# -- what the middlewares share -------------------------------------------------------------


def active_settings() -> Settings | None:
    """The settings errors of requests are reported with: the current
    :func:`~eventlog_handler.setup`'s, else those of an
    :class:`~eventlog_handler.EventLogHandler` on the root logger (a ``dictConfig``)."""
    settings = current_settings()
    if settings is not None:
        return settings
    for handler in logging.getLogger().handlers:  # an EventLogHandler (a dictConfig)
        found = getattr(handler, "settings", None)
        if isinstance(found, Settings):
            return found
    return None


def active_exclusions() -> tuple[str, ...]:
    """The data exclusions of :func:`active_settings`, or the defaults."""
    settings = active_settings()
    return settings.data_exclusions if settings is not None else DEFAULT_DATA_EXCLUSIONS


def report(exc: BaseException, submission_method: str = SUBMISSION_METHOD) -> bool:
    """Report ``exc``, raised out of a request, as an error event (with the request's
    ``@request``, user and tags); once only. Never raises."""
    if not isinstance(exc, Exception):  # KeyboardInterrupt, SystemExit, CancelledError
        return False
    try:
        return capture_error(exc, submission_method=submission_method, settings=active_settings())
    except Exception:  # pragma: no cover - capture_exception never raises
        return False


def not_found_switch(name: str, value: Any) -> bool:
    """A middleware's ``report_not_found`` (``name``: the setting as the user wrote it) as a
    bool: ``"False"`` or ``"no"`` (from an environment variable) is false. A value that is
    not a boolean is said once on stderr, naming the setting, and 404s are not reported."""
    try:
        return bool(checked(boolean, name, value))
    except ValueError as exc:
        say_once(str(exc), f"{exc}; False is used: 404 answers are not reported")
        return False
