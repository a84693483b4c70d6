"""Events of the service's other types, as the official clients send them: feature usage
(``type: "usage"``, ``source`` = the feature) and not-found (``type: "404"``, ``source`` = the
path, with the request's ``@request`` inside a web request).

Both are queued on the current ``setup()``'s engine with the context's user and tags, like any
event (counted, retried, never blocking); without ``setup()`` they are not sent and ``False``
is returned.
"""

from __future__ import annotations

import time
from typing import Any

from eventlog_handler.capture._context import get_request, get_tags, get_user
from eventlog_handler.capture._exceptions import current_settings
from eventlog_handler.delivery._engine import get_engine, is_sender_thread
from eventlog_handler.wire._events import log_event

__all__ = ["submit_feature_usage", "submit_not_found"]


def _submit(kind: str, source: Any, data: dict[str, Any] | None = None) -> bool:
    try:
        settings = current_settings()
        if settings is None or is_sender_thread():
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
        return get_engine(settings).enqueue(event)
    except Exception:  # pragma: no cover - reporting must never raise into the application
        return False


def submit_feature_usage(feature: str) -> bool:
    """Send a feature-usage event (``type: "usage"``, ``source`` = ``feature``); ``True`` when
    queued."""
    return _submit("usage", feature)


def submit_not_found(path: str) -> bool:
    """Send a not-found event (``type: "404"``, ``source`` = ``path``, with ``@request`` inside
    a web request); ``True`` when queued."""
    request = get_request()
    return _submit("404", path, {"@request": request} if request is not None else None)
