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

Memory is bounded in bytes whatever the traffic (a constant message with varying data is the
common case): a distinct event is remembered by a 64-bit digest of what makes it identical, not
by its data; a message's first event is kept (to compare a second one with) only when it is
small, and only for the last :data:`FIRSTS` to twice as many distinct messages (a second event
that comes later is compared from then on: it is sent, and its duplicates are counted); and
the events held for pending roll-ups (the last of each) take at most half of
``max_bytes``: past that the oldest pending roll-up goes out early, with the count it has.
"""

from __future__ import annotations

import json
import math
import time
from typing import Any

from eventlog_handler.wire._events import _orjson, exact

#: Distinct events remembered at most.
MAX_KEYS = 2_000

_SKIPPED_DATA = frozenset({"@trace", "@environment"})


#: A message's first event is kept for a later comparison only up to this many bytes.
SMALL_EVENT = 4_096
#: First events kept, in two generations of this many each. Few, so that they are freed soon
#: after they are sent, as a batch's events are: kept for :data:`MAX_KEYS` messages, they
#: made the garbage collector run about a third more often on the logging threads (a freed
#: object counts against the next collection; freed all at once, most don't).
FIRSTS = 256


class _Seen:
    __slots__ = ("count", "ends", "key", "last", "size")

    def __init__(self, ends: float, key: Any) -> None:
        self.ends = ends
        self.key = key
        self.count = 0
        self.last: dict[str, Any] | None = None
        self.size = 0


def _freeze(value: Any) -> Any:
    """A hashable form of a nested value that compares by value: its JSON with sorted keys
    (the encoder runs in C: an error's frames and stack cost a few microseconds, where nested
    tuples built in Python cost ten times that), else, for what plain JSON can't hold (keys
    that are not strings; the events here are JSON-ready, but a dict key may not be), nested
    tuples, tagged so that they never equal a JSON text. orjson is kept to plain JSON: a date,
    a dataclass or a subclass of ``str`` is refused rather than written as what it looks like.
    """
    try:
        if _orjson is not None:
            # kept as a held event's key: in an allocation of its own length (see exact)
            return exact(_orjson.dumps(value, option=_ORJSON_OPTIONS))
        return _sorted_json(value)
    except (TypeError, ValueError, OverflowError, RecursionError):
        return (_TUPLES, _tuples(value))


_TUPLES = "nested tuples"
_ORJSON_OPTIONS = 0
if _orjson is not None:
    _ORJSON_OPTIONS = (
        _orjson.OPT_SORT_KEYS
        | _orjson.OPT_PASSTHROUGH_DATETIME
        | _orjson.OPT_PASSTHROUGH_DATACLASS
        | _orjson.OPT_PASSTHROUGH_SUBCLASS
    )


_sorted_json = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, check_circular=False
).encode


def _tuples(value: Any) -> Any:
    kind = type(value)
    if kind is dict:
        return tuple(sorted((str(key), _tuples(item)) for key, item in value.items()))
    if kind is list or kind is tuple:
        return tuple(_tuples(item) for item in value)
    return value


_FIELDS = ("type", "source", "message", "@level", "value", "reference_id", "date", "count")
_KNOWN = frozenset((*_FIELDS, "data", "tags", "@user", "@simple_error"))


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
    others = event.keys() - _KNOWN
    if others:  # other top-level fields (geo, custom ones): they count too
        return (key, tuple((name, _freeze(event[name])) for name in sorted(others)))
    return key


class Rollup:
    """The duplicates seen in the current windows (see the module docstring).

    Distinct events are remembered in two generations of ``window`` seconds each (the current
    one and the one before), so that forgetting old ones costs nothing per event: when the
    current generation is a window old, or full (:data:`MAX_KEYS`, or half of ``max_bytes``), it
    becomes the previous one and the previous one is dropped. An event is thus remembered for
    one to two windows.
    """

    def __init__(self, window: float, max_bytes: int = 8 * 1024 * 1024) -> None:
        self.window = window
        self.max_bytes = max_bytes
        #: When the window of each distinct event seen ends, by digest, in two generations.
        self._current: dict[int, float] = {}
        self._previous: dict[int, float] = {}
        self._rotate_at = 0.0
        #: A cheaper first look: each message seen, with its window's end, and its first event
        #: (until a second event with that message makes the full comparison worth its cost).
        #: Two dicts rather than one of pairs: a pair per event would be one more object alive,
        #: and the garbage collector runs after every ~700 of those.
        self._messages: dict[Any, float] = {}
        self._firsts: dict[Any, dict[str, Any]] = {}
        self._old_messages: dict[Any, float] = {}
        self._old_firsts: dict[Any, dict[str, Any]] = {}
        self._generation_bytes = 0
        self._old_generation_bytes = 0
        #: The windows that have counted duplicates (what ``due`` and ``take_due`` look at),
        #: oldest first.
        self._pending: dict[int, _Seen] = {}
        self._pending_bytes = 0
        self._ready: list[tuple[dict[str, Any], int]] = []
        #: Events counted into a pending roll-up and not sent yet.
        self.held = 0

    @property
    def bytes(self) -> int:
        """Bytes this roll-up holds, estimated."""
        return self._generation_bytes + self._old_generation_bytes + self._pending_bytes

    def _rotate(self, now: float) -> None:
        self._previous, self._current = self._current, {}
        self._old_messages, self._messages = self._messages, {}
        self._old_firsts, self._firsts = self._firsts, {}
        self._old_generation_bytes, self._generation_bytes = self._generation_bytes, 0
        self._rotate_at = now + self.window

    def admit(self, event: dict[str, Any], now: float, size: int = 0) -> bool:
        """``True``: send ``event`` now. ``False``: it was counted into a roll-up. ``size`` is
        what the event holds in bytes (an estimate)."""
        if self.window <= 0:
            return True
        if (
            now >= self._rotate_at
            or len(self._messages) >= MAX_KEYS
            or len(self._current) >= MAX_KEYS
            or self._generation_bytes >= self.max_bytes // 4
        ):
            self._rotate(now)
        try:
            message = event.get("message")
            seen = self._messages.get(message)
            if seen is None:
                seen = self._old_messages.get(message)
            if seen is None or now >= seen:
                # No event with this message in a window: not a duplicate (most events).
                window_end = now + self.window
                text = len(message) if type(message) is str else 64
                self._messages[message] = window_end
                if seen is not None:  # the first of a window that ended is not this one's
                    self._old_firsts.pop(message, None)
                if size <= SMALL_EVENT:
                    firsts = self._firsts
                    if len(firsts) >= FIRSTS:
                        self._old_firsts, firsts = firsts, {}
                        self._firsts = firsts
                    firsts[message] = event
                    self._generation_bytes += 120 + text + size
                else:  # too large to keep: remember its digest now
                    self._firsts.pop(message, None)
                    self._old_firsts.pop(message, None)
                    self._current[hash(event_key(event))] = window_end
                    self._generation_bytes += 200 + text
                return True
            first = self._firsts.pop(message, None)
            if first is None:
                first = self._old_firsts.pop(message, None)
            if first is not None:  # a second one: from now on, compare them in full
                self._messages[message] = seen
                first_digest = hash(event_key(first))
                known = self._current.get(first_digest)
                if known is None or known <= now:  # no window, or one that ended: this one
                    older = self._pending.get(first_digest)
                    if older is not None and older.ends <= now:
                        self._release(first_digest)
                    self._current[first_digest] = seen
                self._generation_bytes += 80
            key = event_key(event)
            digest = hash(key)
            ends: float | None = self._current.get(digest)
            if ends is None:
                ends = self._previous.get(digest)
        except Exception:
            return True  # an event that can't be compared is sent as it is
        if ends is not None:
            pending = self._pending.get(digest)
            if pending is not None and pending.key != key:
                return True  # two events with one digest: send this one as it is
            if now < ends:
                if pending is None:
                    pending = self._pending[digest] = _Seen(ends, key)
                self._pending_bytes += size - pending.size
                pending.size = size
                pending.count += 1
                pending.last = event
                self.held += 1
                self._bound_pending()
                return False
            self._release(digest)  # its window ended: its roll-up goes out, a new window begins
        self._current[digest] = now + self.window
        self._generation_bytes += 80
        return True

    def _bound_pending(self) -> None:
        """Send the oldest pending roll-ups early while they hold more than half the bytes."""
        while self._pending_bytes * 2 > self.max_bytes and len(self._pending) > 1:
            self._release(next(iter(self._pending)), keep_window=True)

    def _release(self, digest: int, keep_window: bool = False) -> None:
        ends = self._current.pop(digest, None)
        previous = self._previous.pop(digest, None)
        seen = self._pending.pop(digest, None)
        if seen is not None:
            self._pending_bytes -= seen.size
            if seen.count and seen.last is not None:
                carrier = dict(seen.last)
                carrier["count"] = seen.count
                self._ready.append((carrier, seen.count))
                self.held -= seen.count
        window_end = ends if ends is not None else previous
        if keep_window and window_end is not None:
            self._current[digest] = window_end

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
            for digest, seen in list(self._pending.items()):
                if seen.ends <= now:
                    self._release(digest)
        ready, self._ready = self._ready, []
        return ready

    def take_all(self) -> list[tuple[dict[str, Any], int]]:
        """Every pending roll-up, now (flush and exit). The windows go on: a duplicate that
        follows is counted into a new roll-up of the same window."""
        now = time.monotonic()
        for digest, seen in list(self._pending.items()):
            self._release(digest)
            if now < seen.ends:
                self._current[digest] = seen.ends  # the window goes on
        ready, self._ready = self._ready, []
        return ready
