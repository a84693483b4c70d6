"""Uncaught exceptions: reported once, before the process ends, with the old hook still run."""

from __future__ import annotations

import sys
import textwrap
import threading
import time
from types import TracebackType
from typing import Any

from eventlog_handler import install_hooks
from eventlog_handler.delivery import _engine as transport
from eventlog_handler.integrations._hooks import ExceptionHooks
from eventlog_handler.settings import Settings
from tests.support.capture import CaptureServer
from tests.support.constants import API_KEY, FAST
from tests.support.faultserver import FaultServer
from tests.support.processes import run_python


def errors_of(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [event for event in events if event.get("type") == "error"]


def script(code: str) -> list[str]:
    return ["-c", textwrap.dedent(code)]


def test_uncaught_exception_in_the_main_thread(server: CaptureServer) -> None:
    result = run_python(
        server.url,
        script(
            """
            import logging, sys
            import eventlog_handler

            def previous(exc_type, exc, tb):
                print("PREVIOUS HOOK RAN", file=sys.stderr)
                sys.__excepthook__(exc_type, exc, tb)

            sys.excepthook = previous
            eventlog_handler.setup()
            eventlog_handler.set_user("u-1", name="Ann")
            logging.getLogger("app").info("starting")

            def crash():
                raise RuntimeError("main thread crash")

            crash()
            """
        ),
    )
    assert result.returncode == 1
    assert "PREVIOUS HOOK RAN" in result.stderr
    assert "Traceback (most recent call last)" in result.stderr
    assert "RuntimeError: main thread crash" in result.stderr
    events = server.wait_for(2)
    assert len(events) == 2
    (error,) = errors_of(events)
    assert error["@level"] == "Fatal"
    assert error["data"]["@submission_method"] == "unhandled_exception"
    assert error["@simple_error"]["type"] == "RuntimeError"
    assert error["@simple_error"]["message"] == "main thread crash"
    assert "in crash" in error["@simple_error"]["stack_trace"]
    assert error["@user"] == {"identity": "u-1", "name": "Ann"}
    assert error["data"]["@environment"]["thread_name"] == "MainThread"


def test_uncaught_exception_in_a_worker_thread(server: CaptureServer) -> None:
    result = run_python(
        server.url,
        script(
            """
            import threading
            import eventlog_handler

            eventlog_handler.setup()

            def work():
                raise ValueError("thread crash")

            thread = threading.Thread(target=work, name="worker-1")
            thread.start()
            thread.join()
            print("main thread carried on")
            """
        ),
    )
    assert result.returncode == 0
    assert "main thread carried on" in result.stdout
    assert "Exception in thread worker-1" in result.stderr
    assert "ValueError: thread crash" in result.stderr
    events = server.wait_for(1)
    (error,) = events
    assert error["type"] == "error"
    assert error["@level"] == "Error"
    assert error["data"]["@submission_method"] == "unhandled_thread_exception"
    assert error["data"]["@environment"]["thread_name"] == "worker-1"
    assert error["data"]["thread"] == "worker-1"
    assert error["@simple_error"]["type"] == "ValueError"


def test_keyboard_interrupt_is_not_reported(server: CaptureServer) -> None:
    result = run_python(
        server.url,
        script(
            """
            import logging
            import eventlog_handler

            eventlog_handler.setup()
            logging.getLogger("app").warning("before the interrupt")
            raise KeyboardInterrupt
            """
        ),
    )
    assert result.returncode != 0
    assert "KeyboardInterrupt" in result.stderr
    events = server.wait_for(1)
    assert [event["message"] for event in events] == ["before the interrupt"]


def test_hooks_chain_and_report_in_process(server: CaptureServer) -> None:
    seen: list[Any] = []

    def previous_sys(
        exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None
    ) -> None:
        seen.append(("sys", exc))

    def previous_thread(args: Any) -> None:
        seen.append(("thread", args.exc_value))

    sys.excepthook = previous_sys
    threading.excepthook = previous_thread
    hooks = install_hooks(API_KEY, server.url, force=True, **FAST)
    assert hooks is not None
    try:
        raise LookupError("main")
    except LookupError as exc:
        sys.excepthook(type(exc), exc, exc.__traceback__)
        main_error = exc
    try:
        raise KeyboardInterrupt
    except KeyboardInterrupt as exc:
        sys.excepthook(type(exc), exc, exc.__traceback__)
        interrupt = exc

    def fail() -> None:
        raise OSError("in a thread")

    thread = threading.Thread(target=fail, name="t-1")
    thread.start()
    thread.join()
    # The hooks waited for delivery: the events are there without a flush.
    events = server.events
    assert [event["data"]["@submission_method"] for event in events] == [
        "unhandled_exception",
        "unhandled_thread_exception",
    ]
    assert seen[0] == ("sys", main_error)
    assert seen[1] == ("sys", interrupt)
    assert seen[2][0] == "thread" and isinstance(seen[2][1], OSError)


def test_uninstall_restores_only_hooks_that_are_still_ours(server: CaptureServer) -> None:
    previous_calls: list[Any] = []

    def previous_sys(exc_type: Any, exc: Any, tb: Any) -> None:
        previous_calls.append(exc)

    sys.excepthook = previous_sys
    original_thread = threading.excepthook
    hooks = ExceptionHooks(
        Settings.from_options({"api_key": API_KEY, "server_url": server.url, **FAST})
    )
    hooks.install()
    ours = sys.excepthook
    assert ours is not previous_sys
    calls: list[str] = []

    def wrapper(exc_type: Any, exc: Any, tb: Any) -> None:  # another library wraps ours
        calls.append("wrapper")
        ours(exc_type, exc, tb)

    sys.excepthook = wrapper
    hooks.uninstall()
    assert sys.excepthook is wrapper  # not ours any more: left in place
    assert threading.excepthook is original_thread  # still ours: restored
    try:
        raise ValueError("after uninstall")
    except ValueError as exc:
        sys.excepthook(type(exc), exc, exc.__traceback__)
        assert previous_calls == [exc]  # still chained
    assert calls == ["wrapper"]
    assert transport.get_engine(hooks.settings).flush(5)
    assert server.events == []  # but inert


def test_exception_logged_then_uncaught_is_sent_once(server: CaptureServer) -> None:
    result = run_python(
        server.url,
        script(
            """
            import logging
            import eventlog_handler

            eventlog_handler.setup()
            log = logging.getLogger("app")
            try:
                raise RuntimeError("logged, then re-raised")
            except RuntimeError:
                log.exception("operation failed")
                raise
            """
        ),
    )
    assert result.returncode == 1
    assert "RuntimeError: logged, then re-raised" in result.stderr
    events = server.wait_for(1)
    (error,) = events
    assert error["message"] == "operation failed"
    assert "@submission_method" not in error.get("data", {})


def test_exception_logged_in_a_thread_then_uncaught_is_sent_once(server: CaptureServer) -> None:
    result = run_python(
        server.url,
        script(
            """
            import logging, threading
            import eventlog_handler

            eventlog_handler.setup()

            def work():
                try:
                    raise KeyError("k")
                except KeyError:
                    logging.getLogger("app").error("lookup failed", exc_info=True)
                    raise

            thread = threading.Thread(target=work)
            thread.start()
            thread.join()
            """
        ),
    )
    assert result.returncode == 0
    assert "Exception in thread" in result.stderr
    (error,) = server.wait_for(1)
    assert error["message"] == "lookup failed"


def test_thread_hook_skips_sender_threads_and_system_exit(
    server: CaptureServer,
) -> None:
    previous_calls: list[Any] = []
    threading.excepthook = previous_calls.append
    hooks = install_hooks(API_KEY, server.url, force=True, **FAST)
    assert hooks is not None

    idents: list[int] = []

    def sender_fails() -> None:
        idents.append(threading.get_ident())
        transport.SENDER_THREADS.add(idents[0])  # until the hook has run
        raise RuntimeError("inside the sender")

    class Exiting(threading.Thread):
        def run(self) -> None:
            raise SystemExit(3)

    for thread in (threading.Thread(target=sender_fails), Exiting()):
        thread.start()
        thread.join()
    transport.SENDER_THREADS.discard(idents[0])
    assert transport.get_engine(hooks.settings).flush(5)
    assert server.events == []
    assert len(previous_calls) == 2


def test_a_crash_with_a_server_that_never_answers_ends_within_shutdown_timeout() -> None:
    """The main thread's hook waits for its event, then the exit flush: they share one
    ``shutdown_timeout`` (each took it in full: 4.3 s for the default 2 s)."""
    with FaultServer() as hung:
        hung.default = "hang"
        program = """
            import logging, sys, time
            import eventlog_handler
            eventlog_handler.setup()
            logging.getLogger("app").warning("about to crash")
            raise RuntimeError("crash")
            """
        started = time.monotonic()
        result = run_python(hung.url, script(program))
        ended = time.monotonic()
    assert result.returncode == 1
    assert "RuntimeError: crash" in result.stderr
    # About 2 s (shutdown_timeout) and the interpreter's start and end; not twice that.
    assert ended - started < 3.8, (ended - started, result.stderr)
    assert "outcome is unknown" in result.stderr, result.stderr


def test_threads_dying_while_the_server_never_answers_do_not_each_wait() -> None:
    """A thread's hook waits a moment for its event; when that wait runs out (a request that
    is never answered), the next threads' hooks queue theirs without waiting (each waited
    2 s: five threads, 10 s)."""
    with FaultServer() as hung:
        hung.default = "hang"
        program = """
            import sys, threading, time
            import eventlog_handler
            eventlog_handler.setup(shutdown_timeout=0.5)
            def work():
                1 / 0
            started = time.monotonic()
            for _ in range(5):
                thread = threading.Thread(target=work)
                thread.start()
                thread.join()
            print("MARK joined", time.monotonic() - started)
            """
        result = run_python(hung.url, script(program))
    [line] = [line for line in result.stdout.splitlines() if line.startswith("MARK joined")]
    assert float(line.split()[-1]) < 2.0, result.stdout + result.stderr
    assert result.stderr.count("ZeroDivisionError") == 5


def test_an_error_at_the_interpreters_end_is_reported(server: CaptureServer) -> None:
    """A global whose ``__del__`` raises, collected as the interpreter ends: ``sys.argv`` is
    ``None`` by then, and building the error's ``@environment`` failed on it (the event was lost
    without a word; one logged there was "a log call could not be made an event")."""
    result = run_python(
        server.url,
        script(
            """
            import logging
            import eventlog_handler
            eventlog_handler.setup()
            log = logging.getLogger("app")
            log.warning("started")  # sent: the sending code is loaded before the end

            class Resource:
                def __del__(self):
                    try:
                        1 / 0
                    except ZeroDivisionError:
                        log.exception("cleanup failed")
                    raise ValueError("del raised")

            resource = Resource()
            """
        ),
    )
    assert result.returncode == 0, result.stderr
    assert "could not be made an event" not in result.stderr, result.stderr
    events = server.wait_for(3)
    assert sorted(event["@simple_error"]["type"] for event in errors_of(events)) == [
        "ValueError",
        "ZeroDivisionError",
    ]


def test_an_exception_that_cannot_be_reported_is_said(
    server: CaptureServer, monkeypatch: Any, capsys: Any
) -> None:
    from eventlog_handler.capture import _exceptions
    from eventlog_handler.delivery import _stderr

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise TypeError("'NoneType' object is not iterable")

    monkeypatch.setattr(_exceptions, "build_event", broken)
    monkeypatch.setattr(_stderr, "_SAID", set())
    settings = Settings.from_options({"api_key": API_KEY, "server_url": server.url, **FAST})
    try:
        assert _exceptions.capture_exception(ValueError("x"), settings=settings) is False
    finally:
        transport.get_engine(settings).shutdown(1)
    err = capsys.readouterr().err
    assert "an exception to report could not be made an event (TypeError" in err, err
    assert "it is not sent" in err


def test_an_exception_shown_by_a_console_does_not_shorten_the_exit_later() -> None:
    """``code.interact`` (Django's ``manage.py shell``) shows an exception through
    ``sys.excepthook`` and goes on: the exit that came later got no time to send (the deadline
    was counted from that exception)."""
    with FaultServer() as server:
        server.default = lambda events, size: (time.sleep(0.3), 202)[1]  # a slow answer
        program = """
            import code, logging, time
            import eventlog_handler
            eventlog_handler.setup()
            code.InteractiveConsole().push("1/0")  # a typo in a console session: no exit
            time.sleep(2.5)
            logging.getLogger("app").error("logged just before a normal exit")
            """
        result = run_python(server.url, script(program))
        assert result.returncode == 0, result.stderr
        assert "could not be sent" not in result.stderr, result.stderr
        assert "logged just before a normal exit" in server.arrivals()


def test_cancellation_and_keyboard_interrupt_in_asyncio_are_not_reported(
    server: CaptureServer,
) -> None:
    """A program whose main task is cancelled (a common way to stop a loop, here in a thread
    and in the main thread), a cancelled future never looked at, a task that raised
    ``KeyboardInterrupt`` (collected after ``asyncio.run`` gave it up): each was sent as an
    error (the main thread's as Fatal), where ``KeyboardInterrupt`` is never reported. A real
    failure next to them still is."""
    cancelled = run_python(
        server.url,
        script(
            """
            import asyncio, gc, threading
            import eventlog_handler

            eventlog_handler.setup()

            async def failing():
                raise OSError("a real failure")

            async def main():
                loop = asyncio.get_running_loop()
                task = loop.create_task(failing())
                await asyncio.sleep(0.01)
                del task
                gc.collect()
                future = loop.create_future()
                future.set_exception(asyncio.CancelledError())
                del future
                gc.collect()
                loop.call_later(0.05, asyncio.current_task().cancel)
                await asyncio.sleep(5)

            worker = threading.Thread(target=asyncio.run, args=(main(),))
            worker.start()
            worker.join()
            asyncio.run(main())
            """
        ),
    )
    assert cancelled.returncode == 1 and "CancelledError" in cancelled.stderr, cancelled.stderr
    interrupted = run_python(
        server.url,
        script(
            """
            import asyncio
            import eventlog_handler

            eventlog_handler.setup()

            async def child():
                await asyncio.sleep(0.01)
                raise KeyboardInterrupt

            async def main():
                task = asyncio.create_task(child())
                await asyncio.sleep(1)

            asyncio.run(main())
            """
        ),
    )
    assert interrupted.returncode != 0 and "KeyboardInterrupt" in interrupted.stderr
    time.sleep(0.5)
    errors = errors_of(server.events)
    assert [e["@simple_error"]["type"] for e in errors] == ["OSError", "OSError"], errors
