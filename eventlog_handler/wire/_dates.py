"""The service's date format and the events' reference ids.

A date is ISO 8601 with 7 fractional digits and the UTC offset
(``2030-01-01T12:00:00.1234567-05:00``); a reference id is ``<16 random hex>-<counter>``,
unique across processes, which makes a retried batch safe (the service discards a second event
with the same id within 24 hours).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import itertools
import os
import secrets
import time
from typing import Any

# -- date -----------------------------------------------------------------------------------


def format_date(when: float | _dt.datetime | None = None) -> str:
    """ISO 8601 with 7 fractional digits and the local UTC offset.

    ``when`` is a POSIX timestamp (as in ``LogRecord.created``), an aware or naive (local)
    datetime, or ``None`` for now: ``2030-01-01T12:00:00.1234567-05:00``.
    """
    if when is None:
        when = time.time()
    if isinstance(when, _dt.datetime):
        aware = when if when.tzinfo is not None else when.astimezone()
        offset = aware.utcoffset() or _dt.timedelta(0)
        return _compose(
            f"{aware.year:04d}-{aware:%m-%dT%H:%M:%S}",
            aware.microsecond * 10,
            int(offset.total_seconds()),
        )
    seconds = int(when // 1)
    fraction = int((when - seconds) * 10_000_000 + 0.5)
    if fraction >= 10_000_000:
        seconds, fraction = seconds + 1, fraction - 10_000_000
    cached = _last_second
    # Once per second (or after time.tzset(), which makes a new tzname tuple): anew.
    if cached[0] != seconds or cached[3] is not time.tzname:
        zone = time.tzname
        local = time.localtime(seconds)
        head = f"{local.tm_year:04d}-" + time.strftime("%m-%dT%H:%M:%S", local) + "."
        cached = (seconds, head, _offset(local.tm_gmtoff), zone)
        _remember(cached)
    return cached[1] + _FRACTION % fraction + cached[2]


_FRACTION = "%07d"


# Most records of a process share their second: keep its formatted head and offset (and the
# time zone's names they were made with: time.tzset() replaces them).
_last_second: tuple[int, str, str, Any] = (-1, "", "", None)


def _remember(cached: tuple[int, str, str, Any]) -> None:
    global _last_second
    _last_second = cached


def _offset(offset_seconds: int) -> str:
    sign = "-" if offset_seconds < 0 else "+"
    minutes = abs(offset_seconds) // 60
    return f"{sign}{minutes // 60:02d}:{minutes % 60:02d}"


def _compose(base: str, fraction: int, offset_seconds: int) -> str:
    return f"{base}.{fraction:07d}{_offset(offset_seconds)}"


def parse_date(text: str) -> _dt.datetime:
    """Parse a date of the service (7 fractional digits, ``Z`` or an offset) into an aware datetime.

    Naive values are taken as UTC, as the service writes ``created_utc``.
    """
    value = text.strip()
    if value.endswith(("Z", "z")):
        value = value[:-1] + "+00:00"
    head, sep, rest = value.partition(".")
    if sep:
        digits = "".join(itertools.takewhile(str.isdigit, rest))
        value = f"{head}.{(digits + '000000')[:6]}{rest[len(digits) :]}"
    parsed = _dt.datetime.fromisoformat(value)
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=_dt.timezone.utc)


# -- reference ids --------------------------------------------------------------------------


class _ReferenceIds:
    """``<16 random hex>-<counter>``: unique across processes (the prefix is re-drawn after a
    fork) and cheap enough to make one per event."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.prefix = secrets.token_hex(8)
        self.head = self.prefix + "-"
        self.counter = itertools.count(1)

    def __call__(self) -> str:
        return self.head + hex(next(self.counter))[2:]


new_reference_id = _ReferenceIds()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=new_reference_id.reset)

#: Reference ids the program was given (``last_reference_id()``: an error page shows it, a
#: user may quote it and describe what happened), the latest :data:`MAX_QUOTED`: their events
#: are sent as they are, never counted into another one's roll-up.
QUOTED: dict[str, None] = {}
MAX_QUOTED = 10_000


def quote_reference(reference_id: str) -> None:
    """The program was given ``reference_id`` (see :data:`QUOTED`)."""
    QUOTED[reference_id] = None
    if len(QUOTED) > MAX_QUOTED:
        with contextlib.suppress(StopIteration, KeyError, RuntimeError):  # another thread
            del QUOTED[next(iter(QUOTED))]


def is_valid_reference_id(value: object) -> bool:
    """What the service accepts: 8 to 100 letters, digits and ``-``."""
    return (
        isinstance(value, str)
        and 8 <= len(value) <= 100
        and all(ch.isascii() and (ch.isalnum() or ch == "-") for ch in value)
    )
