"""The trace log's rings and threads: a ring made in a thread serves that thread only, also
when another thread later gets the same ident (idents of ended threads are reused)."""

from __future__ import annotations

import contextvars
import logging
import threading

import pytest

from eventlog_handler.capture import _tracelog as tracelog


def _note(message: str) -> None:
    tracelog.note(logging.LogRecord("app", logging.INFO, __file__, 1, message, None, None))


def _in_thread(target: contextvars.Context | None, message: str) -> tuple[int, list[str]]:
    """Log ``message`` in a new thread (in ``target``, if given); its ident and trace lines."""
    found: list[tuple[int, list[str]]] = []

    def run() -> None:
        def log() -> None:
            _note(message)
            found.append((threading.get_ident(), tracelog.lines(10)))

        if target is None:
            log()
        else:
            target.run(log)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return found[0]


def test_a_context_of_an_ended_thread_has_none_of_its_lines_in_a_thread_of_the_same_ident() -> None:
    tracelog.want(10)
    kept: list[contextvars.Context] = []

    def first() -> None:
        _note("a line of the first thread")
        kept.append(contextvars.copy_context())

    thread = threading.Thread(target=first)
    thread.start()
    ident = thread.ident
    thread.join()
    for _ in range(50):  # until a new thread gets the ended one's ident (at once, on Linux)
        reused, lines = _in_thread(kept[0], "a line of the second thread")
        if reused == ident:
            break
    else:  # pragma: no cover - the platform never reuses idents: nothing to mix up
        pytest.skip("no new thread got the ident of the ended one")
    assert [line.split(" ", 2)[2] for line in lines] == ["app: a line of the second thread"]
