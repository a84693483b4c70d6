"""Log events: the one builder of the log form, for a batch on the delivery worker and for
:func:`log_event`.

:func:`log_builder` is a generator that is sent the parts of one event at a time (a
:class:`~eventlog_handler.delivery._buffer.Entry`, or what :func:`log_event` was given) and
answers with its wire form. What a batch shares is worked out once per builder, in its locals:
the formatted second of the date, the reference id's prefix, the level names, the settings'
tags, exclusions and environment. How ``data`` is made safe is chosen per event:
:func:`flat_data` for the common case (a flat dict of plain values), :func:`general_data` for
anything else. A raw entry's extras are sorted out first when they hold special keys (``tags``,
``@user``, ``stack``, known keys).
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Collection, Generator, Iterable, Mapping
from typing import Any

from eventlog_handler._values import fits
from eventlog_handler.settings import MASK
from eventlog_handler.wire._dates import _FRACTION, format_date, new_reference_id
from eventlog_handler.wire._events import (
    MAX_MESSAGE,
    MAX_SOURCE,
    MAX_TAGS,
    normalize_tags,
    user_with_exclusions,
    with_common,
)
from eventlog_handler.wire._extras import RESERVED_ATTRS, SPECIAL_EXTRAS, sort_extras
from eventlog_handler.wire._jsonsafe import (
    MAX_ITEMS,
    MAX_STRING,
    is_excluded,
    safe_str,
    to_jsonable,
    truncate,
)
from eventlog_handler.wire._levels import level_name

#: What the builder is sent as ``data_ready``: extras as copied from a record (to be sorted
#: out), sorted-out values (data exclusions still to apply), or JSON-safe data.
RAW, SORTED, JSON_READY = 0, 1, 2

_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1
#: Texts at most this long are within their limit even if every character took two UTF-16
#: code units (the service's measure): no closer look.
_HALF_MESSAGE, _HALF_SOURCE, _HALF_STRING = MAX_MESSAGE >> 1, MAX_SOURCE >> 1, MAX_STRING >> 1
#: Whether a data key is excluded, per exclusion list (keys of a program repeat endlessly).
_EXCLUDED: dict[tuple[str, ...], dict[str, bool]] = {}
#: The exclusion list last looked up there and its dict, in one tuple (one assignment: another
#: thread never sees one's list with the other's dict): a list of 20 words hashed again for
#: every event cost more than the rest of the lookup.
_LAST_EXCLUDED: tuple[tuple[str, ...] | None, dict[str, bool]] = (None, {})
#: The last user object and its JSON form, per exclusion list (a context's user repeats).
_LAST_USER: dict[tuple[str, ...], tuple[Any, Any]] = {}
#: Exclusion lists cached at most (a program has a few; log_event may be given any).
_CACHED_LISTS = 64
#: Extras that make the builder sort a raw entry's extras out first.
_SPECIAL = SPECIAL_EXTRAS | RESERVED_ATTRS


def log_builder() -> Generator[dict[str, Any], Any, None]:
    """A builder of log events: started with ``next()``, then sent the parts of each event (an
    object with the attributes of :class:`~eventlog_handler.delivery._buffer.Entry`), it
    answers with the event (see the module docstring)."""
    id_head, counter = new_reference_id.head, new_reference_id.counter
    second, date_head, date_tail = -1, "", ""
    special = _SPECIAL
    levels: dict[Any, str] = {}
    # What the parts' settings give, looked up once per settings object (one, in practice).
    settings: Any = None
    own_tags: tuple[str, ...] = ()
    exclusions: tuple[str, ...] = ()
    environment: str | None = None
    users: Any = _user
    event: Any = None  # answered to the first next()
    while True:
        entry = yield event
        if entry.settings is not settings:
            settings = entry.settings
            own_tags, exclusions = settings.tags, settings.data_exclusions
            environment = settings.environment
            users = user_with_exclusions if type(settings) is _Given else _user
        message = entry.message
        data = entry.data
        user = entry.user
        tags: Iterable[Any] = entry.tags
        ready = entry.data_ready
        stack = None
        if data and ready == RAW and not special.isdisjoint(data):
            data, own_user, extra_tags, stack = sort_extras(data)
            if own_user is not None:
                user = own_user
            if extra_tags:
                tags = (*tags, *extra_tags)
        if own_tags:
            tags = (*own_tags, *tags)
        clean: dict[str, Any] | None = data or None
        if data and ready != JSON_READY:
            clean = flat_data(data, exclusions)
            if clean is None:
                clean = general_data(data, exclusions)
        if type(message) is not str:
            message = safe_str(message)
        if len(message) > _HALF_MESSAGE:  # else within the limit even as UTF-16
            message = truncate(message, MAX_MESSAGE)
        created = entry.created
        if type(created) is not float:  # log_event's datetime, or None for now
            date = format_date(created)
        else:
            whole = int(created // 1)
            fraction = int((created - whole) * 10_000_000 + 0.5)
            if whole != second or fraction >= 10_000_000:
                date = format_date(created)
                second, date_head, date_tail = whole, date[:20], date[27:]
            else:
                date = date_head + _FRACTION % fraction + date_tail
        levelno = entry.levelno
        level = levels.get(levelno)
        if level is None and levelno is not None:  # log_event gives the level's name
            level = levels[levelno] = level_name(levelno) if type(levelno) is int else levelno
        source = entry.source
        if source:
            if type(source) is not str:
                source = safe_str(source)
            if len(source) > _HALF_SOURCE:
                source = truncate(source, MAX_SOURCE)
        if stack is not None:
            clean = dict(clean) if clean else {}
            clean["@stack"] = stack  # after the exclusions: its signature is not a secret
        event = with_common(
            {"type": "log", "message": message, "date": date},
            users(user, exclusions) if user else None,
            source,
            normalize_tags(tags) if tags else None,
            clean,
            level,
            id_head + hex(next(counter))[2:],
        )
        if environment is not None:
            event = with_environment(event, environment)


def flat_data(data: dict[str, Any], exclusions: tuple[str, ...]) -> dict[str, Any] | None:
    """``data`` with excluded values masked (a copy only then), if every key is a short string
    and every value a short string, a 64-bit int, a finite float, a bool or ``None``; else
    ``None``. ``data`` must be the caller's own dict (the worker's entries' are)."""
    if len(data) > MAX_ITEMS:
        return None  # the general builder keeps MAX_ITEMS and marks the rest
    global _LAST_EXCLUDED
    last = _LAST_EXCLUDED
    if last[0] is exclusions:
        cache = last[1]
    else:
        if exclusions not in _EXCLUDED and len(_EXCLUDED) >= _CACHED_LISTS:
            _EXCLUDED.clear()
        cache = _EXCLUDED.setdefault(exclusions, {})
        _LAST_EXCLUDED = (exclusions, cache)
    masked: list[str] | None = None
    for key, value in data.items():
        kind = type(value)
        if kind is str:
            if len(value) > _HALF_STRING and not fits(value, MAX_STRING):
                return None  # cut by the general builder (in UTF-16 code units)
        elif kind is int:
            if not _INT_MIN <= value <= _INT_MAX:
                return None
        elif kind is float:
            if value - value != 0.0:  # NaN or infinite
                return None
        elif value is not None and kind is not bool:
            return None
        excluded = cache.get(key)
        if excluded is None:
            if type(key) is not str or not fits(key, 200):
                return None
            excluded = is_excluded(key, exclusions)
            if len(cache) < 10_000:
                cache[key] = excluded
        if excluded:
            if masked is None:
                masked = []
            masked.append(key)
    if masked:
        data = dict(data)
        for key in masked:
            data[key] = MASK
    return data


def general_data(data: dict[str, Any], exclusions: tuple[str, ...]) -> dict[str, Any] | None:
    """``data`` made JSON-safe with the exclusions applied, whatever it holds (what
    :func:`flat_data` leaves): nested values, long strings and lists cut to their limits."""
    converted = to_jsonable(dict(data), exclusions)
    return converted if type(converted) is dict and converted else None


def _user(user: Mapping[str, Any], exclusions: tuple[str, ...]) -> Any:
    """The ``@user`` of ``user``, the same object for the same user in a row (a context's
    user repeats): for the worker's batches only, whose users are the package's own copies
    (:func:`log_event`'s are the caller's, which may change between calls)."""
    last = _LAST_USER.get(exclusions)
    if last is not None and last[0] is user:
        return last[1]
    converted = user_with_exclusions(user, exclusions)
    if len(_LAST_USER) >= _CACHED_LISTS:
        _LAST_USER.clear()
    _LAST_USER[exclusions] = (user, converted)
    return converted


def with_environment(event: dict[str, Any], environment: str) -> dict[str, Any]:
    """``event`` tagged with the deployment ``environment`` and with it in
    ``data["environment"]`` (a value the event has there already stays): the service
    filters on both (``tag:production``, ``data.environment:production``), and
    ``data["@environment"]`` is the machine's description, not this."""
    tags = event.get("tags")
    if type(tags) is not list:
        event["tags"] = [environment]
    elif environment not in tags:
        if len(tags) >= MAX_TAGS:  # full: the environment takes the last place
            del tags[MAX_TAGS - 1 :]
        tags.append(environment)
    data = event.get("data")
    if type(data) is not dict:
        event["data"] = {"environment": environment}
    else:
        data.setdefault("environment", environment)
    return event


class _Given:
    """The settings :func:`log_event` builds with: its exclusions, no tags or environment."""

    __slots__ = ("data_exclusions", "environment", "tags")

    def __init__(self, exclusions: Collection[str]) -> None:
        self.data_exclusions = tuple(exclusions)
        self.environment: str | None = None
        self.tags: tuple[str, ...] = ()


class _Parts:
    """What :func:`log_event` was given, as the builder reads an entry."""

    __slots__ = (
        *("created", "data", "data_ready", "levelno", "message"),
        *("settings", "source", "tags", "user"),
    )

    def __init__(self, **parts: Any) -> None:
        for name, value in parts.items():
            setattr(self, name, value)


def log_event(
    message: Any,
    *,
    date: float | _dt.datetime | None = None,
    user: Mapping[str, Any] | None = None,
    level: str | None = None,
    source: str | None = None,
    tags: Iterable[str] = (),
    data: Mapping[str, Any] | None = None,
    exclusions: Collection[str] = (),
    reference_id: str | None = None,
) -> dict[str, Any]:
    """The log form: ``type`` = ``log``, ``message``, ``date`` and, when known, ``@user``,
    ``@level``, ``source``, ``tags`` and ``data`` (made JSON-safe, ``exclusions`` masked), built
    by :func:`log_builder`."""
    build = log_builder()
    next(build)
    event = build.send(
        _Parts(
            settings=_Given(exclusions),
            message=message,
            created=date,
            levelno=level,
            source=source,
            user=user,
            tags=tags,
            data=dict(data) if data else None,
            data_ready=SORTED,
        )
    )
    if reference_id:
        event["reference_id"] = reference_id
    return event
