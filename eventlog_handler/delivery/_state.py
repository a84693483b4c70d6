"""The run of one engine in one process, as its parts share it."""

from __future__ import annotations


class RunState:
    """Whether someone waits for everything to be sent, and until when.

    Read and written under the ledger's lock by the worker, the delivery and the lifecycle.
    """

    __slots__ = ("closing", "deadline", "flushing", "next_try", "retry_at")

    def __init__(self) -> None:
        #: How many ``flush()`` calls are waiting.
        self.flushing = 0
        #: The exit flush is under way: everything goes now.
        self.closing = False
        #: Monotonic time by which sending must end (the exit flush's deadline), or ``None``.
        self.deadline: float | None = None
        #: While the delivery waits to retry a failed request: when it tries again (monotonic).
        self.retry_at: float | None = None
        #: Seconds until the next try, when the exit flush ended its sending because that try
        #: was due after its deadline (the service asked to wait): the exit says so.
        self.next_try: float | None = None

    def retry_after(self, deadline: float) -> bool:
        """The delivery waits to retry until after ``deadline``: nothing is sent before it."""
        return self.retry_at is not None and self.retry_at > deadline

    def over(self, now: float) -> bool:
        """The exit flush's deadline has passed: the worker takes no more work."""
        return self.closing and self.deadline is not None and now >= self.deadline

    @property
    def hurried(self) -> bool:
        """Someone waits for everything pending: send it now, whatever is due."""
        return bool(self.flushing or self.closing)
