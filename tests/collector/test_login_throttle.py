"""Password guessing against the collector is slowed down: failed logins per client address and
per account are refused with 429 and ``Retry-After``, the right password included, until the
failures leave the window."""

from __future__ import annotations

import requests

from eventlog_handler.collector import Collector
from eventlog_handler.collector._throttle import (
    LOGIN_FAILURES_PER_ACCOUNT,
    LOGIN_FAILURES_PER_CLIENT,
    LoginGuard,
)


def _login(collector: Collector, email: str, password: str) -> requests.Response:
    return requests.post(
        f"{collector.url}/api/v2/auth/login",
        json={"email": email, "password": password},
        timeout=10,
    )


def test_wrong_passwords_are_refused_with_429_before_the_50th(collector: Collector) -> None:
    statuses = []
    for attempt in range(50):
        answer = _login(collector, collector.admin_email, f"guess-{attempt}")
        statuses.append(answer.status_code)
        if answer.status_code == 429:
            retry_after = int(answer.headers["Retry-After"])
            assert 1 <= retry_after <= 15 * 60
            break
    assert statuses[-1] == 429, statuses
    assert len(statuses) < 50
    assert set(statuses[:-1]) == {401}
    # Throttled: the right password is refused too, for now.
    assert _login(collector, collector.admin_email, collector.admin_password).status_code == 429


def test_another_account_is_not_locked_by_one_accounts_failures(collector: Collector) -> None:
    collector.create_user("ann@example.test", "correct horse battery staple")
    for attempt in range(LOGIN_FAILURES_PER_ACCOUNT):
        assert _login(collector, collector.admin_email, f"guess-{attempt}").status_code == 401
    assert _login(collector, collector.admin_email, collector.admin_password).status_code == 429
    answer = _login(collector, "ann@example.test", "correct horse battery staple")
    assert answer.status_code == 200, answer.text


def test_basic_credentials_count_as_logins(collector: Collector) -> None:
    last = None
    for attempt in range(LOGIN_FAILURES_PER_ACCOUNT + 1):
        last = requests.get(
            f"{collector.url}/api/v2/projects",
            auth=(collector.admin_email, f"guess-{attempt}"),
            timeout=10,
        )
    assert last is not None and last.status_code == 429
    assert "Retry-After" in last.headers


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_guard_lets_logins_through_again_once_failures_leave_the_window() -> None:
    clock = Clock()
    guard = LoginGuard(clock, per_account=3, per_client=5, window=60)
    for _ in range(3):
        assert guard.retry_after("10.0.0.1", "a@x") is None
        guard.failed("10.0.0.1", "a@x")
        clock.now += 1
    wait = guard.retry_after("10.0.0.1", "a@x")
    assert wait is not None and 55 <= wait <= 60
    assert guard.retry_after("10.0.0.1", "b@x") is None  # the address is under its limit
    clock.now += wait
    assert guard.retry_after("10.0.0.1", "a@x") is None


def test_the_guard_counts_an_address_across_accounts_and_forgets_on_success() -> None:
    clock = Clock()
    guard = LoginGuard(clock, per_account=100, per_client=LOGIN_FAILURES_PER_CLIENT, window=60)
    for number in range(LOGIN_FAILURES_PER_CLIENT):
        guard.failed("10.0.0.2", f"user{number}@x")
    assert guard.retry_after("10.0.0.2", "new@x") is not None
    assert guard.retry_after("10.0.0.3", "new@x") is None
    guard.failed("10.0.0.3", "c@x")
    guard.succeeded("c@x")
    assert guard.retry_after("10.0.0.4", "c@x") is None
