"""``setup()``: the one call that connects a program to the service."""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import json
import logging
import multiprocessing
import multiprocessing.util
import os
import sys
import threading
from types import FrameType
from typing import Any, NamedTuple

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
        #: :func:`_pass_to_children`), taken back when it is detached.
        self.for_children: _ForChildren | None = None

    def __repr__(self) -> str:
        settings = self.handler.settings
        if self.closed:
            state = "closed"
        elif settings.problem is not None:  # said on stderr too; a bad URL is not shown
            return f"<EventLogSetup unconfigured: nothing is sent ({settings.problem})>"
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
        left = self.for_children
        if left is not None:  # children started from now on are not set up either
            if os.environ.get(CHILD_SETUP_ENV) == left.sealed:
                del os.environ[CHILD_SETUP_ENV]
            config = _process_config()
            if config.get(CHILD_SETUP_ENV) == left.plain:  # or the same a parent left here
                del config[CHILD_SETUP_ENV]
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
        level_number = check_level(level)
    except ValueError as exc:
        level_number = logging.INFO
        said.append(f"{exc}; INFO is used")
    try:
        flush_timeout = check_timeout(flush_timeout)
    except ValueError as exc:
        flush_timeout = DEFAULT_FLUSH_TIMEOUT
        said.append(f"{exc}; the default ({DEFAULT_FLUSH_TIMEOUT}) is used")
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
        transport.get_engine(handler.settings)
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
        _CURRENT.for_children = _pass_to_children(
            {
                "api_key": api_key,
                "server_url": server_url,
                "level": level_number,
                "capture_exceptions": capture_exceptions,
                "flush_on_sigterm": flush_on_sigterm,
                "flush_timeout": flush_timeout,
                **options,
            }
        )
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


#: How ``setup()``'s arguments reach the processes that ``multiprocessing`` starts with spawn or
#: forkserver: they re-import the main module without running its ``if __name__ ==
#: "__main__":`` block (a fork server's children don't even do that: the fork server imported
#: it once, before it forked them), so a ``setup()`` there would not run in them.
CHILD_SETUP_ENV = "EVENTLOG_HANDLER_CHILD_SETUP"


class _ForChildren(NamedTuple):
    """What a setup left for the children ``multiprocessing`` starts (:func:`_pass_to_children`)."""

    #: In the environment, sealed.
    sealed: str
    #: In the process configuration, as it is.
    plain: str


def _pass_to_children(arguments: dict[str, Any]) -> _ForChildren | None:
    """Leave ``setup()``'s arguments (when they are all plain JSON: a ``before_send`` or
    exception class given as an object can't travel; pass its import path instead) for the
    children ``multiprocessing`` starts, in two places:

    - the configuration ``multiprocessing`` copies into each process object made from now on
      (:func:`_process_config`), which reaches the child with that object through its start-up
      pipe, as the authentication key kept there does: a running child reads it there;
    - the environment, for a spawned child while it imports the main module, before its
      process object has arrived (what it logs then is the program's too). Every subprocess
      inherits the environment, and an API key given in code must not be readable there: it is
      sealed with the authentication key (:func:`_seal`).

    A fork server's children have the fork server's environment, as it was when it started:
    they read the process object's copy, current when the parent made it.
    """
    config = _process_config()
    try:
        plain = json.dumps(arguments)
        left = _ForChildren(_seal(plain.encode()), plain)
    except (TypeError, ValueError):
        os.environ.pop(CHILD_SETUP_ENV, None)
        config.pop(CHILD_SETUP_ENV, None)
        return None
    os.environ[CHILD_SETUP_ENV] = left.sealed
    config[CHILD_SETUP_ENV] = left.plain
    return left


def _process_config() -> dict[str, Any]:
    """This process's ``multiprocessing`` configuration (``BaseProcess._config``, where it keeps
    the authentication key): every process object made here gets a copy, which reaches the
    child with it. A dict of no consequence if a Python lacks it."""
    config = getattr(multiprocessing.current_process(), "_config", None)
    return config if isinstance(config, dict) else {}


def _keys() -> tuple[bytes, bytes]:
    """The keys of the seal, made from ``multiprocessing``'s authentication key: random per
    program, and handed by ``multiprocessing`` to the children it starts through their
    start-up pipe, never the environment."""
    secret = bytes(multiprocessing.current_process().authkey)
    return (
        hashlib.sha256(b"eventlog_handler seal\0" + secret).digest(),
        hashlib.sha256(b"eventlog_handler mac\0" + secret).digest(),
    )


def _seal(plain: bytes) -> str:
    """``plain`` encrypted (a SHAKE-256 keystream) and authenticated (HMAC-SHA256)."""
    seal_key, mac_key = _keys()
    nonce = os.urandom(16)
    sealed = nonce + _keystream_xor(seal_key, nonce, plain)
    tag = hmac.new(mac_key, sealed, hashlib.sha256).digest()[:16]
    return base64.urlsafe_b64encode(tag + sealed).decode("ascii")


def _keystream_xor(key: bytes, nonce: bytes, data: bytes) -> bytes:
    """``data`` XOR the SHAKE-256 keystream of ``key`` and ``nonce``: seals and unseals."""
    stream = hashlib.shake_256(key + nonce).digest(len(data))
    return bytes(a ^ b for a, b in zip(data, stream, strict=True))


def _unseal(text: str) -> bytes | None:
    """What :func:`_seal` sealed, or ``None`` when it was sealed by a process that is not a
    ``multiprocessing`` parent of this one (another program's, inherited through a subprocess)."""
    seal_key, mac_key = _keys()
    try:
        raw = base64.urlsafe_b64decode(text.encode("ascii"))
    except (ValueError, UnicodeError):
        return None
    tag, sealed = raw[:16], raw[16:]
    if len(sealed) < 16 or not hmac.compare_digest(
        tag, hmac.new(mac_key, sealed, hashlib.sha256).digest()[:16]
    ):
        return None
    return _keystream_xor(seal_key, sealed[:16], sealed[16:])


def _in_forkserver() -> bool:
    """Whether this is multiprocessing's fork server importing the main module (preload), not
    one of its children (they run on the fork server's stack, as processes of their parent)."""
    if multiprocessing.parent_process() is not None:
        return False
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename.endswith(os.path.join("multiprocessing", "forkserver.py")):
            return True
        frame = frame.f_back
    return False


def adopt_parent_setup() -> None:
    """In a process that ``multiprocessing`` started: run the ``setup()`` the parent left for
    it (:func:`_pass_to_children`), if this one has none. In a fork server, have each child it
    forks do so as it starts."""
    try:
        if _CURRENT:
            return
        if _in_forkserver():
            # It only forks: setting up there could deadlock its children. multiprocessing
            # runs its after-fork hooks in each of them, once the child has its process object.
            multiprocessing.util.register_after_fork(_ADOPTER, _adopt_in_child)
            return
        if multiprocessing.parent_process() is not None:  # the child runs: its process object
            plain = _process_config().get(CHILD_SETUP_ENV)
            if not isinstance(plain, str):
                # Not handed a setup: a setup the environment holds is stale (the fork
                # server's, from before the parent's close()); its own children must not read it.
                os.environ.pop(CHILD_SETUP_ENV, None)
                return
            raw: bytes | None = plain.encode()
        else:
            # A spawned child imports the parent's main module as "__mp_main__" (in the parent,
            # "__mp_main__" is an alias of "__main__") before its process object arrives.
            main = sys.modules.get("__mp_main__")
            sealed = os.environ.get(CHILD_SETUP_ENV)
            if getattr(main, "__name__", None) != "__mp_main__" or sealed is None:
                return
            # None when sealed by another program's (through a subprocess), or by the parent
            # before it changed its authentication key: _when_spawned looks again.
            raw = _unseal(sealed)
        if raw is None:
            return
        arguments = json.loads(raw)
        if isinstance(arguments, dict):
            with parent_said_it():
                setup(**arguments)
    except Exception as exc:  # a child must run whatever its parent's settings
        sys.stderr.write(f"eventlog_handler: the parent's setup() failed here: {exc}\n")


def _when_spawned() -> None:
    """In a spawned child, once its process object is here (see
    :data:`~eventlog_handler.integrations._hooks.WHEN_SPAWNED`): adopt the parent's setup from
    that object, if the environment held none this process could read; or, where a setup ran
    while the main module was imported, make what it left for this process's own children its
    process object's (it went to the one ``multiprocessing`` had before, which is gone)."""
    active = current()
    if active is None:
        adopt_parent_setup()
        return
    config = _process_config()
    if active.for_children is None:
        config.pop(CHILD_SETUP_ENV, None)
    else:
        config[CHILD_SETUP_ENV] = active.for_children.plain


WHEN_SPAWNED.append(_when_spawned)


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
