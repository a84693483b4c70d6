"""Events of the service's other types, as the official clients send them: feature usage
(``type: "usage"``, ``source`` = the feature) and not-found (``type: "404"``, ``source`` = the
path, with the request's ``@request`` inside a web request); and what a user says about an
error (a user description, posted to the error's reference id).

All are queued on the current ``setup()``'s engine like any event (counted, retried, never
blocking); without ``setup()`` they are not sent and ``False`` is returned. A bad argument is
said on stderr (once per cause) and ``False`` is returned; nothing here raises.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from typing import Any

from eventlog_handler.capture._context import (
    get_request,
    get_tags,
    get_user,
    not_found_sent,
    note_not_found_sent,
)
from eventlog_handler.capture._exceptions import current_settings
from eventlog_handler.delivery._engine import get_engine, is_sender_thread
from eventlog_handler.delivery._errands import Errand
from eventlog_handler.delivery._stderr import say_once
from eventlog_handler.wire._dates import is_valid_reference_id
from eventlog_handler.wire._jsonsafe import safe_str, to_jsonable, truncate
from eventlog_handler.wire._logs import log_event

__all__ = ["submit_feature_usage", "submit_not_found", "submit_user_description"]

#: The longest description sent (longer ones are cut, marked with an ellipsis).
MAX_DESCRIPTION = 10_000
#: What the service takes for an email address (one ``@``, a dot in the domain, no blanks).
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")


def _submit(kind: str, source: Any, data: dict[str, Any] | None = None) -> bool:
    try:
        if not safe_str(source).strip():
            what = "feature name" if kind == "usage" else "path"
            function = "submit_feature_usage" if kind == "usage" else "submit_not_found"
            _say_once(f"empty {kind}", f"{function}: the {what} is empty; nothing was sent")
            return False
        settings = current_settings()
        if settings is None or is_sender_thread():
            return False
        engine = get_engine(settings)
        if engine.server.drops_type(kind, safe_str(source)):  # @@usage:*, @@404:* set to off
            engine.count_filtered()
            return False
        event = log_event(
            "",
            date=time.time(),
            user=get_user(),
            source=source if isinstance(source, str) else str(source),
            tags=(*settings.tags, *get_tags()),
            data=data,
            exclusions=settings.data_exclusions,
        )
        event["type"] = kind
        event.pop("message", None)
        return engine.enqueue(event, settings=settings)
    except Exception:  # pragma: no cover - reporting must never raise into the application
        return False


def submit_feature_usage(feature: str) -> bool:
    """Send a feature-usage event (``type: "usage"``, ``source`` = ``feature``); ``True`` when
    queued."""
    return _submit("usage", feature)


def submit_not_found(path: str) -> bool:
    """Send a not-found event (``type: "404"``, ``source`` = ``path``, with ``@request`` inside
    a web request); ``True`` when queued. A request from a crawler (its user agent matches
    the service's ``@@UserAgentBotPatterns``) is not sent: counted as ``filtered``. Inside a
    web request, the middleware's ``report_not_found`` then sends no second one
    (:func:`report_not_found`)."""
    request = get_request()
    if request is not None:
        try:
            settings = current_settings()
            if settings is not None and not is_sender_thread():
                engine = get_engine(settings)
                if engine.server.is_bot(request.get("user_agent")):
                    engine.count_filtered()
                    return False
        except Exception:  # pragma: no cover - reporting must never raise
            return False
    queued = _submit("404", path, {"@request": request} if request is not None else None)
    if queued:
        note_not_found_sent()
    return queued


def report_not_found(path: str) -> bool:
    """The web middleware's 404 (``report_not_found=True``): :func:`submit_not_found`, unless
    the application sent the request's not-found event itself."""
    if get_request() is not None and not_found_sent():
        return False
    return submit_not_found(path)


def submit_user_description(
    reference_id: str,
    email: str | None = None,
    description: str | None = None,
    data: Mapping[str, Any] | None = None,
) -> bool:
    """Send what a user said about the event ``reference_id`` (for instance the id an error
    page showed from :func:`~eventlog_handler.last_reference_id`): ``email`` and
    ``description``, at least one of them, posted as the service's ``email_address`` and
    ``description`` to ``POST /api/v2/events/by-ref/{reference_id}/user-description``.

    The service adds it to that event as ``data["@user_description"]``. Queued and sent by the
    delivery worker after the events queued before it (retried, counted in
    ``stats()["side_requests"]``); ``True`` when queued. ``False``, said on stderr, for a
    reference id that is not one (8 to 100 letters, digits or ``-``), an email address the
    service would refuse, or neither email nor description."""
    try:
        problem = _description_problem(reference_id, email, description)
        if problem is not None:
            kind, why = problem
            _say_once(kind, f"submit_user_description: {why}; nothing was sent")
            return False
        settings = current_settings()
        if settings is None or is_sender_thread():
            return False
        email_text = email.strip() if isinstance(email, str) and email.strip() else None
        text = truncate(description, MAX_DESCRIPTION) if description else None
        extra = to_jsonable(dict(data), settings.data_exclusions) if data else None
        size = len(reference_id) + len(email_text or "") + len(text or "") * 4 + 256
        size += len(safe_str(extra)) if extra else 0
        errand = Errand(
            "user description",
            lambda client: client.post_user_description(reference_id, email_text, text, extra),
            size,
            time.monotonic() + settings.error_delay,
            retry=True,
        )
        return get_engine(settings).errand(errand)
    except Exception:  # pragma: no cover - reporting must never raise into the application
        return False


def _description_problem(reference_id: Any, email: Any, description: Any) -> tuple[str, str] | None:
    """``(kind, why)`` when the arguments can't be sent; ``None`` when they can."""
    if not is_valid_reference_id(reference_id):
        return "reference_id", (
            f"{safe_str(reference_id)[:120]!r} is not a reference id (8 to 100 letters, "
            "digits or '-', as last_reference_id() returns)"
        )
    if email is not None and not isinstance(email, str):
        return "email", f"email must be a string, got {type(email).__name__}"
    if description is not None and not isinstance(description, str):
        return "description", f"description must be a string, got {type(description).__name__}"
    has_email = isinstance(email, str) and bool(email.strip())
    if not has_email and not (isinstance(description, str) and description.strip()):
        return "empty", "give an email address, a description, or both"
    if has_email and not _EMAIL.match(str(email).strip()):
        return "email", "the email address is not valid (the service answers 422 to it)"
    return None


def _say_once(key: str, text: str) -> None:
    say_once(f"typed: {key}", f"eventlog_handler: {text} (said once)")
