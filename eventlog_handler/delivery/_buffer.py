"""What the caller's thread hands to the worker: :class:`Entry`, and the bounded queue of them.

An :class:`Entry` is a snapshot of one captured event, taken on the caller's thread: either a
complete wire event (``event``; errors, whose traceback is read while it exists) or the parts of
a log event (level, logger, message template and arguments, time, extra data, user, tags), which
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
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from eventlog_handler.settings import Settings


#: ``Entry.data_ready``: extras as copied from a record (to be sorted out), sorted-out scalars
#: (data exclusions still to apply), or JSON-safe data.
RAW, SORTED, JSON_READY = 0, 1, 2


class Entry:
    """One captured event (see the module docstring).

    ``args`` is ``None`` when ``message`` is final, else the ``%`` arguments to format it with
    on the worker (only immutable scalars are deferred). ``data`` is ``None``, or a dict whose
    state ``data_ready`` tells: :data:`RAW` (the record's extras, immutable scalars, copied as
    they were), :data:`SORTED` (tags, user and known keys taken out) or :data:`JSON_READY`. ``exc`` is kept only for a
    ``before_send`` hook's hint. ``created`` is the POSIX time of the call, ``enqueued`` its
    monotonic time.
    """

    __slots__ = (
        "args",
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
        args: tuple[Any, ...] | None,
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
        self.args = args
        self.created = created
        self.enqueued = enqueued
        self.data = data
        self.data_ready = data_ready
        self.user = user
        self.tags = tags
        self.is_error = is_error
        self.exc = exc

    def __repr__(self) -> str:
        kind = "error" if self.is_error else "log"
        return f"<Entry {kind} {self.source!r} created={self.created:.3f}>"


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
