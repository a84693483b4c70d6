"""Manual stacking: put events in a stack of your choosing instead of the service's own.

The service groups an error by its type and stack trace, and a log by its source. An event
that carries ``@stack`` (``{"title": str, "signature_data": {str: str}}``) is grouped by its
``signature_data`` instead, under ``title``, whatever its type, message or stack trace::

    from eventlog_handler.wire._stacking import stack

    log.error("payment failed", extra=stack("Payment gateway timeout", gateway="adyen"))
    log.exception("sync failed", extra=stack("Inventory sync"))   # one stack for every cause

:func:`stack` builds the ``extra`` fragment; :func:`manual_stack` turns what a user gave under
``extra={"stack": ...}`` into the ``@stack`` value (or ``None``). Only a mapping with ``title``
and/or ``signature_data`` under ``stack`` is a manual stack (:func:`is_stack`): another value
there, such as a stack trace string, is the user's data and never regroups the event. Neither ever raises: input
that can't name a stack leaves the event in its default stack, and says so once on the
``eventlog_handler`` logger.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from eventlog_handler.wire._jsonsafe import safe_str, truncate

#: The ``data`` key of manual stacking on the wire.
STACK_KEY = "@stack"
#: The ``extra=`` key that carries it on a log call.
EXTRA_KEY = "stack"
#: The signature key the official clients use for a stacking key given as one string.
DEFAULT_SIGNATURE_KEY = "ManualStackingKey"
#: Characters kept of a title, of a signature key, of a signature value.
MAX_TITLE = 1_000
MAX_KEY = 100
MAX_VALUE = 1_000
#: Signature entries kept (the first ones in key order).
MAX_ENTRIES = 20

_log = logging.getLogger("eventlog_handler")
_warned = False


def stack(
    title: Any = None,
    signature_data: Any = None,
    /,
    **fields: Any,
) -> dict[str, Any]:
    """The ``extra`` fragment that puts an event in the stack ``title``.

    The stack is told apart by ``signature_data`` and the keyword ``fields`` (values are made
    strings); without any, by the title itself (as the official clients' manual stacking key
    does). Two events with the same signature land in the same stack, whatever else differs::

        stack("Payment gateway timeout", gateway="adyen")
        # {"stack": {"title": "Payment gateway timeout",
        #            "signature_data": {"gateway": "adyen"}}}

    Returns ``{}`` (the default stack) when neither a title nor a signature is usable.
    """
    signature: dict[Any, Any] = {}
    if isinstance(signature_data, Mapping):
        signature.update(signature_data)
    elif signature_data is not None:
        _warn_once(f"stack() got signature_data of type {type(signature_data).__name__}")
    signature.update(fields)
    value = manual_stack({"title": title, "signature_data": signature})
    return {EXTRA_KEY: value} if value is not None else {}


def is_stack(value: Any) -> bool:
    """Whether ``value``, found under ``extra={"stack": ...}``, is meant as a manual stack (a
    mapping with ``title`` and/or ``signature_data``, as :func:`stack` makes it)."""
    try:
        return isinstance(value, Mapping) and ("title" in value or "signature_data" in value)
    except Exception:  # a hostile mapping: the event keeps it as data
        return False


def manual_stack(value: Any) -> dict[str, Any] | None:
    """The ``@stack`` value of a manual stack, or ``None``.

    Accepts a mapping with ``title`` and/or ``signature_data`` (a mapping of names to values),
    what :func:`stack` makes and what is taken under ``extra={"stack": ...}`` (:func:`is_stack`),
    or a string (the title, also used as the stacking key) given here directly. Titles and values become
    strings, blank ones are left out, sizes are bounded (:data:`MAX_TITLE`, :data:`MAX_KEY`,
    :data:`MAX_VALUE`, :data:`MAX_ENTRIES`) and keys are sorted, so the same input always
    gives the same signature. ``None`` when no stack can be named: the event keeps the
    service's default stacking. Never raises; cheap enough for the caller's thread.
    """
    try:
        return _normalize(value)
    except Exception:  # a hostile __str__ or mapping
        _warn_once("the stack value could not be read")
        return None


def _normalize(value: Any) -> dict[str, Any] | None:
    title: Any = None
    raw_signature: Any = None
    if value is None:
        return None
    if isinstance(value, str):
        title = value
    elif isinstance(value, Mapping):
        unknown = [key for key in value if key not in ("title", "signature_data")]
        if unknown:
            _warn_once(f"a stack mapping has unknown keys {sorted(map(safe_str, unknown))}")
            return None
        title, raw_signature = value.get("title"), value.get("signature_data")
    else:
        _warn_once(f"a stack must be a string or a mapping, not {type(value).__name__}")
        return None
    clean_title = _text(title, MAX_TITLE)
    signature = _signature(raw_signature)
    if not signature:
        if not clean_title:
            _warn_once("a stack needs a title or signature data")
            return None
        signature = {DEFAULT_SIGNATURE_KEY: clean_title}
    result: dict[str, Any] = {"signature_data": signature}
    if clean_title:
        result = {"title": clean_title, **result}
    return result


def _text(value: Any, limit: int) -> str:
    if value is None:
        return ""
    text = value if isinstance(value, str) else safe_str(value)
    return truncate(text.strip(), limit)


def _signature(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        _warn_once(f"signature_data must be a mapping, not {type(value).__name__}")
        return {}
    entries: dict[str, str] = {}
    for key, item in value.items():
        name = _text(key, MAX_KEY)
        text = _text(item, MAX_VALUE)
        if name and text:
            entries[name] = text
    return {key: entries[key] for key in sorted(entries)[:MAX_ENTRIES]}


def _warn_once(problem: str) -> None:
    global _warned
    if not _warned:
        _warned = True
        _log.warning("eventlog_handler: %s; the event keeps its default stack", problem)
