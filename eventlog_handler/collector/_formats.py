"""Identifiers and timestamps in the shapes the service uses.

- Object ids (organizations, projects, events) are 24 lowercase hex digits, like MongoDB
  ObjectIds: a 4-byte timestamp followed by 8 random bytes.
- Token keys are 40 characters of ``[A-Za-z0-9]``.
- Event dates are written ``2030-01-01T12:00:00.0000000-05:00`` (7 fractional digits, offset).
- Resource timestamps (``created_utc``...) are written ``2026-01-15T12:00:00.123Z`` (fraction
  trimmed of trailing zeros, dropped when zero).
"""

from __future__ import annotations

import itertools
import re
import secrets
import string
import time
from datetime import datetime, timedelta, timezone

__all__ = [
    "DateFormatError",
    "ObjectIds",
    "event_date_timestamp",
    "format_event_date",
    "format_utc",
    "format_utc_ts",
    "new_object_id",
    "new_token_key",
    "parse_date",
    "utc_now",
]

_TOKEN_ALPHABET = string.ascii_letters + string.digits

_DATE_RE = re.compile(
    r"""
    ^(?P<year>\d{4})-(?P<month>\d{2})-(?P<day>\d{2})
    (?:[Tt\ ](?P<hour>\d{2}):(?P<minute>\d{2})
        (?::(?P<second>\d{2})(?:[.,](?P<fraction>\d{1,9}))?)?
        (?P<offset>[Zz]|[+-]\d{2}(?::?\d{2})?)?
    )?$
    """,
    re.VERBOSE,
)


class DateFormatError(ValueError):
    """A date string that is not ISO 8601."""


def utc_now() -> datetime:
    """The current time as an aware UTC datetime."""
    return datetime.now(timezone.utc)


def new_object_id() -> str:
    """A new 24-hex-digit identifier (4-byte timestamp + 8 random bytes)."""
    return f"{int(time.time()) & 0xFFFFFFFF:08x}{secrets.token_hex(8)}"


class ObjectIds:
    """Fast unique 24-hex-digit ids shaped like MongoDB ObjectIds: a 4-byte timestamp, 5 random
    bytes chosen once per instance and a 3-byte counter that starts at a random value."""

    def __init__(self) -> None:
        self._prefix = secrets.token_hex(5)
        self._counter = itertools.count(secrets.randbelow(1 << 24))

    def new(self, now: float) -> str:
        """A new id for the time ``now`` (seconds since the epoch)."""
        return f"{int(now) & 0xFFFFFFFF:08x}{self._prefix}{next(self._counter) & 0xFFFFFF:06x}"


def new_token_key() -> str:
    """A new 40-character ``[A-Za-z0-9]`` token key."""
    return "".join(secrets.choice(_TOKEN_ALPHABET) for _ in range(40))


def parse_date(text: str) -> datetime:
    """Parse an ISO 8601 date or date-time into an aware datetime.

    Accepts up to 9 fractional digits (7 is the service's own format; digits past the 6th are
    dropped), ``Z`` or ``+hh:mm`` / ``+hhmm`` / ``+hh`` offsets, and no offset at all (read as
    UTC). Raises :class:`DateFormatError` for anything else.
    """
    match = _DATE_RE.match(text.strip())
    if match is None:
        raise DateFormatError(f"not an ISO 8601 date: {text[:60]!r}")
    parts = match.groupdict()
    fraction = (parts["fraction"] or "0")[:6].ljust(6, "0")
    tz = timezone.utc
    offset = parts["offset"]
    if offset and offset not in ("Z", "z"):
        sign = -1 if offset[0] == "-" else 1
        digits = offset[1:].replace(":", "")
        hours, minutes = int(digits[:2]), int(digits[2:4] or "0")
        if hours > 23 or minutes > 59:
            raise DateFormatError(f"bad UTC offset in {text[:60]!r}")
        tz = timezone(sign * timedelta(hours=hours, minutes=minutes))
    try:
        return datetime(
            int(parts["year"]),
            int(parts["month"]),
            int(parts["day"]),
            int(parts["hour"] or 0),
            int(parts["minute"] or 0),
            int(parts["second"] or 0),
            int(fraction),
            tzinfo=tz,
        )
    except ValueError as exc:
        raise DateFormatError(f"not a valid date: {text[:60]!r} ({exc})") from None


_CANONICAL_DATE_RE = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\.(\d{7})([+-]\d\d:\d\d)")
_SECOND_CACHE: dict[str, float] = {}
_SECOND_CACHE_SIZE = 4096


def event_date_timestamp(text: str) -> float | None:
    """The timestamp of a date already in the service's own shape
    (``2030-01-01T12:00:00.0000000-05:00``), or None for any other shape.

    The fast path of event ingestion: whole seconds are cached, so a batch of events logged
    within the same second costs one datetime computation.
    """
    if len(text) != 33 or text[19] != "." or text[30] != ":" or text[27] not in "+-":
        return None
    fraction = text[20:27]
    if not fraction.isdigit() or not fraction.isascii():
        return None
    key = text[:19] + text[27:]
    base = _SECOND_CACHE.get(key)
    if base is None:
        if _CANONICAL_DATE_RE.fullmatch(text) is None:
            return None
        try:
            base = datetime.fromisoformat(key).timestamp()
        except (ValueError, OverflowError):
            return None
        if len(_SECOND_CACHE) >= _SECOND_CACHE_SIZE:
            _SECOND_CACHE.clear()
        _SECOND_CACHE[key] = base
    return base + int(fraction) / 10_000_000


def format_event_date(moment: datetime) -> str:
    """``2030-01-01T12:00:00.0000000-05:00``: 7 fractional digits and the moment's own offset."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    offset = moment.utcoffset() or timedelta(0)
    total_minutes = int(offset.total_seconds()) // 60
    sign = "-" if total_minutes < 0 else "+"
    hours, minutes = divmod(abs(total_minutes), 60)
    return (
        f"{moment.strftime('%Y-%m-%dT%H:%M:%S')}.{moment.microsecond:06d}0"
        f"{sign}{hours:02d}:{minutes:02d}"
    )


def format_utc_ts(timestamp: float) -> str:
    """:func:`format_utc` of a timestamp (seconds since the epoch)."""
    return format_utc(datetime.fromtimestamp(timestamp, timezone.utc))


def format_utc(moment: datetime) -> str:
    """``2026-01-15T12:00:00.5Z``: UTC, fraction trimmed of trailing zeros, ``Z`` suffix."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    moment = moment.astimezone(timezone.utc)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    if moment.microsecond:
        text += "." + f"{moment.microsecond:06d}".rstrip("0")
    return text + "Z"
