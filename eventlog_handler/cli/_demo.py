"""``eventlog demo``: the package at work in one command, with no account.

It starts the local collector on a loopback port (a free one unless told), connects logging to
it with :func:`eventlog_handler.setup` exactly as a program would, posts a message with
``Client.submit()`` (past the handler: its statistics do not count it), logs at
several levels with extras and a user, fails the same way three times (one stack, counted
three times), logs a caught exception with a chained cause, lets an exception escape a thread,
flushes, and prints the stacks the dashboard shows, the events, and the dashboard's address.

The collector's database is kept in a directory of its own; the demo prints the exact
``eventlog serve`` command that opens the same dashboard again after it ends. With
``--keep-serving`` it keeps serving until Ctrl-C instead.
"""

from __future__ import annotations

import logging
import os
import shlex
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from eventlog_handler._setup import setup
from eventlog_handler.api._client import Client
from eventlog_handler.capture._context import user_context
from eventlog_handler.cli._table import format_table
from eventlog_handler.collector import Collector
from eventlog_handler.wire._events import message_event

#: Events the demo logs through the handler: 4 logs (DEBUG..ERROR), 1 caught error with a
#: cause, 3 failed reservations (one stack), 1 thread error.
HANDLER_EVENTS = 9
#: The message the demo posts with ``Client.submit()``, as a script with no logging would: it
#: goes past the handler (its statistics do not count it) and has no level and no source.
SUBMITTED_MESSAGE = "Disk space is low"
#: Every event the collector receives.
EXPECTED_EVENTS = HANDLER_EVENTS + 1
#: The LEVEL cell of an event that has no level: a plain message (``{"message": ...}``).
NO_LEVEL = "(message)"
#: The port ``eventlog serve`` suggests for reopening the dashboard.
REOPEN_PORT = 5000


class PaymentError(Exception):
    """The demo's own exception type."""


def _charge(order_id: int) -> None:
    try:
        {"card": "4242"}["cvv"]
    except KeyError as exc:
        raise PaymentError(f"payment for order {order_id} failed") from exc


def _reserve(sku: str) -> None:
    stock: dict[str, int] = {}
    stock[sku] -= 1  # KeyError: the same line every time, so the same stack


def _worker() -> None:
    raise RuntimeError("the background job crashed")


#: The project setting the demo makes on the collector, as a person would in its dashboard
#: or with ``eventlog settings set``: the chatty logger's lines stay out of the service.
QUIET_SETTING = ("@@log:shop.chatty", "Off")
QUIET_LINES = 5


def produce_events(collector: Collector) -> dict[str, Any]:
    """Use the package as a program would; return the delivery statistics."""
    os.environ["NO_PROXY"] = os.environ["no_proxy"] = collector.no_proxy()  # not via HTTP_PROXY
    # What `eventlog settings set PROJECT @@log:shop.chatty Off` does (a user token).
    Client(collector.url, collector.user_token).set_project_setting(
        collector.project_id, *QUIET_SETTING
    )
    handle = setup(
        api_key=collector.project_token,
        server_url=collector.url,
        level=logging.DEBUG,
        tags=["demo"],
        shutdown_timeout=2.0,
    )
    # The demo's own lines go to the collector only, not to this terminal as well (a program
    # with no handler of its own would see them printed by Python's last resort).
    logging.getLogger("shop").addHandler(logging.NullHandler())
    try:
        Client(collector.url, collector.project_token).submit(message_event(SUBMITTED_MESSAGE))
        log = logging.getLogger("shop.checkout")
        with user_context("u-42", name="Ann", data={"plan": "pro"}):
            log.debug("cart loaded with %d items", 3, extra={"cart_id": "c-7"})
            log.info("order %s placed", 1001, extra={"total": 59.90, "currency": "EUR"})
            log.warning("stock for %s is low", "SKU-1", extra={"left": 2, "password": "hunter2"})
            log.error("coupon %s rejected", "SPRING", extra={"reason": "expired"})
            try:
                _charge(1001)
            except PaymentError:
                log.exception("checkout failed for order %s", 1001)
        for user in ("u-7", "u-8", "u-9"):
            with user_context(user):
                try:
                    _reserve("SKU-9")
                except KeyError:
                    logging.getLogger("shop.stock").exception("could not reserve SKU-9")
        thread = threading.Thread(target=_worker, name="background-job")
        original_hook = threading.excepthook
        threading.excepthook = _quiet_chain(original_hook)
        try:
            thread.start()
            thread.join()
        finally:
            threading.excepthook = original_hook
        handle.flush(10.0)
        # The worker fetched the project's settings when it started: the chatty logger's lines
        # are dropped on this thread, before they are even queued.
        chatty = logging.getLogger("shop.chatty")
        for index in range(QUIET_LINES):
            chatty.info("polling the inventory (%d)", index)
        handle.flush(10.0)
        return handle.stats()
    finally:
        handle.close(5.0)


def _quiet_chain(hook: Any) -> Any:
    """Keep the demo's output readable: the thread's traceback is summed up in one line."""

    def chained(args: Any) -> None:
        saved = sys.stderr
        try:
            sys.stderr = _Discard()
            hook(args)
        finally:
            sys.stderr = saved
        print(f"  (a {args.exc_type.__name__} escaped thread {args.thread.name!r})")

    return chained


class _Discard:
    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


def describe(events: list[dict[str, Any]]) -> str:
    """The received events as a table, oldest first."""
    rows = [("TYPE", "LEVEL", "SOURCE", "USER", "MESSAGE / ERROR")]
    for event in sorted(events, key=lambda item: str(item.get("date"))):
        data = event.get("data") or {}
        user = (data.get("@user") or {}).get("identity", "")
        error = data.get("@simple_error")
        text = str(event.get("message") or "")
        if isinstance(error, dict):
            chain: list[str] = []
            while isinstance(error, dict) and len(chain) < 4:
                chain.append(str(error.get("type", "")).rsplit(".", 1)[-1])
                error = error.get("inner")
            text = f"{text}  [{' <- '.join(chain)}]".strip()
        rows.append(
            (
                str(event.get("type") or ""),
                str(data.get("@level") or NO_LEVEL),
                str(event.get("source") or ""),
                str(user),
                text[:70],
            )
        )
    return format_table(rows)


def describe_stacks(stacks: list[dict[str, Any]]) -> str:
    """The stacks as the dashboard lists them: the same problem once, with its count."""
    rows = [("COUNT", "USERS", "TYPE", "STATUS", "STACK")]
    for stack in sorted(stacks, key=lambda item: (-item["total_occurrences"], item["title"])):
        rows.append(
            (
                str(stack["total_occurrences"]),
                str(stack["users"]),
                str(stack["type"]),
                str(stack["status"]),
                str(stack["title"])[:60],
            )
        )
    return format_table(rows)


def reopen_command(database: Path, port: int = REOPEN_PORT) -> str:
    """The command that serves the demo's dashboard again."""
    return f"eventlog serve --db {shlex.quote(str(database))} --port {port}"


def run_demo(keep_serving: bool = False, port: int = 0) -> int:
    """Run the demo; 0 when every event arrived."""
    folder = Path(tempfile.mkdtemp(prefix="eventlog-demo-"))
    database = folder / "demo.sqlite3"
    try:
        collector = Collector(db_path=database, port=port).start()
    except OSError as exc:  # the port is taken, or the folder can't be written
        print(f"eventlog demo: cannot start the collector on port {port}: {exc}", file=sys.stderr)
        return 1
    try:
        print(f"Local collector listening on {collector.url}")
        print("Logging through eventlog_handler.setup() ...")
        stats = produce_events(collector)
        try:
            events = collector.wait_for_events(EXPECTED_EVENTS, timeout=10.0)
        except TimeoutError:
            events = collector.events()
        stacks = collector.stacks()
        print()
        print(f"The collector grouped them into {len(stacks)} stacks (the dashboard's view):")
        print(describe_stacks(stacks))
        print()
        posted = sum(1 for event in events if event.get("message") == SUBMITTED_MESSAGE)
        print(
            f"The {len(events)} event(s) it received ({len(events) - posted} logged through the "
            f"handler, {posted} posted with Client.submit()):"
        )
        print(describe(events))
        if posted:
            print(
                f"{NO_LEVEL}: {SUBMITTED_MESSAGE!r} was posted with Client.submit(), not "
                f"logged: a plain message, with no level or source."
            )
        print()
        dropped = stats.get("dropped_total", 0)
        chatty = [event for event in events if event.get("source") == "shop.chatty"]
        print(
            f"The project's setting {QUIET_SETTING[0]} = {QUIET_SETTING[1]} (set on the "
            f"collector, fetched by the handler) kept {QUIET_LINES - len(chatty)} of "
            f"{QUIET_LINES} shop.chatty lines out."
        )
        print(
            f"Handler statistics (the logged events; the posted message went past it): "
            f"captured {stats.get('captured')}, delivered {stats.get('delivered')}, "
            f"dropped {dropped}."
        )
        ok = len(events) >= EXPECTED_EVENTS and not dropped and not chatty
        if not ok:
            print(f"eventlog demo: expected {EXPECTED_EVENTS} events", file=sys.stderr)
        if keep_serving:
            print(f"Dashboard: {collector.url}/  (stacks; events at {collector.url}/events)")
            print("Serving the dashboard; press Ctrl-C to stop.")
            try:
                while True:
                    time.sleep(3600)
            except KeyboardInterrupt:
                print()
        else:
            print(f"The demo's collector stops now; its database is kept at {database}")
            print("To open its dashboard again, run:")
            print(f"    {reopen_command(database)}")
            print(
                f"and open http://127.0.0.1:{REOPEN_PORT}/  (or run: eventlog demo --keep-serving)"
            )
        return 0 if ok else 1
    finally:
        collector.close()
