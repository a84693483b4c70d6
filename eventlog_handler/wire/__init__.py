"""The service's event forms: what goes on the wire.

Builders of the three event forms (:func:`log_event`, :func:`error_event`,
:func:`message_event`), dates and reference ids, ``@simple_error`` and its stack trace text,
manual stacks, JSON safety, secret masking, and encoding within the service's size limits.
Nothing here knows about threads, queues or HTTP.
"""

from eventlog_handler.wire._dates import format_date, parse_date
from eventlog_handler.wire._events import (
    LEVELS,
    MAX_AGE_SECONDS,
    MAX_EVENT_BYTES,
    encode,
    error_event,
    fit,
    message_event,
)
from eventlog_handler.wire._logs import log_event
from eventlog_handler.wire._stacking import manual_stack, stack

__all__ = [
    "LEVELS",
    "MAX_AGE_SECONDS",
    "MAX_EVENT_BYTES",
    "encode",
    "error_event",
    "fit",
    "format_date",
    "log_event",
    "manual_stack",
    "message_event",
    "parse_date",
    "stack",
]
