"""The delivery policy as a value: what to do with a batch after each answer of the service.

In the spirit of urllib3's ``Retry``: :class:`RetryPolicy` is an immutable description (delays,
caps, jitter), and :meth:`RetryPolicy.decide` maps one failed attempt to a :class:`Decision`.
The engine carries the decision out; nothing here sleeps or sends.

========================================  ======================================================
answer                                    decision
========================================  ======================================================
refused, reset, timeout, TLS, 5xx, 503    ``RETRY`` after exponential backoff with jitter
409, 429                                  ``RETRY``, after ``Retry-After`` when one is sent
402                                       ``RETRY`` when the next 5-minute usage bucket starts
413                                       ``SPLIT`` a batch; ``SHRINK`` a single event, once
422                                       ``SPLIT`` a batch to isolate the bad event; ``DROP``
                                          a single one (counted as ``rejected``)
400, 411, 415, 401, 403, 404, 3xx,        ``REFUSED``: said once on stderr, retried slowly
other 4xx
========================================  ======================================================

A retry's wait also says what the exit flush, when it begins meanwhile, does with it
(:class:`AtExit`): a failure that may have ended by now (a refused connection, a reset, a 5xx
without ``Retry-After``) gets one more try at once; a wait the service asked for (409, 429,
402, a ``Retry-After``) is kept, so the try comes when it ends, or, past the exit's deadline,
not at all; a refusal ends the exit's sending at once, since no try can mend it.

Why 400 is a refusal, not a bad event: the real service parses events only after it has
answered 202, so it never rejects one bad event synchronously. On ``POST /api/v2/events`` it
answers 400 when the key belongs to no project (an organization-level key), and every event
would get it: bisecting a batch on it cost one request per event and dropped them all. 411 and
415 are about the request, not an event, and the same for every batch. Only 422 (which the real
service does not send for events, but other implementations of the API may) is evidence that
one event is bad, and only while a smaller part gets a different answer.
"""

from __future__ import annotations

import dataclasses
import enum
import random
import time

from eventlog_handler.api import _errors as errors

USAGE_BUCKET_SECONDS = 300
#: Events this close to the service's 3-day window are dropped (``expired``) rather than sent.
EXPIRY_MARGIN_SECONDS = 60


class AtExit(enum.Enum):
    """What the exit flush, when it begins during a retry's wait, does with that wait."""

    #: End the wait for one more try now: the failure may have ended (a server restarting).
    RETRY = "retry"
    #: Keep the wait, which the service asked for: the try comes when it ends, if that is
    #: before the exit's deadline; if not, there is no try, and the exit's sending ends.
    WAIT = "wait"
    #: End the exit's sending at once: the service refused the key or the URL, and no try
    #: can mend that.
    END = "end"


class Action(enum.Enum):
    RETRY = "retry"
    SPLIT = "split"
    SHRINK = "shrink"
    DROP = "drop"
    REFUSED = "refused"


@dataclasses.dataclass(frozen=True)
class Decision:
    """What to do next: the action and, for retries, how long to wait first and what the
    exit flush does with that wait."""

    action: Action
    delay: float = 0.0
    reason: str = ""
    #: Not part of the decision's identity: the same action, wait and reason, with what the
    #: exit does with the wait beside them (the table above).
    at_exit: AtExit = dataclasses.field(default=AtExit.RETRY, compare=False)


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """Backoff settings: ``delay(n) = min(maximum, initial * 2**n)``, jittered down to half.

    ``refused_delay`` is the slowest pace used while the key is refused (401/403/404).
    """

    initial: float = 1.0
    maximum: float = 300.0
    refused_delay: float = 60.0
    jitter: bool = True

    def backoff(self, attempt: int) -> float:
        """The pause before retry number ``attempt`` (0 for the first retry)."""
        delay = min(self.maximum, self.initial * float(2 ** min(attempt, 30)))
        if self.jitter:
            delay *= random.uniform(0.5, 1.0)
        return delay

    def decide(self, error: errors.EventLogError, attempt: int, batch_size: int) -> Decision:
        """The decision for a batch of ``batch_size`` events whose attempt raised ``error``."""
        if isinstance(error, errors.TransportError):
            return Decision(Action.RETRY, self.backoff(attempt), f"transport: {error.kind}")
        if not isinstance(error, errors.ApiError):  # pragma: no cover - defensive
            return Decision(Action.RETRY, self.backoff(attempt), type(error).__name__)
        status = error.status
        if isinstance(error, errors.RateLimitedError):
            delay = self._after(error, attempt)
            return Decision(Action.RETRY, delay, f"throttled ({status})", AtExit.WAIT)
        if isinstance(error, errors.PaymentRequiredError):
            delay = self.until_next_bucket()
            return Decision(Action.RETRY, delay, "usage limit (402)", AtExit.WAIT)
        if isinstance(error, errors.PayloadTooLargeError):
            action = Action.SPLIT if batch_size > 1 else Action.SHRINK
            return Decision(action, 0.0, "too large (413)")
        if isinstance(error, errors.ServerError) or status in (408, 425):
            # A Retry-After is the service's word on when to come back; without one, the
            # failure may be a moment's (a restart), worth one more try at exit.
            told = getattr(error, "retry_after", None) is not None
            at_exit = AtExit.WAIT if told else AtExit.RETRY
            return Decision(
                Action.RETRY, self._after(error, attempt), f"server error ({status})", at_exit
            )
        if isinstance(error, errors.ValidationError):
            action = Action.SPLIT if batch_size > 1 else Action.DROP
            return Decision(action, 0.0, f"rejected ({status})")
        delay = max(self.backoff(attempt), min(self.refused_delay, self.maximum))
        return Decision(Action.REFUSED, delay, f"refused ({status})", AtExit.END)

    def _after(self, error: errors.ApiError, attempt: int) -> float:
        """The pause before retrying after ``error``: its ``Retry-After`` when it has one (at
        most :attr:`maximum`, or 1 s), else the backoff. A ``Retry-After`` shorter than
        :attr:`initial` (``0``, a date in the past: clock skew) is honoured on the first retry;
        when the server answers so again, the backoff paces the retries, not the server."""
        retry_after = getattr(error, "retry_after", None)
        if retry_after is None:
            return self.backoff(attempt)
        delay = min(max(float(retry_after), 0.0), max(self.maximum, 1.0))
        if delay < self.initial and attempt > 0:
            delay = max(delay, self.backoff(attempt))
        return delay

    def until_next_bucket(self, now: float | None = None) -> float:
        """Seconds until the next 5-minute usage bucket starts (capped at :attr:`maximum`)."""
        now = time.time() if now is None else now
        wait = USAGE_BUCKET_SECONDS - (now % USAGE_BUCKET_SECONDS) + random.uniform(0, 5)
        return min(wait, self.maximum)
