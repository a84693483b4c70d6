"""Delivery of a batch: encode, compress, post, and carry out the policy's decision on failure.

:class:`Delivery` takes finished events (or rows read back from the spool) as
:class:`~eventlog_handler.delivery._batches.Part` objects and sends each until it is delivered or
dropped: it splits a part the service finds too large, shrinks a single event once, waits out
retries (sending the events that pile up meanwhile to the spool, when there is one and it has
room), and settles every event's outcome in the :class:`~eventlog_handler.delivery._ledger.Ledger`.

It also says what a person running the program needs to know, once, on stderr: a key or project
the service refuses (401/403/404, and 400, which the real service answers to a key that belongs
to no project), a delivery failure that has lasted :attr:`Settings.outage_notice` seconds
(naming the server, so a deploy that forgot ``EVENTLOG_SERVER_URL`` is noticed), and the
recovery. The API key is masked in every line.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from eventlog_handler.api import _errors as errors
from eventlog_handler.api._client import compress
from eventlog_handler.delivery._batches import WORKER_LEVEL, Part, encode_parts
from eventlog_handler.delivery._courtesy import Courtesy
from eventlog_handler.delivery._intake import BUSY, Intake
from eventlog_handler.delivery._ledger import Ledger
from eventlog_handler.delivery._retry import EXPIRY_MARGIN_SECONDS, Action, AtExit, RetryPolicy
from eventlog_handler.delivery._spooling import SpoolTraffic
from eventlog_handler.delivery._state import RunState
from eventlog_handler.delivery._stderr import redact, say, shown_server
from eventlog_handler.settings import Settings, mask_secret
from eventlog_handler.wire._events import MAX_AGE_SECONDS
from eventlog_handler.wire._jsonsafe import safe_str

if TYPE_CHECKING:
    from eventlog_handler.api._client import Client

#: While a failure lasts, the outage line is repeated at most this often.
OUTAGE_REPEAT = 300.0
#: Seconds the exit flush goes on retrying once a connection was refused (no server listens),
#: in pauses of a quarter of it.
REFUSED_AT_EXIT = 1.0
#: Seconds a 413 is remembered: requests as large as the smallest one it answered are split,
#: shrunk or dropped without being sent meanwhile (a proxy's limit raised is found after it).
TOO_LARGE_KEPT = 60.0


class Delivery:
    """Sends parts for one engine (see the module docstring)."""

    def __init__(
        self,
        settings: Settings,
        ledger: Ledger,
        intake: Intake,
        state: RunState,
        policy: RetryPolicy,
        client: Callable[[float | None], Client],
        config_seen: Callable[[int], None],
        spooling: SpoolTraffic | None,
        refused_at_exit: Callable[[], float] = lambda: REFUSED_AT_EXIT,
    ) -> None:
        self.settings = settings
        self.ledger = ledger
        self.intake = intake
        self.state = state
        self.policy = policy
        #: The worker's client (``client(None)``), or a new one bounded by a timeout.
        self.client = client
        #: Called with the settings' version an answer names.
        self.config_seen = config_seen
        #: The engine's spool traffic, if it has a spool: where events wait out an outage.
        self.spooling = spooling
        #: Seconds the exit flush goes on retrying once a connection was refused (asked then).
        self.refused_at_exit = refused_at_exit
        #: What the exit flush does with the next :meth:`pause`, if it begins meanwhile.
        self.at_exit = AtExit.RETRY
        #: In-memory parts being delivered (what the exit path may still save to the spool).
        self.current: deque[Part] = deque()
        #: When the service began refusing the events (said once), until it takes them again.
        self._refused_since: float | None = None
        #: The reasons (``too_large``, ``rejected``) whose drops were said on stderr.
        self._drops_said: set[str] = set()
        #: The smallest request (bytes as sent) answered 413, until when that is remembered,
        #: and the answer: requests as large are not sent (:meth:`_known_too_large`).
        self._too_large_at: int | None = None
        self._too_large_until = 0.0
        self._too_large_answer = ""
        #: When a request as large is tried again (a probe), and whether a probe was answered
        #: 413 too (then such requests are not sent until the 413 is forgotten).
        self._probe_at = 0.0
        self._too_large_confirmed = False
        self._failing_since: float | None = None
        self._outage_said_at: float | None = None
        self._failures = 0

    # -- in-memory events ---------------------------------------------------------------------

    def send_events(
        self,
        events: list[dict[str, Any]],
        created: list[float],
        weights: list[int] | None,
        client: Client | None = None,
        *,
        after_exit: bool = False,
    ) -> bool:
        """Send finished in-memory events (in flight); ``False`` when time ran out or they
        went to the spool to wait for the service. ``after_exit``: events captured after the
        exit flush, sent by the thread that logged them (no retry)."""
        oldest_allowed = time.time() - MAX_AGE_SECONDS + EXPIRY_MARGIN_SECONDS
        if created and min(created) < oldest_allowed:
            keep = [index for index, when in enumerate(created) if when >= oldest_allowed]
            expired = sum(
                weights[index] if weights is not None else 1
                for index, when in enumerate(created)
                if when < oldest_allowed
            )
            self.ledger.settle(expired, "expired", held=True)
            events = [events[index] for index in keep]
            weights = [weights[index] for index in keep] if weights is not None else None
            created = [created[index] for index in keep]
        courtesy = Courtesy(lambda: self.ledger.captured)
        parts = encode_parts(events, created, self.settings.max_raw_batch_bytes, weights, courtesy)
        return self.send_parts(deque(parts), client, after_exit=after_exit)

    def send_parts(
        self, parts: deque[Part], client: Client | None = None, *, after_exit: bool = False
    ) -> bool:
        """:meth:`deliver` in-memory parts, where the exit path can find them."""
        outer, self.current = self.current, parts
        try:
            return self.deliver(parts, client, after_exit=after_exit)
        finally:
            self.current = outer  # a send within a pause (see there) ends in the outer one

    # -- any part -----------------------------------------------------------------------------

    def deliver(
        self, parts: deque[Part], client: Client | None = None, *, after_exit: bool = False
    ) -> bool:
        """Send ``parts`` until each is delivered or dropped; ``False`` when time ran out or the
        events went to the spool to wait for the service (``after_exit``: see
        :meth:`send_events`)."""
        client = client or self.client(None)
        attempt = 0
        retried: Part | None = None  # a shrunk copy sent again after its own 413: no probe
        while parts:
            if (self.intake.finished and not after_exit) or self.state.over(time.monotonic()):
                # Past the exit's deadline the exiting thread writes the parts not yet posted
                # to the spool (or counts them): posting one now would send it twice.
                return False
            part = parts[0]
            payload, gzipped = compress(part.body(), WORKER_LEVEL)
            refused = part is not retried and self._known_too_large(len(payload))
            if len(part) > 1 and (refused or len(payload) > self.settings.max_batch_bytes):
                parts.popleft()
                parts.extendleft(reversed(part.halves()))
                continue
            if refused:  # a single event as large as one the service answered 413 to
                if not part.shrunk:
                    parts[0] = part.shrunk_copy()
                    continue
                wait = self._probe_at - time.monotonic()
                if self._too_large_confirmed:
                    parts.popleft()
                    self._say_dropped("too_large", self._too_large_answer, part.weight())
                    self.settle_part(part, "too_large", held=True)
                    continue
                if wait > 0:
                    # Sent as a probe when it is due: a first 413 may be a moment's (a proxy
                    # restarting), and what is logged then must not be dropped untried.
                    if self.state.closing and self.state.over(self._probe_at):
                        with self.ledger.lock:  # due after the exit: what is left is spooled
                            self._end_exit_sending()  # or counted, as the exit does
                        continue
                    self.intake.retrying = True
                    if not self.pause(wait):
                        return False
                    continue
            sent_at = time.monotonic()
            try:
                result = self._post(client, part, payload, gzipped)
            except errors.EventLogError as error:
                if part.origin is None and getattr(error, "sent", False):
                    with self.ledger.lock:  # it may have arrived: its outcome is unknown
                        self.ledger.uncertain = part.weight()
                decision = self.policy.decide(error, attempt, len(part))
                if isinstance(error, errors.PayloadTooLargeError):  # not 422's bisection
                    self._learn_too_large(len(payload), error, probe=refused)
                self.ledger.last_error = self.redact(f"{decision.reason}: {safe_str(error)}")
                if decision.action in (Action.RETRY, Action.REFUSED):
                    if decision.action is Action.REFUSED:
                        self._say_refused(error)
                    else:
                        self._failing(sent_at)
                    with self.ledger.lock:
                        self.ledger.retries += 1
                    attempt += 1
                    self.intake.retrying = True
                    spooling = self.spooling
                    spilled = (
                        spooling is not None and part.origin is None and spooling.spill_parts(parts)
                    )
                    delay = decision.delay
                    with self.ledger.lock:
                        if self.state.closing and (
                            decision.action is Action.REFUSED
                            or (spooling is not None and spooling.accepting())
                        ):
                            self._end_exit_sending()
                        elif self.state.closing and _nothing_listens(error):
                            grace = self.refused_at_exit()
                            self._shorten_exit(grace)
                            delay = min(delay, grace / 4)
                        elif self.state.over(time.monotonic() + delay):
                            # The exit's next try would come after its deadline (a 402's next
                            # usage bucket, a long Retry-After): no try is left to wait for.
                            self._end_exit_sending(time.monotonic() + delay)
                    self.at_exit = decision.at_exit
                    if spilled:
                        self.pause(delay)
                        return False
                    if not self.pause(delay):
                        return False
                elif decision.action is Action.SPLIT:
                    parts.popleft()
                    parts.extendleft(reversed(part.halves()))
                elif decision.action is Action.SHRINK and not part.shrunk:
                    parts[0] = retried = part.shrunk_copy()
                else:
                    parts.popleft()
                    reason = "rejected" if decision.action is Action.DROP else "too_large"
                    self._say_dropped(reason, self.redact(safe_str(error)), part.weight())
                    self.settle_part(part, reason)
                continue
            except Exception as exc:  # pragma: no cover - a bug must not lose the batch silently
                parts.popleft()
                self.ledger.last_error = f"unexpected: {type(exc).__name__}: {safe_str(exc)}"
                self.settle_part(part, "rejected")
                continue
            parts.popleft()
            attempt = 0
            self.ledger.uncertain = 0
            if self._too_large_at is not None and len(payload) >= self._too_large_at:
                self._too_large_at = None  # as large a request is taken again
                self._too_large_confirmed = False
            self._succeeded()
            with self.ledger.lock:
                self.ledger.batches += 1
                self.ledger.bytes_sent += result.bytes_sent
            self.settle_part(part, None)
            if result.config_version is not None:
                self.config_seen(result.config_version)
        return True

    def _post(self, client: Client, part: Part, payload: bytes, gzipped: bool) -> Any:
        """Post one part, noting what is on the wire (what the exit path calls "outcome
        unknown" if its deadline passes meanwhile)."""
        ledger, intake = self.ledger, self.intake
        on_wire = part.weight() if part.origin is None else 0
        with ledger.lock:
            ledger.posting = on_wire
            intake.posting_since = time.monotonic()
            intake.waited = 0.0
            if intake.waiting:  # the worker waits for the network now: logging goes on
                ledger.changed.notify_all()
        try:
            return client.post_payload(payload, gzipped, len(part))
        finally:
            with ledger.lock:
                ledger.posting = 0
                intake.posting_since = None
                if self.state.closing:  # the exit may wait to know this request's outcome
                    ledger.changed.notify_all()

    def _end_exit_sending(self, next_try: float | None = None) -> None:
        """A request failed during the exit flush, and retrying within the exit's deadline
        can't help: the service refused the key or the URL (a configuration error no retry
        mends), or the spool takes events now (what is left goes to disk: the rule the exit
        applies when it begins during a failure; a full or failing disk does not end it, and
        the events are retried from memory until the deadline). The exit's deadline becomes
        now, so the program ends at once instead of retrying until ``shutdown_timeout``. A
        refused connection does not end it: a server starting or restarting meanwhile (a
        collector started with the program, a deploy) takes the events. ``next_try``: when
        the next try was due (monotonic), after the deadline; the exit says so. Lock held."""
        state = self.state
        now = time.monotonic()
        if next_try is not None:
            state.next_try = next_try - now
        if state.deadline is None or state.deadline > now:
            state.deadline = now
            self.ledger.changed.notify_all()

    def _shorten_exit(self, seconds: float) -> None:
        """A connection was refused during the exit flush: nothing listens at the server's
        address. The exit retries for ``seconds`` more at most (a server starting meanwhile, a
        collector started with the program, still gets the events), not until
        ``shutdown_timeout``. The lock is held."""
        state = self.state
        end = time.monotonic() + seconds
        if state.deadline is None or state.deadline > end:
            state.deadline = end
            self.ledger.changed.notify_all()

    def settle_part(self, part: Part, reason: str | None, *, held: bool = False) -> None:
        """Record the outcome of a part: in flight from memory, or rows of a spool file.
        ``held``: a part that was not posted (see :meth:`Ledger.settle`)."""
        ledger = self.ledger
        if part.origin is None:
            ledger.uncertain = 0
            ledger.settle(part.weight(), reason, held=held)
            return
        if self.intake.finished:
            return  # the spool is closed: the rows stay for the next start
        deleted = part.origin.delete(part.rows, part.weight())
        spooling = self.spooling
        with ledger.lock:
            if spooling is not None and spooling.is_own(part.origin):
                ledger.spooled = max(0, ledger.spooled - deleted)
                if reason is None:
                    ledger.delivered += deleted
                else:
                    ledger.dropped[reason] += deleted
            else:
                ledger.replayed["delivered" if reason is None else "dropped"] += deleted
            ledger.changed.notify_all()

    # -- waiting before a retry ---------------------------------------------------------------

    def pause(self, delay: float) -> bool:
        """Wait ``delay`` seconds before a retry; ``False`` when the engine must stop sending.

        When the exit flush begins meanwhile, :attr:`at_exit` (see :class:`AtExit`) says if
        it ends for one more try, goes on for a try before the exit's deadline, or ends the
        exit's sending (nothing posted again); it never runs past the exit deadline. With a
        spool that has room, events that pile up meanwhile go to disk rather than waiting in
        memory; without one (or with a full disk) they wait in the bounded buffer. ``state.retry_at`` says when the retry comes (a
        ``flush()`` whose deadline is before it has nothing to wait for).
        """
        at_exit, self.at_exit = self.at_exit, AtExit.RETRY  # this pause's, not the next's
        with self.ledger.lock:
            outer = self.state.retry_at  # a pause within a pause (a send from a full disk's)
        try:
            return self._pause(delay, at_exit)
        finally:
            with self.ledger.lock:
                self.state.retry_at = outer

    def _pause(self, delay: float, at_exit: AtExit) -> bool:
        ledger, intake, state = self.ledger, self.intake, self.state
        was_closing = state.closing
        end = retry = time.monotonic() + delay
        notice = self._notice_due()
        # Now and then, the spool's own file is checked (a cleanup may have removed it, and a
        # long outage is when it holds the most): the worker is in here, not in its scans.
        check_at = time.monotonic() + self.settings.spool_scan_interval
        while True:
            spill: list[Any] = []
            spilled_bytes = 0
            check_disk = False
            with ledger.lock:
                if state.deadline is not None:
                    end = min(end, state.deadline)
                if state.retry_at != end:
                    state.retry_at = end
                    ledger.changed.notify_all()  # a flush() may have nothing to wait for
                while not intake.finished:
                    if state.closing and not was_closing:
                        if at_exit is AtExit.RETRY:
                            return True  # one more try, at once
                        was_closing = True
                        if at_exit is AtExit.END or state.over(retry):
                            # Refused for good, or the wait asked for ends after the deadline.
                            self._end_exit_sending(retry if at_exit is AtExit.WAIT else None)
                            return False
                    now = time.monotonic()
                    if notice is not None and now >= notice:
                        notice = None
                        self._say_outage()
                    if now >= end:
                        break
                    until = end if notice is None else min(end, notice)
                    spooling = self.spooling
                    if spooling is not None:
                        if now >= check_at:
                            check_disk = True
                            break
                        until = min(until, check_at)
                    spilling = spooling is not None and spooling.accepting()
                    if spilling:
                        due = intake.due(now)
                        if due <= now:
                            spill = intake.take()  # a part at a time: its build is in memory
                            ledger.in_flight += len(spill)
                            spilled_bytes = sum(entry.size for entry in spill)
                            ledger.in_flight_bytes += spilled_bytes  # in memory until written
                            intake.taken()
                            break
                        until = min(until, due)
                        intake.wake_at = until  # a log call that makes a batch due wakes us
                    try:
                        ledger.changed.wait(timeout=max(0.0, until - now))
                    finally:
                        intake.wake_at = BUSY
                if not spill and not check_disk:
                    if intake.finished:
                        return False
                    return state.deadline is None or time.monotonic() < state.deadline
            assert self.spooling is not None
            if check_disk:
                check_at = time.monotonic() + self.settings.spool_scan_interval
                with contextlib.suppress(OSError, sqlite3.Error):
                    self.spooling.keep_in_place()
                continue
            given_back = False
            try:
                left = self.spooling.spill_entries(spill)
                given_back = left is None
                if left:  # what a full disk had no room for is sent from memory
                    self.send_parts(left)
            finally:
                if not given_back:  # on disk now (give_back moved the bytes to the buffer)
                    with ledger.lock:
                        ledger.in_flight_bytes = max(0, ledger.in_flight_bytes - spilled_bytes)

    # -- what stderr says ---------------------------------------------------------------------

    def redact(self, text: str) -> str:
        """``text`` (which may quote the server) without the API key in it."""
        return redact(text, *self.settings.secrets)

    def _say_refused(self, error: errors.EventLogError) -> None:
        """Say once, naming the real cause, why the service keeps refusing the events."""
        if self._refused_since is not None:
            return
        self._refused_since = time.monotonic()
        status = getattr(error, "status", "?")
        settings = self.settings
        url = settings.shown_url
        check = "check EVENTLOG_API_KEY / api_key"
        if isinstance(error, errors.UnexpectedAnswerError):
            what = (
                f"answered {status} with something that is not the event service's answer "
                f"({error.title}): a proxy's login page, or a URL that leads elsewhere"
            )
            check = "check EVENTLOG_SERVER_URL / server_url"
        elif isinstance(status, int) and 300 <= status < 400:
            target = self.redact(getattr(error, "location", "") or "another address")
            what = (
                f"redirected the events to {target} ({status}); redirects are not followed "
                f"(the request and its key would go elsewhere)"
            )
            check = "set EVENTLOG_SERVER_URL / server_url to the address the service is at"
        elif status == 404:
            what = (
                f"answered 404 to POST {url}/api/v2/events: the URL does not lead to the "
                f"event service's API (a wrong path or another server)"
            )
            check = "check EVENTLOG_SERVER_URL / server_url"
        elif status == 400:
            what = (
                "refused the events (400). The real service answers 400 when the API key "
                "belongs to no project (an organization-level key): use a project's API key"
            )
        elif status == 407:
            what = "could not be reached: the proxy refused its own credentials (407)"
            check = "check the proxy's user and password in HTTP_PROXY / HTTPS_PROXY"
        elif status in (401, 403):
            what = f"refused the API key {mask_secret(settings.api_key)} ({status})"
        else:
            what = f"refused the events ({status})"
        detail = self.redact(safe_str(error))
        if self.state.closing:  # the exit's own line says what could not be sent
            fate = check[0].upper() + check[1:]
        else:
            retry = self.policy.refused_delay
            fate = (
                f"Events are kept (up to {settings.queue_size}) and retried every {retry:g} s "
                f"or more; {check}"
            )
        say(f"eventlog_handler: {url} {what}: {detail}. {fate}.")

    def _known_too_large(self, size: int) -> bool:
        """Whether the service answered 413 to a request of ``size`` bytes or fewer within
        :data:`TOO_LARGE_KEPT` seconds. Such a request is sent alone and shrunk, once, as a
        probe, ``retry_initial`` seconds after that 413: a 413 of a moment (a proxy
        restarting) had every event of the minute after dropped untried. When the probe is
        answered 413 too, such requests are not sent for the rest of the time (a proxy that
        answers 413 to every request cost three requests an event, split, alone and shrunk)."""
        smallest = self._too_large_at
        if smallest is None or size < smallest:
            return False
        if time.monotonic() > self._too_large_until:
            self._too_large_at = None
            self._too_large_confirmed = False
            return False
        return True

    def _learn_too_large(self, size: int, error: errors.EventLogError, probe: bool) -> None:
        """The service answered 413 to a request of ``size`` bytes (``probe``: to one sent
        as large as one it answered 413 to before: the limit is the service's)."""
        if self._too_large_at is None or size < self._too_large_at:
            self._too_large_at = size
            self._too_large_answer = self.redact(safe_str(error))
        self._too_large_until = time.monotonic() + TOO_LARGE_KEPT
        if probe:
            self._too_large_confirmed = True
        else:
            self._probe_at = time.monotonic() + self.settings.retry_initial

    def _say_dropped(self, reason: str, answer: str, count: int) -> None:
        """Events the service refused for good: said once per reason, with its answer."""
        if reason in self._drops_said:
            return
        self._drops_said.add(reason)
        why = (
            "too large, even alone and shrunk"
            if reason == "too_large"
            else "invalid (it stores the others)"
        )
        what = "an event" if count == 1 else f"{count} events"
        say(
            f"eventlog_handler: {self.settings.shown_url} refused {what} as {why}: "
            f"{answer}. Events it refuses so are dropped and counted in "
            f"stats()['dropped']['{reason}']; said once."
        )

    def _failing(self, sent_at: float) -> None:
        """A request sent at ``sent_at`` failed: the outage began then, not when the failure
        came back (a server that never answers fails only at ``timeout``)."""
        self._failures += 1
        if self._failing_since is None:
            self._failing_since = sent_at
        self._say_outage()

    def _notice_due(self) -> float | None:
        """When the outage line is due (``None``: said, or nothing is failing)."""
        if self._failing_since is None or self._outage_said_at is not None:
            return None
        return self._failing_since + self.settings.outage_notice

    def _say_outage(self) -> None:
        since = self._failing_since
        if since is None:
            return
        now = time.monotonic()
        if now - since < self.settings.outage_notice:
            return
        said = self._outage_said_at
        if said is not None and now - said < OUTAGE_REPEAT:
            return
        self._outage_said_at = now
        settings = self.settings
        ledger = self.ledger
        with ledger.lock:
            waiting = len(self.intake.buffer) + ledger.in_flight + ledger.spooled
            evicted = ledger.dropped["queue_full"]
        kept = "kept on disk and in memory" if self.spooling else "kept in memory"
        dropped = (
            f"; {evicted} dropped so far, the oldest logs first ({_BOUNDS})" if evicted else ""
        )
        say(
            f"eventlog_handler: cannot deliver events to {shown_server(settings)} for "
            f"{now - since:.0f} s: {ledger.last_error}. {waiting} event(s) waiting, {kept} "
            f"(up to {settings.queue_size} in memory, {settings.memory_budget / 2**20:.3g} MB)"
            f"{dropped}; retrying."
        )

    def _succeeded(self) -> None:
        since = self._failing_since
        self.intake.retrying = False
        refused, self._refused_since = self._refused_since, None
        if refused is not None:
            say(
                f"eventlog_handler: {self.settings.shown_url} takes the events again, after "
                f"refusing them for {time.monotonic() - refused:.0f} s."
            )
        if since is None:
            return
        if self._outage_said_at is not None:
            say(
                f"eventlog_handler: delivery to {self.settings.shown_url} recovered after "
                f"{time.monotonic() - since:.0f} s."
            )
        self._failing_since = self._outage_said_at = None
        self._failures = 0


#: Why logs are evicted from memory (``queue_full``), as the lines on stderr say it.
_BOUNDS = "queue_full: past queue_size or memory_budget"


def _nothing_listens(error: errors.EventLogError) -> bool:
    """Whether ``error`` is a refused connection: no server listens at the address."""
    return isinstance(error, errors.TransportError) and error.kind == "refused"
