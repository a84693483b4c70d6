"""Exceptions Python can't raise (``__del__``: ``sys.unraisablehook``) and exceptions of asyncio
tasks nobody awaited (the loop's exception handler, default or custom) become error events;
what Python printed before is still printed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.faultserver import FaultServer
from tests.support.processes import run_program
from tests.support.waits import wait_until

PROGRAM = """
import asyncio, gc, logging
import eventlog_handler

logging.basicConfig()  # a console handler, as a program that wants console output has
eventlog_handler.setup()

class Leaky:
    def __del__(self):
        raise RuntimeError("closing failed in __del__")

Leaky()
gc.collect()

async def failing():
    raise LookupError("nobody awaited me")

async def main():
    task = asyncio.get_running_loop().create_task(failing())
    await asyncio.sleep(0.05)
    del task  # the exception was never retrieved: the loop's handler gets it
    gc.collect()
    await asyncio.sleep(0.05)

asyncio.run(main())

custom = []
async def with_custom_handler():
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda loop, context: custom.append(context["message"]))
    loop.call_soon(lambda: 1 / 0)
    await asyncio.sleep(0.05)

asyncio.run(with_custom_handler())
print("custom handler called:", len(custom))
"""


UVLOOP = """
import uvloop
asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
"""


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_unraisable_and_asyncio_exceptions_arrive_and_still_print(
    server: FaultServer, tmp_path: Path, loop: str
) -> None:
    program = PROGRAM
    if loop == "uvloop":
        pytest.importorskip("uvloop", reason="uvloop is a test dependency (the dev extra)")
        # The loops of uvicorn and of apps that choose uvloop: asyncio.run() makes one.
        program = PROGRAM.replace(
            "import eventlog_handler\n", "import eventlog_handler\n" + UVLOOP, 1
        )
        program += "\nprint('loop:', type(asyncio.new_event_loop()).__module__)\n"
    code, stderr, lines = run_program(program, server.url, tmp_path)
    assert code == 0, stderr
    assert wait_until(lambda: len(server.accepted) == 3, 10), server.accepted
    by_type = {event["@simple_error"]["type"]: event for event in server.accepted}
    unraisable = by_type["RuntimeError"]
    assert unraisable["data"]["@submission_method"] == "unraisable_exception"
    assert "Leaky" in unraisable["data"]["@unraisable"]["object"]
    task = by_type["LookupError"]
    assert task["data"]["@submission_method"] == "unhandled_async_exception"
    assert "never retrieved" in task["data"]["@asyncio"]["message"]
    callback = by_type["ZeroDivisionError"]
    assert callback["data"]["@submission_method"] == "unhandled_async_exception"
    # The console output stays: Python's own report and the loop's default handler's log.
    assert "Exception ignored in" in stderr and "closing failed in __del__" in stderr
    assert "Task exception was never retrieved" in stderr
    assert "custom handler called: 1" in lines  # the custom handler still runs
    if loop == "uvloop":
        assert lines[-1] == "loop: uvloop"
