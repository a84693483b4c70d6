"""The project's settings from the service, as the official clients apply them.

``GET /api/v2/projects/config?v=N`` answers ``{"version": int, "settings": {str: str}}``.
Three kinds of setting change what is sent:

- ``@@log:<source pattern>``: the lowest level sent for log events of a source (``Trace``,
  ``Debug``, ``Info``, ``Warn``, ``Error``, ``Fatal``; ``Off`` or ``false`` sends none). The
  exact source wins, then the most specific pattern (longest first, then alphabetical), where
  ``*`` at the start or end of a pattern matches anything. Where no ``@@log:*`` setting matches,
  the handler's own level stands (the official clients fall back to ``Warn`` there).
- ``@@error:<type pattern>``: ``false``/``off`` drops errors of a matching exception type (the
  qualified name, ``myapp.PaymentError``, or the class name alone, ``PaymentError``; the type of
  any exception in the chain counts).
- ``@@DataExclusions``: comma-separated key patterns added to the local data exclusions.
- ``@@<type>:<source pattern>`` for the other types (``@@usage:export-*``, ``@@404:*``):
  ``false``/``off`` drops those events of a matching source (the feature, the path).
- ``@@UserAgentBotPatterns``: comma-separated user-agent patterns (``*bot*``, ``curl*``) of
  crawlers: a not-found event of a request whose user agent matches one is not sent.

A :class:`ServerSettings` is immutable; the engine swaps in a new one when the service has a new
version, so the caller's thread reads it without a lock. Its answers are cached per source and
per type name, so a record that the service filters out costs a dictionary lookup.
"""

from __future__ import annotations

import fnmatch
import math
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from eventlog_handler.api._errors import EventLogError
from eventlog_handler.wire._jsonsafe import safe_str
from eventlog_handler.wire._levels import NUMBERS

#: The level number that sends nothing (``Off``).
OFF = 1 << 30

#: Values that turn a source or an error type off, as the official clients read them.
_FALSE = frozenset({"false", "off", "no", "0"})
#: Values that send everything of a source (``Trace``), as the official clients read them.
_TRUE = frozenset({"true", "yes", "1"})
_CACHE_LIMIT = 10_000


def _matches(pattern: str, name: str) -> bool:
    """The official clients' rule: ``*`` at the start and/or end; case-insensitive."""
    pattern = pattern.lower()
    name = name.lower()
    if pattern == "*":
        return True
    starts, ends = pattern.startswith("*"), pattern.endswith("*")
    core = pattern.strip("*")
    if starts and ends:
        return core in name
    if ends:
        return name.startswith(core)
    if starts:
        return name.endswith(core)
    if "*" in core or "?" in core:
        return fnmatch.fnmatchcase(name, pattern)
    return name == core


def _by_specificity(patterns: Iterable[str]) -> list[str]:
    return sorted(patterns, key=lambda item: (-len(item), item))


class ServerSettings:
    """One version of the project's settings (see the module docstring)."""

    def __init__(self, version: int = -1, settings: Mapping[str, Any] | None = None) -> None:
        self.version = version
        self.settings: dict[str, str] = {
            str(key): str(value) for key, value in (settings or {}).items() if key is not None
        }
        log_levels: dict[str, int] = {}
        error_off: list[str] = []
        exclusions: list[str] = []
        bots: list[str] = []
        types_off: dict[str, list[str]] = {}
        for key, value in self.settings.items():
            lowered = key.lower()
            if lowered.startswith("@@log:"):
                log_levels[key[len("@@log:") :]] = _level(value)
            elif lowered.startswith("@@error:") and value.strip().lower() in _FALSE:
                error_off.append(key[len("@@error:") :])
            elif lowered == "@@dataexclusions":
                exclusions.extend(part.strip() for part in value.split(",") if part.strip())
            elif (
                lowered.startswith("@@")
                and ":" in lowered
                and value.strip().lower() in _FALSE
                and not lowered.startswith(("@@log:", "@@error:"))
            ):
                kind, _, pattern = key[2:].partition(":")
                types_off.setdefault(kind.lower(), []).append(pattern)
            elif lowered == "@@useragentbotpatterns":
                bots.extend(part.strip() for part in value.split(",") if part.strip())
        self._exact = {source.lower(): level for source, level in log_levels.items()}
        self._log_patterns = [
            (pattern, log_levels[pattern])
            for pattern in _by_specificity(log_levels)
            if "*" in pattern or "?" in pattern
        ]
        self._error_patterns = _by_specificity(error_off)
        #: Key patterns to add to the local data exclusions.
        self.data_exclusions: tuple[str, ...] = tuple(exclusions)
        #: User-agent patterns of crawlers (their not-found events are not sent).
        self.bot_patterns: tuple[str, ...] = tuple(bots)
        self._types_off = {kind: _by_specificity(found) for kind, found in types_off.items()}
        #: Whether any ``@@log:*`` setting exists (the caller skips the lookup when not).
        self.has_log_levels = bool(log_levels)
        self.has_error_rules = bool(error_off)
        self._levels: dict[str | None, int | None] = {}
        self._errors: dict[tuple[str, ...], bool] = {}

    def __repr__(self) -> str:
        return f"<ServerSettings v{self.version} {len(self.settings)} settings>"

    def drops_type(self, kind: str, source: str | None) -> bool:
        """Whether events of type ``kind`` (not ``log`` or ``error``) from ``source`` are off."""
        patterns = self._types_off.get(kind.lower())
        if not patterns:
            return False
        return any(_matches(pattern, source or "") for pattern in patterns)

    def is_bot(self, user_agent: Any) -> bool:
        """Whether ``user_agent`` matches one of the service's ``@@UserAgentBotPatterns``."""
        if not self.bot_patterns or not isinstance(user_agent, str) or not user_agent:
            return False
        return any(_matches(pattern, user_agent) for pattern in self.bot_patterns)

    def log_level(self, source: str | None) -> int | None:
        """The lowest level sent for ``source``, or ``None`` when the service says nothing."""
        found = self._levels.get(source, -1)
        if found != -1:
            return found
        name = source or ""
        level = self._exact.get(name.lower())
        if level is None:
            for pattern, candidate in self._log_patterns:
                if _matches(pattern, name):
                    level = candidate
                    break
        if len(self._levels) < _CACHE_LIMIT:
            self._levels[source] = level
        return level

    def drops_error(self, type_names: tuple[str, ...]) -> bool:
        """Whether an error whose chain has these exception type names is turned off."""
        if not self._error_patterns:
            return False
        found = self._errors.get(type_names)
        if found is not None:
            return found
        names = [*type_names, *(name.rpartition(".")[2] for name in type_names)]
        dropped = any(_matches(pattern, name) for pattern in self._error_patterns for name in names)
        if len(self._errors) < _CACHE_LIMIT:
            self._errors[type_names] = dropped
        return dropped


#: A ``@@log`` value that filters nothing of its source (``none``, or a word no client knows).
NO_FILTER = 0


def _level(value: str) -> int:
    """A ``@@log:*`` value read as Exceptionless.Net's ``LogLevel`` and the JavaScript client's
    ``EventExclusionPlugin`` read it: ``false``/``0``/``no``/``off`` → Off; ``true``/``1``/``yes``
    → Trace (everything); a level name → that level; ``none`` and any other word → no filtering
    for the source (:data:`NO_FILTER`, which also keeps a wildcard setting from applying)."""
    text = value.strip().lower()
    if text in _FALSE:
        return OFF
    if text in _TRUE:
        return NUMBERS["trace"]
    return NUMBERS.get(text, NO_FILTER)


#: Before anything was fetched: the service says nothing.
EMPTY = ServerSettings()


#: Seconds a fetch of the service's settings waits for the answer (on a thread of its own).
CONFIG_TIMEOUT = 3.0
#: After a failed fetch of the settings, seconds before the next try.
CONFIG_RETRY = 60.0
#: Seconds between checks of the settings while nothing names a newer version (an idle
#: process), as the official clients check: one ``?v=`` request, answered 304 when current.
IDLE_CHECK = 120.0


class SettingsFetch:
    """The service's settings of one engine: fetched by the worker at start, whenever an
    answer names a newer version, and every :data:`IDLE_CHECK` seconds since the last fetch
    (a process that sends nothing still learns of new settings); a failed fetch changes nothing
    but the time of the next try.

    ``fetch(v)`` is the client call (``GET /api/v2/projects/config?v=``): it returns the answer,
    or ``None`` for 304.
    """

    def __init__(self, enabled: bool, redact: Callable[[str], str]) -> None:
        self.enabled = enabled
        self._redact = redact
        #: The settings in force (swapped whole when a new version arrives).
        self.current: ServerSettings = EMPTY
        #: Why the last fetch failed (``None``: it didn't).
        self.error: str | None = None
        self.wanted = enabled
        #: A fetch is under way (taken, not yet run to its end).
        self.fetching = False
        self.next_try = 0.0
        #: When the next check is due though no answer named a newer version.
        self.next_check = math.inf

    def restart(self) -> None:
        """A new process (after fork): fetch again; the settings in force stay."""
        self.wanted = self.enabled
        self.fetching = False
        self.next_try = 0.0
        self.error = None

    def seen(self, version: int) -> None:
        """An answer named the settings' current version: fetch them if it is newer."""
        if self.enabled and version > self.current.version and time.monotonic() >= self.next_try:
            self.wanted = True

    def due_at(self) -> float:
        """When the worker should wake for the next check (``inf``: never, or not while a
        fetch is under way: its end wakes the worker)."""
        return self.next_check if self.enabled and not self.fetching else math.inf

    def check_due(self, now: float) -> bool:
        """Whether a fetch is wanted now (an idle check is due: it is then wanted)."""
        if self.enabled and not self.wanted and now >= self.next_check:
            self.wanted = True
        return self.wanted and not self.fetching

    def refresh(self, fetch: Callable[[int | None], Mapping[str, Any] | None]) -> None:
        """Fetch the settings if wanted: :meth:`take`, then :meth:`run`."""
        if self.take():
            self.run(fetch)

    def take(self) -> bool:
        """Whether a fetch is wanted; if so, it is under way from now (the worker asks, and
        then runs it on a thread of its own)."""
        if not self.wanted or self.fetching:
            return False
        self.wanted = False
        self.fetching = True
        self.next_check = time.monotonic() + IDLE_CHECK
        return True

    def run(self, fetch: Callable[[int | None], Mapping[str, Any] | None]) -> None:
        """Fetch the settings and put them in force (a failure changes nothing else)."""
        try:
            self._run(fetch)
        finally:
            self.fetching = False

    def _run(self, fetch: Callable[[int | None], Mapping[str, Any] | None]) -> None:
        current = self.current
        try:
            answer = fetch(current.version if current.version >= 0 else None)
        except EventLogError as exc:
            self._failed(self._redact(safe_str(exc)))
            return
        except Exception as exc:  # pragma: no cover - a bad answer must not stop the worker
            self._failed(f"{type(exc).__name__}: {safe_str(exc)}")
            return
        if answer is None:  # 304: what we have is current
            return
        version = answer.get("version")
        settings = answer.get("settings")
        if not isinstance(version, int) or not isinstance(settings, dict):
            self._failed("the answer is not {version, settings}")
            return
        self.error = None
        self.current = ServerSettings(version, settings)

    def _failed(self, why: str) -> None:
        self.next_try = time.monotonic() + CONFIG_RETRY
        self.error = why
