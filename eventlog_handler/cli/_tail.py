"""``eventlog tail``: new events of a server, one line each, as they arrive.

It polls ``GET /api/v2/events`` (newest first, with a user token) every ``--interval`` seconds
and prints each event it has not printed yet, oldest first: its time, level, source, message
and a link to its stack. ``--errors`` keeps error events only; ``--filter`` passes the service's
filter syntax (``level:warn source:shop.*``). It starts with the last ``--last`` events (up to
1,000, page by page). A server that can't be reached, or answers 429 or 5xx for a while (a
proxy during a deploy), is said once on stderr and tried again (after its ``Retry-After``
when it gives one); Ctrl-C ends it (exit 0).

A burst (a batch of 500 from one program) is read page by page, back to the events already
printed, up to the 1,000 the service's paging reaches; past that, how many were skipped is said
on stderr. The service lists events by their own date, so an event dated before the ones
already printed (one replayed from a spool after an outage) comes after them in no list: tail
shows it only while it is among the newest page. Text from events is printed without its
control characters: a message can't retitle or recolour the terminal.
"""

from __future__ import annotations

import errno
import select
import sys
import time
from collections import OrderedDict
from datetime import datetime
from typing import Any, TextIO

from eventlog_handler.api import _errors as errors
from eventlog_handler.api._client import Client
from eventlog_handler.settings import shown_url

__all__ = ["run_tail"]

_SEEN = 10_000
#: Events per page, and the pages the service's paging reaches (it gives no link past a
#: skip of 1,000).
_PAGE = 100
_PAGES = 10
#: The longest wait a ``Retry-After`` gets tail to make between two looks.
_LONGEST_WAIT = 60.0


def _clean(value: Any, longest: int) -> str:
    """``value`` as one line of at most ``longest`` characters, without control characters
    (an escape sequence in a message would act on the terminal)."""
    text = "".join(ch if ch.isprintable() else " " for ch in str(value))
    return " ".join(text.split())[:longest]


def _line(event: dict[str, Any], base: str) -> str:
    date = str(event.get("date") or "")
    try:
        moment = datetime.fromisoformat(date.replace("Z", "+00:00"))
        when = moment.astimezone().strftime("%Y-%m-%d %H:%M:%S")
    except ValueError:
        when = date[:19]
    raw = event.get("data")
    data: dict[str, Any] = raw if isinstance(raw, dict) else {}
    level = str(
        data.get("@level") or ("Error" if event.get("type") == "error" else event.get("type") or "")
    )
    message = str(event.get("message") or "")
    error = data.get("@simple_error") if isinstance(data.get("@simple_error"), dict) else None
    if error is not None:  # the exception's type says what happened
        kind = str(error.get("type") or "Error")
        text = str(error.get("message") or "")
        message = f"{kind}: {text}" if not message or message == text else f"{message} ({kind})"
    message = _clean(message, 300)
    stack = _clean(event.get("stack_id") or "", 100)
    link = f"{base}/stacks/{stack}" if stack else ""
    source = _clean(event.get("source") or "-", 60)
    return f"{_clean(when, 30)}  {_clean(level, 20):<5}  {source}  {message}  {link}".rstrip()


def _last_events(client: Client, query: str | None, last: int) -> list[dict[str, Any]]:
    """The newest events, newest first: at least ``last`` of them when there are so many
    (one page, or as many as ``last`` needs)."""
    found: list[dict[str, Any]] = []
    taken: set[str] = set()
    for page in range(1, _PAGES + 1):
        events = client.list_events(query, limit=_PAGE, page=page)
        for event in events:
            ident = str(event.get("id"))
            if ident not in taken:
                taken.add(ident)
                found.append(event)
        if len(found) >= last or len(events) < _PAGE:
            break
    return found


def _new_events(
    client: Client, query: str | None, seen: OrderedDict[str, None], err: TextIO
) -> list[dict[str, Any]]:
    """The events not printed yet, newest first: page after page until one reaches an event
    printed before (or the list's end); past the last page the service reaches, what was
    skipped is said."""
    fresh: list[dict[str, Any]] = []
    taken: set[str] = set()
    for page in range(1, _PAGES + 1):
        found = client.list_events(query, limit=_PAGE, page=page)
        # Events that came meanwhile push the older ones down: a page may repeat the end of
        # the one before it.
        reached = False  # an event printed before: the pages after it were read then
        for event in found:
            ident = str(event.get("id"))
            if ident in seen:
                reached = True
            elif ident not in taken:
                taken.add(ident)
                fresh.append(event)
        if reached or len(found) < _PAGE:
            return fresh
    print(
        f"eventlog tail: more than {_PAGES * _PAGE} events came since the last look; "
        "the older ones are not shown",
        file=err,
    )
    return fresh


def run_tail(
    client: Client,
    *,
    errors_only: bool = False,
    filter_text: str = "",
    interval: float = 1.0,
    last: int = 10,
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
) -> int:
    """Print new events until interrupted (see the module docstring); returns the exit code."""
    query = " ".join(part for part in ("type:error" if errors_only else "", filter_text) if part)
    seen: OrderedDict[str, None] = OrderedDict()
    base = shown_url(client.server_url)  # a password in it is not printed in every link
    first = True
    failing = False
    try:
        while True:
            try:
                if first:
                    found = _last_events(client, query or None, last)
                else:
                    found = _new_events(client, query or None, seen, err)
            except (
                errors.TransportError,
                errors.RateLimitedError,
                errors.ServerError,
            ) as exc:
                wait = getattr(exc, "retry_after", None) or interval
                wait = max(interval, min(float(wait), _LONGEST_WAIT))
                if not failing:
                    print(f"eventlog tail: {exc}; trying again every {wait:g} s", file=err)
                    failing = True
                _wait(out, wait)
                continue
            if failing:
                print("eventlog tail: connected again", file=err)
                failing = False
            fresh = [event for event in found if str(event.get("id")) not in seen]
            if first:
                fresh = fresh[: max(0, last)]
                for event in found:
                    seen[str(event.get("id"))] = None
                first = False
            for event in reversed(fresh):
                seen[str(event.get("id"))] = None
                print(_line(event, base), file=out, flush=True)
            while len(seen) > _SEEN:
                seen.popitem(last=False)
            _wait(out, interval)
    except KeyboardInterrupt:
        return 0


def _wait(out: TextIO, seconds: float) -> None:
    """Wait ``seconds`` for the next look; a reader of ``out`` that went away meanwhile
    (``eventlog tail | head -1`` on a quiet project) ends the wait with
    :class:`BrokenPipeError`, as the next line would, instead of when an event comes."""
    try:
        poller = select.poll()
        poller.register(out.fileno(), 0)  # only its errors: a pipe whose reader closed
    except (AttributeError, OSError, ValueError):  # no descriptor (a StringIO), or no poll()
        time.sleep(seconds)
        return
    if poller.poll(max(0, int(seconds * 1000))):
        raise BrokenPipeError(errno.EPIPE, "the reader of the output went away")
