"""``@simple_error`` from an exception: type, message, stack trace, inner chain, extras.

The service groups errors by ``type`` plus a hash of ``stack_trace``, so the stack trace is the
part of Python's printed traceback that is the same every time the same bug happens: the
``Traceback (most recent call last):`` header, the frames (file, line, function, source line)
and a last line naming the type. The exception's message, which often carries ids and values,
travels in ``message`` instead. Chained exceptions (``raise B from A``, or an exception raised
while handling another) become ``inner``; exception groups list their members under
``data["@ext"]["exceptions"]``.
"""

from __future__ import annotations

import builtins
import sys
import traceback
from collections.abc import Collection
from typing import Any

from eventlog_handler.jsonsafe import safe_repr, to_jsonable, truncate

#: Chained exceptions followed at most (``inner`` depth).
MAX_INNER = 5
#: Frames kept per traceback; the middle of a longer one is elided.
MAX_FRAMES = 100
#: Characters kept per stack trace.
MAX_STACK_TRACE = 64_000
#: Characters kept per error message.
MAX_MESSAGE = 2_000
#: Members of an exception group listed.
MAX_GROUP_MEMBERS = 10

_GROUP_TYPES: tuple[type[BaseException], ...] = (
    (builtins.BaseExceptionGroup,) if sys.version_info >= (3, 11) else ()  # type: ignore[attr-defined,unused-ignore]
)


def type_name(exc_type: type[BaseException]) -> str:
    """The type's qualified name, prefixed by its module unless it is a builtin."""
    try:
        module = getattr(exc_type, "__module__", None)
        qualname = getattr(exc_type, "__qualname__", None) or exc_type.__name__
    except Exception:  # pragma: no cover - a type without names
        return "Exception"
    if not module or module == "builtins":
        return str(qualname)
    return f"{module}.{qualname}"


def exception_message(exc: BaseException) -> str:
    """``str(exc)``; when that raises, a marker like the one ``traceback`` prints."""
    try:
        return str(exc)
    except Exception:
        return f"<exception str() failed: {safe_repr(exc)}>"


def stack_trace(exc: BaseException) -> str:
    """The stable traceback text of ``exc`` alone (its chain is reported as ``inner``)."""
    name = type_name(type(exc))
    tb = exc.__traceback__
    if tb is None:
        return name
    try:
        frames = traceback.extract_tb(tb)
    except Exception:  # pragma: no cover - a broken traceback object
        return name
    lines = ["Traceback (most recent call last):\n"]
    if len(frames) > MAX_FRAMES:
        head, tail = MAX_FRAMES // 5, MAX_FRAMES - MAX_FRAMES // 5
        omitted = len(frames) - head - tail
        lines.extend(traceback.StackSummary.from_list(frames[:head]).format())
        lines.append(f"  ... {omitted} frames omitted ...\n")
        lines.extend(traceback.StackSummary.from_list(frames[-tail:]).format())
    else:
        lines.extend(frames.format())
    lines.append(name)
    return truncate("".join(lines), MAX_STACK_TRACE)


def extra_attributes(exc: BaseException, exclusions: Collection[str]) -> dict[str, Any]:
    """Public attributes of ``exc`` and its ``__notes__``, JSON-safe."""
    extras: dict[str, Any] = {}
    try:
        attributes = dict(vars(exc))
    except TypeError:
        attributes = {}
    for key, value in attributes.items():
        if isinstance(key, str) and not key.startswith("_"):
            extras[key] = value
    if isinstance(exc, OSError):
        for key in ("errno", "strerror", "filename", "filename2"):
            value = getattr(exc, key, None)
            if value is not None:
                extras.setdefault(key, value)
    notes = getattr(exc, "__notes__", None)
    if isinstance(notes, list) and notes:
        extras["__notes__"] = notes
    converted = to_jsonable(extras, exclusions)
    return converted if isinstance(converted, dict) else {}


def simple_error(
    exc: BaseException,
    exclusions: Collection[str] = (),
    *,
    max_inner: int = MAX_INNER,
) -> dict[str, Any]:
    """The ``@simple_error`` object of ``exc``; never raises."""
    return _build(exc, exclusions, max_inner, set())


def _build(
    exc: BaseException, exclusions: Collection[str], depth_left: int, seen: set[int]
) -> dict[str, Any]:
    seen.add(id(exc))
    error: dict[str, Any] = {
        "message": truncate(exception_message(exc), MAX_MESSAGE),
        "type": type_name(type(exc)),
        "stack_trace": stack_trace(exc),
    }
    ext = extra_attributes(exc, exclusions)
    if _GROUP_TYPES and isinstance(exc, _GROUP_TYPES):
        members = list(getattr(exc, "exceptions", ()))
        ext["exceptions"] = [
            _build(member, exclusions, min(depth_left, 1), seen)
            for member in members[:MAX_GROUP_MEMBERS]
            if id(member) not in seen
        ]
        if len(members) > MAX_GROUP_MEMBERS:
            ext["exceptions_omitted"] = len(members) - MAX_GROUP_MEMBERS
    if ext:
        error["data"] = {"@ext": ext}
    cause = chained(exc)
    if cause is not None and id(cause) not in seen:
        if depth_left > 0:
            error["inner"] = _build(cause, exclusions, depth_left - 1, seen)
        else:
            error.setdefault("data", {})["@inner_omitted"] = True
    return error


def chained(exc: BaseException) -> BaseException | None:
    """The exception ``exc`` was chained to: ``__cause__``, else an unsuppressed ``__context__``."""
    if exc.__cause__ is not None:
        return exc.__cause__
    if exc.__context__ is not None and not exc.__suppress_context__:
        return exc.__context__
    return None
