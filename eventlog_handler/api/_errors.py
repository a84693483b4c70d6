"""Typed errors for every answer of the service that is not a success.

The hierarchy mirrors what a caller does about an answer, in the style of
``requests.exceptions``::

    EventLogError
    ├── TransportError            refused, reset, timed out, TLS failure: nothing was answered
    └── ApiError                  the service answered with a status that is not a success
        ├── BadRequestError       400, 411, 415: the request itself is wrong
        │   └── ValidationError   422: a field failed validation (``errors`` says which)
        ├── AuthenticationError   401: unknown, disabled or expired token
        ├── PaymentRequiredError  402: plan or 5-minute usage bucket exhausted
        ├── PermissionDeniedError 403: the token lacks the scope
        ├── NotFoundError         404: unknown project, or a token of another project
        ├── PayloadTooLargeError  413: the body is over the size limit
        ├── RateLimitedError      429 (and 409 from older servers): throttled
        └── ServerError           5xx
            └── ServiceUnavailableError 503: submission disabled or the service is down
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from eventlog_handler.settings import shown_url


class EventLogError(Exception):
    """Base class of every error this package raises."""


class TransportError(EventLogError):
    """The request got no answer: connection refused or reset, timeout, TLS or DNS failure.

    ``kind`` is one of ``"refused"``, ``"reset"``, ``"timeout"``, ``"tls"``, ``"other"``.
    ``sent`` says the request may have reached the service before the failure (the connection
    was reset, or the answer timed out, after the request was written): its outcome is unknown.
    """

    def __init__(self, message: str, kind: str = "other", *, sent: bool = False) -> None:
        super().__init__(message)
        self.kind = kind
        self.sent = sent


class ApiError(EventLogError):
    """The service answered with a status that is not a success.

    ``title`` and ``errors`` come from the RFC 7807 problem body when there is one. ``url`` and
    ``location`` are kept as they may be printed (:func:`~eventlog_handler.settings.shown_url`):
    a password in them, a token in the user's place and the query's values are ``[excluded]``,
    so neither the message nor the attributes carry a secret of the server's URL.
    """

    def __init__(
        self,
        status: int,
        title: str | None = None,
        errors: Mapping[str, Any] | None = None,
        body: str = "",
        url: str = "",
        location: str = "",
    ) -> None:
        self.status = status
        self.title = title
        self.errors: dict[str, Any] = dict(errors or {})
        self.body = body
        self.url = shown_url(url) if url else ""
        #: Where a redirect (3xx) points (never followed).
        self.location = shown_url(location) if location else ""
        super().__init__(self._describe())

    def _describe(self) -> str:
        text = f"{self.status}"
        if self.title:
            text += f" {self.title}"
        if self.errors:
            details = "; ".join(f"{key}: {_join(value)}" for key, value in self.errors.items())
            text += f" ({details})"
        if self.url:
            text += f" from {self.url}"
        return text


def _join(value: Any) -> str:
    if isinstance(value, list | tuple):
        return ", ".join(str(item) for item in value)
    return str(value)


class BadRequestError(ApiError):
    """400, 411 or 415: the request is malformed (400 also means "token without a project")."""


class ValidationError(BadRequestError):
    """422: the body failed validation; ``errors`` maps each field to its problems."""


class AuthenticationError(ApiError):
    """401: the token is unknown, disabled or expired."""


class PaymentRequiredError(ApiError):
    """402: the plan's limit or the current 5-minute usage bucket is exhausted."""


class PermissionDeniedError(ApiError):
    """403: the token does not carry the scope this call needs."""


class NotFoundError(ApiError):
    """404: no such resource, or a project the token does not belong to."""


class PayloadTooLargeError(ApiError):
    """413: the request body is over the service's size limit."""


class RateLimitedError(ApiError):
    """429 (409 on older servers): the organization is throttled.

    ``retry_after`` is the server's ``Retry-After`` in seconds, when it sent one.
    """

    def __init__(self, status: int, retry_after: float | None = None, **kwargs: Any) -> None:
        self.retry_after = retry_after
        super().__init__(status, **kwargs)


class ServerError(ApiError):
    """A 5xx answer."""


class ServiceUnavailableError(ServerError):
    """503: submission is disabled or the service is temporarily down.

    ``retry_after`` is the ``Retry-After`` in seconds, when one was sent (the service sends
    none; proxies and load balancers in front of it do).
    """

    def __init__(self, status: int, retry_after: float | None = None, **kwargs: Any) -> None:
        self.retry_after = retry_after
        super().__init__(status, **kwargs)


_BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    402: PaymentRequiredError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: RateLimitedError,
    411: BadRequestError,
    413: PayloadTooLargeError,
    415: BadRequestError,
    422: ValidationError,
    429: RateLimitedError,
    503: ServiceUnavailableError,
}


def error_class_for(status: int) -> type[ApiError]:
    """The :class:`ApiError` subclass that stands for ``status``."""
    if status in _BY_STATUS:
        return _BY_STATUS[status]
    if status >= 500:
        return ServerError
    if status in (408,):
        return ServerError
    return BadRequestError if 400 <= status < 500 else ApiError


class UnexpectedAnswerError(ApiError):
    """A success status whose body is not the service's (an HTML page, garbage): something
    else answered (a proxy's login page, a wrong URL), so the events did not arrive."""
