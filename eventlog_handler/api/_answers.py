"""Reading the service's answers, whichever library received them (requests for the API,
urllib3 for the worker's event posts): success results, one typed error per status, what a
success answer that is not the service's means, and transport failures named by cause."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import re
import socket
import ssl
from collections.abc import Mapping
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlsplit

import requests
import urllib3

from eventlog_handler.api import _errors as errors
from eventlog_handler.settings import MASK, mask_secret
from eventlog_handler.wire._scrub import MIN_SECRET_LENGTH


@dataclasses.dataclass(frozen=True)
class SubmitResult:
    """What the service said to an accepted submission."""

    status: int
    events: int
    bytes_sent: int
    config_version: int | None = None
    rate_limit_remaining: int | None = None


def _int_header(headers: Mapping[str, str], name: str) -> int | None:
    try:
        return int(headers[name])
    except (KeyError, ValueError):
        return None


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds or an HTTP date), or ``None``."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=_dt.timezone.utc)
    return max(0.0, (when - _dt.datetime.now(_dt.timezone.utc)).total_seconds())


@dataclasses.dataclass(frozen=True)
class Answer:
    """An HTTP answer, whichever library received it (requests for the API, urllib3 for the
    worker's event posts), so one set of functions reads it."""

    status: int
    reason: str
    headers: Mapping[str, str]
    content: bytes
    url: str

    @classmethod
    def of(cls, response: requests.Response) -> Answer:
        return cls(
            response.status_code,
            response.reason or "",
            response.headers,
            response.content or b"",
            response.url or "",
        )


def submit_result(answer: Answer, count: int, bytes_sent: int) -> SubmitResult:
    """What an accepted event post said: its status and the headers the engine follows."""
    return SubmitResult(
        status=answer.status,
        events=count,
        bytes_sent=bytes_sent,
        config_version=_int_header(answer.headers, "X-Exceptionless-ConfigVersion"),
        rate_limit_remaining=_int_header(answer.headers, "X-RateLimit-Remaining"),
    )


def api_error(answer: Answer, secrets: tuple[str | None, ...] = ()) -> errors.ApiError:
    """The :class:`~eventlog_handler.api._errors.ApiError` subclass for a failure answer.

    ``secrets``: what the request carried (its token first, then a login's password), masked
    wherever the answer quotes them (a server or proxy that echoes the request): the token as
    :func:`~eventlog_handler.settings.mask_secret` shows it, anything else whole."""
    status = answer.status
    title: str | None = None
    problems: dict[str, Any] = {}
    body = _without(answer.content[:2000].decode("utf-8", "replace"), secrets)
    try:
        data = json.loads(body) if body else None
    except ValueError:
        data = None
    if isinstance(data, dict):
        if isinstance(data.get("title"), str):
            title = data["title"]
        elif isinstance(data.get("message"), str):
            title = data["message"]
        detail = data.get("detail")  # RFC 7807: what the server says of this very request
        if isinstance(detail, str) and detail.strip() and detail != title:
            title = f"{title}: {detail.strip()}" if title else detail.strip()
        if isinstance(data.get("errors"), dict):
            problems = data["errors"]
    if title is None:
        title = _without(answer.reason, secrets) or None
    cls = errors.error_class_for(status)
    kwargs: dict[str, Any] = {
        "title": title,
        "errors": problems,
        "body": body,
        "url": answer.url,
        "location": answer.headers.get("Location", ""),
    }
    if cls is errors.RateLimitedError or cls is errors.ServiceUnavailableError:
        return cls(
            status, retry_after=parse_retry_after(answer.headers.get("Retry-After")), **kwargs
        )
    return cls(status, **kwargs)


def _without(text: str, secrets: tuple[str | None, ...]) -> str:
    """``text`` with each of ``secrets`` masked: as it is, and as JSON writes it, once or twice
    (a JSON answer that quotes the JSON body of the request)."""
    for index, secret in enumerate(secrets):
        if secret and len(secret) >= MIN_SECRET_LENGTH:  # a shorter one would mask words
            masked = mask_secret(secret) if index == 0 else MASK
            once = json.dumps(secret)[1:-1]
            for form in sorted({secret, once, json.dumps(once)[1:-1]}, key=len, reverse=True):
                text = text.replace(form, masked)
    return text


def check_event_answer(answer: Answer) -> None:
    """Raise :class:`~eventlog_handler.api._errors.UnexpectedAnswerError` when a success answer
    to an event post is not the service's: it answers 202 with an empty body (a JSON body is
    tolerated); an HTML page or other text means something else answered."""
    content = answer.content
    if not content or not content.strip():
        return
    kind = answer.headers.get("Content-Type", "").split(";")[0].strip().lower()
    if "json" in kind or (not kind and content.lstrip()[:1] in (b"{", b"[")):
        try:
            json.loads(content)
            return
        except ValueError:
            pass
    what = (
        "an HTML page"
        if "html" in kind or b"<html" in content[:500].lower()
        else (f"a {kind or 'body'} that is not the service's answer")
    )
    raise errors.UnexpectedAnswerError(answer.status, title=f"answered with {what}", url=answer.url)


def transport_error(exc: BaseException, url: str) -> errors.TransportError:
    """A :class:`~eventlog_handler.api._errors.TransportError` naming what went wrong, from a
    requests or a urllib3 exception; ``sent`` says whether the request may have arrived."""
    where = urlsplit(url).netloc.rpartition("@")[2]
    chain = _causes(exc)
    if any(isinstance(item, _PROXY_ERRORS) for item in chain):
        return _proxy_error(chain, where)
    if any(isinstance(item, _SSL_ERRORS) for item in chain):
        return errors.TransportError(
            f"TLS failure talking to {where}: {exc}{_tls_hint(chain)}", "tls"
        )
    if any(isinstance(item, socket.gaierror) for item in chain) or _UNRESOLVED.search(str(exc)):
        return errors.TransportError(
            f"cannot reach {where}: its name does not resolve (a typo in the URL?)"
        )
    if any(isinstance(item, ConnectionRefusedError) for item in chain) or "refused" in str(exc):
        return errors.TransportError(f"connection to {where} refused", "refused")
    if any(
        isinstance(item, _TIMEOUTS) and not isinstance(item, urllib3.exceptions.NewConnectionError)
        for item in chain
    ):
        sent = not any(isinstance(item, _CONNECT_TIMEOUTS) for item in chain)
        return errors.TransportError(f"no answer from {where} in time", "timeout", sent=sent)
    if any(isinstance(item, ConnectionResetError | BrokenPipeError) for item in chain) or any(
        word in str(exc) for word in ("reset", "RemoteDisconnected", "aborted", "Broken pipe")
    ):
        return errors.TransportError(f"connection to {where} reset", "reset", sent=True)
    return errors.TransportError(f"cannot reach {where}: {type(exc).__name__}", "other")


def _tls_hint(chain: list[BaseException]) -> str:
    """What a TLS failure most likely means, where its text tells."""
    texts = " ".join(str(item) for item in chain)
    if "WRONG_VERSION_NUMBER" in texts or "record layer failure" in texts:
        return " (the server does not speak TLS: an https:// URL to an http:// server?)"
    if "CERTIFICATE_VERIFY_FAILED" in texts:
        return " (its certificate is not trusted here: give verify= the CA bundle that signed it)"
    return ""


def _proxy_error(chain: list[BaseException], where: str) -> errors.TransportError:
    """What the proxy from ``HTTPS_PROXY``/``HTTP_PROXY`` did (it is not the server's doing;
    its address and credentials are not shown)."""
    texts = " ".join(str(item) for item in chain)
    kind = "other"
    if " 407 " in f" {texts} ":
        what = "refused its own credentials (407): check the user and password in it"
    elif any(isinstance(item, ConnectionRefusedError) for item in chain) or "refused" in texts:
        what, kind = "refused the connection: is it running?", "refused"
    elif any(isinstance(item, _TIMEOUTS) for item in chain):
        what, kind = "did not answer in time", "timeout"
    elif answered := re.search(
        r"Tunnel connection failed: (\d{3}(?: [A-Za-z][A-Za-z -]{0,40})?)", texts
    ):
        what = f"answered {answered.group(1).strip()} to the tunnel (the server behind it?)"
    else:
        what = f"failed: {type(chain[-1]).__name__}"
    return errors.TransportError(
        f"cannot reach {where} through the proxy of HTTPS_PROXY / HTTP_PROXY, which {what}", kind
    )


_UNRESOLVED = re.compile(r"Name or service not known|nodename nor servname|Failed to resolve")
_PROXY_ERRORS = (requests.exceptions.ProxyError, urllib3.exceptions.ProxyError)
_SSL_ERRORS = (requests.exceptions.SSLError, urllib3.exceptions.SSLError, ssl.SSLError)
_TIMEOUTS = (requests.Timeout, urllib3.exceptions.TimeoutError, TimeoutError)
_CONNECT_TIMEOUTS = (requests.ConnectTimeout, urllib3.exceptions.ConnectTimeoutError)


def _causes(exc: BaseException) -> list[BaseException]:
    found: list[BaseException] = []
    stack: list[BaseException | None] = [exc]
    while stack and len(found) < 20:
        item = stack.pop()
        if item is None or any(item is seen for seen in found):
            continue
        found.append(item)
        stack.extend([item.__cause__, item.__context__])
        stack.extend(arg for arg in getattr(item, "args", ()) if isinstance(arg, BaseException))
        reason = getattr(item, "reason", None)
        if isinstance(reason, BaseException):
            stack.append(reason)
    return found
