"""``EventLogHandler``: a :class:`logging.Handler` that sends records to the service.

In code::

    import logging
    from eventlog_handler import EventLogHandler

    logging.getLogger().addHandler(EventLogHandler(level="INFO", tags=["web"]))

In a ``dictConfig`` (every argument is plain JSON; ``api_key`` and ``server_url`` may be left
out and come from ``EVENTLOG_API_KEY`` / ``EVENTLOG_SERVER_URL``)::

    "handlers": {
        "eventlog": {
            "class": "eventlog_handler.EventLogHandler",
            "level": "INFO",
            "tags": ["web", "eu-1"],
            "flush_interval": 2,
        }
    }

In a ``fileConfig`` file::

    [handler_eventlog]
    class = eventlog_handler.EventLogHandler
    level = INFO
    args = ()
    kwargs = {"tags": ["web"], "server_url": "https://collector.example.com"}

How a record becomes an event is described in :mod:`eventlog_handler.capture._records`.
"""

from __future__ import annotations

import _thread
import logging
import math
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

from eventlog_handler._values import MAX_SECONDS, boolean
from eventlog_handler.capture import _admit as admit
from eventlog_handler.capture import _records as records
from eventlog_handler.capture import _tracelog as tracelog
from eventlog_handler.capture._admit import is_ignored_logger
from eventlog_handler.capture._records import capture_record
from eventlog_handler.capture._session import open_session
from eventlog_handler.delivery._engine import Engine, get_engine, is_sender_thread
from eventlog_handler.delivery._stderr import say_capture_failed, say_unconfigured
from eventlog_handler.integrations import _console as console
from eventlog_handler.integrations import _signals as signals
from eventlog_handler.integrations._hooks import ExceptionHooks, install_with
from eventlog_handler.settings import Settings
from eventlog_handler.wire._jsonsafe import safe_str

#: Seconds :meth:`EventLogHandler.flush` and :meth:`EventLogHandler.close` wait at most.
DEFAULT_FLUSH_TIMEOUT = 1.0


def check_level(level: Any, name: str = "level") -> int:
    """A :mod:`logging` level from a number or a level name (``"INFO"``, ``"warning"``)."""
    if isinstance(level, bool):
        raise ValueError(f"eventlog_handler: setting {name!r} must be a level, got {level!r}")
    if isinstance(level, int):
        if level < 0:
            raise ValueError(f"eventlog_handler: setting {name!r} must not be negative")
        return level
    if isinstance(level, str):
        text = level.strip()
        if text.isdigit():
            return int(text)
        number = logging.getLevelName(text.upper())
        if isinstance(number, int):
            return number
    raise ValueError(
        f"eventlog_handler: setting {name!r} must be a level number or a level name "
        f"(DEBUG, INFO, WARNING, ERROR, CRITICAL), got {level!r}"
    )


class EventLogHandler(logging.Handler):
    """Send log records to the event collection service.

    ``api_key`` and ``server_url`` default to ``EVENTLOG_API_KEY`` and ``EVENTLOG_SERVER_URL``
    (and the server to the local collector, ``http://127.0.0.1:5000``). ``level`` is a number or
    a level name. Every other keyword is an option of :class:`~eventlog_handler.Settings`:
    ``tags`` (added to every event of this handler), ``data_exclusions``,
    ``include_environment``, and the delivery options (``queue_size``, ``batch_size``,
    ``flush_interval``, ``error_delay``, ``shutdown_timeout``, ``timeout``, ``verify``, ...).
    A missing or malformed setting raises :class:`ValueError` naming it; an unknown option name
    raises :class:`TypeError`. ``flush_timeout`` bounds :meth:`flush` and :meth:`close`.

    The constructor does no network I/O. Handlers pointing at the same server with the same key
    share one delivery engine (the first one's delivery options apply); ``tags``,
    ``data_exclusions`` and ``include_environment`` are each handler's own.

    ``emit`` never raises and never blocks on the network: it builds the event on the calling
    thread and queues it. Records of the loggers in
    :data:`~eventlog_handler.capture._admit.IGNORED_LOGGERS` (the HTTP stack the sender uses,
    this package, and libraries that log every request or part they handle) and of their
    child loggers, and records logged on a thread that is sending events, are ignored. Records that cannot be turned into events are counted in
    :attr:`emit_errors` (see :meth:`stats`), never raised.

    :meth:`close` sends what is pending for up to ``flush_timeout`` seconds but leaves the shared
    engine running, so reconfiguring logging loses nothing; the exit flush happens at interpreter
    exit for every engine.
    """

    def __init__(
        self,
        api_key: str | None = None,
        server_url: str | None = None,
        level: int | str = logging.NOTSET,
        *,
        flush_timeout: float = DEFAULT_FLUSH_TIMEOUT,
        hooks: bool | None = None,
        **options: Any,
    ) -> None:
        level_number = check_level(level)
        if hooks is not None:  # "false" from a configuration file means False
            hooks = boolean("hooks", hooks)
        timeout = check_timeout(flush_timeout)
        settings = Settings.from_options(
            {"api_key": api_key, "server_url": server_url, **options}, lenient=True
        )
        say_unconfigured(settings)
        super().__init__(level_number)
        self.settings = settings
        self.flush_timeout = timeout
        self._trace = settings.trace_size > 0
        if self._trace:
            tracelog.want(settings.trace_size)
        self._ignore_loggers = tuple(settings.ignore_loggers)
        self._minimums: dict[str, float] = {}
        self._engine: Engine | None = None
        #: Records that could not be turned into events (they were skipped, not raised).
        self.emit_errors = 0
        self.last_emit_error: str | None = None
        #: The exception hooks this handler installed (a dictConfig handler: see the class doc).
        self.hooks: ExceptionHooks | None = None
        self._sigterm = False
        #: Set by :func:`~eventlog_handler.setup`: called on a thread of its own once a logging
        #: configuration that closed this handler (``dictConfig``, ``fileConfig``) is done.
        self.after_reconfiguration: Callable[[], None] | None = None
        if hooks if hooks is not None else _built_by_logging_config():
            self.hooks = install_with(settings)
            self._sigterm = signals.flush_on_sigterm(auto=True)
            signals.flush_before_raised_signals()
        open_session(settings)

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {self.settings.shown_target} "
            f"({logging.getLevelName(self.level)})>"
        )

    @property
    def engine(self) -> Engine:
        """The delivery engine of this handler's server and key (shared)."""
        return get_engine(self.settings)

    def handle(self, record: logging.LogRecord) -> Any:
        """Filter and emit ``record``. ``emit`` is thread-safe, so no handler lock is taken."""
        if not self.filters:
            self.emit(record)
            return record
        try:
            result: Any = self.filter(record)
        except Exception as exc:  # a user's filter failed: counted, said once, not raised
            self._count_error(f"a filter raised {type(exc).__name__}: {safe_str(exc)}")
            return False
        if isinstance(result, logging.LogRecord):  # Python 3.12+: a filter may swap the record
            record = result
        if result:
            self.emit(record)
        return result

    def _minimum(self, name: str) -> float:
        """The lowest level of the logger ``name`` that becomes an event (see
        :func:`~eventlog_handler.capture._admit.source_minimum`), remembered per name here."""
        minimum = admit.source_minimum(name, self._ignore_loggers)
        if len(self._minimums) < 10_000:
            self._minimums[name] = minimum
        return minimum

    def emit(self, record: logging.LogRecord) -> None:
        """Turn ``record`` into an event and queue it. Never raises."""
        try:
            name = record.name
            minimum = self._minimums.get(name)
            if minimum is None:
                minimum = self._minimum(name)
            levelno = record.levelno
            if levelno < minimum:
                if self._trace and minimum != math.inf:
                    tracelog.note(record)  # a server's routine line: in the trace log only
                return
            settings = self.settings
            engine = self._engine
            if engine is None or engine.intake.finished:
                engine = self._engine = get_engine(settings)
            if admit._processors_exist and not admit.claim(
                admit.HANDLER, record, settings.engine_key
            ):
                return  # a structlog processor decided of it already (sent it, or not)
            exc = (
                records.record_exception(record)
                if record.exc_info or type(record.msg) is dict  # structlog's event dict
                else None
            )
            if admit.admit(name, levelno, exc, settings, engine) != admit.SEND:
                if self._trace:
                    tracelog.note(record)
                return
            entry = capture_record(record, settings, self.formatter)
            engine.submit(entry)
            if self._trace:
                tracelog.note(record)
        except RecursionError:
            # Almost no stack is left: count without calling anything that needs a frame.
            try:
                self.emit_errors += 1
                self.last_emit_error = "RecursionError"
            except RecursionError:  # pragma: no cover - even that failed
                pass
        except Exception as exc:
            self._count_error(f"{type(exc).__name__}: {safe_str(exc)}")

    def _count_error(self, text: str) -> None:
        try:
            self.emit_errors += 1
            self.last_emit_error = text[:500]
            say_capture_failed("stats()['emit_errors']", text[:500], self.settings)
        except Exception:  # pragma: no cover - str() of the error failed
            pass

    def handleError(self, record: logging.LogRecord) -> None:
        """Count the failure; never print or raise (the application must not notice)."""
        self._count_error("handleError")

    def flush(self, timeout: float | None = None) -> None:
        """Send what is pending; wait at most ``timeout`` (default ``flush_timeout``) seconds.

        Never raises. ``handler.engine.flush(timeout)`` does the same and returns whether
        everything was settled. When called while :mod:`logging`'s module lock is held (by
        ``dictConfig``/``fileConfig`` closing the old handlers), it does not wait: the sending
        thread may need that lock to log, and the events are sent within ``flush_interval``.
        """
        try:
            if _logging_lock_held():
                return
            get_engine(self.settings).flush(self.flush_timeout if timeout is None else timeout)
        except Exception:  # pragma: no cover - flush must return
            pass

    def close(self) -> None:
        """Flush for at most ``flush_timeout`` seconds and detach from :mod:`logging`.

        The shared engine keeps running (other handlers may use it, and the same handler still
        works if it is used again); pending events are sent by the exit flush at the latest.
        """
        try:
            if self.after_reconfiguration is not None and _logging_lock_held():
                _when_configured(self.after_reconfiguration)
            if self.hooks is not None:
                self.hooks.uninstall()
                self.hooks = None
            if self._sigterm:
                signals.remove_sigterm_flush()
                self._sigterm = False
            self.flush()
        finally:
            super().close()

    def stats(self) -> dict[str, Any]:
        """The engine's statistics plus this handler's ``emit_errors``."""
        stats = get_engine(self.settings).stats()
        stats["emit_errors"] = self.emit_errors
        return stats


class TraceLogHandler(logging.Handler):
    """The companion :func:`~eventlog_handler.setup` attaches next to its
    :class:`EventLogHandler` (level ``NOTSET``, so it sees every record that reaches the root). It
    never sends anything itself. It does two things:

    - it feeds the trace log with the records below the handler's level, so an error event
      carries the ``DEBUG`` and ``INFO`` lines that led up to it;
    - it keeps the console as it was before ``setup()``: Python prints a record of ``WARNING``
      and above through its "last resort" handler when no handler is found for it, and the
      package's own handlers on the root logger would stop that. Where the record's loggers
      have no other handler, it hands the record to :data:`logging.lastResort`, exactly as
      :meth:`logging.Logger.callHandlers` would have.
    """

    def __init__(self, event_level: int, trace: bool = True) -> None:
        super().__init__(logging.NOTSET)
        self.event_level = event_level
        self.trace = trace

    def handle(self, record: logging.LogRecord) -> Any:
        try:
            if record.name == "werkzeug":  # imported after setup(): its console (see _console)
                console.werkzeug_console(_ours, record)
            if (
                self.trace
                and record.levelno < self.event_level
                and not is_sender_thread()
                and not is_ignored_logger(record.name)
            ):
                tracelog.note(record)
            last_resort = logging.lastResort
            if (
                last_resort is not None
                and record.levelno >= last_resort.level
                and not _other_handlers(record.name)
            ):
                last_resort.handle(record)
        except Exception:  # pragma: no cover - a log call must never raise
            pass
        return True

    def emit(self, record: logging.LogRecord) -> None:  # pragma: no cover - handle() does it
        pass


def _ours(handler: logging.Handler) -> bool:
    """Whether ``handler`` is one of the package's handlers."""
    return isinstance(handler, EventLogHandler | TraceLogHandler)


def _other_handlers(name: str) -> bool:
    """Whether a record of the logger ``name`` finds a handler that is not this package's on
    its way up (the walk :meth:`logging.Logger.callHandlers` makes)."""
    logger: logging.Logger | None = logging.root
    if name and name != "root":
        found = logging.Logger.manager.loggerDict.get(name)
        if isinstance(found, logging.Logger):
            logger = found
    while logger is not None:
        for handler in logger.handlers:
            if not isinstance(handler, EventLogHandler | TraceLogHandler):
                return True
        if not logger.propagate:
            break
        logger = logger.parent
    return False


def _built_by_logging_config() -> bool:
    """Whether the handler is being built by :func:`logging.config.dictConfig` or
    ``fileConfig`` (a program configured by them alone gets the exception hooks too)."""
    frame: FrameType | None = sys._getframe(2)
    for _ in range(12):
        if frame is None:
            return False
        if frame.f_globals.get("__name__") == "logging.config":
            return True
        frame = frame.f_back
    return False


def _when_configured(callback: Callable[[], None]) -> None:
    """Run ``callback`` on a thread of its own once the logging configuration in progress
    (which holds :mod:`logging`'s module lock) is over: the way back for a setup whose handler
    a ``dictConfig`` or ``fileConfig`` called by a name imported before ``setup()`` closed
    and took off the root logger (gunicorn's ``from logging.config import dictConfig``)."""
    lock = getattr(logging, "_lock", None)

    def wait_then_run() -> None:
        try:
            if lock is None:
                callback()
                return
            with lock:  # after the configuration, and before the program's next one
                callback()
        except Exception:  # pragma: no cover - never raises
            pass

    # Not threading.Thread.start(): it waits until the new thread says it started, and the
    # garbage collector may run a dead handler's weakref callback on that thread first, which
    # takes logging's lock, held here by the configuration: both would wait for ever.
    _thread.start_new_thread(wait_then_run, ())


def _logging_lock_held() -> bool:
    """Whether this thread holds :mod:`logging`'s module lock (configuration in progress)."""
    is_owned = getattr(getattr(logging, "_lock", None), "_is_owned", None)
    if is_owned is None:
        return False
    try:
        return bool(is_owned())
    except Exception:  # pragma: no cover - an unusual lock
        return False


def check_timeout(value: Any) -> float:
    """``flush_timeout`` checked: a number of seconds, at least 0."""
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    except (TypeError, ValueError):
        number = math.nan
    if isinstance(value, bool) or not math.isfinite(number) or not 0 <= number <= MAX_SECONDS:
        raise ValueError(
            f"eventlog_handler: setting 'flush_timeout' must be a number of seconds from 0 to "
            f"{MAX_SECONDS:.0f}, got {value!r}"
        )
    return number
