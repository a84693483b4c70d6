"""Ship Python logs, structlog events and uncaught exceptions to an event collection service.

One call sets everything up::

    import eventlog_handler
    eventlog_handler.setup(api_key="...", server_url="https://...")

See the README for ``dictConfig``, structlog and the ``eventlog`` command.
"""

from eventlog_handler._version import __version__
from eventlog_handler.api import (
    Client,
    IncompleteListWarning,
    InsecureTransportWarning,
    SubmitResult,
    TokenCreationRefusedError,
)
from eventlog_handler.capture import capture_exception
from eventlog_handler.configure import EventLogSetup, setup
from eventlog_handler.context import (
    RequestScope,
    add_tags,
    clear_user,
    get_tags,
    get_user,
    request_scope,
    set_user,
    user_context,
)
from eventlog_handler.errors import (
    ApiError,
    AuthenticationError,
    BadRequestError,
    EventLogError,
    NotFoundError,
    PayloadTooLargeError,
    PaymentRequiredError,
    PermissionDeniedError,
    RateLimitedError,
    ServerError,
    ServiceUnavailableError,
    TransportError,
    ValidationError,
)
from eventlog_handler.events import error_event, log_event, message_event
from eventlog_handler.handler import EventLogHandler
from eventlog_handler.hooks import install_hooks
from eventlog_handler.models import Project, ProjectConfig, Token
from eventlog_handler.settings import Settings
from eventlog_handler.stacking import stack

__all__ = [
    "ApiError",
    "AuthenticationError",
    "BadRequestError",
    "Client",
    "EventLogError",
    "EventLogHandler",
    "EventLogSetup",
    "IncompleteListWarning",
    "InsecureTransportWarning",
    "NotFoundError",
    "PayloadTooLargeError",
    "PaymentRequiredError",
    "PermissionDeniedError",
    "Project",
    "ProjectConfig",
    "RateLimitedError",
    "RequestScope",
    "ServerError",
    "ServiceUnavailableError",
    "Settings",
    "SubmitResult",
    "Token",
    "TokenCreationRefusedError",
    "TransportError",
    "ValidationError",
    "__version__",
    "add_tags",
    "capture_exception",
    "clear_user",
    "error_event",
    "get_tags",
    "get_user",
    "install_hooks",
    "log_event",
    "message_event",
    "request_scope",
    "set_user",
    "setup",
    "stack",
    "user_context",
]
