"""The requests-based client of the service's REST API v2: projects, tokens, settings, login
and event submission, with one typed exception per status."""

from eventlog_handler.api._answers import SubmitResult
from eventlog_handler.api._client import (
    Client,
    IncompleteListWarning,
    InsecureTransportWarning,
    TokenCreationRefusedError,
)
from eventlog_handler.api._errors import (
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
    UnexpectedAnswerError,
    ValidationError,
)
from eventlog_handler.api._models import Project, ProjectConfig, Token

__all__ = [
    "ApiError",
    "AuthenticationError",
    "BadRequestError",
    "Client",
    "EventLogError",
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
    "UnexpectedAnswerError",
    "ValidationError",
]
