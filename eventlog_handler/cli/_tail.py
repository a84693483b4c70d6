"""``eventlog tail``: new events of a server, one line each, as they arrive.

It polls ``GET /api/v2/events`` (newest first, with a user token) every ``--interval`` seconds
and prints each event it has not printed yet, oldest first: its time, level, source, message
and a link to its stack. ``--errors`` keeps error events only; ``--filter`` passes the service's
filter syntax (``level:warn source:shop.*``). It starts with the last ``--last`` events. A
server that can't be reached is said once on stderr and tried again; Ctrl-C ends it (exit 0).
"""

from __future__ import annotations

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
    message = " ".join(message.split())[:300]
    stack = event.get("stack_id")
    link = f"{base}/stacks/{stack}" if stack else ""
    return f"{when}  {level:<5}  {str(event.get('source') or '-')[:60]}  {message}  {link}".rstrip()


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
                found = client.list_events(query or None, limit=100)
            except errors.TransportError as exc:
                if not failing:
                    print(f"eventlog tail: {exc}; trying again every {interval:g} s", file=err)
                    failing = True
                time.sleep(interval)
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
            time.sleep(interval)
    except KeyboardInterrupt:
        return 0
