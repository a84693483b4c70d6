"""The wire forms of an event: the message and error forms, the fields every form shares, the
environment, and encoding within the size limits (the log form: :mod:`._logs`; dates and
reference ids: :mod:`._dates`).

The three forms of the service's interface document::

    {"message": "Disk space is low"}
    {"type": "log", "message": "User logged in", "date": "2030-01-01T12:00:00.0000000-05:00",
     "@user": {"identity": "u-42", "name": "Ann"}}
    {"type": "error", "date": "2030-01-01T12:00:00.0000000-05:00",
     "@simple_error": {"message": "division by zero", "type": "ZeroDivisionError",
                       "stack_trace": "Traceback (most recent call last): ..."}}

Every builder adds one field to these: a unique ``reference_id``, which makes a retried batch
safe (the service discards a second event with the same id within 24 hours). Optional fields
(``source``, ``tags``, ``data``, ``@level``, ``@user``) appear only when given.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import platform
import socket
import sys
import threading
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from eventlog_handler._values import fits
from eventlog_handler.settings import DEFAULT_DATA_EXCLUSIONS
from eventlog_handler.wire._dates import format_date, new_reference_id
from eventlog_handler.wire._jsonsafe import (
    exclusion_matcher,
    safe_str,
    to_jsonable,
    truncate,
)
from eventlog_handler.wire._simple_error import main_named, simple_error
from eventlog_handler.wire._spans import mask_arguments

#: ``message`` and ``source`` are cut by the service past this many characters. Every length of
#: the service is counted as C# counts it: in UTF-16 code units, where an emoji is 2
#: (:func:`~eventlog_handler._values.utf16_len`).
MAX_MESSAGE = 2_000
MAX_SOURCE = 2_000
#: Tags the service keeps per event, and the longest tag it keeps.
MAX_TAGS = 50
MAX_TAG_LENGTH = 100
#: Bytes of JSON one event may take. Below the service's 200,000-byte request limit even if
#: it would not compress at all, so any single event can always be sent.
MAX_EVENT_BYTES = 180_000
#: Events older than this are discarded by the service.
MAX_AGE_SECONDS = 3 * 24 * 3600

LEVELS = ("Trace", "Debug", "Info", "Warn", "Error", "Fatal")


# -- builders -------------------------------------------------------------------------------


def user_info(
    identity: Any = None, name: Any = None, data: Mapping[str, Any] | None = None
) -> dict[str, Any] | None:
    """The ``@user`` object, or ``None`` when neither identity nor name is given."""
    if identity is None and name is None:
        return None
    user: dict[str, Any] = {}
    if identity is not None:
        user["identity"] = truncate(safe_str(identity), 1000)
    if name is not None:
        user["name"] = truncate(safe_str(name), 1000)
    if data:
        user["data"] = to_jsonable(dict(data))
    return user


def message_event(message: Any, *, reference_id: str | None = None) -> dict[str, Any]:
    """The message form: ``{"message": ...}`` (plus its ``reference_id``)."""
    return {
        "message": truncate(safe_str(message), MAX_MESSAGE),
        "reference_id": reference_id or new_reference_id(),
    }


def error_event(
    exc: BaseException,
    *,
    message: Any = None,
    date: float | _dt.datetime | None = None,
    user: Mapping[str, Any] | None = None,
    level: str | None = None,
    source: str | None = None,
    tags: Iterable[str] = (),
    data: Mapping[str, Any] | None = None,
    exclusions: Collection[str] = (),
    reference_id: str | None = None,
) -> dict[str, Any]:
    """The error form: ``type`` = ``error``, ``date`` and ``@simple_error`` (with ``inner``).

    ``message`` (for instance the text of ``logger.exception("...")``) is added when given.
    """
    event: dict[str, Any] = {"type": "error", "date": format_date(date)}
    if message is not None:
        event["message"] = truncate(safe_str(message), MAX_MESSAGE)
    event["@simple_error"] = simple_error(exc, exclusions)
    return with_common(
        event,
        *_safe_common(user, source, tags, data, exclusions),
        level,
        reference_id or new_reference_id(),
    )


def _safe_common(
    user: Mapping[str, Any] | None,
    source: str | None,
    tags: Iterable[str],
    data: Mapping[str, Any] | None,
    exclusions: Collection[str],
) -> tuple[Any, str | None, list[str] | None, dict[str, Any] | None]:
    """``@user``, ``source``, ``tags`` and ``data`` made safe (``None`` where absent)."""
    converted = to_jsonable(dict(data), exclusions) if data else None
    return (
        user_with_exclusions(user, exclusions) if user else None,
        truncate(safe_str(source), MAX_SOURCE) if source else None,
        normalize_tags(tags) or None,
        converted if converted else None,
    )


def with_common(
    event: dict[str, Any],
    user: Any,
    source: str | None,
    tags: list[str] | None,
    data: dict[str, Any] | None,
    level: str | None,
    reference_id: str,
) -> dict[str, Any]:
    """``event`` with the fields every form shares, made safe already, in their wire order:
    the one place they are put in, for :func:`error_event` and the builder of log events
    (:func:`eventlog_handler.wire._logs.log_builder`)."""
    if user:
        event["@user"] = user
    if level is not None:
        event["@level"] = level
    if source:
        event["source"] = main_named(source)
    if tags:
        event["tags"] = tags
    if data:
        event["data"] = data
    event["reference_id"] = reference_id
    return event


def user_with_exclusions(user: Mapping[str, Any], exclusions: Collection[str]) -> Any:
    """``@user`` as JSON: identity and name as given, its ``data`` under the exclusions."""
    result = to_jsonable({key: value for key, value in user.items() if key != "data"}, ())
    if isinstance(result, dict) and user.get("data") is not None:
        result["data"] = to_jsonable(user["data"], exclusions)
    return result


def normalize_tags(tags: Iterable[Any]) -> list[str]:
    """Distinct non-empty tags of at most 100 characters (UTF-16 code units, as the service
    counts them: a tag of 60 emoji is 120, and the service would drop it), 50 at most, in
    order."""
    result: list[str] = []
    for tag in tags:
        text = safe_str(tag).strip()
        if text and fits(text, MAX_TAG_LENGTH) and text not in result:
            result.append(text)
            if len(result) == MAX_TAGS:
                break
    return result


# -- environment ----------------------------------------------------------------------------

_ENVIRONMENT: dict[str, Any] | None = None
#: The command line is masked by the default exclusions here; the scrubber applies the
#: engine's own (and the service's) when the event is sent.
_DEFAULT_EXCLUDED = exclusion_matcher(DEFAULT_DATA_EXCLUSIONS)


def environment_info() -> dict[str, Any]:
    """``@environment`` of this process (computed once per process), without thread fields."""
    global _ENVIRONMENT
    pid = os.getpid()
    if _ENVIRONMENT is None or _ENVIRONMENT.get("process_id") != str(pid):
        uname = platform.uname()
        # A list of text, but at the interpreter's end (None: an error in a __del__ then).
        argv = [safe_str(arg) for arg in sys.argv] if isinstance(sys.argv, list) else []
        _ENVIRONMENT = {
            "machine_name": socket.gethostname(),
            "process_id": str(pid),
            "process_name": os.path.basename(argv[0]) if argv and argv[0] else "python",
            "command_line": truncate(" ".join(mask_arguments(argv, _DEFAULT_EXCLUDED)), 1000),
            "o_s_name": uname.system,
            "o_s_version": uname.release,
            "architecture": uname.machine,
            "runtime_version": f"{platform.python_implementation()} {platform.python_version()}",
            "processor_count": os.cpu_count() or 1,
        }
    return _ENVIRONMENT


def thread_info() -> dict[str, Any]:
    """The calling thread's name and id, for ``@environment``."""
    thread = threading.current_thread()
    return {"thread_name": thread.name, "thread_id": str(threading.get_ident())}


# -- encoding and limits --------------------------------------------------------------------


_orjson: Any = None
with contextlib.suppress(ImportError):  # the optional fast encoder (the ``fast`` extra)
    import orjson as _orjson


def _stdlib_encode(value: Any) -> bytes:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.encode("utf-8", "replace")


def exact(body: bytes) -> bytes:
    """``body`` in an allocation of its own length. ``orjson.dumps`` (3.12 and later) returns
    bytes whose buffer keeps the encoder's whole capacity, which it does not shrink: 128 KiB
    behind an 8 KB event (a string of 8,192 characters reserves 16 bytes each), 1 MiB behind a
    100 KB one, 4 KiB behind a short log. ``sys.getsizeof`` and the memory budget see only the
    length, so the bodies a part holds took 10 to 15 times what was counted. ``bytes(body)``
    is ``body`` itself (no copy); a memoryview's bytes are a copy of the length only."""
    return bytes(memoryview(body))


def encode(event: Mapping[str, Any]) -> bytes:
    """Compact UTF-8 JSON of a JSON-ready event (lone surrogates become ``?``)."""
    if _orjson is not None:
        try:
            return exact(_orjson.dumps(event))
        except (TypeError, ValueError):  # lone surrogates, huge ints: the standard library's way
            pass
    return _stdlib_encode(event)


def encode_batch(events: list[dict[str, Any]]) -> bytes:
    """Compact UTF-8 JSON array of JSON-ready events, in one pass.

    With ``orjson`` installed (the ``fast`` extra) about 8 times faster than :mod:`json`, with
    the same JSON values; :mod:`json` whenever ``orjson`` refuses a value.
    """
    if _orjson is not None:
        try:
            return exact(_orjson.dumps(events))
        except (TypeError, ValueError):
            pass
    return _stdlib_encode(events)


def fit(event: dict[str, Any], max_bytes: int = MAX_EVENT_BYTES) -> tuple[dict[str, Any], bytes]:
    """``event`` and its JSON, shrunk until the JSON is at most ``max_bytes``.

    An event that fits is returned as it is. Otherwise cuts, in order, until it fits: long
    strings in ``data``, the inner errors, a stack trace longer than the package itself writes
    (:data:`~eventlog_handler.wire._simple_error.MAX_STACK_TRACE`), ``data`` itself (keeping the small
    keys the service reads: ``@stack``, ``@version``, ``@level``, ``@submission_method``), the
    message and the user, then the stack trace, then the rest of ``data`` and the tags. What
    was cut is listed in ``data["@trimmed"]``; the caller's event is not modified.

    The stack trace, whose hash decides the error's stack, is cut only when all else was not
    enough, and then by :func:`~eventlog_handler.wire._simple_error.trim_stack_trace`, which keeps
    whole frames by a fixed ladder: the same input always gives the same output.
    """
    body = encode(event)
    if len(body) <= max_bytes:
        return event, body
    trimmed: list[str] = []
    event = dict(event)
    for step in (
        _trim_data_strings,
        _trim_inner,
        _trim_long_stack,
        _trim_data,
        _trim_message,
        _trim_stack,
        _trim_all_data,
    ):
        name = step(event, max_bytes)
        if name:
            if name not in trimmed:
                trimmed.append(name)
            data = dict(event.get("data") or {})
            data["@trimmed"] = trimmed
            event["data"] = data
            body = encode(event)
            if len(body) <= max_bytes:
                return event, body
    return event, body


#: ``data`` keys the service reads that :func:`fit` keeps (when small) after dropping the rest
#: of ``data``: manual stacking, the version, the level and how the event was captured.
_KEPT_DATA_KEYS = ("@stack", "@version", "@level", "@submission_method")
_KEPT_VALUE_BYTES = 4_096


def _kept_data(data: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        return {}
    return {
        key: data[key]
        for key in _KEPT_DATA_KEYS
        if key in data and len(encode({key: data[key]})) <= _KEPT_VALUE_BYTES
    }


def _trim_data_strings(event: dict[str, Any], max_bytes: int) -> str | None:
    data = event.get("data")
    if not data or not isinstance(data, dict):
        return None
    kept = _kept_data(data)
    rest = {key: value for key, value in data.items() if key not in kept}
    shortened = to_jsonable(rest, max_string=max(64, max_bytes // 200), max_items=50)
    event["data"] = {**(shortened if isinstance(shortened, dict) else {}), **kept}
    return "data values"


def _trim_inner(event: dict[str, Any], max_bytes: int) -> str | None:
    error = event.get("@simple_error")
    if not isinstance(error, dict) or "inner" not in error:
        return None
    event["@simple_error"] = {key: value for key, value in error.items() if key != "inner"}
    return "inner errors"


def _trim_data(event: dict[str, Any], max_bytes: int) -> str | None:
    data = _without_marker(event.get("data"))
    kept = _kept_data(data)
    error = event.get("@simple_error")
    error_data = isinstance(error, dict) and "data" in error
    if data == kept and not error_data:
        return None
    event["data"] = kept
    if isinstance(error, dict) and error_data:
        event["@simple_error"] = {key: value for key, value in error.items() if key != "data"}
    return "data"


def _without_marker(data: Any) -> dict[str, Any]:
    """``data`` without the ``@trimmed`` list that :func:`fit` keeps in it."""
    if not isinstance(data, dict):
        return {}
    return {key: value for key, value in data.items() if key != "@trimmed"}


def _trim_message(event: dict[str, Any], max_bytes: int) -> str | None:
    changed = event.pop("@user", None) is not None
    for key in ("message", "source"):
        value = event.get(key)
        if isinstance(value, str) and len(value) > 200:
            event[key] = truncate(value, 200)
            changed = True
    error = event.get("@simple_error")
    message = error.get("message") if isinstance(error, dict) else None
    if isinstance(error, dict) and isinstance(message, str) and len(message) > 200:
        event["@simple_error"] = {**error, "message": truncate(message, 200)}
        changed = True
    return "message" if changed else None


def _trim_long_stack(event: dict[str, Any], max_bytes: int) -> str | None:
    from eventlog_handler.wire._simple_error import MAX_STACK_TRACE, trim_stack_trace

    error = event.get("@simple_error")
    if not isinstance(error, dict) or not isinstance(error.get("stack_trace"), str):
        return None
    text = error["stack_trace"]
    trimmed = trim_stack_trace(text, MAX_STACK_TRACE)
    if trimmed == text:
        return None
    event["@simple_error"] = {**error, "stack_trace": trimmed}
    return "stack trace"


def _trim_stack(event: dict[str, Any], max_bytes: int) -> str | None:
    from eventlog_handler.wire._simple_error import trim_stack_trace

    error = event.get("@simple_error")
    if not isinstance(error, dict) or not isinstance(error.get("stack_trace"), str):
        return None
    text = error["stack_trace"]
    data = dict(event.get("data") or {})
    data["@trimmed"] = [*data.get("@trimmed", ()), "stack trace"]
    without = {**event, "data": data, "@simple_error": {**error, "stack_trace": ""}}
    trimmed = trim_stack_trace(text, max(0, max_bytes - len(encode(without))), _json_size)
    if trimmed == text:
        return None
    event["@simple_error"] = {**error, "stack_trace": trimmed}
    return "stack trace"


def _json_size(text: str) -> int:
    """Bytes that ``text`` adds to an event's JSON (its encoding, without the quotes)."""
    return len(json.dumps(text, ensure_ascii=False).encode("utf-8", "replace")) - 2


def _trim_all_data(event: dict[str, Any], max_bytes: int) -> str | None:
    if not _without_marker(event.get("data")) and not event.get("tags"):
        return None
    event["data"] = {}
    event.pop("tags", None)
    return "all data"
