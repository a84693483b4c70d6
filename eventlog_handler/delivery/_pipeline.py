"""On the worker, between the queue and the wire: what happens to each taken entry.

In order:

1. :func:`~eventlog_handler.delivery._finish.built` builds the wire event;
2. a ``@ref:<name>`` data value that is not a reference id (8 to 100 letters, digits or ``-``)
   is renamed ``_@ref:<name>``, as the service's own keys given as data are, and said once on
   stderr per name; ``@version`` is added (``Settings.version``, ``EVENTLOG_VERSION`` or the
   version of the distribution that owns ``__main__``), and with sessions, ``@ref:session`` (the session open
   when the event was captured; a value the program set is kept); the marks given as data,
   ``@value`` (a number: the event's ``value``) and ``@critical`` (true: the ``Critical`` tag,
   as the official clients' ``MarkAsCritical``), move to where the service reads them;
3. ``before_send(event, hint)``, when set, may change the event or drop it (``None``: counted as
   ``dropped["filtered"]``); when it raises, the event goes on unchanged and the failure is
   counted (``hook_errors``) and said once on stderr; what it returns is made an event the
   service reads (:func:`~eventlog_handler.wire._conform.conform`);
4. the :class:`~eventlog_handler.wire._scrub.Scrubber` masks secrets in every string (URL
   credentials, secret query values, the API key) and the values of excluded keys, with the
   service's ``@@DataExclusions`` added;
5. the :class:`~eventlog_handler.delivery._rollup.Rollup` holds back duplicates, to be sent once with a
   ``count`` (never a session's own events: two session starts of one user are two sessions).

Events held by the roll-up stay ``in_flight`` until the event that carries their count has an
outcome.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from itertools import repeat
from typing import Any

from eventlog_handler.delivery._buffer import Entry, built_out
from eventlog_handler.delivery._courtesy import Courtesy
from eventlog_handler.delivery._finish import built
from eventlog_handler.delivery._ledger import Ledger
from eventlog_handler.delivery._rollup import Rollup
from eventlog_handler.delivery._server_settings import ServerSettings
from eventlog_handler.delivery._sessions import SESSION_TYPES, Sessions
from eventlog_handler.delivery._stderr import redact, say, say_once
from eventlog_handler.settings import Settings
from eventlog_handler.wire._conform import before_hook, conform, named
from eventlog_handler.wire._dates import QUOTED, is_valid_reference_id
from eventlog_handler.wire._events import MAX_MESSAGE
from eventlog_handler.wire._extras import set_aside
from eventlog_handler.wire._jsonsafe import safe_str, to_jsonable
from eventlog_handler.wire._levels import level_name
from eventlog_handler.wire._scrub import Scrubber

#: Data keys (``extra={"@value": 12.5, "@critical": True}``) that are fields of the event.
VALUE_KEY = "@value"
CRITICAL_KEY = "@critical"
CRITICAL_TAG = "Critical"

Batch = tuple[list[dict[str, Any]], list[float], "list[int] | None"]


class Pipeline:
    """Finish, version, ``before_send``, scrub, roll-up (see the module docstring)."""

    def __init__(
        self,
        settings: Settings,
        ledger: Ledger,
        rollup: Rollup,
        server: Callable[[], ServerSettings],
        sessions: Sessions | None = None,
    ) -> None:
        self.settings = settings
        self.sessions = sessions
        self.ledger = ledger
        #: The service's current settings (their data exclusions are masked too).
        self.server = server
        self.rollup = rollup
        self._version: str | bool | None = False  # False: not looked up yet
        self._scrubber: Scrubber | None = None
        self._scrubber_for: tuple[str, ...] | None = None
        self._other_scrubbers: dict[tuple[object, ...], Scrubber] = {}
        self._hook_said = False
        #: When the service's level and error rules were first seen here (POSIX time): events
        #: captured before were admitted without them (a program's first moments).
        self._rules_seen: float | None = None

    @property
    def version(self) -> str | None:
        if self._version is False:
            version = self.settings.version
            if version is None:
                from eventlog_handler.wire._appversion import detect_version

                version = detect_version()
            self._version = version
        return self._version  # type: ignore[return-value]

    def scrubber(self, settings: Settings | None = None) -> Scrubber:
        """The scrubber for the local exclusions (the engine's, or those of ``settings``: an
        entry's of another handler or processor) plus the service's current ones."""
        extra = self.server().data_exclusions
        if settings is not None and settings.data_exclusions != self.settings.data_exclusions:
            key = (settings.api_key, settings.data_exclusions, extra)
            found = self._other_scrubbers.get(key)
            if found is None:
                if len(self._other_scrubbers) >= 16:
                    self._other_scrubbers.clear()
                found = self._other_scrubbers[key] = Scrubber.for_settings(settings, (), extra)
            return found
        if self._scrubber is None or self._scrubber_for != extra:
            self._scrubber = Scrubber.for_settings(self.settings, (), extra)
            self._scrubber_for = extra
        return self._scrubber

    def run(self, entries: list[Entry], rollup: bool = True) -> Batch:
        """The events to send for ``entries`` (taken, in flight), plus roll-ups now due.

        Each entry is taken off ``entries`` as its event is built (the list is empty once
        the batch is made) and freed once that event is done. Kept to the end of the batch,
        500 entries and their arguments stayed alive while as many events were made, and the
        garbage collector, which runs after about 700 new objects that are still alive, ran
        on the logging threads about twice as often as the caller's own objects make it.

        ``rollup=False`` (the exit path, on a thread that is not the worker) leaves the roll-up
        alone: every event is returned."""
        events: list[dict[str, Any]] = []
        created: list[float] = []
        version = self.version
        own = self.settings
        hook = own.before_send
        # Entries of another handler of this server and key (a later setup(), a new
        # dictConfig) are given to that handler's hook, each its own.
        mixed = any(entry.settings is not own for entry in entries)
        scrubber = self.scrubber()
        scrub = scrubber.flat_event
        # The messages of log entries are those of their events (a hook may change them; a
        # long one is cut, with a mark): looked at for secrets all together, not one by one.
        plain = (
            not mixed
            and hook is None
            and scrubber.plain_texts([entry.message for entry in entries], MAX_MESSAGE)
        )
        roll = self.rollup if rollup else None
        now = time.monotonic()
        server = self.server()
        unruled = self._admitted_without_rules(server)
        filtered = failed = held = grown = 0
        courtesy = Courtesy(lambda: self.ledger.captured)
        sessions = self.sessions
        entries.reverse()  # taken from the end, in order
        for entry, event in self._built(entries):
            courtesy()  # a long batch (errors cost more): logging threads don't wait for it
            if entry is None or event is None:
                failed += 1
                continue
            if entry.created < unruled and _turned_off(entry, event, server):
                filtered += 1  # captured before the service's rules were known here
                continue
            data = event.get("data")
            if type(data) is dict and data:
                _check_references(data)
            if version is not None:
                if data is None:
                    data = event["data"] = {"@version": version}
                elif type(data) is dict:
                    data["@version"] = version
            if sessions is not None:
                user = event.get("@user")
                identity = user.get("identity") if type(user) is dict else None
                _stamp_session(event, sessions.id_at(entry.created, identity))
                data = event.get("data")
            if data and (VALUE_KEY in data or CRITICAL_KEY in data):
                _lift_marks(event, data)
            if mixed:
                hook = entry.settings.before_send
                # A processor's own data_exclusions (its options over setup()'s) are its own.
                scrub = self.scrubber(entry.settings).flat_event
            if hook is not None:
                changed = self._before_send(hook, event, entry)
                if changed is None:
                    filtered += 1
                    continue
                event = changed
            try:
                event = scrub(event, plain)
            except Exception as exc:  # a bug: the event may hold a secret still, so it stays
                self.ledger.last_error = f"scrubbing: {type(exc).__name__}: {safe_str(exc)}"
                failed += 1
                continue
            size = entry.size
            if entry.is_error:
                # Built out since it was captured (its frames got their source lines, the
                # trace its lines): that counts in the batch in flight, and twice in a roll-up,
                # whose key holds its nested parts again (as JSON).
                size += built_out(event)
                grown += size - entry.size
                size *= 2
            if (
                roll is not None
                and event.get("type") not in SESSION_TYPES  # each session is its own
                and (not QUOTED or event.get("reference_id") not in QUOTED)  # a user has it
                and not roll.admit(event, now, size)
            ):
                held += 1
                continue
            events.append(event)
            created.append(entry.created)
        weights: list[int] | None = None
        carriers = roll.take_due(now) if roll is not None else []
        if carriers:
            weights = [1] * len(events)
            for event, count in carriers:
                events.append(event)
                created.append(time.time())
                weights.append(count)
        if filtered or failed or held or grown:
            with self.ledger.lock:
                self.ledger.rolled_up += held
                if rollup:  # the worker's batch (the exit's own are not counted in bytes)
                    self.ledger.in_flight_bytes = max(0, self.ledger.in_flight_bytes + grown)
            if filtered:
                self.ledger.settle(filtered, "filtered", held=True)
            if failed:
                self.ledger.settle(failed, "rejected", held=True)
        return events, created, weights

    def _admitted_without_rules(self, server: ServerSettings) -> float:
        """Events captured before this POSIX time were admitted before the service's
        ``@@log`` and ``@@error`` rules were known (0: none were)."""
        if server.version < 0 or not (server.has_log_levels or server.has_error_rules):
            return 0.0
        if self._rules_seen is None:
            self._rules_seen = time.time()
        return self._rules_seen

    def _built(
        self, entries: list[Entry]
    ) -> Iterator[tuple[Entry, dict[str, Any]] | tuple[None, None]]:
        """:func:`~eventlog_handler.delivery._finish.built` for the reversed ``entries``, each
        popped as it is built; ``(None, None)`` for an entry whose building failed (a bug must
        not lose the batch: the rest are built)."""
        pop = entries.pop
        while entries:
            left = len(entries)
            try:
                # Each taken off the list as it is built (popped in C: no generator of ours).
                yield from built(map(pop, repeat(-1, left)))
            except Exception as exc:
                self.ledger.last_error = f"building events: {type(exc).__name__}: {safe_str(exc)}"
                if len(entries) == left:  # it failed before taking one: that one goes
                    entries.pop()
                yield None, None

    def pending_rollups(self, everything: bool) -> Batch:
        """Roll-ups to send now: those due, or (``everything``: flush and exit) all of them."""
        now = time.monotonic()
        carriers = self.rollup.take_all() if everything else self.rollup.take_due(now)
        stamp = time.time()
        return (
            [event for event, _ in carriers],
            [stamp] * len(carriers),
            [count for _, count in carriers],
        )

    def _before_send(self, hook: Any, event: dict[str, Any], entry: Entry) -> Any:
        hint = {
            "exception": entry.exc,
            "level": level_name(entry.levelno) if entry.levelno else None,  # None: no level
            "source": entry.source,
        }
        user = event.get("@user")
        if type(user) is dict:  # the builder's last user, shared by the events that follow
            event["@user"] = {**user, "data": dict(user["data"])} if "data" in user else dict(user)
        before = before_hook(event)
        try:
            result = hook(event, hint)
        except BaseException as exc:  # SystemExit too: the worker must outlive the hook
            # Its text may quote a secret: the program's URL or key (a failed call of its
            # own), a password in a message; masked as in the events.
            text = self.scrubber().text(redact(safe_str(exc), *entry.settings.secrets))
            self._hook_failed(f"raised {type(exc).__name__}: {text}")
            return event
        if result is None:
            return None
        if not isinstance(result, dict):
            self._hook_failed(f"returned {type(result).__name__}, not a dict or None")
            return event
        # The fields the service reads, of the types it reads them with: before the JSON
        # safety (which writes a Decimal as a text) and after it (which writes a cycle so).
        restored = conform(result, before)
        safe = to_jsonable(result, max_string=1_000_000)  # whatever the hook added: valid JSON
        if not isinstance(safe, dict):
            return event
        restored += conform(safe, to_jsonable(before))
        if restored:
            self._hook_failed(
                f"set {named(restored)} to a value the service can't read (it would store "
                "the whole batch as one text)",
                "the field was sent as it was before the hook",
            )
        return safe

    def _hook_failed(self, what: str, outcome: str = "the event was sent unchanged") -> None:
        """Count a failure of ``before_send`` and say the first one on stderr."""
        with self.ledger.lock:
            self.ledger.hook_errors += 1
        if self._hook_said:
            return
        self._hook_said = True
        say(
            f"eventlog_handler: before_send {what}; {outcome} "
            f"(counted in stats()['hook_errors'], said once)."
        )


def _turned_off(entry: Entry, event: dict[str, Any], server: ServerSettings) -> bool:
    """Whether the service's rules turn off an event that was admitted without them: an error
    whose type (or a type of its chain) is ``@@error:*`` off, a log below its source's
    ``@@log`` level (the decision :func:`~eventlog_handler.capture._admit.admit` makes)."""
    if event.get("type") == "error":
        names: list[str] = []
        error = event.get("@simple_error")
        while type(error) is dict and len(names) < 10:
            if isinstance(error.get("type"), str):
                names.append(error["type"])
            error = error.get("inner")
        return server.has_error_rules and bool(server.drops_error(tuple(names)))
    if server.has_log_levels and entry.levelno and event.get("type", "log") == "log":
        # a log record's entry (typed events and entries given back from a spill have none)
        minimum = server.log_level(entry.source)
        return minimum is not None and entry.levelno < minimum
    return False


#: What starts a data key whose value is a reference to another event (``@ref:session``).
REF_PREFIX = "@ref:"
#: The ``@ref:`` keys among a set of data keys, by the keys in their order.
_REFS: dict[tuple[Any, ...], tuple[str, ...]] = {}


def _check_references(data: dict[str, Any]) -> None:
    """Rename, in place, each ``@ref:<name>`` of ``data`` whose value is not a reference id
    (8 to 100 letters, digits or ``-``) to ``_@ref:<name>``, as a known data key given as data
    is (``@stack`` → ``_@stack``): the service would keep a reference to nothing, and a
    session's own id may then take its place. It is then data like any other, the data
    exclusions applied. Said once per name on stderr (the value not shown)."""
    keys = tuple(data)  # a call site's events have the same keys: looked through once
    refs = _REFS.get(keys)
    if refs is None:
        refs = tuple(key for key in keys if type(key) is str and key.startswith(REF_PREFIX))
        if len(_REFS) >= 1_000:
            _REFS.clear()
        _REFS[keys] = refs
    if not refs:
        return
    bad = [key for key in refs if not is_valid_reference_id(data[key])]
    for key in bad:
        name = set_aside(data, key)
        value = data[name] = data.pop(key)
        say_once(
            f"bad reference: {key}",
            f"eventlog_handler: data {key!r} is not a reference id (8 to 100 letters, digits "
            f"or '-'), got {_described(value)}; it is sent as {name!r}, plain data (the "
            f"data exclusions apply to it), said once for {key!r}",
        )


def _described(value: Any) -> str:
    """What a value is, without itself (it is no reference id: it may be anything)."""
    if isinstance(value, str):
        return f"a str of {len(value)} characters"
    return f"a value of type {type(value).__name__}"


def _stamp_session(event: dict[str, Any], session_id: str | None) -> None:
    """Add ``@ref:session`` to an event of the session (not to the session's own events)."""
    if session_id is None or event.get("type") in SESSION_TYPES:
        return
    data = event.get("data")
    if data is None:
        event["data"] = {"@ref:session": session_id}
    elif type(data) is dict:
        data.setdefault("@ref:session", session_id)


def _lift_marks(event: dict[str, Any], data: dict[str, Any]) -> None:
    """``@value`` → the event's ``value`` (a number; anything else stays data), ``@critical``
    → the ``Critical`` tag (when true)."""
    value = data.get(VALUE_KEY)
    if VALUE_KEY in data and type(value) in (int, float) and value == value:
        event["value"] = data.pop(VALUE_KEY)
    if CRITICAL_KEY in data and data.pop(CRITICAL_KEY) is True:
        tags = event.get("tags")
        if not isinstance(tags, list):
            event["tags"] = [CRITICAL_TAG]
        elif CRITICAL_TAG not in tags:
            tags.append(CRITICAL_TAG)
    if not data:
        del event["data"]
