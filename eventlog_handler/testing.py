"""A pytest plugin for your own tests: a running local collector and the events your code sent.

Opt in from a ``conftest.py``::

    pytest_plugins = ["eventlog_handler.testing"]

then::

    def test_checkout_reports_failures(eventlog):
        eventlog_handler.setup()               # EVENTLOG_SERVER_URL/API_KEY point at it
        checkout(order=None)
        [event] = eventlog.events(type="error")
        assert event["data"]["@simple_error"]["type"] == "ValueError"

The ``eventlog`` fixture starts a :class:`~eventlog_handler.collector.Collector` on loopback,
points ``EVENTLOG_SERVER_URL`` and ``EVENTLOG_API_KEY`` at it for the test, and afterwards
removes what :func:`eventlog_handler.setup` installed during the test (wherever it sent) and
the engines that sent to the collector, and gives back the user, tags, request and reference
id the test set, and the thread's trace log: the next test starts without them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from eventlog_handler import _setup as configure
from eventlog_handler.capture import _context as context
from eventlog_handler.capture import _tracelog as tracelog
from eventlog_handler.collector import Collector
from eventlog_handler.delivery import _engine as transport
from eventlog_handler.settings import ENV_API_KEY, ENV_SERVER_URL


class EventRecorder:
    """The collector of one test and what it received."""

    def __init__(self, collector: Collector) -> None:
        self.collector = collector

    @property
    def url(self) -> str:
        """The collector's base URL (also in ``EVENTLOG_SERVER_URL``)."""
        return self.collector.url

    @property
    def api_key(self) -> str:
        """A project token of the collector (also in ``EVENTLOG_API_KEY``)."""
        return self.collector.project_token

    def flush(self, timeout: float = 5.0) -> bool:
        """Send what every engine of this collector has pending; ``True`` when all was sent."""
        done = True
        for engine in transport.engines():
            if engine.settings.server_url == self.url:
                done = engine.flush(timeout) and done
        return done

    def events(
        self, type: str | None = None, level: str | None = None, *, flush: bool = True
    ) -> list[dict[str, Any]]:
        """Events received so far, oldest first, as the service stores them (``@user``,
        ``@level``, ``@simple_error`` under ``data``). Flushes pending events first."""
        if flush:
            self.flush()
        events = self.collector.events(type=type, level=level)
        return sorted(events, key=lambda event: (str(event.get("date")), str(event.get("id"))))

    def messages(self, **filters: Any) -> list[str]:
        """The ``message`` of each event received, oldest first."""
        return [str(event.get("message") or "") for event in self.events(**filters)]

    def clear(self) -> None:
        """Forget the events received so far."""
        self.flush()
        self.collector.clear_events()


@pytest.fixture
def eventlog(monkeypatch: pytest.MonkeyPatch) -> Iterator[EventRecorder]:
    """A local collector for this test, with ``EVENTLOG_*`` pointing at it."""
    collector = Collector().start()
    monkeypatch.setenv(ENV_SERVER_URL, collector.url)
    monkeypatch.setenv(ENV_API_KEY, collector.project_token)
    for name in ("NO_PROXY", "no_proxy"):  # a proxy of the environment can't reach it
        monkeypatch.setenv(name, collector.no_proxy())
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    before = configure.current()
    variables = (context._USER, context._TAGS, context._REQUEST, context._LAST_REFERENCE)
    values = [variable.get() for variable in variables]
    tracelog.clear()  # what earlier tests logged on this thread
    try:
        yield EventRecorder(collector)
    finally:
        installed = configure.current()
        if installed is not None and installed is not before:
            installed.close(2.0)
        for variable, value in zip(variables, values, strict=True):
            variable.set(value)  # type: ignore[attr-defined]
        tracelog.clear()
        for handler in list(root.handlers):
            if handler not in handlers:
                root.removeHandler(handler)
        root.setLevel(level)
        transport.remove_engines(collector.url)
        collector.close()
