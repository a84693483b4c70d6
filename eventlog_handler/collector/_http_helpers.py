"""Small pieces the API endpoints share: request bodies, query arguments, paging links and the
scope checks of projects."""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import urlencode

from eventlog_handler.collector._accounts import TokenRecord
from eventlog_handler.collector._ingest import decode_body
from eventlog_handler.collector._messages import Request, Response
from eventlog_handler.collector._problems import HttpError
from eventlog_handler.collector._storage import Storage

__all__ = [
    "DECOMPRESSION_FACTOR",
    "MAXIMUM_SKIP",
    "content_length",
    "int_arg",
    "json_document",
    "media_type",
    "paging_headers",
    "project_in_scope",
    "read_body",
    "token_project",
]

DECOMPRESSION_FACTOR = 10
#: The service returns nothing past this many skipped rows, and no ``next`` link once the next
#: page would skip this many or more.
MAXIMUM_SKIP = 1000
_DIGITS_RE = re.compile(r"^[0-9]{1,18}$")


def media_type(request: Request) -> str:
    """The request's media type, lowercased, without parameters."""
    return (request.headers.get("Content-Type") or "").split(";")[0].strip().lower()


def content_length(request: Request, max_body_bytes: int) -> int | None:
    """The body's declared length, None when there is none; 400/411/413 when unusable."""
    if request.headers.get("Transfer-Encoding"):
        raise HttpError(411, "Send a Content-Length (or a chunked body).")
    values = request.headers.get_all("Content-Length") or []
    if not values:
        return None
    if len(set(values)) > 1 or not _DIGITS_RE.match(values[0].strip()):
        raise HttpError(400, "The Content-Length header is invalid.")
    length = int(values[0].strip())
    if length > max_body_bytes:
        raise HttpError(413, f"The request body is larger than {max_body_bytes} bytes.")
    return length


def read_body(
    request: Request,
    max_body_bytes: int,
    *,
    required: bool,
    media_types: tuple[str, ...] = ("application/json",),
) -> bytes | None:
    """Check the headers, then read and decode the body (None if absent and optional)."""
    length = content_length(request, max_body_bytes)
    if not length:
        if required:
            raise HttpError(411, "A request body with a Content-Length is required.")
        return None
    if media_type(request) not in media_types:
        raise HttpError(415, f"Send the body as 'Content-Type: {media_types[0]}'.")
    raw = request.read_body(length)
    return decode_body(
        raw, request.headers.get("Content-Encoding"), max_body_bytes * DECOMPRESSION_FACTOR
    )


def json_document(raw: bytes) -> Any:
    """A JSON body (400 when it is not JSON)."""
    try:
        return json.loads(raw.decode("utf-8-sig"))
    except (ValueError, RecursionError) as exc:
        raise HttpError(400, f"The request body is not valid JSON: {str(exc)[:200]}.") from None


def int_arg(request: Request, name: str, default: int, maximum: int | None = None) -> int:
    """A positive integer query argument (400 when it is not one; below 1: the default)."""
    raw = request.arg(name)
    if raw is None or raw.strip() == "":
        return default
    if not _DIGITS_RE.match(raw.strip()):
        raise HttpError(
            400,
            f"'{name}' must be a positive integer.",
            errors={name: ["Must be a positive integer."]},
        )
    value = int(raw.strip())
    if value < 1:
        return default
    return min(value, maximum) if maximum is not None else value


def _page_url(request: Request, changes: dict[str, str], drop: tuple[str, ...]) -> str:
    pairs = [
        (key, value)
        for key, values in request.query.items()
        if key not in changes and key.lower() not in drop
        for value in values
    ]
    pairs += list(changes.items())
    return f"{request.base_url}{request.path}?{urlencode(pairs)}"


_NOT_IN_LINKS = ("access_token", "api_key", "apikey", "page", "after", "before")


def paging_headers(
    request: Request, page: int, limit: int, total: int | None, has_more: bool
) -> dict[str, str]:
    """``X-Result-Count`` and ``Link`` for a numbered page, as the service writes them: a
    ``previous`` link after page 1, a ``next`` link while there is more and the next page would
    skip fewer than 1,000 rows. Tokens in the query are never copied into links."""
    links = []
    if page > 1:
        url = _page_url(request, {"page": str(page - 1), "limit": str(limit)}, _NOT_IN_LINKS)
        links.append(f'<{url}>; rel="previous"')
    if has_more and (page + 1) * limit < MAXIMUM_SKIP:
        url = _page_url(request, {"page": str(page + 1), "limit": str(limit)}, _NOT_IN_LINKS)
        links.append(f'<{url}>; rel="next"')
    headers = {} if total is None else {"X-Result-Count": str(total)}
    if links:
        headers["Link"] = ", ".join(links)
    return headers


def cursor_headers(
    request: Request, limit: int, before: str | None, after: str | None
) -> dict[str, str]:
    """``Link`` for a cursor page: ``previous`` with ``before=<id>``, ``next`` with
    ``after=<id>``."""
    links = []
    if before:
        url = _page_url(request, {"before": before, "limit": str(limit)}, _NOT_IN_LINKS)
        links.append(f'<{url}>; rel="previous"')
    if after:
        url = _page_url(request, {"after": after, "limit": str(limit)}, _NOT_IN_LINKS)
        links.append(f'<{url}>; rel="next"')
    return {"Link": ", ".join(links)} if links else {}


def project_in_scope(storage: Storage, token: TokenRecord, project_id: str) -> str:
    """``project_id`` if the token may act on it, else 404 (as the service answers)."""
    if token.project_id is not None and token.project_id != project_id:
        raise HttpError(404, "This token belongs to another project.")
    project = storage.get_project(project_id)
    if project is None or project["organization_id"] != token.organization_id:
        raise HttpError(404, f"No project {project_id[:40]!r}.")
    return project_id


def token_project(storage: Storage, request: Request, token: TokenRecord) -> str:
    """The project a request acts on: from the path, else the token's own (400 if none)."""
    path_project = request.params.get("project_id")
    if path_project is not None:
        return project_in_scope(storage, token, path_project)
    if token.project_id is None:
        raise HttpError(
            400,
            "This token is not bound to a project: use a project token (API key).",
        )
    return token.project_id


#: On the API's answers to a request from a web page (``Origin``), as the service answers:
#: any origin, without credentials (the API takes a token, not a cookie).
CORS = {
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Expose-Headers": (
        "ETag, Link, X-Result-Count, X-Exceptionless-ConfigVersion, X-RateLimit-Limit, "
        "X-RateLimit-Remaining, Retry-After"
    ),
}
_HEADER_LIST_RE = re.compile(
    r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+(?:\s*,\s*[A-Za-z0-9!#$%&'*+.^_`|~-]+)*$"
)


def preflight(requested: str | None) -> Response:
    """The answer to a browser's CORS preflight (``OPTIONS`` with ``Origin``) of an API route."""
    headers = {
        "Access-Control-Allow-Methods": "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS",
        "Access-Control-Allow-Headers": "Authorization, Content-Type, Content-Encoding",
        "Access-Control-Max-Age": "300",
    }
    wanted = (requested or "").strip()
    if wanted and len(wanted) <= 1000 and _HEADER_LIST_RE.match(wanted):
        headers["Access-Control-Allow-Headers"] = wanted
    return Response(204, headers=headers)


#: A chunk's size line: hexadecimal digits, maybe extensions (RFC 9112, 7.1).
_CHUNK_SIZE = re.compile(rb"([0-9A-Fa-f]{1,15})(?:[ \t]*;[^\r\n]*)?\r\n")


def read_chunked(rfile: Any, limit: int) -> bytes:
    """A chunked body read whole from ``rfile``, strictly (a proxy in front must not read it
    otherwise): 413 past ``limit`` bytes, 400 when malformed, ``EOFError`` when the client
    stops sending."""
    body = bytearray()
    while True:
        found = _CHUNK_SIZE.fullmatch(_chunk_line(rfile))
        if found is None:
            raise HttpError(400, "The chunked body is malformed: a chunk size is hex digits.")
        size = int(found.group(1), 16)
        if size == 0:
            for _ in range(100):  # trailers, up to the blank line
                if _chunk_line(rfile) == b"\r\n":
                    return bytes(body)
            raise HttpError(400, "The chunked body is malformed: too many trailers.")
        if len(body) + size > limit:
            raise HttpError(413, f"The request body is larger than {limit} bytes.")
        chunk = rfile.read(size)
        if len(chunk) < size:
            raise EOFError
        body += chunk
        if rfile.read(2) != b"\r\n":
            raise HttpError(400, "The chunked body is malformed: a chunk ends with CRLF.")


def _chunk_line(rfile: Any) -> bytes:
    """One line of a chunked body's framing, CRLF included, at most 1,024 bytes."""
    line: bytes = rfile.readline(1025)
    if not line:
        raise EOFError
    if len(line) > 1024 or not line.endswith(b"\r\n"):
        raise HttpError(400, "The chunked body is malformed: a line too long or not CRLF.")
    return line
