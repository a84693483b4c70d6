"""Ship Python logs, structlog events and uncaught exceptions to an event collection service."""

from eventlog_handler._version import __version__

__all__ = ["__version__"]
