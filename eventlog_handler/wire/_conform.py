"""An event changed by the program's ``before_send`` hook, made one the service can read.

The service reads a batch with a known field of the wrong JSON type in it (``"value": "19.90"``,
``"tags": [3]``, ``"data": []``) as one log message holding the whole body: every event of the
batch is lost, and the answer is a 202 all the same. So after the hook each known field is made
what the service reads: converted where the conversion keeps its meaning (a ``datetime`` or a
date in another ISO 8601 form, a ``Decimal`` value, tags that are not strings, a text that is
not a string or is too long), else given back the value it had before the hook (or taken out,
if it had none), and named, so that the program is told.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import math
import numbers
from collections.abc import Collection, Mapping, Set
from typing import Any

from eventlog_handler._values import fits
from eventlog_handler.wire._dates import format_date, is_valid_reference_id, parse_date
from eventlog_handler.wire._events import MAX_MESSAGE, MAX_SOURCE, normalize_tags
from eventlog_handler.wire._jsonsafe import safe_str, truncate

#: The top-level fields the service reads with a type, and the data keys it reads as objects
#: (the event's wire form has them at the top level).
FIELDS = (
    *("type", "source", "message", "date", "tags", "geo", "value", "count", "data"),
    *("reference_id", "@simple_error", "@user", "@request", "@environment"),
)

_MAX_TYPE = 100
_MAX_COUNT = 2**31 - 1  # the service's count is a 32-bit integer
_MAX_EXACT = 2**53  # past this, an integer is written as a float (or as a text, if huge)
_KEEP: Any = object()  # the value is right as it is
_BAD: Any = object()  # the value can't be made right


def before_hook(event: Mapping[str, Any]) -> dict[str, Any]:
    """The known fields of ``event`` as they are before the hook (the hook may change the
    event in place)."""
    return {name: event[name] for name in FIELDS if name in event}


def conform(event: dict[str, Any], before: Mapping[str, Any]) -> list[str]:
    """Make the known fields of ``event`` (the hook's result) readable by the service, in place.
    Returns the names of the fields that could not be and were given back their value from
    ``before``. Never raises: a field whose check fails is given back its value too."""
    restored: list[str] = []
    for name in FIELDS:
        if name in event:
            try:
                _conform_field(event, name)
            except Exception:
                _restore(event, name, before)
                restored.append(name)
            else:
                if event.get(name, _KEEP) is _BAD:
                    _restore(event, name, before)
                    restored.append(name)
    return restored


def _restore(event: dict[str, Any], name: str, before: Mapping[str, Any]) -> None:
    if name in before:
        event[name] = before[name]
    else:
        event.pop(name, None)


def _conform_field(event: dict[str, Any], name: str) -> None:
    """``event[name]`` as the service reads it, or :data:`_BAD` (given back by the caller)."""
    value = event[name]
    if value is None:
        del event[name]  # the service reads null as absent
        return
    fixed = _fixed(name, value)
    if fixed is not _KEEP:
        event[name] = fixed


def _fixed(name: str, value: Any) -> Any:
    """``value`` of the field ``name`` as the service reads it: :data:`_KEEP` (it is right),
    a converted value, or :data:`_BAD`."""
    if name in ("source", "message", "geo"):
        text = value if type(value) is str else safe_str(value)
        limit = MAX_MESSAGE if name == "message" else MAX_SOURCE
        text = truncate(text, limit)
        return _KEEP if text is value else text
    if name == "type":
        return _KEEP if type(value) is str and value and fits(value, _MAX_TYPE) else _BAD
    if name == "date":
        return _date(value)
    if name == "tags":
        if isinstance(value, (list, tuple, Set)):
            tags = normalize_tags(value)
            return _KEEP if tags == value and type(value) is list else tags
        return _BAD
    if name in ("value", "count"):
        return _number(value, whole=name == "count")
    if name == "data" or name[0] == "@":
        if type(value) is dict:
            return _KEEP
        return dict(value) if isinstance(value, Mapping) else _BAD
    return _KEEP if is_valid_reference_id(value) else _BAD  # reference_id


def _date(value: Any) -> Any:
    try:
        if isinstance(value, _dt.datetime):
            formatted = format_date(value)
        elif type(value) is str:
            formatted = format_date(parse_date(value))
        elif type(value) in (int, float):
            formatted = format_date(float(value))  # a POSIX time, as LogRecord.created is
        else:
            return _BAD
    except (ValueError, OverflowError, OSError):  # datetime.min in a zone west of UTC...
        return _BAD
    if not (formatted[:4].isdigit() and formatted[4:5] == "-"):
        return _BAD  # a year before 1 or past 9999
    return _KEEP if formatted == value else formatted


def _number(given: Any, whole: bool) -> Any:
    kind = type(given)
    if kind is bool or not isinstance(given, (numbers.Real, decimal.Decimal)):
        return _BAD  # a text is not a number: "10" is as the program wrote it
    value: Any = given
    if whole:
        if not isinstance(given, numbers.Integral) or not 0 <= int(value) <= _MAX_COUNT:
            return _BAD
        return _KEEP if kind is int else int(value)
    if kind is float or (kind is int and abs(value) <= _MAX_EXACT):
        return _KEEP if math.isfinite(value) else _BAD
    try:
        number = float(value)  # a Decimal, a Fraction, a numpy number
    except (ValueError, OverflowError, TypeError):
        return _BAD
    return number if math.isfinite(number) else _BAD


def named(fields: Collection[str]) -> str:
    """``'value', 'tags'`` for a line."""
    return ", ".join(repr(name) for name in fields)
