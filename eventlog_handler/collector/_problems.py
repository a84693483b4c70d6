"""RFC 7807 problem details: the error bodies of the collector's API."""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

__all__ = ["HttpError", "problem_body"]

# The problem ``type`` URIs ASP.NET Core (and so the real service) uses for each status.
_RFC9110 = "https://tools.ietf.org/html/rfc9110#section-"
_TYPES: dict[int, str] = {
    400: _RFC9110 + "15.5.1",
    401: _RFC9110 + "15.5.2",
    402: _RFC9110 + "15.5.3",
    403: _RFC9110 + "15.5.4",
    404: _RFC9110 + "15.5.5",
    405: _RFC9110 + "15.5.6",
    409: _RFC9110 + "15.5.10",
    411: _RFC9110 + "15.5.12",
    413: _RFC9110 + "15.5.14",
    415: _RFC9110 + "15.5.16",
    421: _RFC9110 + "15.5.20",
    422: _RFC9110 + "15.5.21",
    429: "https://tools.ietf.org/html/rfc6585#section-4",
    500: _RFC9110 + "15.6.1",
    503: _RFC9110 + "15.6.4",
}


class HttpError(Exception):
    """Raised by a route to answer with an error status and a problem body.

    ``errors`` maps a field name to its messages (the ``errors`` member of the problem body);
    ``headers`` are extra response headers (``Allow`` for a 405...).
    """

    def __init__(
        self,
        status: int,
        detail: str | None = None,
        *,
        errors: dict[str, list[str]] | None = None,
        headers: dict[str, str] | None = None,
        title: str | None = None,
    ) -> None:
        super().__init__(detail or title or HTTPStatus(status).phrase)
        self.status = status
        self.detail = detail
        self.errors = errors
        self.headers = headers or {}
        self.title = title


def problem_body(
    status: int,
    instance: str,
    *,
    title: str | None = None,
    detail: str | None = None,
    errors: dict[str, list[str]] | None = None,
) -> dict[str, Any]:
    """The JSON object of a problem: ``type``, ``title``, ``status``, ``instance`` and more."""
    phrase = HTTPStatus(status).phrase
    body: dict[str, Any] = {
        "type": _TYPES.get(status, "about:blank"),
        "title": title or phrase,
        "status": status,
        "instance": instance,
    }
    if detail:
        body["detail"] = detail
    if errors:
        body["errors"] = errors
    return body
