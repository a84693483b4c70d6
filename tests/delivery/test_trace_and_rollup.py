"""The trace log (``@trace``: the lines that led up to an error, of the same thread or task)
and the roll-up of duplicates (one event with a ``count`` instead of thousands), observed in
what a loopback server receives from programs that log through ``setup()``."""

from __future__ import annotations

from pathlib import Path

from tests.support.faultserver import FaultServer
from tests.support.processes import marks, run_program
from tests.support.waits import wait_until

TRACE = """
import asyncio, logging, threading
import eventlog_handler

eventlog_handler.setup()  # events at INFO and above; the trace log keeps DEBUG lines too
log = logging.getLogger("app.trace")
log.setLevel(logging.DEBUG)

def other_thread():
    for index in range(10):
        log.info("other thread %d", index)

for index in range(30):
    if index == 12:
        worker = threading.Thread(target=other_thread)
        worker.start()
        worker.join()
    if index % 3 == 0:
        log.debug("step %d", index)
    else:
        log.info("step %d with password=hunter2", index)
try:
    {}["missing"]
except KeyError:
    log.exception("the job failed")

async def task(name, count):
    for index in range(count):
        log.info("%s line %d", name, index)
        await asyncio.sleep(0)
    if name == "b":
        try:
            raise ValueError(name)
        except ValueError:
            log.exception("task %s failed", name)

async def main():
    await asyncio.gather(task("a", 8), task("b", 5))

asyncio.run(main())
"""


def test_an_error_carries_the_last_25_lines_of_its_thread(
    server: FaultServer, tmp_path: Path
) -> None:
    code, stderr, _ = run_program(TRACE, server.url, tmp_path)
    assert code == 0, stderr
    errors = {e["message"]: e for e in server.accepted if e.get("type") == "error"}
    trace = errors["the job failed"]["data"]["@trace"]
    assert len(trace) == 25
    texts = [line.split(" ", 2)[2] for line in trace]  # "HH:MM:SS.mmm Level source: message"
    assert texts[0] == "app.trace: step 5 with password=[excluded]"
    assert texts[-1] == "app.trace: step 29 with password=[excluded]"
    assert "app.trace: step 6" in texts  # a DEBUG line, below the level events are sent at
    assert not any("other thread" in text for text in texts)  # another thread's lines
    assert not any("hunter2" in line for line in trace)
    assert not any("the job failed" in text for text in texts)  # the error itself is not
    # In asyncio, each task has its own trace log.
    task_trace = errors["task b failed"]["data"]["@trace"]
    assert [line.split(": ", 1)[1] for line in task_trace] == [f"b line {i}" for i in range(5)]


KEPT_OBJECTS = """
import gc, json, logging, weakref
import eventlog_handler

eventlog_handler.setup()
log = logging.getLogger("app.objects")
log.setLevel(logging.DEBUG)

class Connection:
    def __repr__(self):
        return "<Connection open>"

freed = []
connection = Connection()
weakref.finalize(connection, freed.append, "connection")
log.debug("using %r", connection)
del connection
class Payload(bytearray):
    pass

payload = Payload(50_000_000)
weakref.finalize(payload, freed.append, "payload")
log.debug("received %d bytes: %r", len(payload), payload)
del payload
cart = ["apple"]
log.info("cart is %s", cart)
cart.append("pear")
log.info("template only, %s", "a short string")
gc.collect()
print("MARK freed", json.dumps(freed), flush=True)
try:
    raise RuntimeError("checkout")
except RuntimeError:
    log.exception("checkout failed")
"""


def test_the_trace_log_keeps_no_object_of_the_program_alive_and_shows_it_as_it_was_logged(
    server: FaultServer, tmp_path: Path
) -> None:
    """A line's arguments that are not short plain values are formatted when it is logged: the
    program's objects are freed when it lets go of them (a connection, a 50 MB payload), and
    the error's trace shows a list as it was then, not as it was changed later."""
    code, stderr, lines = run_program(KEPT_OBJECTS, server.url, tmp_path)
    assert code == 0, stderr
    assert sorted(marks(lines)["freed"]) == ["connection", "payload"]
    errors = [e for e in server.accepted if e.get("type") == "error"]
    assert len(errors) == 1
    texts = [line.split(" ", 2)[2] for line in errors[0]["data"]["@trace"]]
    assert texts[0] == "app.objects: using <Connection open>"
    assert texts[1].startswith("app.objects: received 50000000 bytes: Payload(b'\\x00")
    assert len(texts[1]) < 600  # cut to a line's limit
    assert texts[2:] == [
        "app.objects: cart is ['apple']",
        "app.objects: template only, a short string",
    ]


ROLLUP = """
import json, logging, time
import eventlog_handler

eventlog_handler.setup()
log = logging.getLogger("app.storm")
print("MARK first", json.dumps({"at": time.time()}), flush=True)
for index in range(10_000):
    try:
        {}["missing"]
    except KeyError:
        log.exception("lookup failed")
print("MARK done", json.dumps({"at": time.time()}), flush=True)
"""


def test_an_error_storm_arrives_as_a_few_events_whose_counts_add_up(
    server: FaultServer, tmp_path: Path
) -> None:
    code, stderr, lines = run_program(ROLLUP, server.url, tmp_path, timeout=120)
    assert code == 0, stderr
    assert "could not be sent" not in stderr, stderr
    assert wait_until(lambda: sum(e.get("count", 1) for e in server.accepted) >= 10_000, 10)
    events = server.accepted
    assert 1 <= len(events) <= 5, len(events)
    assert sum(event.get("count", 1) for event in events) == 10_000
    assert len({event["@simple_error"]["stack_trace"] for event in events}) == 1  # one stack
    # The first one was not held back for the roll-up's window (60 s by default): it arrived
    # within seconds of the first call (``error_delay`` is 0.25 s; the bound is generous so that
    # a loaded machine, where the storm itself takes seconds, does not fail it).
    first_arrival = min(seen.at for seen in server.requests)
    started = marks(lines)["first"]["at"]
    assert first_arrival - started < 10, first_arrival - started


TASK_REUSE = """
import asyncio, logging
import eventlog_handler

eventlog_handler.setup(trace_size=10, rollup_window=0)
log = logging.getLogger("app")

async def worker(index):
    await asyncio.sleep(0)
    try:
        raise ValueError(f"worker {index} failed")
    except ValueError:
        log.exception("worker %d failed", index)

async def supervisor():  # logs nothing; its workers copy its context, and so the request's
    for index in range(20):
        await asyncio.sleep(0.01)
        await asyncio.create_task(worker(index))

async def request():
    log.info("a line of the request, for user alice")
    return asyncio.create_task(supervisor())

async def main():
    supervising = await asyncio.create_task(request())
    await supervising

asyncio.run(main())
"""


def test_a_later_task_never_takes_the_trace_of_an_ended_one(
    server: FaultServer, tmp_path: Path
) -> None:
    """A task's ring was known by the task's id: a task made after it ended, with a copy of
    its context, got the same address and so its ring, and every worker's error carried the
    request's line and the earlier workers' errors (20 of 20)."""
    code, stderr, _ = run_program(TASK_REUSE, server.url, tmp_path)
    assert code == 0, stderr
    assert wait_until(lambda: len(server.accepted) == 21, 10), len(server.accepted)
    failures = [event for event in server.accepted if event.get("type") == "error"]
    traces = [event.get("data", {}).get("@trace") for event in failures]
    assert traces == [None] * 20, traces[:3]


TO_THREAD = """
import asyncio, concurrent.futures, logging
import eventlog_handler

eventlog_handler.setup(rollup_window=0)
log = logging.getLogger("app")
log.info("the program starts")  # a line of the main thread, in every task's copied context

def work(user, fail):
    log.info("private line of %s", user)
    if fail:
        try:
            raise ValueError(f"job of {user} failed")
        except ValueError:
            log.exception("job of %s failed", user)

async def job(user, fail):  # logs nothing itself before it hands its work to a thread
    await asyncio.to_thread(work, user, fail)

async def main():
    asyncio.get_running_loop().set_default_executor(concurrent.futures.ThreadPoolExecutor(1))
    for user in ("alice", "bob", "carol"):
        await asyncio.create_task(job(user, user == "carol"))

asyncio.run(main())
"""


def test_work_handed_to_a_thread_carries_its_own_lines_not_the_jobs_before(
    server: FaultServer, tmp_path: Path
) -> None:
    """``asyncio.to_thread`` runs each job in a copy of its task's context on one pool thread:
    the thread's ring was shared by every job it ran (and the main thread's by every job whose
    task had not logged), so carol's error carried alice's and bob's private lines."""
    code, stderr, _ = run_program(TO_THREAD, server.url, tmp_path)
    assert code == 0, stderr
    assert wait_until(lambda: any(e.get("type") == "error" for e in server.accepted), 10)
    (failure,) = [event for event in server.accepted if event.get("type") == "error"]
    trace = failure["data"]["@trace"]
    assert [line.split(" ", 2)[2] for line in trace] == ["app: private line of carol"], trace


INTERLEAVED = """
import contextvars, logging, threading
import eventlog_handler

eventlog_handler.setup(rollup_window=0)
log = logging.getLogger("app")
log.info("a line of the main thread")
captured = contextvars.copy_context()  # the main thread's, as a callback registry keeps it

def step(job, index, fail=False):
    log.info("%s step %d", job, index)
    if fail:
        try:
            raise ValueError(f"{job} failed")
        except ValueError:
            log.exception("%s failed", job)

def worker():
    log.info("worker starts")
    job_a, job_b = contextvars.Context(), contextvars.Context()  # two jobs, interleaved
    job_a.run(step, "A", 1)
    job_b.run(step, "B", 1)
    captured.run(log.info, "a callback in the main thread's context")
    job_a.run(step, "A", 2, True)
    step("worker", 3, True)

thread = threading.Thread(target=worker)
thread.start()
thread.join()
"""


def test_contexts_that_take_turns_on_one_thread_keep_their_own_lines(
    server: FaultServer, tmp_path: Path
) -> None:
    """A worker thread that runs the steps of several jobs, each in its own context, and a
    callback in a copy of another thread's context: each job's error has its own steps, and the
    thread's own error its own lines (a ring made last on the thread replaced the others)."""
    code, stderr, _ = run_program(INTERLEAVED, server.url, tmp_path)
    assert code == 0, stderr
    assert wait_until(lambda: sum(e.get("type") == "error" for e in server.accepted) == 2, 10)
    traces = {
        event["@simple_error"]["message"]: [
            line.split(" ", 2)[2] for line in event["data"]["@trace"]
        ]
        for event in server.accepted
        if event.get("type") == "error"
    }
    assert traces == {
        "A failed": ["app: A step 1", "app: A step 2"],
        "worker failed": ["app: worker starts", "app: worker step 3"],
    }


IMPORTED_FIRST = """
import logging, sys
import eventlog_handler  # before asyncio, as a program's first lines do
import asyncio

eventlog_handler.setup()
log = logging.getLogger("app.tasks")

async def job(name):
    log.info("%s started", name)
    await asyncio.sleep(0)
    if name == "b":
        try:
            raise ValueError(name)
        except ValueError:
            log.exception("job %s failed", name)

async def main():
    print("current task found:", asyncio.current_task() is not None, flush=True)
    if sys.version_info >= (3, 11):
        async with asyncio.timeout(5):
            async with asyncio.TaskGroup() as group:
                for name in "ab":
                    group.create_task(job(name))
    else:
        await asyncio.gather(job("a"), job("b"))

asyncio.run(main())
"""


def test_asyncio_imported_after_the_package_still_knows_its_tasks(
    server: FaultServer, tmp_path: Path
) -> None:
    """The trace log looked for a running loop through ``_asyncio``, imported before
    :mod:`asyncio` itself: asyncio then fell back to its pure-Python task registry, which its C
    tasks do not fill, and ``current_task()`` was ``None`` in every task of a program that
    imported the package first. ``TaskGroup`` and ``asyncio.timeout`` raised "cannot determine
    the parent task", and every task shared one trace log."""
    code, stderr, lines = run_program(IMPORTED_FIRST, server.url, tmp_path)
    assert code == 0, stderr
    assert "current task found: True" in lines, (lines, stderr)
    [error] = [e for e in server.accepted if e.get("type") == "error"]
    assert error["message"] == "job b failed"
    assert [line.split(": ", 1)[1] for line in error["data"]["@trace"]] == ["b started"]


SIBLINGS = """
import asyncio, logging
import eventlog_handler

eventlog_handler.setup(rollup_window=0)
log = logging.getLogger("app")

def load(user):
    log.info("loading account of %s", user)
    if user == "bob":
        try:
            raise KeyError(user)
        except KeyError:
            log.exception("account of %s failed", user)

async def request(user):  # logs nothing itself: its context holds the server task's trace
    await asyncio.to_thread(load, user)

async def server():
    log.info("server started")
    for user in ("alice", "carol", "bob"):
        await asyncio.create_task(request(user))
    asyncio.get_running_loop().call_soon(log.info, "a callback's line")
    await asyncio.sleep(0.05)
    try:
        raise ValueError("server")
    except ValueError:
        log.exception("the server failed")

asyncio.run(server())
"""


def test_jobs_of_sibling_tasks_do_not_write_into_their_parents_trace(
    server: FaultServer, tmp_path: Path
) -> None:
    """Request tasks that log nothing themselves hold their parent's trace in their context:
    the lines their ``to_thread`` jobs logged went into it, and bob's error carried alice's
    and carol's lines; the server's own error carried all of them and its callback's."""
    code, stderr, _ = run_program(SIBLINGS, server.url, tmp_path)
    assert code == 0, stderr
    assert wait_until(lambda: len([e for e in server.accepted if e["type"] == "error"]) == 2, 10)
    errors = {e["message"]: e["data"]["@trace"] for e in server.accepted if e["type"] == "error"}
    texts = {key: [line.split(": ", 1)[1] for line in trace] for key, trace in errors.items()}
    assert texts["account of bob failed"] == ["server started", "loading account of bob"]
    assert texts["the server failed"] == ["server started"]
