"""``setup()``: the one call that connects a program to the service."""

from __future__ import annotations

import functools
import logging
import multiprocessing
import multiprocessing.util
import sys
import threading
from typing import Any

from eventlog_handler._values import boolean, checked
from eventlog_handler.capture import _exceptions as exception_capture
from eventlog_handler.capture._admit import IGNORED_LOGGERS
from eventlog_handler.capture._session import close_session
from eventlog_handler.delivery import _engine as transport
from eventlog_handler.delivery._engine import Engine, get_engine
from eventlog_handler.delivery._stderr import parent_said_it, say
from eventlog_handler.handler import (
    DEFAULT_FLUSH_TIMEOUT,
    EventLogHandler,
    TraceLogHandler,
    _ours,
    check_level,
    check_timeout,
)
from eventlog_handler.integrations import _celery as celery
from eventlog_handler.integrations import _children as children
from eventlog_handler.integrations import _console as console
from eventlog_handler.integrations import _rq as rq
from eventlog_handler.integrations import _server_loggers as server_loggers
from eventlog_handler.integrations import _signals as signals
from eventlog_handler.integrations._hooks import WHEN_SPAWNED, ExceptionHooks, install_with
from eventlog_handler.settings import Settings


class EventLogSetup:
    """What :func:`setup` installed: the handler, the exception hooks, and their engine."""

    def __init__(
        self,
        handler: EventLogHandler,
        hooks: ExceptionHooks | None,
        logger: logging.Logger,
        previous_level: int | None,
        level: int,
    ) -> None:
        #: The :class:`EventLogHandler` attached to the root logger.
        self.handler = handler
        #: The installed exception hooks, or ``None`` (interactive session, or not asked for).
        self.hooks = hooks
        self.logger = logger
        self.level = level
        self._previous_level = previous_level
        self.closed = False
        #: Whether the flush on SIGTERM was installed by this setup.
        self.sigterm = False
        #: The handler that keeps records below ``level`` for the trace log, if any.
        self.trace_handler: TraceLogHandler | None = None
        #: Loggers whose DEBUG records this setup made cheap again (see :func:`_trace_level`).
        self.quieted: list[str] = []
        #: The program's handlers that print what they printed before (see
        #: :mod:`eventlog_handler.integrations._console`).
        self.pinned: list[tuple[logging.Handler, console.AsBefore]] = []
        #: What this setup left for the children ``multiprocessing`` starts (see
        #: :mod:`~eventlog_handler.integrations._children`), taken back when it is detached.
        self.for_children: children.Left | None = None

    def __repr__(self) -> str:
        settings = self.handler.settings
        if self.closed:
            state = "closed"
        elif settings.problem is not None:
            return f"<EventLogSetup {settings.shown_target}>"
        else:
            state = "active"
        return f"<EventLogSetup {settings.shown_url} {state}>"

    @property
    def engine(self) -> Engine:
        """The delivery engine (shared by every handler of the same server and key)."""
        return get_engine(self.handler.settings)

    def flush(self, timeout: float = 5.0) -> bool:
        """Send everything pending now; wait at most ``timeout`` seconds. ``True`` when done."""
        return self.engine.flush(timeout)

    def stats(self) -> dict[str, Any]:
        """Delivery statistics: captured, delivered, dropped (by reason), queued, in flight..."""
        return self.handler.stats()

    def detach(self) -> None:
        """Remove the handler and the hooks, and give the root logger its level back if it
        still has the one set here. Sends nothing; pending events stay queued."""
        if self.closed:
            return
        self.closed = True
        if self.for_children is not None:  # children started from now on are not set up either
            children.take_back(self.for_children)
        if exception_capture.current_settings() is self.handler.settings:
            exception_capture.set_active(None)
        if self.hooks is not None:
            self.hooks.uninstall()
        if self.sigterm:
            signals.remove_sigterm_flush()
        self.logger.removeHandler(self.handler)
        if self.trace_handler is not None:
            self.logger.removeHandler(self.trace_handler)
        server_loggers.detach(self.handler)
        if self._previous_level is not None and self.logger.level == self.level:
            self.logger.setLevel(self._previous_level)
        console.unpin(self.pinned)
        console.stop_watching()
        for name in self.quieted:
            quiet = logging.getLogger(name)
            if quiet.level == logging.INFO:
                quiet.setLevel(logging.NOTSET)

    def take_back(self) -> None:
        """After the program configured logging (``basicConfig``, ``dictConfig``,
        ``fileConfig``): put the handlers back on the root logger if the configuration took
        them off (unless it put a handler of the package there itself), and the root logger's
        level back down if it raised it, the program's handlers keeping the level it set."""
        root = self.logger
        if type(root.handlers) is not list:  # basicConfig's view (see _set_aside)
            root.handlers = list(root.handlers)
        if not any(isinstance(handler, EventLogHandler) for handler in root.handlers):
            root.addHandler(self.handler)
        if (
            self.handler in root.handlers
            and self.trace_handler is not None
            and self.trace_handler not in root.handlers
        ):
            root.addHandler(self.trace_handler)
        for handler in (self.handler, self.trace_handler):
            if handler is not None:
                console.keep_registered(handler)
        if root.level > self.level:
            self.pinned.extend(console.pin_levels(root.level, self.level, _ours))
            self._previous_level = root.level
            root.setLevel(self.level)
        server_loggers.ensure_attached()

    def close(self, timeout: float = 5.0) -> bool:
        """Detach (see :meth:`detach`), then send what is pending within ``timeout`` seconds
        and stop the engine's worker (an event captured later starts it again)."""
        self.detach()
        close_session(self.handler.settings)
        try:
            return self.engine.close(timeout)
        finally:
            logging.Handler.close(self.handler)


def _trace_level(level: int) -> int:
    """The root logger's level for a setup that sends ``level`` and above and keeps a trace log:
    ``DEBUG``, so an error event's ``@trace`` has the ``DEBUG`` lines that led up to it — unless
    some handler the program configured would then print records it never printed before (a
    handler whose own level is below ``level``): then ``level``, and the trace log keeps what
    reaches it."""
    for logger in console.all_loggers():
        for handler in logger.handlers:
            if isinstance(handler, (EventLogHandler, TraceLogHandler, logging.NullHandler)):
                continue
            if handler.level < level:
                return level
    return logging.DEBUG


#: Libraries that log many DEBUG lines per call of theirs (an AWS request, an SSH packet, a
#: font lookup): their DEBUG records would cost more than they tell in a trace.
CHATTY_LOGGERS = frozenset(
    {"botocore", "boto3", "s3transfer", "aiobotocore", "paramiko", "PIL", "matplotlib", "parso"}
    | {"filelock", "kafka", "pika", "selenium", "asyncio"}
)


def _quiet_ignored_loggers() -> list[str]:
    """Give the loggers whose records never become events nor trace lines (the HTTP stack; the
    package's own logger is left alone) and the :data:`CHATTY_LOGGERS` the level ``INFO`` where
    they have none, so that with the root at ``DEBUG`` their debug calls stay as cheap as
    before. Returns the names changed."""
    changed = []
    for name in sorted((IGNORED_LOGGERS | CHATTY_LOGGERS) - {"eventlog_handler"}):
        logger = logging.getLogger(name)
        if logger.level == logging.NOTSET:
            logger.setLevel(logging.INFO)
            changed.append(name)
    return changed


_CURRENT: EventLogSetup | None = None
_LOCK = threading.Lock()


def _switch(name: str, value: Any, default: bool | None, said: list[str]) -> Any:
    """A switch of :func:`setup` as a bool; a malformed one is named in ``said`` and
    ``default`` applies."""
    try:
        return checked(boolean, name, value)
    except ValueError as exc:
        shown = "None (the default)" if default is None else repr(default)
        said.append(f"{exc}; {shown} is used")
        return default


def setup(
    api_key: str | None = None,
    server_url: str | None = None,
    level: int | str = logging.INFO,
    *,
    capture_exceptions: bool = True,
    flush_on_sigterm: bool | None = None,
    force_hooks: bool = False,
    flush_timeout: float = DEFAULT_FLUSH_TIMEOUT,
    **options: Any,
) -> EventLogSetup:
    """Send this program's logs and uncaught exceptions to the service. Call it once at start.

    ``api_key`` and ``server_url`` default to ``EVENTLOG_API_KEY`` and ``EVENTLOG_SERVER_URL``
    (the server to the local collector). Other keywords are the options of
    :class:`EventLogHandler` (``tags``, ``data_exclusions``, ``include_environment``, delivery
    options). It never raises: a missing or malformed key or URL is said once on stderr and
    nothing is sent (the events are counted as dropped, ``unconfigured``); an unknown option,
    or a malformed one (``queue_size="many"``, ``level="chatty"``), is said on stderr, naming
    it, and the default applies in its place.

    What it does:

    1. Attaches an :class:`EventLogHandler` with level ``level`` to the root logger.
    2. Makes sure records of ``level`` reach it: if the root logger's level is higher than
       ``level`` (its default is ``WARNING``), the root logger is lowered to ``level``. It is
       never raised. So with ``level="INFO"``, every ``INFO`` and higher record of a logger
       that propagates to the root reaches the service, unless a logger on its way has a level
       of its own that is higher (``logging.getLogger("noisy").setLevel("ERROR")`` still
       applies), or the record comes from ``urllib3``, ``requests``, ``charset_normalizer`` or
       ``eventlog_handler``, which are never sent. For the trace log (``@trace``), the root
       logger goes down to ``DEBUG`` instead when no handler of the program has a level below
       ``level`` (so nothing prints a line it did not print before); the HTTP libraries'
       loggers without a level then get ``INFO``, so their debug calls stay cheap. With
       ``trace_size=0`` the root logger goes down to ``level`` only.
    3. Installs the exception hooks (:mod:`eventlog_handler.integrations._hooks`) unless
       ``capture_exceptions=False``; in an interactive session only with ``force_hooks=True``.
    4. Runs the exit flush when ``SIGTERM`` arrives (see
       :mod:`eventlog_handler.integrations._signals`), then lets the signal end the process as
       before: by default only where ``SIGTERM`` still has Python's default action (a server's
       own handler is kept); ``flush_on_sigterm=True`` also chains to a handler already set,
       ``False`` installs nothing.
    5. Relies on the exit flush: at interpreter exit, pending events are sent for up to
       ``shutdown_timeout`` seconds (default 2).

    Calling it again replaces what the previous call installed (its handler and hooks are
    removed first, nothing is sent twice). The console stays as it was: records that found no
    handler before ``setup()`` are still printed by Python's "last resort" handler.

    Returns an :class:`EventLogSetup` with ``flush(timeout)``, ``close(timeout)``, ``stats()``
    and ``handler``.
    """
    global _CURRENT
    said: list[str] = []
    if "hooks" in options:  # EventLogHandler's option; setup() installs the hooks itself
        options = {name: value for name, value in options.items() if name != "hooks"}
        said.append(
            "eventlog_handler: setup() takes capture_exceptions=True/False for the exception "
            "hooks, not hooks= (an EventLogHandler option): ignored"
        )
    try:
        level_number = checked(lambda _, value: check_level(value), "level", level)
    except ValueError as exc:
        level_number = logging.INFO
        said.append(f"{exc}; INFO is used")
    try:
        flush_timeout = checked(
            lambda _, value: check_timeout(value), "flush_timeout", flush_timeout
        )
    except ValueError as exc:
        flush_timeout = DEFAULT_FLUSH_TIMEOUT
        said.append(f"{exc}; the default ({DEFAULT_FLUSH_TIMEOUT}) is used")
    # Switches: "false" from a configuration file means False, not a true string.
    capture_exceptions = _switch("capture_exceptions", capture_exceptions, True, said)
    force_hooks = _switch("force_hooks", force_hooks, False, said)
    if flush_on_sigterm is not None:
        flush_on_sigterm = _switch("flush_on_sigterm", flush_on_sigterm, None, said)
    options, malformed = Settings.usable_options(options)
    for line in said + malformed:
        say(line)
    handler = EventLogHandler(
        api_key, server_url, level_number, flush_timeout=flush_timeout, hooks=False, **options
    )
    root = logging.getLogger()
    with _LOCK:
        if _CURRENT is not None:
            _CURRENT.detach()
            _CURRENT = None
        hooks = install_with(handler.settings, force=force_hooks) if capture_exceptions else None
        signals.decline_sigterm_flush(flush_on_sigterm is False)
        sigterm = flush_on_sigterm is not False and signals.flush_on_sigterm(
            auto=flush_on_sigterm is None
        )
        if flush_on_sigterm is not False:
            signals.flush_before_raised_signals()
        previous_level = root.level
        root_level = level_number
        if handler.settings.trace_size > 0 and level_number > logging.DEBUG:
            root_level = _trace_level(level_number)
        lowered = root.getEffectiveLevel() > root_level
        pinned = []
        if lowered:
            pinned = console.pin_levels(root.getEffectiveLevel(), root_level, _ours)
            root.setLevel(root_level)
        root.addHandler(handler)
        # Next to the handler: the trace log's feed and the console's last resort (see
        # TraceLogHandler).
        trace_handler = TraceLogHandler(level_number, trace=handler.settings.trace_size > 0)
        root.addHandler(trace_handler)
        console.werkzeug_console(_ours)
        console.watch_configuration(_set_aside, _take_back)
        server_loggers.attach(handler)  # uvicorn's and gunicorn's non-propagating error loggers
        # The exit flush is registered when the transport module is imported; make sure the
        # engine exists so that it has something to flush.
        engine = transport.get_engine(handler.settings)
        kept = kept_options(engine, handler.settings)
        if kept:
            say(
                f"eventlog_handler: the delivery engine for {handler.settings.shown_url} runs "
                f"already, made with other options, and keeps them: {', '.join(kept)}. One "
                f"engine serves a server and key in a process (README, dictConfig)."
            )
        _CURRENT = EventLogSetup(
            handler, hooks, root, previous_level if lowered else None, root_level
        )
        if lowered and root_level < level_number:
            _CURRENT.quieted = _quiet_ignored_loggers()
        exception_capture.set_active(handler.settings)
        _CURRENT.sigterm = sigterm
        _CURRENT.trace_handler = trace_handler
        handler.after_reconfiguration = functools.partial(_take_back, _CURRENT)
        _CURRENT.pinned = pinned
        if "celery" in sys.modules:
            celery.install(_current_handlers)
        if "rq" in sys.modules:
            rq.install(_current_handlers)
        handed = {
            "api_key": api_key,
            "server_url": server_url,
            "level": level_number,
            "capture_exceptions": capture_exceptions,
            "flush_on_sigterm": flush_on_sigterm,
            "flush_timeout": flush_timeout,
            **options,
        }
        if "ignore_exceptions" in options:  # as checked: a generator given here is used up
            handed["ignore_exceptions"] = handler.settings.ignore_exceptions
        _CURRENT.for_children = children.hand_down(handed)
        return _CURRENT


def _set_aside(is_basic: bool) -> EventLogSetup | None:
    """Before the program configures logging: the root logger gets back the level it had
    before the setup lowered it, so that the level it has afterwards is the program's
    (:meth:`EventLogSetup.take_back` pins it on the program's handlers); ``basicConfig``,
    which does nothing where the root logger has handlers, runs without seeing the setup's
    (:class:`~eventlog_handler.integrations._console.Unseen`: they are still called)."""
    active = _CURRENT
    if active is None or active.closed:
        return None
    root = active.logger
    if is_basic and type(root.handlers) is list:
        root.handlers = console.Unseen(root.handlers, _ours)
    if active._previous_level is not None and root.level == active.level:
        root.setLevel(active._previous_level)
    return active


def _take_back(active: EventLogSetup | None) -> None:
    root = logging.getLogger()
    if type(root.handlers) is not list:  # also when the setup was closed meanwhile
        root.handlers = list(root.handlers)
    if active is not None and active is _CURRENT and not active.closed:
        active.take_back()


def _current_handlers() -> list[logging.Handler]:
    """The handlers the current setup keeps on the root logger (none once it is closed)."""
    active = current()
    if active is None:
        return []
    found: list[logging.Handler] = [active.handler]
    if active.trace_handler is not None:
        found.append(active.trace_handler)
    return found


def adopt_parent_setup() -> None:
    """In a process that ``multiprocessing`` started: run the ``setup()`` the parent handed it
    (:mod:`~eventlog_handler.integrations._children`), if this one has none. In a fork server,
    have each child it forks do so as it starts. Then hand down from here (this process's
    children, those of a child included, get this process's setup, if any)."""
    try:
        if _CURRENT:
            return
        if children.in_forkserver():
            # It only forks: setting up there could deadlock its children. multiprocessing
            # runs its after-fork hooks in each of them, once the child has its process object.
            multiprocessing.util.register_after_fork(_ADOPTER, _adopt_in_child)
            return
        arguments = children.handed_to_this_process()
        if arguments is not None:
            with parent_said_it():
                setup(**arguments)
    except Exception as exc:  # a child must run whatever its parent's settings
        sys.stderr.write(f"eventlog_handler: the parent's setup() failed here: {exc}\n")
    finally:
        children.pass_on_from_here()


#: A spawned child, once its process object is here, adopts the parent's setup from that
#: object if the environment held none it could use while the main module was imported, and
#: hands down from that object (the one multiprocessing had before is gone).
WHEN_SPAWNED.append(adopt_parent_setup)


class _Adopter:
    """Anchor of the fork server's after-fork registration (kept by weak reference)."""


_ADOPTER = _Adopter()


def _adopt_in_child(_anchor: object) -> None:
    """In a child of the fork server, as ``multiprocessing`` starts it."""
    adopt_parent_setup()


def current() -> EventLogSetup | None:
    """What the last :func:`setup` installed, unless it was closed."""
    current = _CURRENT
    return current if current is not None and not current.closed else None


#: The options an engine is made with (a handler's own: tags, level, before_send, ...).
ENGINE_OPTIONS = (
    "timeout",
    "verify",
    "queue_size",
    "memory_budget",
    "batch_size",
    "max_batch_bytes",
    "max_raw_batch_bytes",
    "flush_interval",
    "error_delay",
    "shutdown_timeout",
    "retry_initial",
    "max_backoff",
    "spool_path",
    "spool_all",
    "spool_max_bytes",
    "spool_scan_interval",
    "server_settings",
    "rollup_window",
    "outage_notice",
    "sessions",
    "heartbeat_interval",
)


def kept_options(engine: Engine, settings: Settings) -> list[str]:
    """The options of ``settings`` that ``engine`` (made with other settings for the same
    server and key) does not follow, as ``name=running (asked asked)``."""
    kept = []
    for name in ENGINE_OPTIONS:
        running, asked = getattr(engine.settings, name), getattr(settings, name)
        if running != asked:
            kept.append(f"{name}={running!r} (asked {asked!r})")
    return kept
