"""When the worker fetches the service's settings (``SettingsFetch`` in
``delivery/_server_settings.py``): at start, after an answer names a newer version, never
faster than ``CONFIG_RETRY`` after a failure; a 304 keeps what is in force."""

from __future__ import annotations

import types
from collections.abc import Mapping
from typing import Any

import pytest

from eventlog_handler.api import _errors as errors
from eventlog_handler.delivery import _server_settings
from eventlog_handler.delivery._server_settings import (
    CONFIG_RETRY,
    EMPTY,
    OFF,
    ServerSettings,
    SettingsFetch,
)

KEY = "Tk7sQ2mX9pLr4VbN8cYw1ZdF6gHj3KeA5uMo0PiR"


class Clock:
    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(_server_settings, "time", types.SimpleNamespace(monotonic=fake.monotonic))
    return fake


class Service:
    """``fetch(v)``: records the versions asked for and answers what it is told to."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.asked: list[int | None] = []

    def __call__(self, version: int | None) -> Mapping[str, Any] | None:
        self.asked.append(version)
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer


def fetcher(enabled: bool = True) -> SettingsFetch:
    return SettingsFetch(enabled, lambda text: text.replace(KEY, "***"))


def test_wanted_at_start_when_enabled() -> None:
    fetch = fetcher()
    assert fetch.wanted is True
    assert fetch.current is EMPTY
    assert fetch.error is None


def test_never_wanted_when_disabled(clock: Clock) -> None:
    fetch = fetcher(enabled=False)
    assert fetch.wanted is False
    fetch.seen(5)
    assert fetch.wanted is False
    service = Service()
    fetch.refresh(service)
    assert service.asked == []


def test_the_first_fetch_asks_without_a_version_and_installs_the_answer(clock: Clock) -> None:
    fetch = fetcher()
    service = Service({"version": 3, "settings": {"@@log:*": "Warn"}})
    fetch.refresh(service)
    assert service.asked == [None]
    assert fetch.wanted is False
    assert fetch.current.version == 3
    assert fetch.current.log_level("anything") == 30
    assert fetch.error is None


def test_refresh_does_nothing_unless_wanted(clock: Clock) -> None:
    fetch = fetcher()
    fetch.refresh(Service({"version": 1, "settings": {}}))
    service = Service()
    fetch.refresh(service)
    assert service.asked == []


def test_seen_a_newer_version_makes_it_wanted(clock: Clock) -> None:
    fetch = fetcher()
    fetch.refresh(Service({"version": 3, "settings": {}}))
    fetch.seen(3)
    assert fetch.wanted is False  # the same version: nothing to do
    fetch.seen(2)
    assert fetch.wanted is False
    fetch.seen(4)
    assert fetch.wanted is True
    service = Service({"version": 4, "settings": {"@@DataExclusions": "card, pin"}})
    fetch.refresh(service)
    assert service.asked == [3]  # the version in force is sent
    assert fetch.current.version == 4
    assert fetch.current.data_exclusions == ("card", "pin")


def test_304_keeps_the_settings_in_force(clock: Clock) -> None:
    fetch = fetcher()
    fetch.refresh(Service({"version": 3, "settings": {"@@log:*": "Error"}}))
    current = fetch.current
    fetch.seen(4)
    fetch.refresh(Service(None))  # 304 Not Modified
    assert fetch.current is current
    assert fetch.wanted is False
    assert fetch.error is None


def test_a_failure_sets_the_error_and_the_next_try(clock: Clock) -> None:
    fetch = fetcher()
    fetch.refresh(Service(errors.TransportError("connection refused", "refused")))
    assert fetch.error == "connection refused"
    assert fetch.next_try == clock.now + CONFIG_RETRY
    assert fetch.wanted is False
    assert fetch.current is EMPTY  # nothing else changes


def test_the_error_is_redacted(clock: Clock) -> None:
    fetch = fetcher()
    fetch.refresh(Service(errors.AuthenticationError(401, title=f"bad key {KEY}")))
    assert fetch.error is not None
    assert KEY not in fetch.error
    assert "***" in fetch.error


def test_after_a_failure_seen_waits_for_the_next_try(clock: Clock) -> None:
    fetch = fetcher()
    fetch.refresh(Service(errors.ServerError(500)))
    fetch.seen(7)
    assert fetch.wanted is False  # not before CONFIG_RETRY
    clock.now += CONFIG_RETRY - 0.1
    fetch.seen(7)
    assert fetch.wanted is False
    clock.now += 0.1
    fetch.seen(7)
    assert fetch.wanted is True


def test_a_failure_keeps_the_settings_in_force(clock: Clock) -> None:
    fetch = fetcher()
    fetch.refresh(Service({"version": 2, "settings": {"@@log:app": "Off"}}))
    current = fetch.current
    fetch.seen(3)
    fetch.refresh(Service(errors.ServiceUnavailableError(503)))
    assert fetch.current is current
    assert fetch.current.log_level("app") == OFF
    assert fetch.error is not None


def test_a_success_after_a_failure_clears_the_error(clock: Clock) -> None:
    fetch = fetcher()
    fetch.refresh(Service(errors.ServerError(500)))
    clock.now = fetch.next_try
    fetch.seen(1)
    fetch.refresh(Service({"version": 1, "settings": {}}))
    assert fetch.error is None
    assert fetch.current.version == 1


@pytest.mark.parametrize(
    "answer",
    [{}, {"version": "3", "settings": {}}, {"version": 3, "settings": []}, {"settings": {}}],
)
def test_an_answer_of_the_wrong_shape_is_a_failure(clock: Clock, answer: dict) -> None:
    fetch = fetcher()
    fetch.refresh(Service(answer))
    assert fetch.error == "the answer is not {version, settings}"
    assert fetch.next_try == clock.now + CONFIG_RETRY
    assert fetch.current is EMPTY


def test_restart_fetches_again_and_keeps_the_settings_in_force(clock: Clock) -> None:
    fetch = fetcher()
    fetch.refresh(Service(errors.ServerError(500)))
    fetch.restart()  # a forked child
    assert fetch.wanted is True
    assert fetch.next_try == 0.0
    assert fetch.error is None
    fetch.refresh(Service({"version": 5, "settings": {}}))
    current = fetch.current
    fetch.restart()
    assert fetch.current is current
    assert fetcher(enabled=False).wanted is False


# -- the settings themselves (what the fetch installs) ----------------------------------------


def test_log_levels_exact_source_then_most_specific_pattern() -> None:
    settings = ServerSettings(
        1,
        {
            "@@log:*": "Error",
            "@@log:app.*": "Info",
            "@@log:app.db*": "Debug",
            "@@log:app.web": "Off",
        },
    )
    assert settings.log_level("other") == 40
    assert settings.log_level("app.cache") == 20
    assert settings.log_level("app.db.pool") == 10
    assert settings.log_level("APP.WEB") == OFF
    assert ServerSettings(1, {}).log_level("x") is None


def test_error_rules_match_qualified_and_short_names() -> None:
    settings = ServerSettings(1, {"@@error:PaymentError": "false", "@@error:net.*": "off"})
    assert settings.drops_error(("myapp.PaymentError",))
    assert settings.drops_error(("ValueError", "net.Timeout"))
    assert not settings.drops_error(("ValueError",))
    assert not ServerSettings(1, {"@@error:X": "true"}).has_error_rules
