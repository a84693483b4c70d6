"""Ship Python logs, structlog events and uncaught exceptions to an event collection service.

One call sets everything up::

    import eventlog_handler
    eventlog_handler.setup(api_key="...", server_url="https://...")

See the README for ``dictConfig``, structlog and the ``eventlog`` command. The package's layers,
top down: :mod:`.handler` and the integrations (``structlog``, ``wsgi``, ``asgi``, ``django``)
capture on the caller's thread (:mod:`.capture`), the delivery engine (:mod:`.delivery`) turns
entries into the service's events (:mod:`.wire`) and posts them; :mod:`.api` is the REST client.
"""

from __future__ import annotations

import importlib
import logging
import warnings
from typing import Any

#: The loggers that existed before this package was imported (see the end of this module).
_LOGGERS_BEFORE = frozenset(logging.Logger.manager.loggerDict)

from eventlog_handler._setup import EventLogSetup, adopt_parent_setup, setup
from eventlog_handler._version import __version__
from eventlog_handler.api import Client, EventLogError
from eventlog_handler.capture._context import (
    RequestScope,
    add_tags,
    clear_user,
    get_tags,
    get_user,
    last_reference_id,
    request_scope,
    set_user,
    user_context,
)
from eventlog_handler.capture._exceptions import capture_exception
from eventlog_handler.capture._typed import (
    submit_feature_usage,
    submit_not_found,
    submit_user_description,
)
from eventlog_handler.handler import EventLogHandler
from eventlog_handler.integrations._console import spare_loggers
from eventlog_handler.integrations._hooks import install_hooks
from eventlog_handler.wire import stack

# Importing the package created loggers (requests', urllib3's), and a dictConfig that builds
# its handler imports asyncio (the exception hooks): it must not disable them as loggers that
# were there before it.
spare_loggers(
    frozenset(logging.Logger.manager.loggerDict) - _LOGGERS_BEFORE
    | {"asyncio", "concurrent.futures"}
)

__all__ = [
    "Client",
    "EventLogError",
    "EventLogHandler",
    "EventLogSetup",
    "RequestScope",
    "__version__",
    "add_tags",
    "capture_exception",
    "clear_user",
    "get_tags",
    "get_user",
    "install_hooks",
    "last_reference_id",
    "request_scope",
    "set_user",
    "setup",
    "stack",
    "submit_feature_usage",
    "submit_not_found",
    "submit_user_description",
    "user_context",
]

#: Names this module exported before they moved to the sub-package that owns them.
_MOVED = {
    **dict.fromkeys(
        [
            "ApiError",
            "AuthenticationError",
            "BadRequestError",
            "IncompleteListWarning",
            "InsecureTransportWarning",
            "NotFoundError",
            "PayloadTooLargeError",
            "PaymentRequiredError",
            "PermissionDeniedError",
            "Project",
            "ProjectConfig",
            "RateLimitedError",
            "ServerError",
            "ServiceUnavailableError",
            "SubmitResult",
            "Token",
            "TokenCreationRefusedError",
            "TransportError",
            "ValidationError",
        ],
        "eventlog_handler.api",
    ),
    **dict.fromkeys(("error_event", "log_event", "message_event"), "eventlog_handler.wire"),
    "Settings": "eventlog_handler.settings",
}


def __getattr__(name: str) -> Any:
    """Names that moved to a sub-package still resolve here, with a ``DeprecationWarning``."""
    home = _MOVED.get(name)
    if home is None:
        raise AttributeError(f"module 'eventlog_handler' has no attribute {name!r}")
    warnings.warn(
        f"eventlog_handler.{name} moved: import it from {home}",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(importlib.import_module(home), name)


adopt_parent_setup()  # a process spawned by multiprocessing runs its parent's setup()
