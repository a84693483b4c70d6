"""Turn any Python value into plain JSON data, safely, with bounds and data exclusions.

:func:`to_jsonable` runs on the caller's thread when an event is captured, so the queue holds
a snapshot made only of ``dict``/``list``/``str``/``int``/``float``/``bool``/``None``: later
mutation of the caller's objects can't change what is sent, and the worker can encode it
without touching user code. Leaf types that JSON lacks go through python-json-logger's
``JsonEncoder.default`` (the same rendering as its ``JsonFormatter``: ISO dates, enum values,
dataclass fields, ``str()`` of the rest); bytes (their ``repr``, which the secret-masking rules
read), containers, cycles, depth, sizes, non-finite floats and failing ``__str__``/``__repr__``
are handled here.
"""

from __future__ import annotations

import bisect
import itertools
import math
import re
from collections import deque
from collections.abc import Collection, Iterable, KeysView, Mapping, ValuesView
from typing import Any

from pythonjsonlogger.json import JsonEncoder

from eventlog_handler._values import fits, utf16_len
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
    """``text`` cut to ``limit`` UTF-16 code units (as the service, in C#, measures a
    ``message`` or a ``source``: an emoji counts 2), marked with how many characters were cut.
    A character is never split (the service cuts a surrogate pair in two). A text of at most
    half the limit, or of ASCII within it, costs one comparison or two."""
    if fits(text, limit):
        return text
    size = len(text)
    # The mark is ASCII and one BMP character: its length is its size in code units.
    keep = max(0, limit - len(f"…[truncated {size} chars]"))
    if not text.isascii():
        keep = _whole_units(text, keep)
    return text[:keep] + f"…[truncated {size - keep} chars]"


def _whole_units(text: str, units: int) -> int:
    """The most characters of the start of ``text`` that take at most ``units`` UTF-16 code
    units (each step drops at most what is over: a character is 1 or 2 units)."""
    keep = min(units, len(text))
    while keep:
        over = utf16_len(text[:keep]) - units
        if over <= 0:
            break
        keep -= (over + 1) >> 1
    return keep


def is_excluded(key: str, exclusions: Collection[str]) -> bool:
    """Whether ``key`` names a secret according to ``exclusions``.

    ``exclusions`` holds words (the local ``data_exclusions``) and the service's
    ``@@DataExclusions`` patterns, in any mix; each entry is compared in its
    :func:`~eventlog_handler.settings.normalize_key` form, case-insensitively.

    - A pattern (an entry with ``*`` at its start and/or end) follows the official clients:
      ``*word*`` matches keys that contain ``word``, ``word*`` keys that start with it,
      ``*word`` keys that end with it, and ``*`` every key.
    - A word matches where it ends one of the key's words (the key is split at ``_``, ``-``,
      ``.``, spaces, digits and camelCase humps), or where what follows it up to the end of that
      key word is a compound suffix (:data:`COMPOUND_SUFFIXES`: ``id``, ``value``, ``hash``, ...).
      So ``token`` matches ``token``, ``AUTH_TOKEN``, ``accessToken``, ``csrftoken`` and
      ``tokenId`` but not ``tokenizer_name``; ``auth`` matches ``auth`` and ``oauth`` but not
      ``author`` or ``authority_count``; ``apikey`` matches ``X-Api-Key`` and ``apiKeyHash``.
      Requiring the word's end, not its start, at a boundary keeps ``dbpassword`` and
      ``authtoken`` (names without separators) masked, since in compound names the noun that
      says what the value is comes last.

    The answer per key is cached (keys of a program repeat endlessly); the matcher of one
    exclusions collection is built once.
    """
    if not exclusions:
        return False
    return exclusion_matcher(exclusions)(key)


#: What may follow an exclusion word inside one word of a key, for the key still to match:
#: ``passwordid``, ``tokenvalue``, ``PASSWORDHash``, ``secretStr``.
COMPOUND_SUFFIXES = frozenset(
    ("", "id", "ids", "value", "values", "hash", "str", "string", "text", "data", "header", "b64")
)

#: Words that match only from the start of a word of the key: they end too many ordinary words
#: (``pan`` masks ``card_pan`` and ``panNumber``, not ``span_id``; ``cc`` masks ``cc_number``,
#: not ``bcc``).
WHOLE_WORDS = frozenset({"pan", "cc"})

#: The words of a key: camelCase humps (an acronym keeps its capitals: ``APIKey`` → ``API``,
#: ``Key``), lower-case runs, digit runs, and runs of other letters.
_KEY_WORDS = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+|[^\W\d_A-Za-z]+")
#: Keys whose answer is remembered, per matcher.
_CACHE_KEYS = 10_000


class ExclusionMatcher:
    """``matcher(key)``: whether ``key`` is excluded by one collection of exclusions
    (see :func:`is_excluded` for the rule)."""

    __slots__ = ("_cache", "_contains", "_everything", "_prefixes", "_suffixes", "_words")

    def __init__(self, exclusions: Iterable[object]) -> None:
        words: set[str] = set()
        self._everything = False
        contains: list[str] = []
        prefixes: list[str] = []
        suffixes: list[str] = []
        for entry in exclusions:
            if not isinstance(entry, str):
                continue
            entry = entry.strip()
            starts, ends = entry.startswith("*"), entry.endswith("*") and len(entry) > 1
            if not (starts or ends):
                word = normalize_key(entry)
                if word:
                    words.add(word)
                continue
            core = normalize_key(entry[1 if starts else 0 : -1 if ends else None])
            if not core or entry == "*":
                self._everything = True
            elif starts and ends:
                contains.append(core)
            elif starts:
                suffixes.append(core)
            else:
                prefixes.append(core)
        self._words = tuple(sorted(words))
        self._contains = tuple(contains)
        self._prefixes = tuple(prefixes)
        self._suffixes = tuple(suffixes)
        self._cache: dict[str, bool] = {}

    def __call__(self, key: str) -> bool:
        answer = self._cache.get(key)
        if answer is None:
            # Event references (``@ref:session``, ``@ref:parent``) are ids, never secrets.
            answer = not key.startswith("@ref:") and (self._everything or self._match(key))
            if len(self._cache) < _CACHE_KEYS:
                self._cache[key] = answer
        return answer

    def _match(self, key: str) -> bool:
        if self._contains or self._prefixes or self._suffixes:
            normalized = normalize_key(key)
            if (
                any(core in normalized for core in self._contains)
                or normalized.startswith(self._prefixes)
                or normalized.endswith(self._suffixes)
            ):
                return True
        if not self._words:
            return False
        parts = [part.lower() for part in _KEY_WORDS.findall(key)]
        text = "".join(parts)
        ends = list(itertools.accumulate(len(part) for part in parts))
        starts = {0, *ends}
        for word in self._words:
            short = word in WHOLE_WORDS
            start = text.find(word)
            while start >= 0:
                end = start + len(word)
                boundary = ends[bisect.bisect_left(ends, end)]
                if text[end:boundary] in COMPOUND_SUFFIXES and (not short or start in starts):
                    return True
                start = text.find(word, start + 1)
        return False


#: Matchers per exclusions tuple, and the one used last (found by identity, without hashing).
_MATCHERS: dict[tuple[str, ...], ExclusionMatcher] = {}
_LAST: tuple[object, ExclusionMatcher] = ((), ExclusionMatcher(()))


def exclusion_matcher(exclusions: Collection[str]) -> ExclusionMatcher:
    """The (cached) matcher of ``exclusions``: words and ``*`` patterns in any mix."""
    global _LAST
    last = _LAST
    if exclusions is last[0]:
        return last[1]
    key = exclusions if type(exclusions) is tuple else tuple(exclusions)
    matcher = _MATCHERS.get(key)
    if matcher is None:
        if len(_MATCHERS) >= 64:  # exclusions change rarely: never grow without bound
            _MATCHERS.clear()
        matcher = _MATCHERS.setdefault(key, ExclusionMatcher(key))
    if type(exclusions) is tuple:
        _LAST = (exclusions, matcher)
    return matcher


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
    __slots__ = ("active", "excluded", "max_depth", "max_items", "max_string")

    def __init__(
        self, exclusions: Collection[str], max_depth: int, max_items: int, max_string: int
    ) -> None:
        self.excluded = exclusion_matcher(exclusions) if exclusions else None
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
        if isinstance(value, bytes | bytearray):
            return _bytes_text(value, self.max_string)
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
            if self.excluded is not None and self.excluded(name):
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


def _bytes_text(value: bytes | bytearray, limit: int) -> str:
    """``repr`` of bytes (``b'password=hunter2'``): text the secret-masking rules read, as they
    read a bytes argument of a message (``b'password=[excluded]'``). Base64 hid its secrets
    from them, and any reader could decode them."""
    text = repr(bytes(value[:limit]))
    if len(text) <= limit and len(value) <= limit:
        return text
    marker = f"…[truncated: {len(value)} bytes in all]"
    return text[: max(0, limit - len(marker))] + marker


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
