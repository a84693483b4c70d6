"""Stacks: which events are "the same problem", decided as the service decides it.

The service computes a *signature* for every event and groups events with the same signature
(per project) into a stack:

- ``data["@stack"]`` (manual stacking, ``{"title": ..., "signature_data": {str: str}}``) with a
  non-empty ``signature_data``: the concatenation of its non-empty values, in order (keys and
  title are not part of it), and the stack is titled ``title``. A value that is not a string
  makes the service ignore ``@stack``.
- an event of type ``error`` with ``@error`` (frames as objects): the exception type and the
  frames' methods; with ``@simple_error``: the exception type and the SHA1 of the
  ``stack_trace`` text, exactly as sent (the text decides what "the same bug" is).
- anything else: the event's ``type`` and ``source`` (so log events group by logger).

Only the outermost error is used, never its ``inner`` errors. :func:`stack_basis` is the cheap,
hashable form of the signature computed for every event; :func:`signature_of` turns it into the
stored signature hash and info once per stack.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

__all__ = ["StackBasis", "signature_of", "stack_basis", "stack_id_for", "stack_title"]

#: ``(kind, *values)``: ``("manual", ((key, value), ...))``, ``("error", type, stack_trace)``,
#: ``("frames", type, method, method, ...)`` or ``("default", type, source)``.
StackBasis = tuple[Any, ...]

_MAX_FRAMES = 50


def _manual(data: Mapping[str, Any]) -> StackBasis | None:
    manual = data.get("@stack")
    if not isinstance(manual, dict):
        return None
    signature = manual.get("signature_data")
    if not isinstance(signature, dict):
        return None
    if any(value is not None and not isinstance(value, str) for value in signature.values()):
        return None  # the service can't read it as its string dictionary: @stack is ignored
    items = tuple((str(key), value) for key, value in signature.items() if value)
    return ("manual", items) if items else None


def _frame_method(frame: Any) -> str:
    if not isinstance(frame, dict):
        return str(frame)
    parts = [
        str(frame[key])
        for key in ("declaring_namespace", "declaring_type", "name")
        if frame.get(key)
    ]
    parameters = frame.get("parameters")
    signature = ""
    if isinstance(parameters, list):
        types = [
            str(parameter.get("type_namespace", "")) + "." + str(parameter.get("type", ""))
            if isinstance(parameter, dict)
            else str(parameter)
            for parameter in parameters
        ]
        signature = "(" + ",".join(types) + ")"
    return ".".join(parts) + signature


def stack_basis(event_type: str, source: str | None, data: Mapping[str, Any]) -> StackBasis:
    """The hashable signature basis of one event (see the module's rules)."""
    manual = _manual(data) if "@stack" in data else None
    if manual is not None:
        return manual
    if event_type == "error":
        error = data.get("@error")
        if isinstance(error, dict):
            frames = error.get("stack_trace")
            error_type = error.get("type")
            if isinstance(frames, list) and frames:
                methods = tuple(_frame_method(frame) for frame in frames[:_MAX_FRAMES])
                return ("frames", str(error_type or ""), *methods)
            if error_type:
                return ("frames", str(error_type))
        simple = data.get("@simple_error")
        if isinstance(simple, dict):
            error_type = simple.get("type")
            trace = simple.get("stack_trace")
            type_text = error_type if isinstance(error_type, str) else ""
            trace_text = trace if isinstance(trace, str) else ""
            if type_text or trace_text:
                return ("error", type_text, trace_text)
    return ("default", event_type, source or "")


def signature_of(basis: StackBasis) -> tuple[str, dict[str, str]]:
    """The signature hash (40 hex digits) and the signature info shown for a stack."""
    kind = basis[0]
    info: dict[str, str] = {}
    if kind == "manual":
        # The service hashes the values alone, concatenated in order (SHA1 of UTF-16LE text):
        # two signatures with the same values under other keys are one stack.
        joined = "".join(value for _, value in basis[1])
        return hashlib.sha1(joined.encode("utf-16-le", "replace")).hexdigest(), dict(basis[1])
    if kind == "error":
        if basis[1]:
            info["ExceptionType"] = basis[1]
        if basis[2]:
            info["StackTrace"] = hashlib.sha1(basis[2].encode("utf-8", "replace")).hexdigest()
    elif kind == "frames":
        if basis[1]:
            info["ExceptionType"] = basis[1]
        if len(basis) > 2:
            info["Method"] = basis[2]
            joined = "\n".join(basis[2:])
            info["Frames"] = hashlib.sha1(joined.encode("utf-8", "replace")).hexdigest()
    else:
        if basis[1]:
            info["Type"] = basis[1]
        if basis[2]:
            info["Source"] = basis[2]
    text = "\x1f".join(f"{key}\x1e{value}" for key, value in info.items())
    return hashlib.sha1(text.encode("utf-8", "replace")).hexdigest(), info


def stack_id_for(project_id: str, signature_hash: str) -> str:
    """The stack's id: 24 hex digits derived from the project and the signature."""
    return hashlib.sha1(f"{project_id}:{signature_hash}".encode()).hexdigest()[:24]


def stack_title(
    event_type: str, source: str | None, message: str | None, data: Mapping[str, Any]
) -> str:
    """A stack's title, from its first event: the manual title, the error's type and message,
    else the source the events are grouped by (the message when there is no source)."""
    manual = data.get("@stack")
    if isinstance(manual, dict) and isinstance(manual.get("title"), str) and manual["title"]:
        return str(manual["title"])[:1000]
    if event_type == "error":
        error = data.get("@error")
        if not isinstance(error, dict):
            error = data.get("@simple_error")
        if isinstance(error, dict):
            kind = str(error.get("type") or "Error").rsplit(".", 1)[-1]
            text = error.get("message") or message or ""
            return f"{kind}: {text}"[:1000] if text else kind[:1000]
    if source:  # grouped by source: the logger names the stack, its events say the rest
        return source[:1000]
    return (message or event_type or "(no message)")[:1000]
