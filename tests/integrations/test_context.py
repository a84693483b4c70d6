"""The current user and tags follow contextvars: copied contexts, threads, asyncio tasks."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
from collections.abc import Callable

from eventlog_handler import (
    EventLogHandler,
    add_tags,
    clear_user,
    get_tags,
    get_user,
    set_user,
    user_context,
)
from tests.support.capture import CaptureServer, deliver

MakeHandler = Callable[..., tuple[logging.Logger, EventLogHandler]]


def users_by_message(events: list[dict[str, object]]) -> dict[object, object]:
    return {event["message"]: event.get("@user") for event in events}


def test_set_user_returns_a_resettable_scope() -> None:
    assert get_user() is None
    scope = set_user("u-1", name="Ann")
    assert get_user() == {"identity": "u-1", "name": "Ann"}
    with set_user(42):
        assert get_user() == {"identity": "42"}
        with clear_user():
            assert get_user() is None
        assert get_user() == {"identity": "42"}
    assert get_user() == {"identity": "u-1", "name": "Ann"}
    scope.reset()
    scope.reset()  # twice is harmless
    assert get_user() is None
    with user_context("u-2", data={"plan": "pro"}) as user:
        assert user == {"identity": "u-2", "data": {"plan": "pro"}}
    assert get_user() is None


def test_user_data_is_a_snapshot() -> None:
    data = {"plan": "free"}
    with set_user("u-1", data=data):
        data["plan"] = "changed later"
        assert get_user() == {"identity": "u-1", "data": {"plan": "free"}}


def test_tags_context() -> None:
    with add_tags("a", "b"):
        with add_tags(["c", "a"]):
            assert get_tags() == ("a", "b", "c")
        assert get_tags() == ("a", "b")
    assert get_tags() == ()


def test_user_follows_copied_context_into_threads(
    make_handler: MakeHandler, server: CaptureServer
) -> None:
    logger, handler = make_handler()

    def work(name: str) -> None:
        logger.info(name)

    with set_user("u-42", name="Ann"):
        context = contextvars.copy_context()
        copied = threading.Thread(target=context.run, args=(work, "copied context"))
        plain = threading.Thread(target=work, args=("plain thread",))
        copied.start()
        plain.start()
        copied.join()
        plain.join()
    logger.info("after the block")
    users = users_by_message(deliver(handler, server, 3))
    assert users == {
        "copied context": {"identity": "u-42", "name": "Ann"},
        "plain thread": None,
        "after the block": None,
    }


def test_each_thread_sets_its_own_user(make_handler: MakeHandler, server: CaptureServer) -> None:
    logger, handler = make_handler()
    barrier = threading.Barrier(4)

    def request(identity: str) -> None:
        with user_context(identity):
            barrier.wait(5)  # all four users are set at the same time
            logger.info(f"request of {identity}")

    threads = [threading.Thread(target=request, args=(f"u-{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    users = users_by_message(deliver(handler, server, 4))
    assert users == {f"request of u-{i}": {"identity": f"u-{i}"} for i in range(4)}


def test_user_follows_asyncio_tasks(make_handler: MakeHandler, server: CaptureServer) -> None:
    logger, handler = make_handler()

    async def request(identity: str, gate: asyncio.Event) -> None:
        set_user(identity, name=identity.upper())  # scoped to this task's context
        await gate.wait()  # every task has set its user before any logs
        logger.info(f"task {identity}")
        await asyncio.sleep(0)
        logger.info(f"task {identity} again")

    async def whoami() -> object:
        await asyncio.sleep(0)
        return get_user()

    async def main() -> None:
        gate = asyncio.Event()
        with set_user("outer"):
            tasks = [asyncio.create_task(request(f"u-{i}", gate)) for i in range(3)]
            inherited = asyncio.create_task(whoami())
            await asyncio.sleep(0)
            gate.set()
            await asyncio.gather(*tasks)
            assert await inherited == {"identity": "outer"}
            logger.info("outer after tasks")

    asyncio.run(main())
    users = users_by_message(deliver(handler, server, 7))
    expected: dict[object, object] = {"outer after tasks": {"identity": "outer"}}
    for i in range(3):
        user = {"identity": f"u-{i}", "name": f"U-{i}"}
        expected[f"task u-{i}"] = user
        expected[f"task u-{i} again"] = user
    assert users == expected
