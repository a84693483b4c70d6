"""Turning a ``POST /api/v2/events`` body into events ready to store.

Three steps, each raising :class:`~eventlog_handler.collector.problems.HttpError`:

1. :func:`decode_body` undoes ``Content-Encoding`` (``gzip``, raw ``deflate``, ``identity``)
   without ever producing more than a bound: a gzip bomb costs at most the bound in memory and
   is answered 413.
2. :func:`parse_events` reads the JSON (one object or an array of objects). Bytes that are not
   UTF-8 or not JSON are answered **400**. The real service answers 202 and later stores such a
   body as a plain log message; for a development tool a clear error is more useful.
3. :func:`normalize_events` applies the service's rules to each event (see ``PROTOCOL.md``):
   defaults for ``type`` and ``date``, the 3-day window, clamping of future dates, truncation of
   ``message``/``source``, the tag limits, ``reference_id`` validation and moving unknown
   top-level keys into ``data``. A field of the wrong JSON type, a ``date`` that is not ISO 8601
   or a ``type`` longer than 100 characters is answered **422** with ``errors`` keyed like
   ``[3].date`` (the real service drops such an event after its 202). An empty ``type`` gets
   the default, as on the real service.
"""

from __future__ import annotations

import hashlib
import json
import re
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from eventlog_handler.collector.formats import DateFormatError, format_event_date, parse_date
from eventlog_handler.collector.problems import HttpError

__all__ = [
    "INVALID_REFERENCE_ID",
    "KNOWN_FIELDS",
    "MAX_EVENT_AGE",
    "MAX_FUTURE_SKEW",
    "NormalizedEvent",
    "Outcome",
    "decode_body",
    "error_chain",
    "normalize_event",
    "normalize_events",
    "parse_events",
]

KNOWN_FIELDS = frozenset(
    ("type", "source", "date", "tags", "message", "geo", "value", "count", "data", "reference_id")
)
MAX_TEXT = 2000
MAX_TYPE = 100
MAX_TAGS = 50
MAX_TAG = 100
MAX_EVENT_AGE = timedelta(days=3)
MAX_FUTURE_SKEW = timedelta(hours=1)
INVALID_REFERENCE_ID = "invalid-reference-id"
_REFERENCE_RE = re.compile(r"^[A-Za-z0-9-]{8,100}$")
_MAX_ERRORS = 50
_MAX_INNER = 20


@dataclass
class NormalizedEvent:
    """One event after the service's rules, with the columns the store indexes."""

    type: str
    date: str
    timestamp: float
    source: str | None = None
    message: str | None = None
    tags: list[str] = field(default_factory=list)
    geo: str | None = None
    value: float | int | None = None
    count: int | None = None
    data: dict[str, Any] = field(default_factory=dict)
    reference_id: str | None = None

    @property
    def level(self) -> str | None:
        """``data["@level"]`` lowercased, or None."""
        level = self.data.get("@level")
        return level.lower() if isinstance(level, str) else None

    @property
    def search_text(self) -> str:
        """Lowercased text free-text filters look in: message, source, error types/messages."""
        parts = [self.message or "", self.source or ""]
        for error in error_chain(self.data):
            parts.append(str(error.get("type") or ""))
            parts.append(str(error.get("message") or ""))
        return "\n".join(parts).lower()

    @property
    def stack_key(self) -> str:
        """What groups occurrences of the same problem (type + stack trace for errors)."""
        chain = error_chain(self.data)
        if chain:
            first = chain[0]
            basis = json.dumps(
                [self.type, first.get("type"), first.get("stack_trace")], default=str
            )
        else:
            basis = json.dumps([self.type, self.source, self.message])
        return hashlib.sha1(basis.encode("utf-8", "replace")).hexdigest()

    def wire_fields(self) -> dict[str, Any]:
        """The stored event's own fields (without ids and bookkeeping)."""
        return {
            "type": self.type,
            "source": self.source,
            "date": self.date,
            "tags": list(self.tags),
            "message": self.message,
            "geo": self.geo,
            "value": self.value,
            "count": self.count,
            "data": self.data,
            "reference_id": self.reference_id,
        }


@dataclass
class Outcome:
    """The result of normalizing a request's events."""

    events: list[NormalizedEvent] = field(default_factory=list)
    expired: int = 0


def error_chain(data: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The error and its ``inner`` errors, outermost first, from ``@simple_error`` or ``@error``.

    Bounded to 20 levels; entries that are not objects end the chain.
    """
    chain: list[dict[str, Any]] = []
    current = data.get("@simple_error")
    if not isinstance(current, dict):
        current = data.get("@error")
    while isinstance(current, dict) and len(chain) < _MAX_INNER:
        chain.append(current)
        current = current.get("inner")
    return chain


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


# -- step 2: JSON ----------------------------------------------------------------------------


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def parse_events(body: bytes) -> list[Any]:
    """The events of a body: one JSON object, or an array of them.

    An empty (or all-whitespace) body or an empty array is answered 411, bytes that are not
    UTF-8 JSON 400. Elements are returned as parsed; :func:`normalize_events` checks them.
    """
    try:
        text = body.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise HttpError(400, f"The request body is not valid UTF-8: {exc}.") from None
    if not text.strip():
        raise HttpError(411, "The request body is empty.")
    try:
        document = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise HttpError(400, f"The request body is not valid JSON: {str(exc)[:200]}.") from None
    if isinstance(document, list):
        if not document:
            raise HttpError(411, "The request body is an empty array.")
        return document
    return [document]


# -- step 3: the service's rules -------------------------------------------------------------


def _data_key_for(key: str, data: Mapping[str, Any]) -> str:
    if key not in data:
        return key
    return "_" + key if key.startswith("@") else "_@" + key


def _tags(raw: list[Any]) -> list[str]:
    kept: list[str] = []
    seen: set[str] = set()
    for tag in raw:
        if not isinstance(tag, str) or not tag.strip() or len(tag) > MAX_TAG or tag in seen:
            continue
        seen.add(tag)
        kept.append(tag)
        if len(kept) == MAX_TAGS:
            break
    return kept


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _optional_text(
    item: Mapping[str, Any], name: str, errors: dict[str, list[str]], prefix: str
) -> str | None:
    value = item.get(name)
    if value is None or isinstance(value, str):
        return value[:MAX_TEXT] if value is not None else None
    errors[prefix + name] = [f"'{name}' must be a string."]
    return None


def normalize_event(
    item: Any, now: datetime, errors: dict[str, list[str]], prefix: str = ""
) -> NormalizedEvent | None:
    """Apply the service's rules to one parsed event.

    Problems are added to ``errors`` (keys prefixed with ``prefix``, e.g. ``"[2]."``) and None
    is returned; None is also returned, with no error, for an event dated more than 3 days ago.
    """
    if not isinstance(item, dict):
        errors[prefix.rstrip(".") or "event"] = ["An event must be a JSON object."]
        return None
    before = len(errors)

    raw_data = item.get("data")
    data: dict[str, Any] = {}
    if isinstance(raw_data, dict):
        data = dict(raw_data)
    elif raw_data is not None:
        errors[prefix + "data"] = ["'data' must be an object."]
    for key, value in item.items():
        if key not in KNOWN_FIELDS:
            data[_data_key_for(key, data)] = value

    raw_type = item.get("type")
    event_type = "error" if ("@simple_error" in data or "@error" in data) else "log"
    if isinstance(raw_type, str) and raw_type:
        if len(raw_type) > MAX_TYPE:
            errors[prefix + "type"] = [f"'type' must be at most {MAX_TYPE} characters."]
        event_type = raw_type
    elif raw_type not in (None, ""):
        errors[prefix + "type"] = ["'type' must be a string."]

    moment = now
    raw_date = item.get("date")
    if isinstance(raw_date, str):
        try:
            moment = parse_date(raw_date)
            moment.timestamp()
        except (DateFormatError, OverflowError, ValueError) as exc:
            errors[prefix + "date"] = [f"'date' is not an ISO 8601 date-time: {exc}"]
    elif raw_date is not None:
        errors[prefix + "date"] = ["'date' must be a string."]

    source = _optional_text(item, "source", errors, prefix)
    message = _optional_text(item, "message", errors, prefix)

    tags: list[str] = []
    raw_tags = item.get("tags")
    if isinstance(raw_tags, list):
        tags = _tags(raw_tags)
    elif raw_tags is not None:
        errors[prefix + "tags"] = ["'tags' must be an array of strings."]

    geo = item.get("geo")
    if geo is not None and not isinstance(geo, str):
        errors[prefix + "geo"] = ["'geo' must be a string like \"47.6,-122.3\"."]
        geo = None
    value = item.get("value")
    if value is not None and not _is_number(value):
        errors[prefix + "value"] = ["'value' must be a number."]
        value = None
    count = item.get("count")
    if count is not None and (not isinstance(count, int) or isinstance(count, bool)):
        errors[prefix + "count"] = ["'count' must be an integer."]
        count = None

    reference_id = item.get("reference_id")
    if reference_id is not None and (
        not isinstance(reference_id, str) or not _REFERENCE_RE.match(reference_id)
    ):
        reference_id = INVALID_REFERENCE_ID

    if len(errors) > before:
        return None
    timestamp = moment.timestamp()
    if timestamp < (now - MAX_EVENT_AGE).timestamp():
        return None
    if timestamp > (now + MAX_FUTURE_SKEW).timestamp():
        moment, timestamp = now, now.timestamp()
    return NormalizedEvent(
        type=event_type,
        date=format_event_date(moment),
        timestamp=timestamp,
        source=source,
        message=message,
        tags=tags,
        geo=geo,
        value=value,
        count=count,
        data=data,
        reference_id=reference_id,
    )


def _indexed(items: list[Any]) -> Iterator[tuple[str, Any]]:
    if len(items) == 1:
        yield "", items[0]
        return
    for index, item in enumerate(items):
        yield f"[{index}].", item


def normalize_events(items: list[Any], now: datetime) -> Outcome:
    """Normalize every event of a request, or raise 422 listing the problems of all of them.

    A request is accepted or refused as a whole: nothing of a batch with one bad event is
    stored, so a client can split the batch and retry the good part.
    """
    errors: dict[str, list[str]] = {}
    outcome = Outcome()
    for prefix, item in _indexed(items):
        before = len(errors)
        event = normalize_event(item, now, errors, prefix)
        if event is not None:
            outcome.events.append(event)
        elif len(errors) == before:
            outcome.expired += 1
        if len(errors) >= _MAX_ERRORS:
            break
    if errors:
        raise HttpError(
            422,
            "One or more events are invalid; nothing was stored.",
            errors=dict(list(errors.items())[:_MAX_ERRORS]),
            title="One or more validation errors occurred.",
        )
    return outcome
