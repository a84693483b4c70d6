"""The ``extra=`` fields of a record: which are data, and which say something else.

Three keys are not data: ``tags`` (added to the event's tags), ``@user`` (the event's user) and
``stack`` when it holds what :func:`~eventlog_handler.wire._stacking.stack` makes (a mapping with
``title`` and/or ``signature_data``: a manual stack). Any other value under ``stack`` (a string,
such as the stack that structlog's ``StackInfoRenderer`` renders) is data. A key that is one of the service's own data keys
(:data:`KNOWN_DATA_KEYS`) travels as ``_<key>`` so it can't override the package's value.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from pythonjsonlogger.core import RESERVED_ATTRS as _JSON_LOGGER_RESERVED

from eventlog_handler.wire._events import user_info
from eventlog_handler.wire._stacking import EXTRA_KEY as STACK_KEY
from eventlog_handler.wire._stacking import is_stack, manual_stack

#: Record attributes that are not ``extra=`` fields: python-json-logger's list, every attribute
#: of a fresh ``LogRecord`` of this Python (``taskName`` on 3.12+, and whatever comes later),
#: what formatters add, and what structlog's stdlib bridge adds.
RESERVED_ATTRS: frozenset[str] = frozenset(
    {
        *_JSON_LOGGER_RESERVED,
        *vars(logging.LogRecord("", logging.INFO, "", 0, "", None, None)),
        "message",
        "asctime",
        "taskName",
        "_logger",
        "_name",
        "_record",
        "_from_structlog",
    }
)

#: ``extra=`` keys with a meaning of their own (see the module docstring).
TAGS_KEY = "tags"
USER_KEY = "@user"

#: The service's own data keys (its known data keys) and the package's: a user's
#: ``extra=`` value under one of these names travels as ``_<name>`` instead.
KNOWN_DATA_KEYS = frozenset(
    {
        "@level",
        "@user",
        "@simple_error",
        "@error",
        "@version",
        "@stack",
        "@environment",
        "@request",
        "@trace",
        "@submission_method",
        "@submission_client",
        "@user_description",
        "@location",
        "@stack_info",
        "@message_args",
        "@format_error",
        "@trimmed",
        "@frames",
    }
)


#: ``extra=`` keys that are not plain data (sorted out by :func:`sort_extras`).
SPECIAL_EXTRAS = frozenset({"tags", "@user", STACK_KEY}) | KNOWN_DATA_KEYS


def sort_extras(
    data: dict[str, Any],
) -> tuple[dict[str, Any], dict[str, Any] | None, tuple[Any, ...], dict[str, Any] | None]:
    """Extras copied from a record, sorted out: ``(data, user, tags, stack)``, with the
    attributes formatters add dropped and the special keys taken out. The worker calls it for
    entries :func:`eventlog_handler.capture._records.capture_record` left raw; the caller's
    thread, for the records it builds whole."""
    if not RESERVED_ATTRS.isdisjoint(data):
        data = {key: value for key, value in data.items() if key not in RESERVED_ATTRS}
    if SPECIAL_EXTRAS.isdisjoint(data):
        return data, None, (), None
    return (data, *take_special(data))


def take_special(
    data: dict[str, Any],
) -> tuple[dict[str, Any] | None, tuple[Any, ...], dict[str, Any] | None]:
    """``(user, tags, stack)`` taken out of ``data`` (changed in place), and the service's own
    keys in it renamed (:func:`reserve_known_keys`)."""
    user: dict[str, Any] | None = None
    tags: tuple[Any, ...] = ()
    stack: dict[str, Any] | None = None
    if TAGS_KEY in data:
        tags = tags_from(data.pop(TAGS_KEY))
    if USER_KEY in data:
        user = user_from(data.pop(USER_KEY))
    if STACK_KEY in data and is_stack(data[STACK_KEY]):
        stack = manual_stack(data.pop(STACK_KEY))
    if not KNOWN_DATA_KEYS.isdisjoint(data):
        reserve_known_keys(data)
    return user, tags, stack


def reserve_known_keys(data: dict[str, Any]) -> None:
    """Rename, in place, the keys of user data that are known data keys: ``@level`` →
    ``_@level`` (the service would otherwise let the user's value win)."""
    for key in KNOWN_DATA_KEYS.intersection(data):
        data[set_aside(data, key)] = data.pop(key)


def set_aside(data: dict[str, Any], key: str) -> str:
    """The name ``key`` of ``data`` takes when it is set aside: ``_`` before it, as often as
    it takes to find a name ``data`` does not hold (``_@level`` of the user's own kept)."""
    name = "_" + key
    while name in data:
        name = "_" + name
    return name


def user_from(value: Any) -> dict[str, Any] | None:
    """The ``@user`` object of a per-record override: a mapping or an identity."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        data = value.get("data")
        return user_info(
            value.get("identity"),
            value.get("name"),
            data if isinstance(data, Mapping) else None,
        )
    return user_info(value)


def tags_from(value: Any) -> tuple[Any, ...]:
    """Tags of a per-record ``tags`` field: a string is one tag, an iterable several."""
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, Iterable) and not isinstance(value, Mapping):
        try:
            return tuple(value)
        except Exception:
            return ()
    return (value,)
