"""The per-organization API throttle: N requests per 15-minute window → 429; and the login
guard, which slows password guessing down (429 with ``Retry-After``).

Windows are fixed and counted from the collector's start (the service counts from the clock's
15-minute boundaries; anchoring at start keeps tests free of boundary luck). Every authenticated
API request counts, whatever its outcome.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["DEFAULT_LIMIT", "WINDOW_SECONDS", "LoginGuard", "Throttle", "ThrottleResult"]

WINDOW_SECONDS = 15 * 60
DEFAULT_LIMIT = 3500
"""The service's default; reported in ``X-RateLimit-Limit`` when no throttle is set."""


@dataclass(frozen=True)
class ThrottleResult:
    """Whether a request may proceed, and the figures for the ``X-RateLimit-*`` headers."""

    allowed: bool
    limit: int
    remaining: int


class Throttle:
    """Counts requests per organization and window. ``limit=None`` counts but never refuses."""

    def __init__(self, limit: int | None, clock: Callable[[], float] = time.monotonic) -> None:
        if limit is not None and limit < 1:
            raise ValueError("throttle must be a positive number of requests per 15 minutes")
        self.limit = limit
        self._clock = clock
        self._start = clock()
        self._lock = threading.Lock()
        self._window = 0
        self._counts: dict[str, int] = {}

    def hit(self, organization_id: str) -> ThrottleResult:
        """Count one request of the organization."""
        window = int((self._clock() - self._start) // WINDOW_SECONDS)
        with self._lock:
            if window != self._window:
                self._window, self._counts = window, {}
            count = self._counts.get(organization_id, 0) + 1
            self._counts[organization_id] = count
        limit = self.limit if self.limit is not None else DEFAULT_LIMIT
        allowed = self.limit is None or count <= self.limit
        return ThrottleResult(allowed, limit, max(0, limit - count))


#: Failed logins remembered for this long (a sliding window).
LOGIN_WINDOW_SECONDS = 15 * 60
#: Failed logins of one account (e-mail address) in the window before its logins are refused.
LOGIN_FAILURES_PER_ACCOUNT = 10
#: Failed logins from one client address in the window before its logins are refused.
LOGIN_FAILURES_PER_CLIENT = 30
#: Accounts and addresses remembered at most (the oldest are forgotten first).
_LOGIN_KEYS = 10_000


class LoginGuard:
    """Password guessing, slowed down: failed logins (the login route and Basic credentials)
    are counted per client address and per account in a sliding window; past
    :data:`LOGIN_FAILURES_PER_CLIENT` or :data:`LOGIN_FAILURES_PER_ACCOUNT`, every login of that
    address or account is refused with 429 and a ``Retry-After`` (the right password too) until
    enough failures have left the window. A successful login clears its account's failures."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        per_account: int = LOGIN_FAILURES_PER_ACCOUNT,
        per_client: int = LOGIN_FAILURES_PER_CLIENT,
        window: float = LOGIN_WINDOW_SECONDS,
    ) -> None:
        self._clock = clock
        self._limits = {"account": per_account, "client": per_client}
        self._window = window
        self._lock = threading.Lock()
        self._failures: dict[tuple[str, str], deque[float]] = {}

    def retry_after(self, client: str, account: str | None) -> int | None:
        """Seconds until a login of ``account`` from ``client`` may be tried again, or None
        when it may be tried now."""
        now = self._clock()
        wait = 0.0
        with self._lock:
            for key in self._keys(client, account):
                times = self._recent(key, now)
                limit = self._limits[key[0]]
                if times is not None and len(times) >= limit:
                    wait = max(wait, times[len(times) - limit] + self._window - now)
        return max(1, math.ceil(wait)) if wait > 0 else None

    def failed(self, client: str, account: str | None) -> None:
        """Count a failed login."""
        now = self._clock()
        with self._lock:
            for key in self._keys(client, account):
                times = self._recent(key, now)
                if times is None:
                    if len(self._failures) >= _LOGIN_KEYS:
                        del self._failures[next(iter(self._failures))]
                    times = self._failures[key] = deque(maxlen=max(self._limits.values()))
                times.append(now)

    def succeeded(self, account: str | None) -> None:
        """A login of ``account`` succeeded: its failures are forgotten."""
        if account:
            with self._lock:
                self._failures.pop(("account", account.strip().lower()), None)

    @staticmethod
    def _keys(client: str, account: str | None) -> list[tuple[str, str]]:
        keys = [("client", client)]
        if account:
            keys.append(("account", account.strip().lower()))
        return keys

    def _recent(self, key: tuple[str, str], now: float) -> deque[float] | None:
        times = self._failures.get(key)
        if times is None:
            return None
        while times and times[0] <= now - self._window:
            times.popleft()
        return times
