"""What the caller's thread hands to the worker: :class:`Entry`, and the bounded queue of them.

An :class:`Entry` is a snapshot of one captured event, taken on the caller's thread: either a
complete wire event (``event``; errors, whose traceback is read while it exists) or the parts of
a log event (level, logger, formatted message, time, extra data, user, tags), which
the worker turns into the wire form (:mod:`eventlog_handler.delivery._finish`). Only what may change after
the log call returns is copied at capture; the rest of the work happens on the worker.

:class:`EventBuffer` holds entries in two FIFO deques, errors and logs, under one capacity. When
a new entry would overflow it, the oldest **log** is evicted first, so a flood of logs never
pushes out an error; only when it holds nothing but errors does the oldest error go. Every
operation is O(1) (``take`` is O(n) in the entries it returns). The caller holds the engine's
lock; nothing here locks.
"""

from __future__ import annotations

from collections import deque
from itertools import islice
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from eventlog_handler.settings import Settings


#: ``Entry.data_ready``: extras as copied from a record (to be sorted out), sorted-out scalars
#: (data exclusions still to apply), or JSON-safe data.
RAW, SORTED, JSON_READY = 0, 1, 2


class Entry:
    """One captured event (see the module docstring).

    A log entry's ``message`` is formatted: formatting it on the worker would keep the arguments' tuple
    alive with the entry, one more object for the garbage collector to count (it runs after
    every ~700 of them, on whichever thread allocates next). ``data`` is ``None``, or a dict
    whose state ``data_ready`` tells: :data:`RAW` (the record's extras, immutable scalars,
    copied as they were), :data:`SORTED` (tags, user and known keys taken out) or
    :data:`JSON_READY`. ``exc`` is kept only for a ``before_send`` hook's hint. ``created`` is the POSIX time of the call, ``enqueued`` its
    monotonic time.
    """

    __slots__ = (
        "created",
        "data",
        "data_ready",
        "enqueued",
        "event",
        "exc",
        "is_error",
        "levelno",
        "message",
        "settings",
        "size",
        "source",
        "tags",
        "user",
    )

    def __init__(
        self,
        settings: Settings,
        event: dict[str, Any] | None,
        levelno: int,
        source: str | None,
        message: Any,
        created: float,
        enqueued: float,
        data: dict[str, Any] | None = None,
        data_ready: int = RAW,
        user: dict[str, Any] | None = None,
        tags: tuple[Any, ...] = (),
        is_error: bool = False,
        exc: BaseException | None = None,
    ) -> None:
        self.settings = settings
        self.event = event
        self.levelno = levelno
        self.source = source
        self.message = message
        self.created = created
        self.enqueued = enqueued
        self.data = data
        self.data_ready = data_ready
        self.user = user
        self.tags = tags
        self.is_error = is_error
        self.exc = exc
        #: Bytes this entry holds, estimated when it is queued (:func:`entry_size`).
        self.size = 0

    def __repr__(self) -> str:
        kind = "error" if self.is_error else "log"
        return f"<Entry {kind} {self.source!r} created={self.created:.3f}>"


#: Bytes an entry takes beyond what it carries: the entry, its dicts, the event it becomes.
ENTRY_OVERHEAD = 600
#: Containers and values an estimate looks at, at most; past it the rest is extrapolated.
_ESTIMATE_NODES = 2_000
_TEXT = (str, bytes, bytearray)
#: A dict entry and a short key.
_PER_KEY = 64


def estimate(value: Any) -> int:
    """A cheap estimate of the bytes ``value`` holds: text by its length, numbers and other
    leaves at a flat rate, a dict's keys at a flat rate too, containers by their items (bounded
    work: past :data:`_ESTIMATE_NODES` values, the rest of a structure is extrapolated)."""
    kind = type(value)
    if kind is str or kind is bytes:
        return 56 + len(value)
    if kind is not dict and kind is not list and kind is not tuple:
        return 32
    total = 0
    budget = _ESTIMATE_NODES
    pending: list[Any] = [value]
    while pending:
        item = pending.pop()
        kind = type(item)
        if kind is dict:
            total += 64 + _PER_KEY * len(item)
            items: Any = item.values()
        elif kind is list or kind is tuple or kind is set or kind is frozenset:
            total += 56 + 8 * len(item)
            items = item
        elif isinstance(item, _TEXT):
            total += 56 + len(item)
            continue
        else:
            total += 32
            continue
        count = len(items)
        if count > budget:  # look at what the budget allows; the rest is like it
            looked = estimate_items(islice(items, budget), pending) if budget else 32
            total += looked * count // max(budget, 1) + 64 * len(pending)
            return total
        budget -= count
        total += estimate_items(items, pending)
    return total


def estimate_items(items: Any, pending: list[Any]) -> int:
    """The bytes of ``items``' text and scalars; containers among them go to ``pending``."""
    total = 0
    for item in items:
        kind = type(item)
        if kind is str:
            total += 56 + len(item)
        elif kind is int or kind is float or kind is bool or item is None:
            total += 32
        else:
            pending.append(item)
    return total


def entry_size(entry: Entry) -> int:
    """What ``entry`` holds in bytes, roughly (see :func:`estimate`)."""
    if entry.event is not None:
        return ENTRY_OVERHEAD + estimate(entry.event)
    size = ENTRY_OVERHEAD
    message = entry.message
    if type(message) is str:
        size += len(message)
    data = entry.data
    if data:
        for value in data.values():
            kind = type(value)
            if kind is str:
                size += 72 + len(value)
            elif kind is int or kind is float or kind is bool or value is None:
                size += 48
            else:
                size += 16 + estimate(value)
    return size


class EventBuffer:
    """Errors and logs in arrival order, at most ``capacity`` in all; ``bytes`` is the sum of
    their sizes (:attr:`Entry.size`)."""

    __slots__ = ("bytes", "capacity", "errors", "logs")

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self.errors: deque[Entry] = deque()
        self.logs: deque[Entry] = deque()
        self.bytes = 0

    def __len__(self) -> int:
        return len(self.errors) + len(self.logs)

    def __bool__(self) -> bool:
        return bool(self.errors) or bool(self.logs)

    def put(self, entry: Entry, is_error: bool, room: int) -> list[Entry]:
        """Add ``entry`` within ``capacity`` entries and ``room`` bytes; return the entries that
        had to go to make room, oldest logs first (``[entry]`` when it can't go in: a log when
        only errors are left, or an entry larger than ``room`` on its own)."""
        size = entry.size
        if size > room:
            return [entry]
        errors, logs = self.errors, self.logs
        evicted: list[Entry] = []
        while len(errors) + len(logs) >= self.capacity or self.bytes + size > room:
            if logs:
                gone = logs.popleft()
            elif is_error and errors:
                gone = errors.popleft()
            else:  # full of errors: a new log can't push one out
                self._add_back(evicted)
                return [entry]
            self.bytes -= gone.size
            evicted.append(gone)
        (errors if is_error else logs).append(entry)
        self.bytes += size
        return evicted

    def _add_back(self, entries: list[Entry]) -> None:
        for entry in reversed(entries):
            self.put_front(entry)

    def put_front(self, entry: Entry) -> None:
        """Put ``entry`` back at the front (an entry that was taken and is returned)."""
        (self.errors if entry.is_error else self.logs).appendleft(entry)
        self.bytes += entry.size

    def take(self, count: int) -> list[Entry]:
        """Remove and return up to ``count`` entries: errors first, then logs, oldest first."""
        taken: list[Entry] = []
        for source in (self.errors, self.logs):
            while source and len(taken) < count:
                taken.append(source.popleft())
        self.bytes = 0 if not self else self.bytes - sum(entry.size for entry in taken)
        return taken

    def oldest(self) -> tuple[Entry | None, Entry | None]:
        """The oldest error and the oldest log, without removing them."""
        return (self.errors[0] if self.errors else None, self.logs[0] if self.logs else None)

    def clear(self) -> int:
        """Drop everything; return how many entries were dropped."""
        count = len(self)
        self.errors.clear()
        self.logs.clear()
        self.bytes = 0
        return count
