"""On the worker: an :class:`~eventlog_handler.buffer.Entry` becomes the wire form of its event.

What the caller's thread left for later happens here: formatting a message whose arguments are
immutable scalars, the date, the reference id, the level name, normalized tags, the user with
its data exclusions, and ``data`` made JSON-safe with the exclusions applied. The result is the
same dict :func:`eventlog_handler.events.log_event` builds, made faster for the common case (a
flat ``data`` of plain values).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from eventlog_handler.buffer import Entry
from eventlog_handler.events import (
    MAX_MESSAGE,
    MAX_SOURCE,
    format_date,
    log_event,
    new_reference_id,
    normalize_tags,
    user_with_exclusions,
)
from eventlog_handler.jsonsafe import MAX_ITEMS, MAX_STRING, is_excluded, safe_str, truncate
from eventlog_handler.levels import level_name
from eventlog_handler.settings import MASK

_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1
#: Whether a data key is excluded, per exclusion list (keys of a program repeat endlessly).
_EXCLUDED: dict[tuple[str, ...], dict[str, bool]] = {}
#: The last user object and its JSON form, per exclusion list (a context's user repeats).
_LAST_USER: dict[tuple[str, ...], tuple[Any, Any]] = {}


def finish(entry: Entry) -> dict[str, Any]:
    """The wire event of ``entry`` (a ready event is returned as it is)."""
    event = entry.event
    if event is not None:
        return event
    settings = entry.settings
    exclusions = settings.data_exclusions
    message = entry.message
    data = entry.data
    if entry.args is not None:
        try:
            message = message % entry.args
        except Exception as exc:
            data = dict(data) if data else {}
            data["@message_args"] = list(entry.args)
            data["@format_error"] = f"{type(exc).__name__}: {safe_str(exc)}"
            message = safe_str(message)
    tags: Iterable[Any] = settings.tags
    if entry.tags:
        tags = (*settings.tags, *entry.tags)
    if type(message) is str and (entry.data_ready or not data):
        clean: dict[str, Any] | None = data
    elif type(message) is str:
        clean = flat_data(data, exclusions) if data else None
    else:
        clean = None
    if clean is None and data:
        return log_event(
            message,
            date=entry.created,
            user=entry.user,
            level=level_name(entry.levelno),
            source=entry.source,
            tags=tags,
            data=data,
            exclusions=exclusions,
        )
    event = {
        "type": "log",
        "message": message if len(message) <= MAX_MESSAGE else truncate(message, MAX_MESSAGE),
        "date": format_date(entry.created),
    }
    user = entry.user
    if user:
        event["@user"] = _user(user, exclusions)
    event["@level"] = level_name(entry.levelno)
    source = entry.source
    if source:
        if type(source) is not str:
            source = safe_str(source)
        event["source"] = source if len(source) <= MAX_SOURCE else truncate(source, MAX_SOURCE)
    if tags:
        clean_tags = normalize_tags(tags)
        if clean_tags:
            event["tags"] = clean_tags
    if clean:
        event["data"] = clean
    event["reference_id"] = new_reference_id()
    return event


def _user(user: Mapping[str, Any], exclusions: tuple[str, ...]) -> Any:
    last = _LAST_USER.get(exclusions)
    if last is not None and last[0] is user:
        return last[1]
    converted = user_with_exclusions(user, exclusions)
    _LAST_USER[exclusions] = (user, converted)
    return converted


def flat_data(data: Mapping[str, Any], exclusions: tuple[str, ...]) -> dict[str, Any] | None:
    """A copy of ``data`` with excluded values masked, if every key is a short string and every
    value a short string, a 64-bit int, a finite float, a bool or ``None``; else ``None``."""
    if len(data) > MAX_ITEMS:
        return None  # the general builder keeps MAX_ITEMS and marks the rest
    cache = _EXCLUDED.get(exclusions)
    if cache is None:
        cache = _EXCLUDED.setdefault(exclusions, {})
    result: dict[str, Any] = {}
    for key, value in data.items():
        kind = type(value)
        if kind is str:
            if len(value) > MAX_STRING:
                return None
        elif kind is int:
            if not _INT_MIN <= value <= _INT_MAX:
                return None
        elif kind is float:
            if not math.isfinite(value):
                return None
        elif value is not None and kind is not bool:
            return None
        excluded = cache.get(key)
        if excluded is None:
            if type(key) is not str or len(key) > 200:
                return None
            excluded = is_excluded(key, exclusions)
            if len(cache) < 10_000:
                cache[key] = excluded
        result[key] = MASK if excluded else value
    return result
