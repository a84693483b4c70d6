"""The error loggers of web servers that don't propagate to the root logger.

uvicorn and gunicorn log the exceptions of the applications they serve, and their own failures,
on ``uvicorn.error`` and ``gunicorn.error``, which they configure not to propagate to the root
logger: a handler on the root logger never sees those records. :func:`attach` (called by
:func:`~eventlog_handler.setup`) adds a small forwarding handler to each of these loggers that
hands their records to the setup's handler.

- Only the *error* loggers: ``uvicorn.access`` and ``gunicorn.access`` write one ``INFO`` line
  per request, which would make every request an event (the service's quotas count events) and
  says nothing an error report needs. Attach a handler to them yourself if you want them.
- Secret query values in the URLs these loggers print (gunicorn's ``Error handling request
  GET /path?token=...``) are masked in what is sent, like the query of ``@request``.
- Never twice: a forwarder passes a record on only when the record would not reach the
  handler anyway, by propagation (``uvicorn.run(app, log_config=None)`` leaves uvicorn's
  loggers propagating to the root), and once whatever forwarders it meets: uvicorn's worker
  for gunicorn gives ``uvicorn.error`` the very list of handlers of ``gunicorn.error``, so
  both forwarders, or only ``gunicorn.error``'s (``--preload``), see the records of each.
- A server's line that only repeats a failure reported already is not sent: uvicorn logs the
  text of a failed ASGI lifespan (its traceback), which the ASGI middleware reported as an
  error (:func:`reported_as`).
- Loggers are not created here: a logger that does not exist yet (the server is not imported)
  is attached to when it appears, at the next :func:`ensure_attached`. The web middlewares call
  it at the start of each request and of the ASGI lifespan, so the forwarders are back after
  a server configured its logging (``uvicorn.run`` applies a ``dictConfig`` that removes the
  handlers of its loggers) after ``setup()`` ran.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import weakref
from collections import deque
from typing import Any, TypeGuard

#: The servers' error loggers that are configured not to propagate (see the module docstring).
SERVER_LOGGERS: tuple[str, ...] = ("uvicorn.error", "gunicorn.error")


class ServerLogForwarder(logging.Handler):
    """Passes the records of one server logger to ``target`` unless they reach it anyway."""

    def __init__(self, target: logging.Handler, logger_name: str) -> None:
        super().__init__(logging.NOTSET)
        self.target = target
        self.logger_name = logger_name

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.logger_name} -> {self.target!r}>"

    def handle(self, record: logging.LogRecord) -> Any:
        """Forward ``record`` (no lock of this handler is taken). Never raises."""
        try:
            if (
                record.levelno < self.target.level
                or not any(_logged_on(record.name, name) for name in SERVER_LOGGERS)
                or _forwarded_already(record, self.target)
                or _reaches(record.name, self.target)
                or _said_already(record)
            ):
                return False
            return self.target.handle(self._without_secrets(record))
        except Exception:  # pragma: no cover - the target's handle never raises
            return False

    def _without_secrets(self, record: logging.LogRecord) -> logging.LogRecord:
        """``record``, or a copy whose URL arguments (gunicorn's ``Error handling request
        GET /path?token=...``) have their secret query values masked."""
        args = record.args
        if not isinstance(args, tuple) or not any(_is_url(arg) for arg in args):
            return record
        from eventlog_handler.integrations._request import clean_url

        settings = getattr(self.target, "settings", None)
        exclusions = getattr(settings, "data_exclusions", ())
        copy = logging.makeLogRecord(record.__dict__)
        copy.args = tuple(clean_url(arg, exclusions) if _is_url(arg) else arg for arg in args)
        return copy

    def emit(self, record: logging.LogRecord) -> None:
        self.handle(record)


def _reaches(name: str, target: logging.Handler) -> bool:
    """Whether a record of logger ``name`` reaches ``target`` by propagation."""
    logger = _existing_logger(name)
    while logger is not None:
        if target in logger.handlers:
            return True
        if not logger.propagate:
            return False
        logger = logger.parent
    return False


class _Forwarded(threading.local):
    """The record this thread forwarded last, and to which handlers: the forwarders a record
    meets on its way (its logger's handlers, its parents') all run on the logging thread, one
    after another."""

    record: weakref.ref[logging.LogRecord] | None = None  # not kept alive: its traceback
    targets: tuple[logging.Handler, ...] = ()


_FORWARDED = _Forwarded()


def _forwarded_already(record: logging.LogRecord, target: logging.Handler) -> bool:
    """Whether ``record`` was forwarded to ``target`` already; if not, noted as it is now."""
    last = _FORWARDED.record
    if last is not None and last() is record:
        if any(item is target for item in _FORWARDED.targets):
            return True
        _FORWARDED.targets = (*_FORWARDED.targets, target)
    else:
        _FORWARDED.record, _FORWARDED.targets = weakref.ref(record), (target,)
    return False


#: The texts of failures reported already that a server is about to log (see
#: :func:`reported_as`).
_REPORTED: deque[str] = deque(maxlen=4)


def reported_as(text: Any) -> None:
    """``text`` is a failure reported already: the server's record of it is not sent."""
    if isinstance(text, str) and text:
        _REPORTED.append(text)


def _said_already(record: logging.LogRecord) -> bool:
    if not _REPORTED or record.msg not in _REPORTED or record.args:
        return False
    with contextlib.suppress(ValueError):  # another thread took it
        _REPORTED.remove(record.msg)
    return True


_LOCK = threading.Lock()
#: The forwarders of each attached handler, by logger name.
_ATTACHED: dict[logging.Handler, dict[str, ServerLogForwarder]] = {}


def attach(handler: logging.Handler) -> None:
    """Forward the records of the servers' error loggers (:data:`SERVER_LOGGERS`) to
    ``handler`` from now on (see the module docstring). Calling it again does nothing."""
    with _LOCK:
        if handler not in _ATTACHED:
            _ATTACHED[handler] = {
                name: ServerLogForwarder(handler, name) for name in SERVER_LOGGERS
            }
    ensure_attached()


def detach(handler: logging.Handler) -> None:
    """Stop forwarding to ``handler``: remove its forwarders from the server loggers."""
    with _LOCK:
        forwarders = _ATTACHED.pop(handler, {})
    for name, forwarder in forwarders.items():
        logger = _existing_logger(name)
        if logger is not None:
            logger.removeHandler(forwarder)


def ensure_attached() -> None:
    """Attach the forwarders to the server loggers that exist now and lack them. Cheap (a few
    lookups) when nothing changed; never raises."""
    try:
        for forwarders in list(_ATTACHED.values()):
            for name, forwarder in forwarders.items():
                logger = _existing_logger(name)
                if logger is not None and forwarder not in logger.handlers:
                    logger.addHandler(forwarder)
    except Exception:  # pragma: no cover - a broken logging configuration
        pass


def attached_handlers() -> list[logging.Handler]:
    """The handlers the server loggers are forwarded to."""
    return list(_ATTACHED)


def _is_url(value: Any) -> TypeGuard[str]:
    """Whether ``value`` is a URL or request target with a query (``/path?a=b``)."""
    return type(value) is str and "?" in value and (value.startswith("/") or "://" in value)


def _logged_on(name: str, logger_name: str) -> bool:
    """Whether a record of logger ``name`` is one of ``logger_name`` or of its children."""
    return name == logger_name or name.startswith(logger_name + ".")


def _existing_logger(name: str) -> logging.Logger | None:
    logger = logging.Logger.manager.loggerDict.get(name)
    return logger if isinstance(logger, logging.Logger) else None
