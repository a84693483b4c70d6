"""Turning a ``POST /api/v2/events`` body into events ready to store.

1. :func:`decode_body` undoes ``Content-Encoding`` (``gzip``, raw ``deflate``, ``identity``)
   without ever producing more than a bound: a gzip bomb costs at most the bound in memory and
   is answered 413. A body that does not decode is answered 400 (the service answers 202 and
   loses it; a development tool says so).
2. :func:`read_events` reads the text as the service does: JSON (one object or an array of
   objects) goes through :class:`~eventlog_handler.collector._normalize.Normalizer`; anything
   else (plain text, JSON that does not parse, JSON of another shape, fields of the wrong types)
   becomes one log event per non-blank line. Bytes that are not UTF-8 are read with
   replacement characters. Only an empty body is refused (411); an empty array ``[]`` is
   answered 202 with nothing stored, as the service answers it.

The body is kept as it was sent (:class:`Received`), and each event stored points into it: the
rules are applied again, with the same time of receipt, when an event is read, which gives the
same event. Storing thus never encodes an event again.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass
from typing import Any

from eventlog_handler.collector._normalize import FieldTypeError, NormalizedEvent, Normalizer
from eventlog_handler.collector._problems import HttpError

__all__ = ["Received", "body_items", "decode_body", "read_events"]


# -- step 1: content encoding ----------------------------------------------------------------


def _inflate(raw: bytes, wbits: int, limit: int, *, multi_member: bool) -> bytes:
    out = bytearray()
    decompressor = zlib.decompressobj(wbits)
    data = raw
    while True:
        chunk = decompressor.decompress(data, limit + 1 - len(out))
        out += chunk
        if len(out) > limit:
            raise HttpError(
                413, f"The request body is larger than {limit} bytes once decompressed."
            )
        if decompressor.eof:
            rest = decompressor.unused_data
            if multi_member and rest.strip(b"\0"):
                decompressor = zlib.decompressobj(wbits)
                data = rest
                continue
            return bytes(out)
        data = decompressor.unconsumed_tail
        if not data and not chunk:
            raise HttpError(400, "The compressed request body is truncated.")


def decode_body(raw: bytes, content_encoding: str | None, limit: int) -> bytes:
    """Undo ``Content-Encoding``; the result is never longer than ``limit`` bytes (else 413).

    ``gzip`` (and ``x-gzip``), raw ``deflate`` and ``identity`` are understood; any other
    encoding is answered 415, a corrupt stream 400.
    """
    encoding = (content_encoding or "identity").strip().lower()
    try:
        if encoding in ("gzip", "x-gzip"):
            return _inflate(raw, 16 + zlib.MAX_WBITS, limit, multi_member=True)
        if encoding == "deflate":
            return _inflate(raw, -zlib.MAX_WBITS, limit, multi_member=False)
    except zlib.error as exc:
        raise HttpError(400, f"The request body is not valid {encoding} data: {exc}.") from None
    if encoding in ("identity", ""):
        if len(raw) > limit:
            raise HttpError(413, f"The request body is larger than {limit} bytes.")
        return raw
    raise HttpError(415, f"Unsupported Content-Encoding {encoding[:40]!r}; use gzip.")


# -- step 2: events, or text ---------------------------------------------------------------


@dataclass(frozen=True)
class Received:
    """A request body as it is kept: the bytes as sent, their ``Content-Encoding``, why it was
    read as text (None when it was JSON events) and the request's ``User-Agent`` (``""`` when
    it had none; None when the events did not come by HTTP). Each stored event points at its
    position in :func:`body_items` of it, so nothing is encoded again when storing."""

    body: bytes
    encoding: str = "identity"
    note: str | None = None
    user_agent: str | None = None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


class _Unreadable(Exception):
    """The body is not JSON events the service can read."""


def _json_items(text: str) -> list[Any]:
    if text[:1] not in ("{", "["):
        raise _Unreadable("the body is not a JSON object or array")
    try:
        document = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise _Unreadable(f"the body is not valid JSON ({str(exc)[:120]})") from None
    if isinstance(document, list):
        return document  # an empty array is answered 202, as the service answers it
    if isinstance(document, dict):
        return [document]
    raise _Unreadable("the body is not a JSON object or array")


def _text_of(decoded: bytes) -> str:
    return decoded.decode("utf-8-sig", errors="replace")


def read_events(
    decoded: bytes, received: Received, normalizer: Normalizer
) -> tuple[list[NormalizedEvent], Received]:
    """The events of a decoded body, as the service reads them (see the module's docstring),
    and what to keep of the body (``received``, or for a body read as text, the lines as JSON
    with a note saying why)."""
    text = _text_of(decoded)
    stripped = text.strip(" \t\r\n")
    if not text.strip():
        raise HttpError(411, "The request body is empty.")
    try:
        return normalizer.events(_json_items(stripped)), received
    except (_Unreadable, FieldTypeError) as exc:
        reason = str(exc)
    normalizer.dropped = 0
    normalizer.problems.clear()
    note = f"Stored as text: {reason}. The service stores such a body the same way."
    events = normalizer.text_events(text)
    lines = [{"message": event.message} for event in events]
    kept = Received(json.dumps(lines, ensure_ascii=True).encode("ascii"), "identity", note)
    return events, kept


def body_items(received: Received, limit: int = 1 << 30) -> list[Any]:
    """The JSON values a kept body holds (one per event it carried), for reading events back."""
    decoded = decode_body(received.body, received.encoding, limit)
    document = json.loads(_text_of(decoded).strip(" \t\r\n"))
    return document if isinstance(document, list) else [document]
