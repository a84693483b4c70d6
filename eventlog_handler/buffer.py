"""The bounded in-memory queue of captured events.

Two FIFO deques, errors and logs, under one capacity. When a new event would overflow it, the
oldest **log** event is evicted first, so a flood of logs never pushes out an error; only when
it holds nothing but errors does the oldest error go. Every operation is O(1) (``take`` is
O(n) in the events it returns). The caller holds the engine's lock; nothing here locks.
"""

from __future__ import annotations

from collections import deque
from typing import Any, NamedTuple


class Entry(NamedTuple):
    """One captured event: the JSON-ready dict, its wall-clock time, its enqueue time."""

    event: dict[str, Any]
    created: float
    enqueued: float


class EventBuffer:
    """Errors and logs in arrival order, at most ``capacity`` in all."""

    __slots__ = ("capacity", "errors", "logs")

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self.errors: deque[Entry] = deque()
        self.logs: deque[Entry] = deque()

    def __len__(self) -> int:
        return len(self.errors) + len(self.logs)

    def __bool__(self) -> bool:
        return bool(self.errors) or bool(self.logs)

    def put(self, entry: Entry, is_error: bool) -> Entry | None:
        """Add ``entry``; return the entry that had to go to make room (maybe ``entry``)."""
        if len(self.errors) + len(self.logs) < self.capacity:
            (self.errors if is_error else self.logs).append(entry)
            return None
        if self.logs:
            evicted = self.logs.popleft()
        elif is_error:
            evicted = self.errors.popleft()
        else:
            return entry  # full of errors: a new log can't push one out
        (self.errors if is_error else self.logs).append(entry)
        return evicted

    def take(self, count: int) -> list[Entry]:
        """Remove and return up to ``count`` entries: errors first, then logs, oldest first."""
        taken: list[Entry] = []
        for source in (self.errors, self.logs):
            while source and len(taken) < count:
                taken.append(source.popleft())
        return taken

    def oldest(self) -> tuple[Entry | None, Entry | None]:
        """The oldest error and the oldest log, without removing them."""
        return (self.errors[0] if self.errors else None, self.logs[0] if self.logs else None)

    def clear(self) -> int:
        """Drop everything; return how many entries were dropped."""
        count = len(self)
        self.errors.clear()
        self.logs.clear()
        return count
