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

import builtins
import contextlib
import copy as _copy
import math
from collections import deque
from itertools import islice
from sys import getsizeof
from types import FrameType, TracebackType
from typing import TYPE_CHECKING, Any

from eventlog_handler.wire._logs import RAW

if TYPE_CHECKING:
    from eventlog_handler.settings import Settings


class Entry:
    """One captured event (see the module docstring).

    A log entry's ``message`` is formatted: formatting it on the worker would keep the arguments' tuple
    alive with the entry, one more object for the garbage collector to count (it runs after
    every ~700 of them, on whichever thread allocates next). ``data`` is ``None``, or a dict
    whose state ``data_ready`` tells (:mod:`eventlog_handler.wire._logs`): ``RAW`` (the record's
    extras, immutable scalars, copied as they were), ``SORTED`` (tags, user and known keys taken
    out) or ``JSON_READY``. ``exc`` is kept only for a ``before_send`` hook's hint, as a copy
    without traceback (:func:`detached`). ``created`` is the POSIX time of the call,
    ``enqueued`` its monotonic time.
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
        self.exc = None if exc is None else detached(exc)
        #: Bytes this entry holds, estimated when it is queued (:func:`entry_size`), or by
        #: the capture of a log record (0 until then).
        self.size = 0

    def __repr__(self) -> str:
        kind = "error" if self.is_error else "log"
        return f"<Entry {kind} {self.source!r} created={self.created:.3f}>"


def detached(exc: BaseException) -> BaseException:
    """A copy of ``exc`` for a ``before_send`` hook's hint, without its traceback: the same
    class, ``args``, attributes (``__dict__``, slots, and what built-in exceptions keep in C:
    ``errno``, ``filename``, ``name``...), cause and context, and exception groups' members;
    exceptions among its arguments and attributes (a wrapped error, Django's
    ``error_list=[self]``) copied the same way. A queued entry that held the exception itself
    would keep its traceback, and every frame's locals with it, alive until it is sent: memory
    the byte bound can't see.

    Built without calling the class's own ``__init__`` (which may want other arguments); a class
    that can't be built so (its own ``__new__``) is copied as :func:`copy.copy` copies it (its
    ``__reduce__``, as pydantic's errors have), and one that can't be copied at all is given
    as it is: the hint always has the exception."""
    try:
        return _detached(exc, {})
    except Exception:
        return exc


def _detached(exc: BaseException, memo: dict[int, Any]) -> BaseException:
    done = memo.get(id(exc))
    if done is not None:
        return done  # type: ignore[no-any-return]
    kind = type(exc)
    raw = _ARGS.__get__(exc)  # the exception's own, whatever a subclass's ``args`` does
    if isinstance(exc, _GROUPS):
        group: Any = exc
        args: tuple[Any, ...] = (group.message, [_detached(m, memo) for m in group.exceptions])
    else:
        args = raw
    try:
        copy = kind.__new__(kind, *args)
        for base in kind.__mro__:
            if base.__module__ == "builtins":
                base.__init__(copy, *args)  # type: ignore[misc]
                break
    except Exception:
        copy = _copy.copy(exc)
    memo[id(exc)] = copy
    # Set through the descriptors themselves: a frozen dataclass's __setattr__ refuses all.
    _ARGS.__set__(copy, tuple(_detached_value(item, memo) for item in _ARGS.__get__(copy)))
    for base in kind.__mro__:
        if base.__module__ == "builtins":
            names = [
                name
                for name, attribute in vars(base).items()
                if type(attribute) in _C_ATTRIBUTES and not name.startswith("__") and name != "args"
            ]
        else:
            names = list(_slots(base))
        for name in names:
            with contextlib.suppress(Exception):
                value = object.__getattribute__(exc, name)
                if value is not getattr(copy, name, None):
                    object.__setattr__(copy, name, _detached_value(value, memo))
    state = getattr(exc, "__dict__", None)
    if state:
        copy.__dict__.update({key: _detached_value(value, memo) for key, value in state.items()})
    _TRACEBACK.__set__(copy, None)
    cause, context = exc.__cause__, exc.__context__
    _CAUSE.__set__(copy, None if cause is None else _detached(cause, memo))
    _CONTEXT.__set__(copy, None if context is None else _detached(context, memo))
    _SUPPRESS.__set__(copy, exc.__suppress_context__)
    return copy


def _detached_value(value: Any, memo: dict[int, Any]) -> Any:
    """``value`` with the exceptions in it (it, or the items of a list, tuple or dict)
    detached; a traceback or a frame is ``None``."""
    if isinstance(value, BaseException):
        return _detached(value, memo)
    kind = type(value)
    if kind is TracebackType or kind is FrameType:  # an attribute that keeps frames alive
        return None
    if (kind is list or kind is tuple) and any(isinstance(i, BaseException) for i in value):
        return kind(_detached_value(item, memo) for item in value)
    if kind is dict and any(isinstance(item, BaseException) for item in value.values()):
        return {key: _detached_value(item, memo) for key, item in value.items()}
    return value


_ARGS: Any = BaseException.__dict__["args"]
_TRACEBACK: Any = BaseException.__dict__["__traceback__"]
_CAUSE: Any = BaseException.__dict__["__cause__"]
_CONTEXT: Any = BaseException.__dict__["__context__"]
_SUPPRESS: Any = BaseException.__dict__["__suppress_context__"]


def _slots(kind: type) -> tuple[str, ...]:
    slots = vars(kind).get("__slots__", ())
    names = (slots,) if isinstance(slots, str) else tuple(slots)
    return tuple(name for name in names if name not in ("__dict__", "__weakref__"))


_GROUPS: tuple[type, ...] = tuple(
    group for group in (getattr(builtins, "BaseExceptionGroup", None),) if group is not None
)
#: A group's own members (a subclass may make ``exceptions`` anything).
_GROUP_MEMBERS: Any = _GROUPS[0].__dict__["exceptions"] if _GROUPS else None
#: How built-in exceptions keep attributes in C (``OSError.filename``, ``ImportError.name``).
_C_ATTRIBUTES = (type(OSError.filename), type(BaseException.args))

#: Bytes an entry takes beyond what it carries: the entry, its dicts, the event it becomes.
ENTRY_OVERHEAD = 600
_TEXT = (str, bytes, bytearray)
#: A dict entry and a short key.
_PER_KEY = 64


def text_size(text: str) -> int:
    """The bytes ``text`` holds: one per character when it is ASCII (the common case, told
    without a look at the characters), else what the interpreter really takes (up to four
    per character)."""
    return 56 + len(text) if text.isascii() else getsizeof(text)


#: Containers :func:`estimate` walks at most: far more than JSON-safe data of any event holds
#: (it has no cycles), a stop for a structure that holds itself.
_MAX_CONTAINERS = 1_000_000


def estimate(value: Any) -> int:
    """An estimate of the bytes ``value`` holds: text by what it takes, numbers and other
    leaves at a flat rate, a dict's keys at a flat rate too, containers by every item they
    hold. It walks the whole structure: what it is given has been made JSON-safe on the same
    thread just before (:func:`~eventlog_handler.wire._jsonsafe.to_jsonable`), a walk several
    times as costly per item, so this at most adds a fraction to it, and a guess made from a
    part would let a large structure of many small containers past the memory bound."""
    kind = type(value)
    if kind is str:
        return text_size(value)
    if kind is bytes:
        return 56 + len(value)
    if kind is not dict and kind is not list and kind is not tuple:
        return 32
    total = 0
    pending: list[Any] = [value]
    budget = _MAX_CONTAINERS  # a structure that holds itself would be walked forever
    while pending and budget:
        budget -= 1
        item = pending.pop()
        kind = type(item)
        if kind is dict:
            total += 64 + _PER_KEY * len(item) + estimate_items(item.values(), pending)
        elif kind is list or kind is tuple or kind is set or kind is frozenset:
            total += 56 + 8 * len(item) + estimate_items(item, pending)
        elif kind is str:
            total += text_size(item)
        elif isinstance(item, _TEXT):
            total += 56 + len(item)
        else:
            total += 32
    return total


def estimate_items(items: Any, pending: list[Any]) -> int:
    """The bytes of ``items``' text and scalars; containers among them go to ``pending``."""
    total = 0
    for item in items:
        kind = type(item)
        if kind is str:
            total += 56 + len(item) if item.isascii() else getsizeof(item)
        elif kind is int or kind is float or kind is bool or item is None:
            total += 32
        else:
            pending.append(item)
    return total


def entry_size(entry: Entry) -> int:
    """What ``entry`` holds in bytes, roughly (see :func:`estimate`)."""
    size = ENTRY_OVERHEAD if entry.exc is None else ENTRY_OVERHEAD + held_by(entry.exc)
    if entry.event is not None:
        return size + estimate(entry.event)
    message = entry.message
    if type(message) is str:
        size += len(message) if message.isascii() else getsizeof(message)
    data = entry.data
    return size + data_size(data) if data else size


def data_size(data: dict[str, Any], scalars_only: bool = False) -> int:
    """What the values of a log entry's ``data`` hold in bytes, roughly (see
    :func:`estimate`); with ``scalars_only``, -1 at the first value that is not a str, an int,
    a float, a bool or ``None`` (the capture of a record sizes its extras in the look at their
    types, :func:`~eventlog_handler.capture._records.capture_record`)."""
    size = 0
    for value in data.values():
        kind = type(value)
        if kind is str:
            size += 72 + len(value) if value.isascii() else 16 + getsizeof(value)
        elif kind is int or kind is float or kind is bool or value is None:
            size += 48
        elif scalars_only:
            return -1
        else:
            size += 16 + estimate(value)
    return size


def built_out(event: dict[str, Any]) -> int:
    """The bytes an error's event got on the worker, roughly: the source lines of its frames
    and the lines of its trace log (the text, each line as :func:`entry_size` counts a text
    value; a walk of the whole event with :func:`estimate` cost as much as a third of
    building it)."""
    total = 0
    data = event.get("data")
    error = event.get("@simple_error")
    for holder in (data, error.get("data") if type(error) is dict else None):
        if type(holder) is not dict:
            continue
        total += _lines_size(holder.get("@trace"))
        frames = holder.get("@frames")
        if type(frames) is not list:
            continue
        for frame in frames:
            if type(frame) is dict:
                line = frame.get("context_line")
                total += 400 + (len(line) if type(line) is str else 0)
                total += _lines_size(frame.get("pre_context"))
                total += _lines_size(frame.get("post_context"))
    return total


def _lines_size(lines: Any) -> int:
    if type(lines) is not list:
        return 0
    try:
        return 72 * len(lines) + sum(map(len, lines))
    except TypeError:  # not all text: counted by what is
        return sum(72 + len(line) for line in lines if type(line) is str)


#: Items :func:`held_by` looks at, at most, for one exception (a bound on its cost on the
#: logging thread: what it holds beyond that is not counted).
_MAX_HELD_ITEMS = 20_000
_SCALARS = (int, float, bool, type(None))
_SEQUENCES = (list, tuple, set, frozenset)


def held_by(exc: BaseException) -> int:
    """What the copy of an exception for the hint (:func:`detached`) keeps alive, in bytes,
    roughly: the text and containers among its arguments and attributes, and those of the
    objects among them, one level in (an HTTP error's response and the body it read), for
    it, its cause, its context and a group's members. The copy shares these with the
    exception; kept in the queue, they are memory the byte bound must count.

    A walk of at most :data:`_MAX_HELD_ITEMS` items, each object once (a structure that
    holds itself is counted once), by exact types: an object is never asked what it is (a
    lazy proxy would be evaluated on the logging thread). Never raises."""
    try:
        return _held_by(exc)
    except Exception:
        return 0


def _held_by(exc: BaseException) -> int:
    total = 0
    seen: set[int] = set()
    pending: list[tuple[Any, int]] = [(exc, 0)]  # an item, and the objects passed to reach it
    budget = _MAX_HELD_ITEMS
    while pending and budget > 0:
        budget -= 1
        value, level = pending.pop()
        kind = type(value)
        if kind in _SCALARS:
            total += 32
            continue
        if id(value) in seen:
            continue
        seen.add(id(value))
        if kind is str:
            total += text_size(value)
        elif kind is bytes or kind is bytearray:
            total += 56 + len(value)
        elif kind is dict:
            total += 64 + _PER_KEY * len(value)
            pending.extend((item, level) for item in islice(value.values(), budget))
        elif kind in _SEQUENCES:
            total += 56 + 8 * len(value)
            pending.extend((item, level) for item in islice(value, budget))
        elif issubclass(kind, BaseException):
            total += 32
            held = [*_ARGS.__get__(value), *_state(value), value.__cause__, value.__context__]
            if issubclass(kind, _GROUPS):
                held += list(_GROUP_MEMBERS.__get__(value))
            pending.extend((item, level) for item in held)
        elif level == 0:
            total += 32  # an object the exception holds: what it holds counts too
            pending.extend((item, 1) for item in _state(value))
        else:
            total += 32
    return total


def _state(value: Any) -> list[Any]:
    """The values of ``value``'s own ``__dict__`` (none when it has none)."""
    try:
        state = object.__getattribute__(value, "__dict__")
    except Exception:
        return []
    return list(state.values()) if type(state) is dict else []


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

    def take(self, count: int, size: float = math.inf) -> list[Entry]:
        """Remove and return up to ``count`` entries, stopping once they reach ``size`` bytes:
        errors first, then logs, oldest first."""
        taken: list[Entry] = []
        held = 0
        for source in (self.errors, self.logs):
            while source and len(taken) < count and held < size:
                entry = source.popleft()
                held += entry.size
                taken.append(entry)
        self.bytes = 0 if not self else self.bytes - held
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
