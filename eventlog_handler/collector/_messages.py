"""The request and response values passed between the HTTP handler and the endpoints."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from email.message import Message
from typing import Any

from eventlog_handler.collector._problems import HttpError, problem_body

__all__ = [
    "Request",
    "Response",
    "empty_response",
    "html_response",
    "json_response",
    "problem_response",
]


@dataclass
class Request:
    """One HTTP request, its body not yet read.

    ``read_body(n)`` reads exactly ``n`` bytes of the body (fewer only if the client hung up);
    endpoints call it only after every check that can be made from the headers.
    """

    method: str
    path: str
    query: dict[str, list[str]]
    headers: Message
    read_body: Callable[[int], bytes]
    base_url: str
    params: dict[str, str] = field(default_factory=dict)
    #: The client's address (for the login guard); empty when not known.
    client: str = ""

    def arg(self, name: str) -> str | None:
        """The first value of a query parameter, or None."""
        values = self.query.get(name)
        return values[0] if values else None


@dataclass
class Response:
    """What to send back: status, headers and a body (empty for 202/204/304), and what to do
    once it is sent (``after``: storing a post's events)."""

    status: int
    body: bytes = b""
    content_type: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    after: Callable[[], None] | None = None


def json_response(status: int, value: Any, headers: dict[str, str] | None = None) -> Response:
    """A JSON body (non-ASCII escaped, so any string is safe to encode)."""
    body = json.dumps(value, ensure_ascii=True, default=str).encode("ascii")
    return Response(status, body, "application/json; charset=utf-8", dict(headers or {}))


def empty_response(status: int, headers: dict[str, str] | None = None) -> Response:
    """No body."""
    return Response(status, b"", None, dict(headers or {}))


def html_response(status: int, page: str, headers: dict[str, str] | None = None) -> Response:
    """An HTML page (text the client sent may hold lone surrogates: they become ``?``)."""
    return Response(
        status, page.encode("utf-8", "replace"), "text/html; charset=utf-8", dict(headers or {})
    )


def problem_response(error: HttpError, instance: str) -> Response:
    """An ``application/problem+json`` answer for an :class:`HttpError`."""
    body = problem_body(
        error.status, instance, title=error.title, detail=error.detail, errors=error.errors
    )
    return Response(
        error.status,
        json.dumps(body, ensure_ascii=True).encode("ascii"),
        "application/problem+json; charset=utf-8",
        dict(error.headers),
    )
