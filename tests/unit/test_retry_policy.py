"""The delivery policy as a value (``delivery/_retry.py``), rule by rule, like urllib3's
``test_retry.py``: no sockets, no threads, no sleeping."""

from __future__ import annotations

import types

import pytest

from eventlog_handler.api import _errors as errors
from eventlog_handler.delivery import _retry
from eventlog_handler.delivery._retry import (
    USAGE_BUCKET_SECONDS,
    Action,
    AtExit,
    Decision,
    RetryPolicy,
)

#: No jitter: every delay is exact.
EXACT = RetryPolicy(initial=1.0, maximum=300.0, refused_delay=60.0, jitter=False)


def api_error(status: int, **kwargs: object) -> errors.ApiError:
    """The error the client raises for ``status`` (the same class mapping as the client)."""
    cls = errors.error_class_for(status)
    if cls is errors.RateLimitedError:
        return errors.RateLimitedError(status, **kwargs)  # type: ignore[arg-type]
    return cls(status, **kwargs)  # type: ignore[arg-type]


@pytest.fixture
def fixed_uniform(monkeypatch: pytest.MonkeyPatch):
    """Make ``random.uniform`` in the policy return one of its bounds: ``set("low"|"high")``."""
    which = {"end": "low"}

    def uniform(low: float, high: float) -> float:
        return low if which["end"] == "low" else high

    monkeypatch.setattr(_retry.random, "uniform", uniform)

    def choose(end: str) -> None:
        which["end"] = end

    return choose


# -- the value object ----------------------------------------------------------------------------


def test_policy_and_decision_are_immutable_values() -> None:
    policy = RetryPolicy()
    with pytest.raises(AttributeError):
        policy.initial = 5.0  # type: ignore[misc]
    assert RetryPolicy() == RetryPolicy()
    assert Decision(Action.RETRY, 1.0) == Decision(Action.RETRY, 1.0, "")
    with pytest.raises(AttributeError):
        Decision(Action.DROP).action = Action.RETRY  # type: ignore[misc]


def test_defaults() -> None:
    policy = RetryPolicy()
    assert (policy.initial, policy.maximum, policy.refused_delay, policy.jitter) == (
        1.0,
        300.0,
        60.0,
        True,
    )


# -- backoff ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("attempt", "expected"),
    [(0, 1.0), (1, 2.0), (2, 4.0), (3, 8.0), (7, 128.0), (8, 256.0), (9, 300.0), (20, 300.0)],
)
def test_backoff_doubles_up_to_the_maximum(attempt: int, expected: float) -> None:
    assert EXACT.backoff(attempt) == expected


def test_backoff_of_a_huge_attempt_is_capped_without_overflow() -> None:
    assert EXACT.backoff(10_000) == 300.0
    assert RetryPolicy(initial=0.5, maximum=1e12, jitter=False).backoff(10_000) == 0.5 * 2**30


def test_backoff_scales_with_initial() -> None:
    policy = RetryPolicy(initial=0.25, maximum=10.0, jitter=False)
    assert [policy.backoff(n) for n in range(7)] == [0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 10.0]


@pytest.mark.parametrize("attempt", [0, 1, 3, 8, 9, 30])
def test_jitter_stays_between_half_and_the_full_delay(attempt: int) -> None:
    policy = RetryPolicy(initial=1.0, maximum=300.0)
    full = EXACT.backoff(attempt)
    delays = [policy.backoff(attempt) for _ in range(200)]
    assert all(full / 2 <= delay <= full for delay in delays)
    assert len(set(delays)) > 1  # it is jittered at all


def test_jitter_bounds_are_exactly_half_and_whole(fixed_uniform) -> None:
    policy = RetryPolicy(initial=1.0, maximum=300.0)
    fixed_uniform("low")
    assert policy.backoff(3) == 4.0
    assert policy.backoff(12) == 150.0  # jittered after the cap: never above the maximum
    fixed_uniform("high")
    assert policy.backoff(3) == 8.0
    assert policy.backoff(12) == 300.0


# -- the table of the module docstring -------------------------------------------------------


@pytest.mark.parametrize("kind", ["refused", "reset", "timeout", "tls", "other"])
def test_transport_failures_are_retried_after_backoff(kind: str) -> None:
    error = errors.TransportError("no answer", kind)
    for attempt in range(4):
        decision = EXACT.decide(error, attempt, batch_size=10)
        assert decision == Decision(Action.RETRY, 2.0**attempt, f"transport: {kind}")


@pytest.mark.parametrize("status", [500, 502, 503, 504, 599])
def test_server_errors_are_retried_after_backoff(status: int) -> None:
    error = api_error(status)
    assert isinstance(error, errors.ServerError)
    assert EXACT.decide(error, 0, 10) == Decision(Action.RETRY, 1.0, f"server error ({status})")
    assert EXACT.decide(error, 5, 10).delay == 32.0
    assert EXACT.decide(error, 50, 10).delay == 300.0


@pytest.mark.parametrize("status", [408, 425])
def test_request_timeout_and_too_early_are_retried(status: int) -> None:
    decision = EXACT.decide(api_error(status), 2, 1)
    assert decision == Decision(Action.RETRY, 4.0, f"server error ({status})")


@pytest.mark.parametrize("status", [409, 429])
def test_throttled_without_retry_after_backs_off(status: int) -> None:
    decision = EXACT.decide(api_error(status), 3, 10)
    assert decision == Decision(Action.RETRY, 8.0, f"throttled ({status})")


@pytest.mark.parametrize("status", [409, 429])
def test_throttled_honours_retry_after(status: int) -> None:
    for attempt in (0, 5, 20):  # whatever the backoff would be
        decision = EXACT.decide(api_error(status, retry_after=42.5), attempt, 10)
        assert decision == Decision(Action.RETRY, 42.5, f"throttled ({status})")
        assert decision.at_exit is AtExit.WAIT  # the exit keeps the wait the service asked


def test_retry_after_is_honoured_with_jitter_too() -> None:
    decision = RetryPolicy().decide(api_error(429, retry_after=7.0), 0, 1)
    assert decision.delay == 7.0


def test_retry_after_is_capped_at_the_maximum_and_never_negative() -> None:
    assert EXACT.decide(api_error(429, retry_after=3600.0), 0, 1).delay == 300.0
    assert EXACT.decide(api_error(429, retry_after=-5.0), 0, 1).delay == 0.0
    assert EXACT.decide(api_error(429, retry_after=0.0), 0, 1).delay == 0.0
    # A tiny maximum still lets a 1-second Retry-After through.
    tiny = RetryPolicy(initial=0.1, maximum=0.2, jitter=False)
    assert tiny.decide(api_error(429, retry_after=1.0), 0, 1).delay == 1.0
    assert tiny.decide(api_error(429, retry_after=9.0), 0, 1).delay == 1.0


def test_a_retry_after_of_now_again_and_again_is_paced_by_the_backoff() -> None:
    """``Retry-After: 0`` (or a date in the past: clock skew) on every answer would have the
    worker retry a throttled server in a tight loop."""
    for retry_after in (0.0, -30.0, 0.5):
        first = EXACT.decide(api_error(429, retry_after=retry_after), 0, 10)
        assert first.delay == max(retry_after, 0.0)  # honoured once
        delays = [
            EXACT.decide(api_error(429, retry_after=retry_after), attempt, 10).delay
            for attempt in (1, 2, 3)
        ]
        assert delays == [2.0, 4.0, 8.0]


def test_a_503_with_retry_after_waits_as_asked() -> None:
    assert EXACT.decide(api_error(503, retry_after=15.0), 0, 10) == Decision(
        Action.RETRY, 15.0, "server error (503)"
    )
    assert EXACT.decide(api_error(503, retry_after=15.0), 0, 10).at_exit is AtExit.WAIT
    assert EXACT.decide(api_error(503), 0, 10).delay == 1.0  # without one: the backoff
    assert EXACT.decide(api_error(503), 0, 10).at_exit is AtExit.RETRY  # one more at exit
    assert EXACT.decide(api_error(500), 2, 10).delay == 4.0


def test_the_answer_reader_takes_retry_after_from_a_503() -> None:
    from eventlog_handler.api._answers import Answer
    from eventlog_handler.api._answers import api_error as from_answer

    answer = Answer(503, "Service Unavailable", {"Retry-After": "15"}, b"", "http://127.0.0.1/")
    error = from_answer(answer)
    assert isinstance(error, errors.ServiceUnavailableError) and error.retry_after == 15.0


@pytest.mark.parametrize(
    ("now", "low"),
    [(1000.0, 200.0), (1200.0, 0.0 + USAGE_BUCKET_SECONDS), (1199.5, 0.5), (0.0, 300.0)],
)
def test_until_next_bucket_is_the_start_of_the_next_5_minute_bucket(
    fixed_uniform, now: float, low: float
) -> None:
    policy = RetryPolicy(maximum=1000.0)
    fixed_uniform("low")
    assert policy.until_next_bucket(now=now) == pytest.approx(low)
    fixed_uniform("high")  # up to 5 seconds later, so that clients don't all come back at once
    assert policy.until_next_bucket(now=now) == pytest.approx(low + 5.0)


def test_until_next_bucket_without_a_fixed_random_is_within_five_seconds() -> None:
    policy = RetryPolicy(maximum=1000.0)
    for _ in range(50):
        assert 200.0 <= policy.until_next_bucket(now=1000.0) <= 205.0


def test_until_next_bucket_is_capped_at_the_maximum() -> None:
    assert RetryPolicy(maximum=30.0).until_next_bucket(now=1000.0) == 30.0
    assert RetryPolicy().until_next_bucket(now=1200.0) <= 300.0


def test_402_is_retried_when_the_next_usage_bucket_starts(
    monkeypatch: pytest.MonkeyPatch, fixed_uniform
) -> None:
    monkeypatch.setattr(_retry, "time", types.SimpleNamespace(time=lambda: 6_000_123.0))
    fixed_uniform("low")
    policy = RetryPolicy(maximum=1000.0, jitter=False)
    for attempt in (0, 7):  # not the backoff: the bucket
        decision = policy.decide(api_error(402), attempt, 25)
        assert decision == Decision(Action.RETRY, 300.0 - 123.0, "usage limit (402)")
        assert decision.at_exit is AtExit.WAIT


def test_413_splits_a_batch() -> None:
    for size in (2, 3, 500):
        decision = EXACT.decide(api_error(413), 0, size)
        assert decision == Decision(Action.SPLIT, 0.0, "too large (413)")


def test_413_shrinks_a_single_event() -> None:
    assert EXACT.decide(api_error(413), 0, 1) == Decision(Action.SHRINK, 0.0, "too large (413)")
    # The policy says SHRINK every time; doing it only once is the delivery's part (Part.shrunk).
    assert EXACT.decide(api_error(413), 3, 1).action is Action.SHRINK


def test_422_splits_a_batch_to_isolate_the_bad_event() -> None:
    error = api_error(422, errors={"message": ["required"]})
    assert isinstance(error, errors.ValidationError)
    assert EXACT.decide(error, 0, 2) == Decision(Action.SPLIT, 0.0, "rejected (422)")
    assert EXACT.decide(error, 0, 100).action is Action.SPLIT


def test_422_drops_a_single_event() -> None:
    assert EXACT.decide(api_error(422), 0, 1) == Decision(Action.DROP, 0.0, "rejected (422)")


@pytest.mark.parametrize("status", [400, 411, 415, 401, 403, 404, 405, 410, 418, 451])
def test_refused_statuses_are_said_and_retried_slowly(status: int) -> None:
    decision = EXACT.decide(api_error(status), 0, 10)
    assert decision.action is Action.REFUSED
    assert decision.reason == f"refused ({status})"
    assert decision.delay == 60.0  # never faster than refused_delay


@pytest.mark.parametrize("status", [400, 411, 415])
def test_request_errors_are_refused_for_a_batch_too_never_split(status: int) -> None:
    """400 is a key without a project for every event: bisecting it would drop them all."""
    for size in (1, 2, 500):
        assert EXACT.decide(api_error(status), 0, size).action is Action.REFUSED


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_redirects_are_refused(status: int) -> None:
    error = api_error(status, location="https://elsewhere.example/")
    assert type(error) is errors.ApiError
    decision = EXACT.decide(error, 0, 10)
    assert decision == Decision(Action.REFUSED, 60.0, f"refused ({status})")
    assert decision.at_exit is AtExit.END  # no try at exit mends it


def test_refused_delay_grows_with_the_backoff_past_refused_delay() -> None:
    assert [EXACT.decide(api_error(401), n, 1).delay for n in (0, 5, 6, 7, 8, 9, 30)] == [
        60.0,
        60.0,
        64.0,
        128.0,
        256.0,
        300.0,
        300.0,
    ]


def test_refused_delay_is_capped_by_the_maximum() -> None:
    policy = RetryPolicy(initial=0.1, maximum=5.0, refused_delay=60.0, jitter=False)
    assert policy.decide(api_error(403), 0, 1).delay == 5.0
    assert policy.decide(api_error(403), 40, 1).delay == 5.0


def test_refused_delay_with_jitter_is_never_below_refused_delay() -> None:
    policy = RetryPolicy()
    for attempt in range(12):
        assert 60.0 <= policy.decide(api_error(404), attempt, 1).delay <= 300.0


def test_an_unexpected_success_answer_is_refused() -> None:
    error = errors.UnexpectedAnswerError(200, title="answered with an HTML page")
    assert EXACT.decide(error, 0, 10).action is Action.REFUSED


def test_decide_does_not_depend_on_the_batch_size_for_retries() -> None:
    for error in (errors.TransportError("x", "reset"), api_error(503), api_error(429)):
        assert EXACT.decide(error, 2, 1) == EXACT.decide(error, 2, 500)
