"""The per-organization API throttle: N requests per 15-minute window → 429.

Windows are fixed and counted from the collector's start (the service counts from the clock's
15-minute boundaries; anchoring at start keeps tests free of boundary luck). Every authenticated
API request counts, whatever its outcome.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["DEFAULT_LIMIT", "WINDOW_SECONDS", "Throttle", "ThrottleResult"]

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
