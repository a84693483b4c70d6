"""The delivery engine: from "an event was captured" to "the service has it".

One :class:`Engine` per process per (server, key), shared by every handler and processor that
points there (:func:`get_engine`). It only composes; each part is handed the collaborators it
uses and nothing else, and none reaches the others through the engine:

=========================  =====================================================================
:mod:`._intake`            the caller's side: the bounded buffer, waking the worker, back-pressure
:mod:`._worker`            the worker thread: waits until something is due, takes it, runs it
:mod:`._pipeline`          finish, ``@version``, ``before_send``, scrub, roll-up
:mod:`._delivery`          encode, compress, post, retry, settle; what stderr says
:mod:`._spooling`          the durable spool: spill, bound, replay
:mod:`._lifecycle`         flush, close, the exit flush
:mod:`._server_settings`   the service's settings, fetched by the worker
:mod:`._errands`           requests that are not event posts: user descriptions, heartbeats
:mod:`._sessions`          the process's session: its start event, heartbeats and end
:mod:`._ledger`            the lock, the condition, and the counts of every outcome
:mod:`._state`             flushing, closing and the exit deadline, shared by the parts
=========================  =====================================================================

The parts are built bottom up, each after what it uses: the spool traffic before the delivery,
which holds it (it spills during an outage); where the spool traffic sends from disk, the worker
hands it the delivery for that call. The intake alone is given two callables after the worker
and the spool exist (start the worker; whether the disk takes events now).

The path of an event: ``EventLogHandler.emit`` →
:func:`~eventlog_handler.capture._records.capture_record` → :meth:`Engine.submit` →
:meth:`Intake.put <._intake.Intake.put>` (the buffer) → the worker (a batch is due) →
:meth:`Pipeline.run <._pipeline.Pipeline.run>` (wire events) →
:meth:`Delivery.send_events <._delivery.Delivery.send_events>` (the socket).

Accounting: ``captured == delivered + sum(dropped) + queued + in_flight + spooled`` always
(:class:`~._ledger.Ledger`).
"""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing
import multiprocessing.util
import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from eventlog_handler.api._client import Client
from eventlog_handler.delivery import _sigterm as sigterm
from eventlog_handler.delivery import _uwsgi as uwsgi
from eventlog_handler.delivery._buffer import Entry
from eventlog_handler.delivery._delivery import REFUSED_AT_EXIT, Delivery
from eventlog_handler.delivery._errands import Errand, Errands
from eventlog_handler.delivery._intake import Intake
from eventlog_handler.delivery._ledger import DROP_REASONS, Ledger
from eventlog_handler.delivery._lifecycle import Lifecycle
from eventlog_handler.delivery._pipeline import Pipeline
from eventlog_handler.delivery._retry import RetryPolicy
from eventlog_handler.delivery._rollup import Rollup
from eventlog_handler.delivery._sender import Sender
from eventlog_handler.delivery._server_settings import ServerSettings, SettingsFetch
from eventlog_handler.delivery._sessions import Sessions
from eventlog_handler.delivery._sigterm import block_signals, terminate_gracefully
from eventlog_handler.delivery._spool import Spool, target_tag
from eventlog_handler.delivery._spooling import SpoolTraffic
from eventlog_handler.delivery._state import RunState
from eventlog_handler.delivery._stderr import redact, say, say_once
from eventlog_handler.delivery._worker import SENDER_THREADS, Worker, is_sender_thread
from eventlog_handler.settings import Settings, mask_secret
from eventlog_handler.wire._levels import NUMBERS

__all__ = [
    "DROP_REASONS",
    "Engine",
    "engines",
    "get_engine",
    "is_sender_thread",
    "remove_engines",
    "shutdown_all",
]

#: Bumped in a forked child: an engine whose generation differs was made by the parent.
_generation = 0
#: Whether this process (a forked or multiprocessing child) flushes on SIGTERM.
_terminate_guarded = False
#: Where it should and waits for its main thread to log to put the flush in place: the main
#: thread's ident.
_terminate_wanted: int | None = None
#: The ident of this process's main thread (in a forked child, the thread that forked).
_main_ident = threading.main_thread().ident
#: In a child forked from a thread other than its parent's main thread: that thread, whose end
#: ends the child (see :func:`_end_with`), until it is watched.
_primary: threading.Thread | None = None


class Engine:
    """One server and key in one process: the buffer, the worker and everything in between."""

    def __init__(
        self,
        settings: Settings,
        *,
        client_factory: Callable[[Settings, float | None], Client] | None = None,
    ) -> None:
        self.settings = settings
        #: Why this engine can't send (a missing or malformed key or URL): every event it is
        #: given is dropped, counted as ``unconfigured``.
        self.problem = settings.problem or (None if settings.api_key else "no API key is set")
        self.policy = RetryPolicy(
            initial=settings.retry_initial,
            maximum=settings.max_backoff,
            refused_delay=min(60.0, settings.max_backoff),
        )
        self._client_factory = client_factory or _default_client
        self._spool: Spool | None = None
        self._spool_refused = False
        #: The service's settings: fetched by the worker, read by every caller.
        self.server_settings = SettingsFetch(
            settings.server_settings, lambda text: redact(text, *settings.secrets)
        )
        self._reset_process_state()
        uwsgi.chain_post_fork(_after_fork_in_child)  # a hook the program set since import
        uwsgi.advise_in_master()
        if settings.spool_path and self.problem is None:
            with self.ledger.lock:  # replay what ended processes left in the spool, from the start
                self.worker.start()

    def __repr__(self) -> str:
        return (
            f"<Engine {self.settings.shown_url} key={mask_secret(self.settings.api_key)} "
            f"queued={len(self.intake.buffer)}>"
        )

    # -- state of this process ----------------------------------------------------------------

    def _reset_process_state(self) -> None:
        settings = self.settings
        if self._spool is not None:  # a forked child: the parent's file stays the parent's
            self._spool.after_fork()
        self._generation = _generation
        self._pid = os.getpid()
        self._client: Client | None = None
        self.server_settings.restart()
        self.state = state = RunState()
        self.ledger = ledger = Ledger()
        self.intake = intake = Intake(settings, ledger, state)
        self.errands = errands = Errands(ledger, self.policy)
        self.sessions = (
            Sessions(settings, ledger, errands, lambda event: self.enqueue(event, urgent=True))
            if settings.sessions
            else None
        )
        rollup = Rollup(settings.rollup_window, settings.memory_budget // 8)
        self.pipeline = pipeline = Pipeline(settings, ledger, rollup, self._server, self.sessions)
        if (
            settings.spool_path
            and self._spool is None
            and not self._spool_refused
            and self.problem is None
        ):
            spool = Spool(
                settings.spool_path,
                settings.spool_max_bytes,
                target_tag(settings.api_key or ""),
            )
            why = spool.check()
            if why is None:
                self._spool = spool
            else:
                self._spool_refused = True
                say(
                    f"eventlog_handler: the spool directory {settings.spool_path} can't be used "
                    f"({why}); events are kept in memory only."
                )
        self.spooling: SpoolTraffic | None = None
        if self._spool is not None:
            self.spooling = SpoolTraffic(
                self._spool,
                settings,
                ledger,
                intake,
                state,
                lambda entries: pipeline.run(entries, rollup=False),
            )
        self.delivery = delivery = Delivery(
            settings,
            ledger,
            intake,
            state,
            self.policy,
            self.client,
            self.server_settings.seen,
            self.spooling,
            # A multiprocessing child's exit is part of the program's work (Pool.__exit__,
            # an executor's shutdown wait for it): one that never reached the server does not
            # wait for it to start; one that did (a long-lived worker) waits out a restart.
            lambda: (
                0.0
                if _in_multiprocessing_child() and not self.ledger.delivered
                else REFUSED_AT_EXIT
            ),
        )
        self.worker = worker = Worker(
            settings,
            ledger,
            intake,
            state,
            pipeline,
            rollup,
            delivery,
            self.spooling,
            self.server_settings,
            self.client,
            self.same_process,
            errands,
        )
        intake.start_worker = self._start_worker
        if self.spooling is not None:
            intake.spilling = self.spooling.accepting
        self.lifecycle = Lifecycle(
            settings,
            ledger,
            intake,
            state,
            worker,
            pipeline,
            rollup,
            delivery,
            self.spooling,
            self.client,
            self.check_process,
            errands,
            self.sessions,
        )

    @property
    def server(self) -> ServerSettings:
        """The service's settings in force (read on the caller's thread, without a lock)."""
        return self.server_settings.current

    def _server(self) -> ServerSettings:
        return self.server_settings.current

    def _start_worker(self) -> bool:
        """Start the worker (the lock is held), and in a child, the flush on SIGTERM
        (:func:`_guard_child`) and the end with its thread (:func:`_end_with`)."""
        global _primary
        _guard_child()
        if _primary is not None:
            primary, _primary = _primary, None
            with contextlib.suppress(RuntimeError):  # no thread can start now
                threading.Thread(
                    target=_end_with, args=(primary,), name="eventlog-handler-exit", daemon=True
                ).start()
        return self.worker.start()

    def same_process(self) -> bool:
        return self._generation == _generation

    def check_process(self) -> None:
        """In a forked child, start over (see :mod:`eventlog_handler.delivery._lifecycle`)."""
        if self._generation != _generation and self._pid != os.getpid():
            self._reset_process_state()

    # -- the caller's side ----------------------------------------------------------------------

    def submit(self, entry: Entry) -> bool:
        """Queue a captured entry. O(1) and never raises. ``False`` when it was dropped at
        once (counted), or when the calling thread is a sender (not counted)."""
        try:
            if self._generation != _generation:
                self.check_process()
            ident = threading.get_ident()
            if ident == _terminate_wanted:
                _guard_child()
            if ident in SENDER_THREADS:
                return False
            if self.problem is not None:
                with self.ledger.lock:
                    self.ledger.captured += 1
                    self.ledger.dropped["unconfigured"] += 1
                return False
            return self.intake.put(entry)
        except Exception:  # pragma: no cover - a log call must never raise
            return False

    def enqueue(
        self,
        event: dict[str, Any],
        created: float | None = None,
        *,
        urgent: bool = False,
        exc: BaseException | None = None,
        settings: Settings | None = None,
    ) -> bool:
        """Queue a complete, JSON-ready event; ``created`` is its POSIX time (default: now).

        An error (and an ``urgent`` event: a session's start) waits ``error_delay``, not
        ``flush_interval``. ``exc``: the exception the event reports, for a ``before_send``
        hook's hint (give it only when one is set: the entry keeps a copy). ``settings``: those
        of the handler or setup the event comes from (default: the engine's), whose
        ``before_send`` it goes through."""
        try:
            level = event.get("@level")
            if level is None and type(event.get("data")) is dict:
                level = event["data"].get("@level")
            is_error = urgent or event.get("type") == "error" or level in ("Error", "Fatal")
            entry = Entry(
                self.settings if settings is None else settings,
                event,
                NUMBERS.get(level.lower(), 0) if type(level) is str else 0,
                event.get("source"),
                None,
                time.time() if created is None else created,
                time.monotonic(),
                is_error=is_error,
                exc=exc,
            )
            return self.submit(entry)
        except Exception:  # pragma: no cover - a log call must never raise
            return False

    def errand(self, errand: Errand) -> bool:
        """Queue a request that is not an event post (see :mod:`._errands`); ``False`` when
        this engine can't send, or its exit flush is over."""
        try:
            self.check_process()
            if self.problem is not None or threading.get_ident() in SENDER_THREADS:
                return False
            with self.ledger.lock:
                if self.intake.finished:
                    return False
                if self.worker.thread is None and not self._start_worker():
                    return False
                self.errands.put(errand)
            return True
        except Exception:  # pragma: no cover - never raises into the application
            return False

    def count_filtered(self) -> None:
        """A captured event that settings filter out (``ignore_exceptions``, ``@@error:*``)."""
        with self.ledger.lock:
            self.ledger.captured += 1
            self.ledger.dropped["filtered"] += 1

    def client(self, timeout: float | None = None) -> Client:
        """The worker's client (``timeout``: a new one bounded by it, for the exit path)."""
        if timeout is not None:
            return self._client_factory(self.settings, timeout)
        if self._client is None:
            self._client = self._client_factory(self.settings, None)
        return self._client

    # -- flush, close, exit -------------------------------------------------------------------

    def flush(self, timeout: float = 5.0, *, until_failure: bool = False) -> bool:
        """Send what is pending now; wait at most ``timeout`` s. ``True`` when all was sent
        (``until_failure``: see :meth:`~eventlog_handler.delivery._lifecycle.Lifecycle.flush`)."""
        try:
            return self.lifecycle.flush(timeout, until_failure=until_failure)
        except Exception:  # pragma: no cover - flush must return
            return False

    def close(self, timeout: float = 5.0) -> bool:
        """Flush, then stop the worker; a later event starts a new one. Returns by the deadline."""
        return self.lifecycle.close(timeout)

    def shutdown(self, timeout: float | None = None, *, late: bool = False) -> int:
        """The exit flush: send for at most ``timeout`` s, then stop. Returns events unsent
        (see :mod:`eventlog_handler.delivery._lifecycle`). Events captured later are dropped,
        or with ``late`` (the interpreter's exit) sent by the thread that logs them."""
        return self.lifecycle.shutdown(timeout, late=late)

    # -- statistics -------------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Counts of this process: captured, delivered, dropped by reason, queued, in flight,
        spooled (on disk, waiting), retries, batches and bytes sent, the last error, and the
        events of ended processes replayed from the spool (not part of ``captured``)."""
        self.check_process()
        with self.ledger.lock:
            stats = self.ledger.snapshot(len(self.intake.buffer))
            own = self._spool.own_file if self._spool is not None else None
            stats["spool_bytes"] = own.bytes if own is not None else 0
            ledger = self.ledger
            stats["memory_bytes"] = (
                self.intake.buffer.bytes + ledger.in_flight_bytes + ledger.held_bytes
            )
            stats["worker_alive"] = self.worker.thread is not None and self.worker.thread.is_alive()
            server = self.server_settings
            stats["server_settings_version"] = (
                server.current.version if server.current.version >= 0 else None
            )
            stats["server_settings_error"] = server.error
            stats["side_requests"] = self.errands.snapshot()
            return stats


def _default_client(settings: Settings, timeout: float | None) -> Client:
    total = settings.timeout if timeout is None else max(0.05, min(timeout, settings.timeout))
    assert settings.api_key is not None
    options: dict[str, Any] = {"timeout": (min(total, 5.0), total), "verify": settings.verify}
    try:
        return Sender(settings.server_url, settings.api_key, **options)
    except Warning as exc:
        # A warnings filter made the plain-http notice an error (python -W error): the worker
        # must not stop for it. Said on stderr instead (once), and the events are sent all
        # the same.
        say_once(str(exc), str(exc))
        return Sender(settings.server_url, settings.api_key, warn_insecure=False, **options)


# -- one engine per process per (server, key) -------------------------------------------------

sigterm.is_sending = is_sender_thread  # a SIGTERM on the worker's greenlet: flushed elsewhere
_ENGINES: dict[tuple[str, str], Engine] = {}
#: Re-entrant: the ``SIGTERM`` handler of a process that outlives the signal (process 1)
#: forgets the engines it flushed (:func:`forget_finished`), and may run while this thread
#: holds the lock in :func:`get_engine`.
_REGISTRY_LOCK = threading.RLock()


def get_engine(settings: Settings) -> Engine:
    """The engine of this process for ``settings``' server and key (created on first use).

    Later settings for the same server and key share the first engine and its options.
    """
    engine = _ENGINES.get(settings.engine_key)
    if engine is not None:
        return engine
    with _REGISTRY_LOCK:
        engine = _ENGINES.get(settings.engine_key)
        if engine is None:
            engine = _ENGINES[settings.engine_key] = Engine(settings)
        return engine


def engines() -> list[Engine]:
    """Every engine of this process."""
    return list(_ENGINES.values())


#: ``(began, ended)``: the main thread's exception hook waited for its event then, as the
#: program ends; the exit flush that follows at once counts its deadline from ``began``. (One
#: that comes later, after an interactive console showed an exception, does not.)
_exit_began: tuple[float, float] | None = None
#: Seconds from the hook's wait to the exit flush within which that flush follows it.
EXIT_FOLLOWS = 0.5


def exit_begins(began: float) -> None:
    """The main thread's exception hook waited from ``began`` until now."""
    global _exit_began
    _exit_began = (began, time.monotonic())


def shutdown_all(timeout: float | None = None, *, late: bool = False) -> int:
    """Run every engine's exit flush within one deadline; return the events left unsent.
    ``late``: at the interpreter's exit (see :meth:`Engine.shutdown`)."""
    current = engines()
    if not current:
        return 0
    if timeout is None:
        timeout = max(engine.settings.shutdown_timeout for engine in current)
    deadline = time.monotonic() + timeout
    if late and _exit_began is not None and time.monotonic() - _exit_began[1] < EXIT_FOLLOWS:
        # Shared with the hook's wait that began the exit.
        deadline = max(time.monotonic(), min(deadline, _exit_began[0] + timeout))
    unsent = 0
    for engine in current:
        unsent += engine.shutdown(max(0.0, deadline - time.monotonic()), late=late)
        if engine.lifecycle.interrupted:  # a Ctrl-C ended the wait: the others don't wait
            deadline = time.monotonic()
    return unsent


def _at_exit() -> None:
    """The exit flush at the interpreter's exit (``atexit``)."""
    shutdown_all(late=True)


def forget_finished() -> None:
    """Forget the engines whose exit flush has run, so that the next event makes new ones: a
    process that outlived the ``SIGTERM`` after that flush (see
    :mod:`eventlog_handler.delivery._sigterm`) goes on sending."""
    with _REGISTRY_LOCK:
        for key, engine in list(_ENGINES.items()):
            if engine.intake.finished:
                del _ENGINES[key]


def remove_engines(server_url: str, timeout: float = 1.0) -> int:
    """Shut down and forget every engine that sends to ``server_url``; return events unsent."""
    with _REGISTRY_LOCK:
        keys = [key for key in list(_ENGINES) if key[0] == server_url.rstrip("/")]
        removed = [_ENGINES.pop(key) for key in keys]
    return sum(engine.shutdown(timeout) for engine in removed)


def _forget_engines_for_tests() -> None:
    """Drop every engine without sending (tests only)."""
    with _REGISTRY_LOCK:
        for engine in _ENGINES.values():
            with engine.ledger.lock:
                engine.intake.finished = True
                engine.ledger.changed.notify_all()
        _ENGINES.clear()


# -- the process around the engines ------------------------------------------------------------


def _in_multiprocessing_child() -> bool:
    try:
        return multiprocessing.parent_process() is not None
    except Exception:  # pragma: no cover - an unusual multiprocessing
        return False


def _guard_child() -> None:
    """In a multiprocessing child, or a forked child whose inherited flush was taken back at
    the fork, flush when SIGTERM ends it, once the child logs (only children that log are
    changed). Only the main thread may set a signal handler: when another thread logs first,
    the main thread's next log puts the flush in place (a child whose main thread never logs
    keeps SIGTERM's default action; ``setup()`` called there installs it)."""
    global _terminate_guarded, _terminate_wanted
    if _terminate_guarded or sigterm.declined:
        return
    if not (sigterm.inherited_flush or _in_multiprocessing_child()):
        return
    if not sigterm.main_os_thread():
        _terminate_wanted = threading.main_thread().ident
        return
    _terminate_wanted = None
    _terminate_guarded = terminate_gracefully(shutdown_all)


def _end_with(primary: threading.Thread) -> None:
    """In a child forked from a thread other than its parent's main thread, that thread is the
    child's only one, and no interpreter exit follows its end (no ``atexit``): the process
    ends when its last thread does, and this package's threads would keep it alive for ever
    (they block ``SIGTERM`` too). When that thread ends, run the exit flush and let the
    package's threads end."""
    block_signals()
    try:
        primary.join()
    except RuntimeError:  # pragma: no cover - a thread threading did not start: not joinable
        return
    shutdown_all()
    sigterm.stop_watching()


def _after_fork_in_child() -> None:
    global _REGISTRY_LOCK, _generation, _terminate_guarded, _terminate_wanted
    global _main_ident, _primary
    try:
        ident = threading.get_ident()
        _primary = threading.current_thread() if ident != _main_ident else None
        _main_ident = ident
        _generation += 1
        _terminate_guarded, _terminate_wanted = False, None
        _REGISTRY_LOCK = threading.RLock()
        SENDER_THREADS.clear()
        for engine in _ENGINES.values():
            engine._reset_process_state()
    finally:
        sigterm.unblock_after_fork()  # a SIGTERM that came during the fork acts now


class _ProcessHooks:
    """Anchor of the multiprocessing after-fork registration (it is kept by weak reference)."""

    @staticmethod
    def in_child(_anchor: object) -> None:
        # A multiprocessing child started by fork ends with os._exit(), which skips atexit,
        # but runs multiprocessing's own finalizers: flush there. (Pool.__exit__ ends its
        # workers with SIGTERM: see Engine._start_worker.)
        multiprocessing.util.Finalize(None, shutdown_all, exitpriority=100)


_PROCESS_HOOKS = _ProcessHooks()

# urllib3 closes a pool's connections from a weakref.finalize. The first finalize made in a
# process registers their atexit hook, which closes every pool's idle connections and then
# stops all finalizers. One made here, before the exit flush is registered, makes that hook
# run after the flush (atexit runs the last registered first): the flush posts on the
# connection the program already has (no new TLS handshake at exit), and a connection it opens
# is still closed, not left to the garbage collector open.
weakref.finalize(_PROCESS_HOOKS, int).atexit = False
atexit.register(_at_exit)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
uwsgi.chain_post_fork(_after_fork_in_child)  # whose forks run none of those hooks
multiprocessing.util.register_after_fork(_PROCESS_HOOKS, _ProcessHooks.in_child)
if multiprocessing.parent_process() is not None:
    # First imported in a multiprocessing child that is running its target (its after-fork
    # hooks ran before): it may end through os._exit (fork, forkserver) all the same.
    _ProcessHooks.in_child(_PROCESS_HOOKS)
