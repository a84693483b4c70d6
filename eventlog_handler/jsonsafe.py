"""Turn any Python value into plain JSON data, safely, with bounds and data exclusions.

:func:`to_jsonable` runs on the caller's thread when an event is captured, so the queue holds
a snapshot made only of ``dict``/``list``/``str``/``int``/``float``/``bool``/``None``: later
mutation of the caller's objects can't change what is sent, and the worker can encode it
without touching user code. Leaf types that JSON lacks go through python-json-logger's
``JsonEncoder.default`` (the same rendering as its ``JsonFormatter``: ISO dates, enum values,
base64 bytes, dataclass fields, ``str()`` of the rest); containers, cycles, depth, sizes,
non-finite floats and failing ``__str__``/``__repr__`` are handled here.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Collection, KeysView, Mapping, ValuesView
from typing import Any

from pythonjsonlogger.json import JsonEncoder

from eventlog_handler.settings import MASK, normalize_key

#: Deepest nesting kept; deeper values become a marker string.
MAX_DEPTH = 10
#: Items kept per container; the rest is replaced by a marker.
MAX_ITEMS = 500
#: Characters kept per string value.
MAX_STRING = 8_192

_ENCODER = JsonEncoder()
_SEQUENCES = (list, tuple, set, frozenset, deque, KeysView, ValuesView)


def safe_str(value: object) -> str:
    """``str(value)``, or ``repr``, or a marker naming the type: never raises."""
    try:
        return str(value)
    except Exception:
        pass
    try:
        return repr(value)
    except Exception:
        return f"<unprintable {_type_name(value)} object>"


def safe_repr(value: object) -> str:
    """``repr(value)``, or a marker naming the type: never raises."""
    try:
        return repr(value)
    except Exception:
        return f"<unprintable {_type_name(value)} object>"


def _type_name(value: object) -> str:
    try:
        return type(value).__qualname__
    except Exception:  # pragma: no cover - a type without a name
        return "object"


def truncate(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, marked with how much was cut."""
    if len(text) <= limit:
        return text
    keep = max(0, limit - len(f"…[truncated {len(text)} chars]"))
    return text[:keep] + f"…[truncated {len(text) - keep} chars]"


def is_excluded(key: str, exclusions: Collection[str]) -> bool:
    """Whether ``key`` names a secret according to ``exclusions`` (normalized words)."""
    if not exclusions:
        return False
    normalized = normalize_key(key)
    return any(word in normalized for word in exclusions)


def to_jsonable(
    value: Any,
    exclusions: Collection[str] = (),
    *,
    max_depth: int = MAX_DEPTH,
    max_items: int = MAX_ITEMS,
    max_string: int = MAX_STRING,
) -> Any:
    """A JSON-ready copy of ``value``; never raises.

    Values under keys matching ``exclusions`` (at any depth) are replaced by ``MASK``.
    """
    converter = _Converter(exclusions, max_depth, max_items, max_string)
    try:
        return converter.convert(value, 0)
    except RecursionError:
        return "<too deeply nested>"
    except Exception as exc:  # pragma: no cover - defensive: conversion must never raise
        return f"<unconvertible {_type_name(value)}: {safe_repr(exc)}>"


class _Converter:
    __slots__ = ("active", "exclusions", "max_depth", "max_items", "max_string")

    def __init__(
        self, exclusions: Collection[str], max_depth: int, max_items: int, max_string: int
    ) -> None:
        self.exclusions = exclusions
        self.max_depth = max_depth
        self.max_items = max_items
        self.max_string = max_string
        self.active: set[int] = set()

    def convert(self, value: Any, depth: int) -> Any:
        kind = type(value)
        if kind is str:
            return truncate(value, self.max_string)
        if kind is bool or value is None:
            return value
        if kind is int:
            return _int(value)
        if kind is float:
            return value if math.isfinite(value) else _non_finite(value)
        if depth >= self.max_depth:
            return f"<max depth {self.max_depth} reached: {_type_name(value)}>"
        if isinstance(value, Mapping):
            return self._container(value, depth, self._mapping)
        if isinstance(value, _SEQUENCES):
            return self._container(value, depth, self._sequence)
        if isinstance(value, str):  # str subclasses
            return truncate(str.__str__(value), self.max_string)
        if isinstance(value, bool):
            return bool(value)
        if isinstance(value, int):
            return _int(int(value))
        if isinstance(value, float):
            number = float(value)
            return number if math.isfinite(number) else _non_finite(number)
        return self._leaf(value, depth)

    def _container(self, value: Any, depth: int, convert: Any) -> Any:
        marker = id(value)
        if marker in self.active:
            return f"<cycle: {_type_name(value)}>"
        self.active.add(marker)
        try:
            return convert(value, depth)
        except RecursionError:
            raise
        except Exception as exc:  # this value only: its siblings are kept
            return f"<unconvertible {_type_name(value)}: {safe_repr(exc)}>"
        finally:
            self.active.discard(marker)

    def _mapping(self, value: Mapping[Any, Any], depth: int) -> dict[str, Any]:
        result: dict[str, Any] = {}
        for index, (key, item) in enumerate(value.items()):
            if index >= self.max_items:
                result["…"] = f"<{len(value) - self.max_items} more items>"
                break
            name = key if type(key) is str else _key(key)
            name = truncate(name, 200)
            if is_excluded(name, self.exclusions):
                result[name] = MASK
            else:
                result[name] = self.convert(item, depth + 1)
        return result

    def _sequence(self, value: Any, depth: int) -> list[Any]:
        items = value
        if isinstance(value, set | frozenset):
            items = _sorted_if_possible(value)
        result = []
        for index, item in enumerate(items):
            if index >= self.max_items:
                result.append(f"<{_length(value) - self.max_items} more items>")
                break
            result.append(self.convert(item, depth + 1))
        return result

    def _leaf(self, value: Any, depth: int) -> Any:
        try:
            rendered = _ENCODER.default(value)
        except Exception:
            return safe_repr(value)
        if rendered is value:  # pragma: no cover - the encoder always changes the value
            return safe_repr(value)
        if rendered == "__could_not_encode__":
            return f"<unprintable {_type_name(value)} object>"
        return self._container(value, depth, lambda _v, d: self.convert(rendered, d + 1))


def _int(value: int) -> int | str:
    # JSON parsers of other languages lose precision past 64 bits, and str() of a huge int
    # raises on Python 3.11+ (the digit limit), so very large ints travel as text.
    if -(2**63) <= value < 2**63:
        return value
    if value.bit_length() > 4_000:
        return f"<int of {value.bit_length()} bits>"
    return str(value)


def _non_finite(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"


def _key(key: Any) -> str:
    if isinstance(key, str):
        return str.__str__(key)
    if key is None or isinstance(key, bool | int | float):
        return str(key)
    return safe_str(key)


def _sorted_if_possible(items: Any) -> list[Any]:
    try:
        return sorted(items)
    except Exception:
        return list(items)


def _length(value: Any) -> int:
    try:
        return len(value)
    except Exception:
        return 0
