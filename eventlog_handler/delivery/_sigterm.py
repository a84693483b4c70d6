"""The flush on ``SIGTERM``: one handler, for a program and for a :mod:`multiprocessing` child.

A process manager (systemd, Kubernetes, ``docker stop``) and ``Pool.__exit__`` end a process
with ``SIGTERM``, whose default ends it at once, without ``atexit``: the events it logged just
before would die with it. The handler made here runs the exit flush, then does what was going
to happen anyway: it calls the previous Python handler, does nothing (``SIG_IGN``), or, for the
default, ends the process by ``SIGTERM`` as before.

A Python signal handler runs in the main thread, between two bytecodes. A signal that arrives
just before the main thread blocks in C (``time.sleep``, a join, a pool worker waiting on its
task queue's semaphore), or that the kernel hands to another thread, is caught but its handler
does not run until that call returns, perhaps never. The default action would have ended the
process at once, so a handler that replaces it must not leave the process hanging there. A
small watcher thread reads the signal wakeup file descriptor (where the C-level handler writes
the number of each signal caught, whatever the thread); when ``SIGTERM`` came and the flush
has not started, it sends ``SIGTERM`` again to the main thread itself, which interrupts the
wait and runs the handler. The watcher serves only a handler that ends in the default action
(a program's own Python handler has that race without this package too), and is only started
where no wakeup descriptor was set. A library that sets its own later (asyncio, trio, Twisted)
takes it over and is told that none was set, as it would be without this package; when it
lets it go, the watcher's is set again. A forked child does not share the parent's descriptor:
it starts over without one. The package's threads block every signal (:func:`block_signals`),
so the kernel gives a process's signals to the program's threads. Where gevent or eventlet
made threads greenlets of the main thread, there is no watcher, and nothing is blocked.

The byte in the pipe does not say which handler the main thread will run: a program that puts
a handler of its own in place for a moment, gets ``SIGTERM`` then, and puts the flush back
within a few milliseconds, would be nudged into the flush as if the signal were still pending.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from eventlog_handler.delivery._stderr import say_once

Handler = Callable[[int, "FrameType | None"], None]

#: The attribute of a handler made here that ends the process by the default action: a list
#: whose one item says whether its flush has started (the watcher reads it; a child replaces
#: such a handler). A list, not a lock-based event: a fork can't leave it locked.
FLUSH_MARK = "_eventlog_handler_flush"
#: The attribute of every handler made here (``True``), whatever it chains to.
HANDLER_MARK = "_eventlog_handler_sigterm"

#: Seconds the watcher gives the main thread to start the handler before it signals again.
NUDGE_AFTER = 0.2

#: This process's wakeup pipe (reader, writer), while its watcher runs.
_pipe: tuple[int, int] | None = None
#: Each forking thread's signal masks before :func:`_before_fork` blocked ``SIGTERM`` in it, by
#: thread (two threads may fork at once), innermost last (an after-fork hook may fork again).
_masks_before_fork: dict[int, list[set[int | signal.Signals]]] = {}

#: :func:`signal.set_wakeup_fd` as it was, before it was wrapped (see :func:`_set_wakeup_fd`).
_original_set_wakeup_fd = signal.set_wakeup_fd


def install(
    flush: Callable[[], object],
    previous: Any,
    resume: Callable[[], object] | None = None,
    carry_on: Callable[[], str] | None = None,
) -> Handler:
    """Install the ``SIGTERM`` handler that runs ``flush`` and then chains to ``previous``
    (see the module docstring); the main thread only. Returns the handler. ``resume`` is
    called when the process outlives the default action, and ``carry_on`` runs instead of
    ``flush`` in a process that will (see :func:`_flush_then`)."""
    handler = _flush_then(flush, previous, resume, carry_on)
    signal.signal(signal.SIGTERM, handler)
    if getattr(handler, FLUSH_MARK, None) is not None:
        _watch()
    return handler


def terminate_gracefully(flush: Callable[[], object]) -> bool:
    """In a child process, flush when ``SIGTERM`` ends it; ``True`` if it does now. Only from
    the main thread, and only where ``SIGTERM`` has its default disposition: a handler made
    here (``setup()`` in the child) is kept, and so is the program's own."""
    if not main_os_thread():
        return False
    try:
        current = signal.getsignal(signal.SIGTERM)
        if getattr(current, HANDLER_MARK, False):
            return True  # this process's flush already
        if current is not signal.SIG_DFL:
            return False  # the program's own handler
        install(flush, signal.SIG_DFL)
    except (ValueError, OSError, AttributeError):  # no SIGTERM here, or not allowed
        return False
    return True


def block_signals() -> None:
    """Keep signals away from the calling thread (one of this package's threads): the kernel
    then hands a process's signals to the program's threads, and a program that blocks
    ``SIGTERM`` to ``sigwait`` for it gets it. Not in a green thread (:func:`green_thread`):
    there the mask is the main thread's, and blocking would keep every signal from the
    program (``SIGTERM``, Ctrl-C, the ``SIGCHLD`` that ends a ``subprocess.run``)."""
    if green_thread():
        return
    with contextlib.suppress(AttributeError, ValueError, OSError):
        signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals() - _FAULTS)


def main_os_thread() -> bool:
    """Whether the caller runs on the main thread's OS thread, where Python lets a program set
    signal handlers: the main thread, or a greenlet on it (eventlet's monkey-patching makes
    its main greenlet a thread other than :func:`threading.main_thread`)."""
    if threading.current_thread() is threading.main_thread():
        return True
    try:
        return threading.get_native_id() == _main_native_id()
    except Exception:  # pragma: no cover - no native ids here
        return False


def green_thread() -> bool:
    """Whether the calling thread, not the main one, runs on the main thread's OS thread: a
    greenlet, where gevent's or eventlet's monkey-patching made :mod:`threading` start
    greenlets instead of OS threads."""
    try:
        return (
            threading.current_thread() is not threading.main_thread()
            and threading.get_native_id() == _main_native_id()
        )
    except Exception:  # pragma: no cover - no native ids here: OS threads
        return False


def _main_native_id() -> int | None:
    """The OS id of the main thread. On Linux the process's id: a forked child's main thread
    keeps its parent's ``native_id`` in :mod:`threading` (gunicorn's workers, which gevent
    patches after the fork)."""
    if _LINUX:
        return os.getpid()
    return threading.main_thread().native_id


_LINUX: bool = sys.platform.startswith("linux")


#: Signals a thread's own fault raises (``faulthandler`` reports them): never blocked.
_FAULTS = frozenset(
    getattr(signal, name)
    for name in ("SIGSEGV", "SIGBUS", "SIGFPE", "SIGILL", "SIGABRT", "SIGTRAP", "SIGSYS")
    if hasattr(signal, name)
)


def _flush_then(
    flush: Callable[[], object],
    previous: Any,
    resume: Callable[[], object] | None = None,
    carry_on: Callable[[], str] | None = None,
) -> Handler:
    """The handler: ``flush``, then ``previous``. Where that is the default action, it is
    taken by sending ``SIGTERM`` again; a process that is still there afterwards is the
    first of its PID namespace (a container's process 1 without an init), for which the
    kernel ignores it. That program runs on as it would have without this package; the
    handler is put back, ``resume`` called (delivery goes on), and stderr says so once.

    Such a process is known before the flush (:func:`outlives_default`): it gets
    ``carry_on`` instead, a flush that leaves delivery running (no exit: nothing is counted
    as lost at an exit deadline that does not come), which returns what stderr says of its
    outcome."""
    ends = previous in (signal.SIG_DFL, None)  # None: a handler not set from Python
    started = [False]

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        if _spawned_from_event_loop(on_sigterm, signum, frame):
            return
        if started[0]:
            # The watcher's nudge, or a second SIGTERM, while the flush runs: not flushed
            # again, but the program's own handler hears every signal.
            if not ends and callable(previous):
                previous(signum, frame)
            return
        started[0] = True
        outcome: str | None = None
        try:
            if ends and carry_on is not None and outlives_default():
                outcome = carry_on()
            else:
                flush()
        finally:
            if ends:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                os.kill(os.getpid(), signal.SIGTERM)
                _outlived_sigterm(on_sigterm, resume, outcome)
            started[0] = False
        if callable(previous):
            previous(signum, frame)

    setattr(on_sigterm, HANDLER_MARK, True)
    if ends:
        setattr(on_sigterm, FLUSH_MARK, started)
    return on_sigterm


#: Seconds a process 1 that outlived ``SIGTERM`` runs on before stderr says so: a server that
#: takes ``SIGTERM`` as its cue to stop (uvicorn sends it to itself again once it has shut
#: down) ends within them, and is not told that it did not.
OUTLIVED_NOTICE_DELAY = 1.0
_exiting = threading.Event()
_noticing: set[str] = set()  # the signals whose notice was started


def outlives_default() -> bool:
    """Whether the kernel ignores this process's default action for ``SIGTERM`` and
    ``SIGHUP``: it is process 1 of its PID namespace (a container's main process without an
    init), and nothing ends it but a handler of its own or ``SIGKILL``."""
    return os.getpid() == 1


def _outlived_sigterm(
    handler: Handler, resume: Callable[[], object] | None, outcome: str | None = None
) -> None:
    """Still running after ``SIGTERM``'s default action (see :func:`_flush_then`);
    ``outcome``: what the flush did, as stderr says it."""
    signal.signal(signal.SIGTERM, handler)
    if resume is not None:
        resume()
    notice_outlived("SIGTERM", outcome)


def notice_outlived(name: str, outcome: str | None) -> None:
    """Say once on stderr, unless the program ends within :data:`OUTLIVED_NOTICE_DELAY`, that
    the signal ``name`` did not end this process 1, and ``outcome`` (what its flush did). Safe
    in a signal handler."""
    if name in _noticing:
        return
    _noticing.add(name)
    import _thread
    import atexit

    if len(_noticing) == 1:
        atexit.register(_exiting.set)
    # Not threading's start(), which waits for the thread's start-up: this runs in a signal
    # handler, which may have come while the main thread holds a lock the start-up needs.
    with contextlib.suppress(RuntimeError):  # interpreter shutdown
        _thread.start_new_thread(_say_outlived, (name, outcome))


def _say_outlived(name: str, outcome: str | None) -> None:
    block_signals()
    if _exiting.wait(OUTLIVED_NOTICE_DELAY):
        return  # the program ended by itself meanwhile
    if outcome is None:  # the exit flush ran: its own lines said what it could not send
        outcome = "Sending goes on for what it logs from now on."
    say_once(
        f"outlived {name}",
        (
            f"eventlog_handler: {name} did not end this process: it is process 1 of its "
            f"container, which ignores {name} without a handler of its own. {outcome} Run it "
            f"under an init (docker run --init, tini) for {name} to end it."
        ),
    )


def _spawned_from_event_loop(handler: Handler, signum: int, frame: FrameType | None) -> bool:
    """Under gevent or eventlet, a signal handler may run in their event loop's own greenlet,
    which must not wait (gevent raises ``BlockingSwitchOutError``): then the handler is
    started in a greenlet of its own, which the loop runs next. ``True`` when it was."""
    try:
        green = _event_loop_spawn()
        if green is None:
            return False
        green(handler, signum, frame)
    except Exception:  # not run here after all: the handler runs as it is
        return False
    return True


def _never() -> bool:
    return False


#: Whether the calling thread (or greenlet) is the delivery worker's: set by the engine.
is_sending: Callable[[], bool] = _never


def _event_loop_spawn() -> Callable[..., Any] | None:
    """``spawn`` of gevent or eventlet when the caller runs in their event loop's greenlet, or
    in the delivery worker's (a signal lands in whichever greenlet runs: there, the flush would
    wait for itself, and every pending event was dropped at once)."""
    monkey = sys.modules.get("gevent.monkey")
    sending = is_sending()
    if monkey is not None and monkey.is_module_patched("threading"):
        gevent: Any = importlib.import_module("gevent")
        return gevent.spawn if sending or gevent.getcurrent() is gevent.get_hub() else None
    patcher = sys.modules.get("eventlet.patcher")
    if patcher is not None and patcher.is_monkey_patched("thread"):
        eventlet: Any = importlib.import_module("eventlet")
        hub = importlib.import_module("eventlet.hubs").get_hub()
        return eventlet.spawn if sending or eventlet.getcurrent() is hub.greenlet else None
    return None


def _watch() -> None:
    """Start this process's watcher thread (see the module docstring), where the wakeup
    descriptor is free. Never raises: without a watcher the handler still works."""
    global _pipe
    if not hasattr(signal, "pthread_kill"):
        return
    if _pipe is not None:  # the watcher runs: take the descriptor back if it was let go since
        with contextlib.suppress(ValueError, OSError):
            current = _original_set_wakeup_fd(_pipe[1], warn_on_full_buffer=False)
            if current not in (-1, _pipe[1]):
                _restore(current)
        return
    try:
        reader, writer = os.pipe()
    except OSError:
        return
    previous: int | None = None
    with contextlib.suppress(ValueError, OSError):  # ValueError: not the main thread
        os.set_blocking(writer, False)
        previous = _original_set_wakeup_fd(writer, warn_on_full_buffer=False)
    if previous != -1:  # not allowed here, or somebody else's: leave it to them
        if previous is not None:
            _restore(previous)
        os.close(reader)
        os.close(writer)
        return
    _pipe = (reader, writer)
    signal.set_wakeup_fd = _set_wakeup_fd
    try:
        threading.Thread(
            target=_watcher,
            args=(reader, threading.main_thread().ident),
            name="eventlog-handler-sigterm",
            daemon=True,
        ).start()
    except RuntimeError:  # no thread can start now (the interpreter is exiting)
        _release(forked=True)  # no watcher reads the pipe: both ends closed here


def _restore(fd: int) -> None:
    """Put back the wakeup descriptor somebody else had set. Whether they wanted a warning
    when it is full is not known: not, which is what trio asks (asyncio's pipe being full
    only means signals were coalesced)."""
    with contextlib.suppress(ValueError, OSError):
        _original_set_wakeup_fd(fd, warn_on_full_buffer=False)


def _set_wakeup_fd(fd: int, /, *, warn_on_full_buffer: bool = True) -> int:
    """:func:`signal.set_wakeup_fd`, to which the watcher's descriptor is invisible: a library
    that sets its own (asyncio, trio, Twisted) takes it over and is told that none was set, as
    it would be without this package (trio warns of a collision otherwise); when it lets its
    own go (``-1``), the watcher's is set again."""
    if _pipe is not None and fd == -1:
        previous = _original_set_wakeup_fd(_pipe[1], warn_on_full_buffer=False)
        return -1 if previous == _pipe[1] else previous
    previous = _original_set_wakeup_fd(fd, warn_on_full_buffer=warn_on_full_buffer)
    if _pipe is not None and previous == _pipe[1] and fd != previous:
        return -1
    return previous


def _watcher(reader: int, main: int | None) -> None:
    try:
        if green_thread():
            # gevent or eventlet: a blocking read would stop the whole program here, and
            # no wait in C keeps the handler from running (their loops run it): no watcher.
            stop_watching()
            return
        block_signals()
        while main is not None:
            caught = os.read(reader, 64)
            if not caught:
                return  # the writer was closed: the flush was removed
            if signal.SIGTERM not in caught:
                continue
            started = getattr(signal.getsignal(signal.SIGTERM), FLUSH_MARK, None)
            while started is not None and not started[0]:
                time.sleep(NUDGE_AFTER)
                if (
                    started[0]
                    or getattr(signal.getsignal(signal.SIGTERM), FLUSH_MARK, None) is not started
                ):
                    break
                signal.pthread_kill(main, signal.SIGTERM)
    except Exception:  # pragma: no cover - a watcher that fails leaves the handler as it is
        pass
    finally:
        with contextlib.suppress(OSError):
            os.close(reader)


def stop_watching() -> None:
    """Give the wakeup descriptor back (unless somebody else has set theirs since) and let the
    watcher end: when the flush is removed."""
    _release(forked=False)


def _release(forked: bool) -> None:
    global _pipe
    if _pipe is None:
        return
    reader, writer = _pipe
    _pipe = None
    with contextlib.suppress(ValueError, OSError):
        current = _original_set_wakeup_fd(-1)
        if current != writer:
            _restore(current)  # set by somebody else since: theirs
    # The watcher reads the end of the pipe once its writer is closed, and closes the reader
    # itself. A forked child has no watcher: it closes both, so that a signal it catches can't
    # make the parent's watcher nudge the parent (the child's own flush starts its own).
    for fd in (writer, reader) if forked else (writer,):
        with contextlib.suppress(OSError):
            os.close(fd)


#: Whether this process is a forked child that inherited the flush (ending in the default
#: action) and had it taken back (see :func:`_after_fork_in_child`).
inherited_flush = False
#: Whether the program said not to flush on ``SIGTERM`` (``setup(flush_on_sigterm=False)``):
#: its children, forked or spawned with the same arguments, do not either.
declined = False


def _before_fork() -> None:
    """Block ``SIGTERM`` in the forking thread (whichever it is: a pool's worker handler forks
    from its own) while the process forks, where a handler made here or its watcher is in
    place.

    The child is a copy of that thread, with its mask: a ``SIGTERM`` that reaches the child
    before its Python code runs again (``Pool.__exit__`` ends the workers that a pool has just
    started in place of finished ones), or while after-fork hooks run, waits until the
    package's hooks have made the child's state its own (:func:`unblock_after_fork`), then
    acts. Caught at once, it would have hit the parent's flush, which the child then takes
    back, and been lost (the child would wait for a task for ever); its byte in the parent's
    wakeup pipe would have made the parent's watcher nudge the parent into its flush and its
    end; and a flush that chains to the program's handler would have flushed the parent's
    queue as copied into the child, which has no worker for it."""
    with contextlib.suppress(ValueError, OSError, AttributeError):
        if _pipe is not None or getattr(signal.getsignal(signal.SIGTERM), HANDLER_MARK, False):
            mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
            _masks_before_fork.setdefault(threading.get_ident(), []).append(mask)


def unblock_after_fork() -> None:
    """In a child, put back the mask the forking thread had before the first fork that is still
    going on in it: the engine calls this once its own after-fork hook has made the child's
    state its own, so that a ``SIGTERM`` held back meanwhile finds the child ready. No other
    thread exists there, and no fork is going on in the child itself."""
    masks = _masks_before_fork.pop(threading.get_ident(), None)
    _masks_before_fork.clear()
    if masks:
        with contextlib.suppress(ValueError, OSError):
            signal.pthread_sigmask(signal.SIG_SETMASK, masks[0])


def _after_fork_in_parent() -> None:
    """Put back the mask of the fork that just ended in the calling thread: the one before it,
    still blocked where that fork was made by an after-fork hook of an outer one."""
    ident = threading.get_ident()
    masks = _masks_before_fork.get(ident)
    if masks:
        mask = masks.pop()
        if not masks:
            del _masks_before_fork[ident]
        with contextlib.suppress(ValueError, OSError):
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def _after_fork_in_child() -> None:
    """A forked child has no watcher, so the parent's flush, if it ends in the default action,
    would leave the child hanging where that action would have ended it: a ``SIGTERM`` that
    lands just before the child blocks in C (a pool worker waiting for its next task, when
    ``Pool.__exit__`` terminates it) is caught, and its handler never runs. Until the child
    logs, it has nothing to flush: the default is put back. A child that starts sending gets
    the flush again, with a watcher of its own (:func:`terminate_gracefully`, from the engine).
    ``SIGTERM`` stays blocked until the engine's own after-fork hook has run (it calls
    :func:`unblock_after_fork`).
    """
    global inherited_flush
    _release(forked=True)
    with contextlib.suppress(ValueError, OSError, AttributeError):
        if getattr(signal.getsignal(signal.SIGTERM), FLUSH_MARK, None) is not None:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            inherited_flush = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=_before_fork,
        after_in_parent=_after_fork_in_parent,
        after_in_child=_after_fork_in_child,
    )
