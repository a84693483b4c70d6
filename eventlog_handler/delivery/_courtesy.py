"""The worker's courtesy: a logging thread never waits long for the interpreter.

Python lets one thread run at a time; a thread that wants to run waits until the running one
lets go, which a thread that computes does only when the interpreter forces it, every 5 ms
(``sys.getswitchinterval()``). A logging call that arrives while the worker builds or encodes a
large batch (errors with their stack traces) would wait that long. So the worker, in its long
loops, calls a :class:`Courtesy` now and then: after every 0.3 ms of work, if a log call was
captured meanwhile (someone is logging, so someone may be waiting), it sleeps for 0.1 ms, which
hands the interpreter over for sure. (``time.sleep(0)`` does not: the worker takes the
interpreter back before the waiting thread has woken up.) A longer slice does not buy
throughput and costs the logging thread's p99: in one run of 4 interleaved rounds each
(``benchmarks/run.py --cases errors,throughput``), slices of 0.3, 1 and 2 ms gave 1.05x,
0.93x and 0.94x the stdlib pipeline's flat-out rate, and a p99 of ``log.exception`` of 0.5,
1.3 and 2.2 ms (the slice itself: a caller arriving while the worker builds error events
waits it out). When nobody logs, it costs a clock read per call.
"""

from __future__ import annotations

import time
from collections.abc import Callable

#: Seconds of work between two looks.
WORK_SLICE = 0.0003
#: Seconds the worker steps aside when someone logged meanwhile.
HANDOVER = 0.0001


class Courtesy:
    """Call it in a long loop on the worker (see the module docstring)."""

    __slots__ = ("_activity", "_next", "_seen")

    def __init__(self, activity: Callable[[], int]) -> None:
        self._activity = activity
        self._seen = activity()
        self._next = time.perf_counter() + WORK_SLICE

    def __call__(self) -> None:
        now = time.perf_counter()
        if now < self._next:
            return
        seen = self._activity()
        if seen != self._seen:
            self._seen = seen
            time.sleep(HANDOVER)
            now = time.perf_counter()
        self._next = now + WORK_SLICE


def none() -> None:
    """No courtesy (work that is short, or not on the worker)."""
