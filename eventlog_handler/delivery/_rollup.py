"""Roll-up of duplicates: identical events inside a window are sent once, with a ``count``.

As the official .NET and JavaScript clients do: the first occurrence of an event is sent as
usual (never held back); identical ones that follow within ``window`` seconds of it are only
counted, and when the window ends one more event goes out (the last occurrence, so it has the
last date) with ``count`` set to how many it stands for. An error storm of 10,000 identical
exceptions thus costs two events and one stack, and ``count`` adds up to 10,000.

Identical means: the same type, source, message, level, tags, user, value, geo, ``data`` and
(for errors) ``@simple_error``; the date, the reference id, ``@trace`` and ``@environment`` (the
thread) don't count. Distinct events are remembered for one to two windows, at most
:data:`MAX_KEYS` per window (past that, older ones are forgotten sooner: a duplicate of a
forgotten one starts a new window). Everything here runs on the delivery worker.
"""

from __future__ import annotations

import math
import time
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


_FIELDS = ("type", "source", "message", "@level", "value", "reference_id", "date", "count")


def event_key(event: dict[str, Any]) -> Any:
    """What makes two events identical (see the module docstring)."""
    data = event.get("data")
    data_key: Any = None
    if data:
        if type(data) is dict and ("@trace" in data or "@environment" in data):
            data = {key: item for key, item in data.items() if key not in _SKIPPED_DATA}
        try:
            data_key = tuple(data.items())
            hash(data_key)
        except (TypeError, AttributeError):  # nested values: compared by their frozen form
            data_key = _freeze(data)
    tags = event.get("tags")
    user = event.get("@user")
    error = event.get("@simple_error")
    key = (
        event.get("type"),
        event.get("source"),
        event.get("message"),
        event.get("@level"),
        event.get("value"),
        tuple(tags) if tags else None,
        data_key,
        _freeze(user) if user else None,
        _freeze(error) if error is not None else None,
    )
    if len(event) > len(_FIELDS) + 4:  # other top-level fields (geo, custom): they count too
        rest = [
            (name, _freeze(value))
            for name, value in event.items()
            if name not in _FIELDS and name not in ("data", "tags", "@user", "@simple_error")
        ]
        return (key, tuple(rest))
    return key


class Rollup:
    """The duplicates seen in the current windows (see the module docstring).

    Distinct events are remembered in two generations of ``window`` seconds each (the current
    one and the one before), so that forgetting old ones costs nothing per event: when the
    current generation is a window old (or full), it becomes the previous one and the previous
    one is dropped. An event is thus remembered for one to two windows.
    """

    def __init__(self, window: float) -> None:
        self.window = window
        #: When the window of each distinct event seen ends, in two generations.
        self._current: dict[Any, float] = {}
        self._previous: dict[Any, float] = {}
        self._rotate_at = 0.0
        #: A cheaper first look: each message seen, its window's end and its first event (until
        #: a second event with that message makes the full comparison worth its cost).
        self._messages: dict[Any, tuple[float, dict[str, Any] | None]] = {}
        self._old_messages: dict[Any, tuple[float, dict[str, Any] | None]] = {}
        #: The windows that have counted duplicates (what ``due`` and ``take_due`` look at).
        self._pending: dict[Any, _Seen] = {}
        self._ready: list[tuple[dict[str, Any], int]] = []
        #: Events counted into a pending roll-up and not sent yet.
        self.held = 0

    def admit(self, event: dict[str, Any], now: float) -> bool:
        """``True``: send ``event`` now. ``False``: it was counted into a roll-up."""
        if self.window <= 0:
            return True
        if now >= self._rotate_at or len(self._messages) >= MAX_KEYS:
            self._previous, self._current = self._current, {}
            self._old_messages, self._messages = self._messages, {}
            self._rotate_at = now + self.window
        try:
            message = event.get("message")
            seen = self._messages.get(message)
            if seen is None:
                seen = self._old_messages.get(message)
            if seen is None or now >= seen[0]:
                # No event with this message in a window: not a duplicate (most events).
                self._messages[message] = (now + self.window, event)
                return True
            first = seen[1]
            if first is not None:  # a second one: from now on, compare them in full
                self._messages[message] = (seen[0], None)
                self._current.setdefault(event_key(first), seen[0])
            key = event_key(event)
            ends = self._current.get(key)
            if ends is None:
                ends = self._previous.get(key)
        except Exception:
            return True  # an event that can't be compared is sent as it is
        if ends is not None:
            if now < ends:
                pending = self._pending.get(key)
                if pending is None:
                    pending = self._pending[key] = _Seen(ends)
                pending.count += 1
                pending.last = event
                self.held += 1
                return False
            self._release(key)  # its window ended: its roll-up goes out, a new window begins
        self._current[key] = now + self.window
        return True

    def _release(self, key: Any) -> None:
        self._current.pop(key, None)
        self._previous.pop(key, None)
        seen = self._pending.pop(key, None)
        if seen is not None and seen.count and seen.last is not None:
            carrier = dict(seen.last)
            carrier["count"] = seen.count
            self._ready.append((carrier, seen.count))
            self.held -= seen.count

    def due(self) -> float:
        """When the next roll-up is due to be sent (``inf``: none pending)."""
        if self._ready:
            return -math.inf
        if not self._pending:
            return math.inf
        return min(seen.ends for seen in self._pending.values())

    def take_due(self, now: float) -> list[tuple[dict[str, Any], int]]:
        """The roll-ups whose window ended (event with ``count``, how many it stands for)."""
        if self._pending:
            for key, seen in list(self._pending.items()):
                if seen.ends <= now:
                    self._release(key)
        ready, self._ready = self._ready, []
        return ready

    def take_all(self) -> list[tuple[dict[str, Any], int]]:
        """Every pending roll-up, now (flush and exit). The windows go on: a duplicate that
        follows is counted into a new roll-up of the same window."""
        for key, seen in list(self._pending.items()):
            self._release(key)
            if now_window_open(seen):
                self._current[key] = seen.ends  # the window goes on
        ready, self._ready = self._ready, []
        return ready


def now_window_open(seen: _Seen) -> bool:
    """Whether a window still runs (its end is in the future of the monotonic clock)."""
    return time.monotonic() < seen.ends
