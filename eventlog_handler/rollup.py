"""Roll-up of duplicates: identical events inside a window are sent once, with a ``count``.

As the official .NET and JavaScript clients do: the first occurrence of an event is sent as
usual (never held back); identical ones that follow within ``window`` seconds of it are only
counted, and when the window ends one more event goes out (the last occurrence, so it has the
last date) with ``count`` set to how many it stands for. An error storm of 10,000 identical
exceptions thus costs two events and one stack, and ``count`` adds up to 10,000.

Identical means: the same type, source, message, level, tags, user, value, geo, ``data`` and
(for errors) ``@simple_error``; the date, the reference id, ``@trace`` and ``@environment`` (the
thread) don't count. At most :data:`MAX_KEYS` distinct events are remembered; when a new one
pushes out the oldest, the oldest's pending count is sent at once. Everything here runs on the
delivery worker.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Any

#: Distinct events remembered at most.
MAX_KEYS = 2_000

_SKIPPED = frozenset({"date", "reference_id", "count"})
_SKIPPED_DATA = frozenset({"@trace", "@environment"})


class _Seen:
    __slots__ = ("count", "ends", "last")

    def __init__(self, ends: float) -> None:
        self.ends = ends
        self.count = 0
        self.last: dict[str, Any] | None = None


def _freeze(value: Any) -> Any:
    kind = type(value)
    if kind is dict:
        return tuple(sorted((str(key), _freeze(item)) for key, item in value.items()))
    if kind is list or kind is tuple:
        return tuple(_freeze(item) for item in value)
    return value


def event_key(event: dict[str, Any]) -> Any:
    """What makes two events identical (see the module docstring)."""
    parts: list[Any] = []
    for name, value in event.items():
        if name in _SKIPPED:
            continue
        if name == "data" and type(value) is dict:
            items = tuple(
                (key, item if type(item) in (str, int, float, bool) else _freeze(item))
                for key, item in value.items()
                if key not in _SKIPPED_DATA
            )
            parts.append((name, items))
        elif type(value) in (str, int, float, bool) or value is None:
            parts.append((name, value))
        else:
            parts.append((name, _freeze(value)))
    return tuple(parts)


class Rollup:
    """The duplicates seen in the current windows (see the module docstring)."""

    def __init__(self, window: float) -> None:
        self.window = window
        self._seen: OrderedDict[Any, _Seen] = OrderedDict()
        self._ready: list[tuple[dict[str, Any], int]] = []
        #: Events counted into a pending roll-up and not sent yet.
        self.held = 0

    def admit(self, event: dict[str, Any], now: float) -> bool:
        """``True``: send ``event`` now. ``False``: it was counted into a roll-up."""
        if self.window <= 0:
            return True
        try:
            key = event_key(event)
            hash(key)
        except Exception:
            return True  # an event that can't be compared is sent as it is
        seen = self._seen.get(key)
        if seen is not None and now < seen.ends:
            seen.count += 1
            seen.last = event
            self.held += 1
            return False
        if seen is not None:  # its window ended: its roll-up goes out, a new window begins
            self._release(key, seen)
        self._seen[key] = _Seen(now + self.window)
        if len(self._seen) > MAX_KEYS:
            old_key, old = next(iter(self._seen.items()))
            self._release(old_key, old)
        return True

    def _release(self, key: Any, seen: _Seen) -> None:
        del self._seen[key]
        if seen.count and seen.last is not None:
            carrier = dict(seen.last)
            carrier["count"] = seen.count
            self._ready.append((carrier, seen.count))
            self.held -= seen.count

    def due(self) -> float:
        """When the next roll-up is due to be sent (``inf``: none pending)."""
        if self._ready:
            return -math.inf
        ends = [seen.ends for seen in self._seen.values() if seen.count]
        return min(ends) if ends else math.inf

    def take_due(self, now: float) -> list[tuple[dict[str, Any], int]]:
        """The roll-ups whose window ended (event with ``count``, how many it stands for)."""
        for key, seen in list(self._seen.items()):
            if seen.ends <= now:
                self._release(key, seen)
        ready, self._ready = self._ready, []
        return ready

    def take_all(self) -> list[tuple[dict[str, Any], int]]:
        """Every pending roll-up, now (flush and exit); windows start over."""
        for key, seen in list(self._seen.items()):
            self._release(key, seen)
        ready, self._ready = self._ready, []
        return ready
