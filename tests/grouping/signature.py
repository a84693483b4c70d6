"""The stack signature the real service computes for an event, from the event as sent.

Exceptionless 8.8: ``03_ManualStackingPlugin`` takes ``data["@stack"]`` when it is an object
whose ``signature_data`` holds only strings, and adds each non-empty value in order;
``AssignToStackAction`` hashes the concatenation of the signature values (SHA1 of the UTF-16LE
text; keys and title are not hashed). Without a usable manual stack, an ``@simple_error`` is
stacked by its type and the SHA1 of its ``stack_trace``; other events by type and source.
"""

from __future__ import annotations

import hashlib
from typing import Any


def _sha1_utf16(text: str) -> str:
    return hashlib.sha1(text.encode("utf-16-le")).hexdigest()


def manual_values(event: dict[str, Any]) -> list[str] | None:
    data = event.get("data") or {}
    stack = data.get("@stack")
    if not isinstance(stack, dict):
        return None
    signature = stack.get("signature_data")
    if not isinstance(signature, dict) or not signature:
        return None
    if not all(isinstance(value, str) for value in signature.values()):
        return None  # the server ignores @stack
    values = [value for value in signature.values() if value]
    return values or None


def server_signature(event: dict[str, Any]) -> str:
    values = manual_values(event)
    if values is not None:
        return _sha1_utf16("".join(values))
    error = event.get("@simple_error") or (event.get("data") or {}).get("@simple_error")
    if event.get("type") == "error" and isinstance(error, dict):
        trace = error.get("stack_trace") or ""
        trace_hash = hashlib.sha1(trace.encode("utf-8")).hexdigest()
        return _sha1_utf16(str(error.get("type") or "") + trace_hash)
    return _sha1_utf16(str(event.get("type") or "log") + str(event.get("source") or ""))
