"""On the worker: an :class:`~eventlog_handler.delivery._buffer.Entry` becomes the wire form of its event.

What the caller's thread left for later happens here: the date, the reference id, the level
name, normalized tags, the user with its data exclusions, and ``data`` made JSON-safe with the
exclusions applied. The result is the same dict :func:`eventlog_handler.wire._events.log_event`
builds, its fields put in by the same :func:`~eventlog_handler.wire._events.with_common`;
:func:`built` is the one builder of a log entry's event. How ``data`` is made safe is chosen per
entry (:func:`flat_data` for the common case, a flat dict of plain values; :func:`general_data`
for anything else), and what a batch shares is worked out once.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from eventlog_handler._values import fits
from eventlog_handler.delivery._buffer import JSON_READY, RAW, Entry
from eventlog_handler.settings import MASK, Settings
from eventlog_handler.wire import _appversion  # noqa: F401 - notes __main__ at import
from eventlog_handler.wire._events import (
    _FRACTION,
    MAX_MESSAGE,
    MAX_SOURCE,
    MAX_TAGS,
    format_date,
    new_reference_id,
    normalize_tags,
    user_with_exclusions,
    with_common,
)
from eventlog_handler.wire._extras import RESERVED_ATTRS, SPECIAL_EXTRAS, sort_extras
from eventlog_handler.wire._frames import FRAMES_KEY, CallSite, is_ref, resolve
from eventlog_handler.wire._grouping import error_stack, log_stack
from eventlog_handler.wire._jsonsafe import (
    MAX_ITEMS,
    MAX_STRING,
    is_excluded,
    safe_str,
    to_jsonable,
    truncate,
)
from eventlog_handler.wire._levels import level_name
from eventlog_handler.wire._simple_error import error_levels
from eventlog_handler.wire._stacking import STACK_KEY

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


def finish(entry: Entry) -> dict[str, Any]:
    """The wire event of ``entry``: :func:`built` of one."""
    return next(built((entry,)))[1]


def complete(event: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """A ready event with what the caller's thread left for the worker: frame references
    resolved (:func:`eventlog_handler.wire._frames.resolve`: paths, ``in_app``, source
    context, locals masked by value), the error's stack
    (:func:`eventlog_handler.wire._grouping.error_stack`) unless it has one, and the
    environment. Events that have nothing pending (from the spool) are left as they are."""
    try:
        include, exclude = settings.in_app_include, settings.in_app_exclude
        data = event.get("data")
        error = event.get("@simple_error")
        resolved = False
        program: str | None = None
        for node in error_levels(error):
            node_data = node.get("data")
            if type(node_data) is dict and is_ref(node_data.get(FRAMES_KEY)):
                refs = node_data[FRAMES_KEY]
                program = program or refs.program
                node_data[FRAMES_KEY] = resolve(refs, include, exclude, settings.secrets)
                resolved = True
        if resolved and (type(data) is not dict or STACK_KEY not in data):
            stack = error_stack(error, program, include, exclude)
            if stack is not None:
                if type(data) is not dict:
                    data = event["data"] = {}
                data[STACK_KEY] = stack
        site = data.get(FRAMES_KEY) if type(data) is dict else None
        if type(site) is CallSite:
            assert type(data) is dict
            if STACK_KEY not in data:
                # An error without frames (never raised): its type and call site, and its
                # type as the title where no message was logged with it.
                kind = error.get("type") if type(error) is dict else None
                kind = kind if isinstance(kind, str) else None
                template = kind if site.template is None else site.template
                stack = log_stack(site.source, template, site, site.innermost, site.program)
                if stack is not None:
                    if kind is not None:
                        stack["signature_data"] = {"type": kind, **stack["signature_data"]}
                    data[STACK_KEY] = stack
            if site:
                data[FRAMES_KEY] = resolve(site, include, exclude, settings.secrets)
            else:
                del data[FRAMES_KEY]
    except Exception:  # pragma: no cover - a bug here must not lose the event
        pass
    if settings.environment is not None:
        return with_environment(event, settings.environment)
    return event


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


def general_data(data: dict[str, Any], exclusions: tuple[str, ...]) -> dict[str, Any] | None:
    """``data`` made JSON-safe with the exclusions applied, whatever it holds (what
    :func:`flat_data` leaves): nested values, long strings and lists cut to their limits."""
    converted = to_jsonable(dict(data), exclusions)
    return converted if type(converted) is dict and converted else None


def _user(user: Mapping[str, Any], exclusions: tuple[str, ...]) -> Any:
    last = _LAST_USER.get(exclusions)
    if last is not None and last[0] is user:
        return last[1]
    converted = user_with_exclusions(user, exclusions)
    _LAST_USER[exclusions] = (user, converted)
    return converted


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


def built(entries: Iterable[Entry]) -> Iterator[tuple[Entry, dict[str, Any]]]:
    """Each of ``entries`` with its wire event: the one builder of log events on the worker.

    A ready event (an error, a structlog event, one from the spool) is completed
    (:func:`complete`). A log entry is built here: extras sorted out if they hold special keys
    (``tags``, ``@user``, ``stack``, known keys), data made safe
    (:func:`flat_data`, else :func:`general_data`), with what a batch shares worked out once:
    the formatted second of the date, the reference id's prefix and the level names.

    A generator, so that an entry taken off its list as it is built
    (:meth:`~eventlog_handler.delivery._pipeline.Pipeline.run`) is freed once its event is
    done, not with the whole batch: the garbage collector counts what stays alive.
    """
    id_head, counter = new_reference_id.head, new_reference_id.counter
    second, date_head, date_tail = -1, "", ""
    special = _SPECIAL
    levels: dict[int, str] = {}
    # What an entry's settings give, looked up once per settings object (one, in practice).
    settings: Any = None
    own_tags: tuple[str, ...] = ()
    exclusions: tuple[str, ...] = ()
    environment: str | None = None
    for entry in entries:
        if entry.settings is not settings:
            settings = entry.settings
            own_tags, exclusions = settings.tags, settings.data_exclusions
            environment = settings.environment
        if entry.event is not None:
            yield entry, complete(entry.event, settings)
            continue
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
        whole = int(created // 1)
        fraction = int((created - whole) * 10_000_000 + 0.5)
        if whole != second or fraction >= 10_000_000:
            date = format_date(created)
            second, date_head, date_tail = whole, date[:20], date[27:]
        else:
            date = date_head + _FRACTION % fraction + date_tail
        levelno = entry.levelno
        level = levels.get(levelno)
        if level is None:
            level = levels[levelno] = level_name(levelno)
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
            _user(user, exclusions) if user else None,
            source,
            normalize_tags(tags) if tags else None,
            clean,
            level,
            id_head + hex(next(counter))[2:],
        )
        if environment is not None:
            event = with_environment(event, environment)
        yield entry, event


#: Extras that make the builder sort a raw entry's extras out first.
_SPECIAL = SPECIAL_EXTRAS | RESERVED_ATTRS
