"""Turning a ``POST /api/v2/events`` body into events ready to store.

1. :func:`decode_body` undoes ``Content-Encoding`` (``gzip``, raw ``deflate``, ``identity``)
   without ever producing more than a bound: a gzip bomb costs at most the bound in memory and
   is answered 413. A body that does not decode is answered 400 (the service answers 202 and
   loses it; a development tool says so).
2. :func:`read_events` reads the text as the service does: JSON (one object or an array of
   objects) goes through :class:`~eventlog_handler.collector.normalize.Normalizer`; anything
   else (plain text, JSON that does not parse, JSON of another shape, fields of the wrong types)
   becomes one log event per non-blank line. Bytes that are not UTF-8 are read with
   replacement characters. Only an empty body or an empty array is refused (411).
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Callable
from typing import Any

from eventlog_handler.collector.normalize import FieldTypeError, NormalizedEvent, Normalizer
from eventlog_handler.collector.problems import HttpError

__all__ = ["decode_body", "json_items", "read_events"]


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


class _Unreadable(Exception):
    """The body is not JSON events the service can read."""


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


#: The C scanner of a decoder: ``(text, index) -> (value, end)``.
_SCAN: Callable[[str, int], tuple[Any, int]] = vars(
    json.JSONDecoder(parse_constant=_reject_constant)
)["scan_once"]
_WHITESPACE = re.compile(r"[ \t\n\r]*")


def _skip(text: str, index: int = 0) -> int:
    """The index of the first character at or after ``index`` that is not JSON whitespace."""
    match = _WHITESPACE.match(text, index)
    return index if match is None else match.end()


def _value(text: str, index: int) -> tuple[Any, int]:
    try:
        return _SCAN(text, index)
    except StopIteration:
        raise _Unreadable(f"the body is not valid JSON (at character {index})") from None
    except (ValueError, RecursionError) as exc:
        raise _Unreadable(f"the body is not valid JSON ({str(exc)[:120]})") from None


def json_items(text: str) -> list[tuple[Any, str | None]]:
    """The values of a JSON object or array body, each with its own JSON text."""
    skip = _skip
    index = skip(text)
    opening = text[index : index + 1]
    if opening == "{":
        value, end = _value(text, index)
        if skip(text, end) != len(text):
            raise _Unreadable("the body has more after its JSON value")
        return [(value, text[index:end])]
    if opening != "[":
        raise _Unreadable("the body is not a JSON object or array")
    items: list[tuple[Any, str | None]] = []
    index = skip(text, index + 1)
    if text[index : index + 1] == "]":
        if skip(text, index + 1) != len(text):
            raise _Unreadable("the body has more after its JSON value")
        raise HttpError(411, "The request body is an empty array.")
    while True:
        value, end = _value(text, index)
        items.append((value, text[index:end]))
        index = skip(text, end)
        separator = text[index : index + 1]
        if separator == ",":
            index = skip(text, index + 1)
        elif separator == "]":
            if skip(text, index + 1) != len(text):
                raise _Unreadable("the body has more after its JSON value")
            return items
        else:
            raise _Unreadable(f"the body is not valid JSON (at character {index})")


def read_events(body: bytes, normalizer: Normalizer) -> list[NormalizedEvent]:
    """The events of a decoded body, as the service reads them (see the module's docstring).

    Events stored from text carry a ``note`` saying why, for the dashboard.
    """
    text = body.decode("utf-8-sig", errors="replace")
    if not text.strip():
        raise HttpError(411, "The request body is empty.")
    try:
        return normalizer.events(json_items(text))
    except (_Unreadable, FieldTypeError) as exc:
        reason = str(exc)
    normalizer.dropped = 0
    normalizer.problems.clear()
    note = f"Stored as text: {reason}. The service stores such a body the same way."
    return normalizer.text_events(text, note)
