"""The program's console stays as it was around :func:`~eventlog_handler.setup`, and ``setup()``
keeps its place when the program configures logging after it.

``setup()`` puts two handlers on the root logger and may lower the root logger's level. Three
things a program sees on its console would change with that alone:

- **A handler that takes its level from the root logger** (``basicConfig(level=WARNING)``'s
  console handler, level ``NOTSET``) would start printing the ``INFO`` records the lowered root
  logger now lets through. :func:`pin_levels` puts a filter on such handlers that lets through
  what reached them before (:class:`AsBefore`); :func:`unpin` takes it off when the setup is
  closed.
- **Logging configured after ``setup()``**: ``logging.basicConfig()`` does nothing when the root
  logger has a handler, so a program that calls it after ``setup()`` lost its console format
  and level; ``dictConfig`` and ``fileConfig`` with a root section remove the root logger's
  handlers, so a Django ``LOGGING`` applied after ``setup()`` silently stopped every event.
  :func:`watch_configuration` wraps the three functions: ``basicConfig`` runs as if the
  package's handlers were not there, and after each of them the setup takes its place back
  (unless the new configuration put a handler of the package on the root logger itself), with
  the level the program gave the root logger pinned on the program's handlers (see above).
- **Werkzeug's development server** (``flask run``) adds its own console handler only when no
  handler would print its ``INFO`` lines (``* Running on ...``, one line per request); the
  package's handlers on the root logger would stop that. :func:`werkzeug_console` makes the
  decision werkzeug would have made without them.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import logging.config
import sys
from collections.abc import Callable, Collection
from typing import Any


def all_loggers() -> list[logging.Logger]:
    """The root logger and every logger made so far (a copy taken in one step: loggers made
    meanwhile on another thread don't disturb it)."""
    found = [logging.getLogger()]
    found.extend(
        item
        for item in list(logging.Logger.manager.loggerDict.values())
        if isinstance(item, logging.Logger)
    )
    return found


def _level_from_root(logger: logging.Logger) -> bool:
    """Whether ``logger``'s effective level is the root logger's (no level of its own on the
    way up)."""
    current: logging.Logger | None = logger
    while current is not None and current.parent is not None:
        if current.level != logging.NOTSET:
            return False
        current = current.parent
    return True


class AsBefore(logging.Filter):
    """On a handler of the program that takes its records at the root logger's level: lets
    through what reached it before ``setup()`` lowered the root logger (records at the root's
    old level and above, and records of loggers with a level of their own on their way up,
    which the root's level never filtered), and everything once the program sets the root
    logger's level itself, or the handler's."""

    def __init__(self, handler: logging.Handler, before: int, lowered_to: int) -> None:
        super().__init__()
        self.handler = handler
        self.before = before
        self.lowered_to = lowered_to

    def filter(self, record: logging.LogRecord) -> bool:
        if (
            record.levelno >= self.before
            or logging.root.level != self.lowered_to
            or self.handler.level != logging.NOTSET  # the program gave it a level since
        ):
            return True
        logger = logging.Logger.manager.loggerDict.get(record.name)
        return isinstance(logger, logging.Logger) and not _level_from_root(logger)


def pin_levels(
    before: int, lowered_to: int, ours: Callable[[logging.Handler], bool]
) -> list[tuple[logging.Handler, AsBefore]]:
    """Put an :class:`AsBefore` filter on every handler of the program (not ``ours``) without
    a level of its own on a logger that takes its level from the root: the root logger goes
    from ``before`` down to ``lowered_to``. Returns what was added, for :func:`unpin`."""
    pinned: list[tuple[logging.Handler, AsBefore]] = []
    for logger in all_loggers():
        if not _level_from_root(logger):
            continue
        for handler in logger.handlers:
            if (
                handler.level != logging.NOTSET
                or ours(handler)
                or isinstance(handler, logging.NullHandler)
            ):
                continue
            found = [item for item in handler.filters if isinstance(item, AsBefore)]
            for guard in found:  # pinned before: the program's level is this one now
                guard.before, guard.lowered_to = before, lowered_to
            if not found:
                guard = AsBefore(handler, before, lowered_to)
                handler.addFilter(guard)
                pinned.append((handler, guard))
    return pinned


def unpin(pinned: list[tuple[logging.Handler, AsBefore]]) -> None:
    """Take the filters :func:`pin_levels` added off their handlers."""
    for handler, guard in pinned:
        handler.removeFilter(guard)
    pinned.clear()


class Unseen(list):  # type: ignore[type-arg]
    """The root logger's handlers while ``basicConfig`` runs: :mod:`logging` still calls the
    package's handlers (it iterates the list), but ``basicConfig``'s "no handler yet" test (its
    length) and ``force``'s removal (a copy by slice) don't see them. Swapped in and out whole,
    so a record logged meanwhile on another thread still reaches every handler."""

    def __init__(self, items: Any, ours: Callable[[logging.Handler], bool]) -> None:
        super().__init__(items)
        self._ours = ours

    def __len__(self) -> int:
        return sum(1 for handler in list.__iter__(self) if not self._ours(handler))

    def __getitem__(self, index: Any) -> Any:
        found = list.__getitem__(self, index)
        if isinstance(index, slice):
            return [handler for handler in found if not self._ours(handler)]
        return found


def werkzeug_console(
    ours: Callable[[logging.Handler], bool], record: logging.LogRecord | None = None
) -> None:
    """Add werkzeug's console handler where werkzeug would add it if the package's handlers
    were not on the root logger: it decides at its first log line, from the handlers it sees.
    At ``setup()`` (no ``record``), before it decides; when werkzeug was imported after
    ``setup()``, at its first ``record`` reaching the root logger (which the handler added
    then prints). Nothing when werkzeug is not imported, or has a handler."""
    internal = sys.modules.get("werkzeug._internal")
    if internal is None:
        return
    logger = logging.getLogger("werkzeug")
    if logger.handlers or (record is None and getattr(internal, "_logger", True) is not None):
        return
    level = logger.getEffectiveLevel() if logger.level != logging.NOTSET else logging.INFO
    current: logging.Logger | None = logger
    while current is not None:
        for handler in current.handlers:
            if not ours(handler) and handler.level <= level:
                return  # a handler of the program prints its lines
        current = current.parent if current.propagate else None
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)
    try:
        handler = getattr(internal, "_ColorStreamHandler", logging.StreamHandler)()
    except Exception:  # pragma: no cover - a werkzeug that changed its handler
        handler = logging.StreamHandler()
    logger.addHandler(handler)
    if record is not None and record.levelno >= logger.getEffectiveLevel():
        handler.handle(record)


def keep_registered(handler: logging.Handler) -> None:
    """Put ``handler`` back on :mod:`logging`'s list of the handlers a configuration closes
    (``dictConfig`` and ``fileConfig`` empty it), so that the next configuration closes it
    too, which is how the setup notices a configuration it did not wrap."""
    refs = getattr(logging, "_handlerList", None)
    add = getattr(logging, "_addHandlerRef", None)
    if refs is None or add is None:
        return
    if not any(ref() is handler for ref in list(refs)):
        add(handler)


#: The functions wrapped, by ``(module, name)``, with the original of each.
_WRAPPED: dict[tuple[Any, str], Any] = {}


def watch_configuration(before: Callable[[bool], Any], after: Callable[[Any], None]) -> None:
    """Wrap ``logging.basicConfig``, ``logging.config.dictConfig`` and ``fileConfig``:
    ``before(is_basic)`` runs first (its result goes to ``after``), ``after`` once the
    configuration is done, also when it failed. Once; :func:`stop_watching` undoes it."""
    for module, name in (
        (logging, "basicConfig"),
        (logging.config, "dictConfig"),
        (logging.config, "fileConfig"),
    ):
        original = getattr(module, name)
        if getattr(original, "__eventlog_wrapped__", None) is not None:
            continue
        wrapped = _wrap(original, name == "basicConfig", before, after)
        _WRAPPED[(module, name)] = original
        setattr(module, name, wrapped)


def _wrap(
    original: Any, is_basic: bool, before: Callable[[bool], Any], after: Callable[[Any], None]
) -> Any:
    @functools.wraps(original)
    def configure(*args: Any, **kwargs: Any) -> Any:
        try:
            token = before(is_basic)
        except Exception:  # pragma: no cover - configuring must work as without the package
            return original(*args, **kwargs)
        try:
            return original(*args, **kwargs)
        finally:
            with contextlib.suppress(Exception):  # never raises into the program
                after(token)

    configure.__eventlog_wrapped__ = original  # type: ignore[attr-defined]
    return configure


def stop_watching() -> None:
    """Put back the functions :func:`watch_configuration` wrapped (where still wrapped)."""
    for (module, name), original in list(_WRAPPED.items()):
        current = getattr(module, name)
        if getattr(current, "__eventlog_wrapped__", None) is original:
            setattr(module, name, original)
        del _WRAPPED[(module, name)]


def spare_loggers(names: Collection[str]) -> None:
    """Leave the loggers ``names`` alone in the ``dictConfig`` and ``fileConfig`` calls to come,
    as if they did not exist yet: they were created by importing this package (``asyncio``,
    ``concurrent.futures``, ``requests``, ``urllib3``), and a configuration that imports the
    handler's class would otherwise disable them (``disable_existing_loggers``, on by
    default): asyncio's "Task exception was never retrieved" and the errors of a future's
    callbacks vanished, from the console and the service alike. Once, at import; a Python
    whose ``logging.config`` lacks the function (none from 3.10 to 3.13) is left as it is."""
    original = getattr(logging.config, "_handle_existing_loggers", None)
    if original is None or not names or getattr(original, "__eventlog_wrapped__", None):
        return
    spared = frozenset(names)

    @functools.wraps(original)
    def handle_existing(existing: list[str], *args: Any, **kwargs: Any) -> Any:
        return original([name for name in existing if name not in spared], *args, **kwargs)

    handle_existing.__eventlog_wrapped__ = original  # type: ignore[attr-defined]
    logging.config._handle_existing_loggers = handle_existing  # type: ignore[attr-defined]
