"""The service's rules for one event: from a parsed JSON object to a :class:`NormalizedEvent`.

What the service does with what real clients send (the Exceptionless server's):

- Property names match case-insensitively and without regard to underscores (``Message``,
  ``ReferenceId``, ``referenceId`` are ``message`` and ``reference_id``); so do the known
  ``@`` data keys (``@Simple_Error`` is ``@simple_error``).
- Any other top-level key moves into ``data``; when ``data`` already holds it, the top-level copy
  is renamed ``_@key``.
- ``type`` defaults to ``error`` when the event carries ``@error``/``@simple_error``, else
  ``log``; ``date`` defaults to the time of receipt; a date more than 3 days old drops the event,
  one more than an hour ahead is clamped to now.
- Lengths are counted as the service (C#) counts them, in UTF-16 code units (an emoji is 2).
  ``message`` and ``source`` are cut to 2,000 characters; tags are a case-insensitive set of at
  most 50, each non-blank and at most 100 characters; a ``reference_id`` that is not 8-100 letters,
  digits or ``-`` becomes ``invalid-reference-id``.
- An error without a message takes its error's message.
- A field of the wrong JSON type (``"date": "not-a-date"``, ``"value": "10"``, ``"tags": "x"``)
  raises :class:`FieldTypeError`: the caller then stores the whole body as log messages, one per
  line, as the service does when its JSON reader fails.
- A ``type`` longer than 100 characters drops the event (the service's validator does so after
  its 202).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from eventlog_handler._values import utf16_len
from eventlog_handler.collector._formats import (
    DateFormatError,
    event_date_timestamp,
    format_event_date,
    parse_date,
)
from eventlog_handler.collector._stacking import StackBasis, stack_basis

__all__ = [
    "INVALID_REFERENCE_ID",
    "KNOWN_FIELDS",
    "MAX_EVENT_AGE_SECONDS",
    "FieldTypeError",
    "NormalizedEvent",
    "Normalizer",
    "error_chain",
    "is_valid_reference_id",
    "submission_client",
]

KNOWN_FIELDS = frozenset(
    ("type", "source", "date", "tags", "message", "geo", "value", "count", "data", "reference_id")
)
KNOWN_DATA_KEYS = frozenset(
    (
        "@simple_error",
        "@error",
        "@user",
        "@user_description",
        "@level",
        "@request",
        "@environment",
        "@trace",
        "@stack",
        "@version",
        "@submission_method",
        "@submission_client",
        "@location",
    )
)
MAX_TEXT = 2000
MAX_TYPE = 100
MAX_TAGS = 50
MAX_TAG = 100
MAX_EVENT_AGE_SECONDS = 3 * 24 * 3600.0
MAX_FUTURE_SKEW_SECONDS = 3600.0
INVALID_REFERENCE_ID = "invalid-reference-id"
_REFERENCE_RE = re.compile(r"[A-Za-z0-9-]{8,100}")
_MAX_INNER = 20
_ALIASES = {name.replace("_", ""): name for name in KNOWN_FIELDS}
_DATA_ALIASES = {name.replace("_", ""): name for name in KNOWN_DATA_KEYS}
_MISSING: Any = object()
#: Top-level keys already looked at: the field each names, or None (a key for ``data``).
_FIELD_CACHE: dict[str, str | None] = {name: name for name in KNOWN_FIELDS}
_KEY_CACHE_SIZE = 2048


class FieldTypeError(ValueError):
    """A known field of the wrong JSON type: the body is not events the service can read."""


@dataclass(slots=True)
class NormalizedEvent:
    """One event after the service's rules, with what the store indexes. ``index`` is the
    event's position in its request body (the store keeps the body and applies the rules
    again, with the same time of receipt, when the event is read); ``stack_id`` is set by the
    store."""

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
    basis: StackBasis = ("default", "log", "")
    stack_id: str = ""
    index: int = -1
    first: bool = False

    @property
    def level(self) -> str | None:
        """``data["@level"]`` lowercased, or None."""
        level = self.data.get("@level")
        return level.lower() if isinstance(level, str) else None

    @property
    def user_identity(self) -> str | None:
        """``data["@user"]["identity"]``, or None."""
        user = self.data.get("@user")
        if isinstance(user, dict):
            identity = user.get("identity")
            if isinstance(identity, str) and identity:
                return identity
        return None

    @property
    def search_text(self) -> str:
        """Lowercased text free-text filters look in: message, source, error types/messages."""
        text = f"{self.message or ''}\n{self.source or ''}"
        if "@simple_error" in self.data or "@error" in self.data:
            for error in error_chain(self.data):
                text += f"\n{error.get('type') or ''}\n{error.get('message') or ''}"
        return text.lower()

    def wire_fields(self) -> dict[str, Any]:
        """The stored event's own fields (without ids and bookkeeping)."""
        return {
            "type": self.type,
            "source": self.source,
            "date": self.date,
            "tags": self.tags,
            "message": self.message,
            "geo": self.geo,
            "value": self.value,
            "count": self.count,
            "data": self.data,
            "reference_id": self.reference_id,
        }


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


_VERSION_RE = re.compile(r"\d{1,9}(?:\.\d{1,9}){1,3}")


def submission_client(user_agent: str) -> dict[str, str] | None:
    """``data["@submission_client"]`` as the service sets it from the ``User-Agent`` of a
    post: the whole header, trimmed and lowercased, and ``version``, the part after its first
    slash when that is a version (2 to 4 numbers, as .NET reads one: ``exceptionless-js/3.2.1``
    gives ``3.2.1``). None without a ``User-Agent``."""
    text = user_agent.strip()
    if not text:
        return None
    client = {"user_agent": text.lower()}
    name, slash, rest = text.partition("/")
    version = rest.strip()
    if name and slash and _VERSION_RE.fullmatch(version):
        client["version"] = ".".join(str(int(part)) for part in version.split("."))
    return client


def is_valid_reference_id(value: Any) -> bool:
    """8-100 characters of letters, digits and ``-``."""
    return isinstance(value, str) and _REFERENCE_RE.fullmatch(value) is not None


def _field_name(key: str) -> str | None:
    """The known field a top-level key names (case- and underscore-insensitive), or None."""
    name = _ALIASES.get(key.replace("_", "").lower())
    if len(_FIELD_CACHE) < _KEY_CACHE_SIZE:
        _FIELD_CACHE[key] = name
    return name


def _data_key(key: str) -> str:
    """A known ``@`` data key in its canonical spelling; any other key unchanged."""
    if key in KNOWN_DATA_KEYS or not key.startswith("@"):
        return key
    return _DATA_ALIASES.get(key.replace("_", "").lower(), key)


def _tags(raw: list[Any]) -> list[str]:
    kept: list[str] = []
    seen: set[str] = set()
    for tag in raw:
        if not isinstance(tag, str):
            raise FieldTypeError("'tags' must be an array of strings")
        folded = tag.lower()
        if not tag.strip() or utf16_len(tag) > MAX_TAG or folded in seen:
            continue
        seen.add(folded)
        kept.append(tag)
        if len(kept) == MAX_TAGS:
            break
    return kept


def _cut(text: str) -> str:
    """``text`` cut to :data:`MAX_TEXT` UTF-16 code units, as the service cuts a ``message``
    or ``source`` (the service may split a surrogate pair; the character is dropped whole
    here, as text with half a pair can't be stored)."""
    keep = min(MAX_TEXT, len(text))
    while keep:  # each step drops at most what is over: a character is 1 or 2 units
        over = utf16_len(text[:keep]) - MAX_TEXT
        if over <= 0:
            break
        keep -= (over + 1) >> 1
    return text[:keep]


def _text(value: Any, name: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise FieldTypeError(f"'{name}' must be a string")
    return _cut(value) if value else None


def _error_message(data: Mapping[str, Any]) -> str | None:
    for key in ("@error", "@simple_error"):
        error = data.get(key)
        if isinstance(error, dict):
            message = error.get("message")
            if isinstance(message, str) and message.strip():
                return _cut(message)
    return None


def _stack_object(data: dict[str, Any], stack: Any) -> dict[str, Any]:
    """``data`` with a ``@stack`` that is not an object made one (a string holding a JSON
    object) or renamed ``_@stack``, as the service does (a copy: the item stays as sent)."""
    parsed: Any = None
    if type(stack) is str:
        try:
            parsed = json.loads(stack)
        except ValueError:
            parsed = None
    data = dict(data)
    if type(parsed) is dict:
        data["@stack"] = parsed
    else:
        data["_@stack"] = data.pop("@stack")
    return data


class Normalizer:
    """Applies the rules to the events of one request, received at ``now``.

    :attr:`dropped` counts events dropped by the rules (too old, invalid type) and
    :attr:`problems` keeps a short reason for each (for the dashboard).
    """

    def __init__(self, now: datetime | None = None) -> None:
        if now is None:
            now = datetime.fromtimestamp(time.time(), timezone.utc)
        self.now = now
        self.now_ts = now.timestamp()
        self.now_date = format_event_date(now)
        self.oldest_ts = self.now_ts - MAX_EVENT_AGE_SECONDS
        self.latest_ts = self.now_ts + MAX_FUTURE_SKEW_SECONDS
        self.dropped = 0
        self.problems: list[str] = []

    def _date(self, raw: Any) -> tuple[str, float]:
        if not isinstance(raw, str):
            raise FieldTypeError("'date' must be a string")
        timestamp = event_date_timestamp(raw)
        if timestamp is not None:
            return raw, timestamp
        try:
            moment = parse_date(raw)
            return format_event_date(moment), moment.timestamp()
        except (DateFormatError, OverflowError, ValueError) as exc:
            raise FieldTypeError(f"'date' is not an ISO 8601 date-time: {exc}") from None

    def event(self, item: Any) -> NormalizedEvent | None:
        """One event, None when the rules drop it; :class:`FieldTypeError` when unreadable.

        ``item`` is left as it is (the same item can be read again and gives the same event).
        The fields are picked in one pass, the service's own spellings first: this is the
        collector's hottest loop.
        """
        if type(item) is not dict:
            raise FieldTypeError("an event must be a JSON object")
        data = event_type = date = source = message = tags = geo = value = count = None
        reference_id = client_id = None
        moved: list[tuple[str, Any]] | None = None
        aliased: list[tuple[str, Any]] | None = None
        for key, field_value in item.items():
            if key == "message":
                message = field_value
            elif key == "date":
                date = field_value
            elif key == "type":
                event_type = field_value
            elif key == "source":
                source = field_value
            elif key == "data":
                data = field_value
            elif key == "reference_id":
                reference_id = field_value
            elif key == "tags":
                tags = field_value
            elif key == "value":
                value = field_value
            elif key == "count":
                count = field_value
            elif key == "geo":
                geo = field_value
            elif key == "id" or key == "Id" or key == "ID":
                client_id = field_value  # the service takes it as the reference id
            else:
                name = _FIELD_CACHE.get(key, _MISSING)
                if name is _MISSING:
                    name = _field_name(key)
                if name is None:
                    if moved is None:
                        moved = []
                    moved.append((key, field_value))
                else:
                    if aliased is None:
                        aliased = []
                    aliased.append((name, field_value))
        if aliased is not None:
            fields = {
                "message": message, "date": date, "type": event_type, "source": source,
                "data": data, "reference_id": reference_id, "tags": tags, "value": value,
                "count": count, "geo": geo, **dict(aliased),
            }  # fmt: skip
            message, date, event_type, source = (
                fields["message"], fields["date"], fields["type"], fields["source"]
            )  # fmt: skip
            data, reference_id, tags = fields["data"], fields["reference_id"], fields["tags"]
            value, count, geo = fields["value"], fields["count"], fields["geo"]

        if data is None:
            data = {}
        elif type(data) is not dict:
            raise FieldTypeError("'data' must be an object")
        if moved is not None:
            data = dict(data)
            for key, field_value in moved:
                target = key if key in KNOWN_DATA_KEYS or key[:1] != "@" else _data_key(key)
                if data and (target in data or target.lower() in data):
                    target = "_" + target if target[0] == "@" else "_@" + target
                data[target] = field_value

        if event_type is None or event_type == "":
            event_type = "error" if ("@simple_error" in data or "@error" in data) else "log"
        elif type(event_type) is not str:
            raise FieldTypeError("'type' must be a string")

        if date is None:
            date, timestamp = self.now_date, self.now_ts
        else:
            fast = event_date_timestamp(date) if type(date) is str else None
            if fast is None:
                date, timestamp = self._date(date)
            else:
                timestamp = fast

        if source is not None:
            if type(source) is not str:
                raise FieldTypeError("'source' must be a string")
            source = _cut(source) if source else None
        if message is not None:
            if type(message) is not str:
                raise FieldTypeError("'message' must be a string")
            message = _cut(message) if message else None

        if tags is None:
            tags = []
        elif type(tags) is list:
            if tags:
                tags = _tags(tags)
        else:
            raise FieldTypeError("'tags' must be an array of strings")

        if geo is not None and type(geo) is not str:
            raise FieldTypeError("'geo' must be a string")
        if value is not None and type(value) is not int and type(value) is not float:
            raise FieldTypeError("'value' must be a number")
        if count is not None and type(count) is not int:
            raise FieldTypeError("'count' must be an integer")
        if reference_id is None and client_id is not None:
            reference_id = client_id
        if reference_id is not None and (
            type(reference_id) is not str or _REFERENCE_RE.fullmatch(reference_id) is None
        ):
            data = {**data, "InvalidReferenceId": reference_id}  # kept, as the service keeps it
            reference_id = INVALID_REFERENCE_ID
        stack = data.get("@stack")
        if stack is not None and type(stack) is not dict:
            data = _stack_object(data, stack)

        if utf16_len(event_type) > MAX_TYPE:
            self._drop(f"'type' longer than {MAX_TYPE} characters: {event_type[:40]!r}…")
            return None
        if timestamp < self.oldest_ts:
            self._drop(f"dated more than 3 days ago: {date}")
            return None
        if timestamp > self.latest_ts:
            date, timestamp = self.now_date, self.now_ts
        if event_type == "error":
            if message is None or not message.strip():
                message = _error_message(data) or message
            basis = stack_basis(event_type, source, data)
        elif "@stack" in data:
            basis = stack_basis(event_type, source, data)
        else:
            basis = ("default", event_type, source or "")
        return NormalizedEvent(
            event_type,
            date,
            timestamp,
            source,
            message,
            tags,
            geo,
            value,
            count,
            data,
            reference_id,
            basis,
        )

    def _drop(self, reason: str) -> None:
        self.dropped += 1
        if len(self.problems) < 20:
            self.problems.append(reason)

    def events(self, items: list[Any]) -> list[NormalizedEvent]:
        """Every event of a parsed body (with its position in it); :class:`FieldTypeError` if
        any is unreadable."""
        event = self.event
        out: list[NormalizedEvent] = []
        append = out.append
        for index, item in enumerate(items):
            normalized = event(item)
            if normalized is not None:
                normalized.index = index
                append(normalized)
        return out

    def text_events(self, text: str) -> list[NormalizedEvent]:
        """A body that is not events: one log event per non-blank line, trimmed."""
        basis = stack_basis("log", None, {})
        lines = [line for line in (part.strip() for part in re.split(r"[\r\n]+", text)) if line]
        return [
            NormalizedEvent(
                type="log",
                date=self.now_date,
                timestamp=self.now_ts,
                message=_cut(line),
                basis=basis,
                index=index,
            )
            for index, line in enumerate(lines)
        ]
