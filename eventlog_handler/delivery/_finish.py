"""On the worker: an :class:`~eventlog_handler.delivery._buffer.Entry` becomes the wire form of its event.

What the caller's thread left for later happens here. A log entry is built by the one builder
of log events (:func:`eventlog_handler.wire._logs.log_builder`: the date, the reference id, the
level name, normalized tags, the user with its data exclusions, ``data`` made JSON-safe with
the exclusions applied); a ready event (an error, a structlog event) gets its frames resolved,
its stack and the environment (:func:`complete`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from eventlog_handler.delivery._buffer import Entry
from eventlog_handler.settings import Settings
from eventlog_handler.wire import _appversion  # noqa: F401 - notes __main__ at import
from eventlog_handler.wire._frames import FRAMES_KEY, CallSite, is_ref, resolve
from eventlog_handler.wire._grouping import error_stack, log_stack
from eventlog_handler.wire._logs import log_builder, with_environment
from eventlog_handler.wire._simple_error import error_levels
from eventlog_handler.wire._stacking import STACK_KEY


def finish(entry: Entry) -> dict[str, Any]:
    """The wire event of ``entry``: :func:`built` of one."""
    return next(built((entry,)))[1]


def complete(event: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """A ready event with what the caller's thread left for the worker: frame references
    resolved (:func:`eventlog_handler.wire._frames.resolve`: paths, ``in_app``, source
    context, locals masked by value), the error's stack
    (:func:`eventlog_handler.wire._grouping.error_stack`) unless it has one, and the
    environment. Events that have nothing pending (from the spool) are left as they are."""
    try:
        include, exclude = settings.in_app_include, settings.in_app_exclude
        data = event.get("data")
        error = event.get("@simple_error")
        resolved = False
        program: str | None = None
        for node in error_levels(error):
            node_data = node.get("data")
            if type(node_data) is dict and is_ref(node_data.get(FRAMES_KEY)):
                refs = node_data[FRAMES_KEY]
                program = program or refs.program
                node_data[FRAMES_KEY] = resolve(refs, include, exclude, settings.secrets)
                resolved = True
        if resolved and (type(data) is not dict or STACK_KEY not in data):
            stack = error_stack(error, program, include, exclude)
            if stack is not None:
                if type(data) is not dict:
                    data = event["data"] = {}
                data[STACK_KEY] = stack
        site = data.get(FRAMES_KEY) if type(data) is dict else None
        if type(site) is CallSite:
            assert type(data) is dict
            if STACK_KEY not in data:
                # An error without frames (never raised): its type and call site, and its
                # type as the title where no message was logged with it.
                kind = error.get("type") if type(error) is dict else None
                kind = kind if isinstance(kind, str) else None
                template = kind if site.template is None else site.template
                stack = log_stack(site.source, template, site, site.innermost, site.program)
                if stack is not None:
                    if kind is not None:
                        stack["signature_data"] = {"type": kind, **stack["signature_data"]}
                    data[STACK_KEY] = stack
            if site:
                data[FRAMES_KEY] = resolve(site, include, exclude, settings.secrets)
            else:
                del data[FRAMES_KEY]
    except Exception:  # pragma: no cover - a bug here must not lose the event
        pass
    if settings.environment is not None:
        return with_environment(event, settings.environment)
    return event


def built(entries: Iterable[Entry]) -> Iterator[tuple[Entry, dict[str, Any]]]:
    """Each of ``entries`` with its wire event. A ready event (an error, a structlog event, one
    from the spool) is completed (:func:`complete`); a log entry is built by the one builder of
    log events (:func:`~eventlog_handler.wire._logs.log_builder`, one per batch: what a batch
    shares is worked out once).

    A generator, so that an entry taken off its list as it is built
    (:meth:`~eventlog_handler.delivery._pipeline.Pipeline.run`) is freed once its event is
    done, not with the whole batch: the garbage collector counts what stays alive.
    """
    build = log_builder()
    next(build)
    send = build.send
    for entry in entries:
        if entry.event is not None:
            yield entry, complete(entry.event, entry.settings)
        else:
            yield entry, send(entry)
