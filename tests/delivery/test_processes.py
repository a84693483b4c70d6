"""Events logged in process pools arrive with the default settings, whatever the start method:
``with multiprocessing.Pool() as pool: pool.map(...)`` ends its workers with SIGTERM as it
leaves the block, and their events must not die with them."""

from __future__ import annotations

import gzip
import http.server
import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.faultserver import FaultServer
from tests.support.processes import child_env, run_program, run_python, run_script
from tests.support.waits import dead_port, wait_until

PROGRAM = """
import logging, multiprocessing, sys, warnings
import eventlog_handler

warnings.simplefilter("ignore", DeprecationWarning)  # fork() with a worker thread (3.12+)
eventlog_handler.setup()  # at import: spawned workers run it too
log = logging.getLogger("app.pool")


def work(item):
    log.info("item %d", item)
    return item


if __name__ == "__main__":
    context = multiprocessing.get_context(sys.argv[1] if len(sys.argv) > 1 else METHOD)
    with context.Pool(4) as pool:
        assert sum(pool.map(work, range(400))) == sum(range(400))
    log.info("pool done")
"""

METHODS = ["fork", "spawn"] if sys.platform != "win32" else ["spawn"]


@pytest.mark.parametrize("method", METHODS)
def test_pool_workers_events_arrive(server: FaultServer, tmp_path: Path, method: str) -> None:
    program = PROGRAM.replace("METHOD", repr(method))
    code, stderr, _ = run_program(program, server.url, tmp_path, timeout=90)
    assert code == 0, stderr
    expected = {f"item {index}" for index in range(400)} | {"pool done"}
    assert wait_until(lambda: expected <= set(server.arrivals()), 10)
    missing = expected - set(server.arrivals())
    assert missing == set(), sorted(missing)[:10]
    assert "could not be sent" not in stderr, stderr
    assert server.duplicates == []


LOST_WAKEUP = """
import logging, multiprocessing, signal, sys, threading, time
import eventlog_handler

eventlog_handler.setup()
log = logging.getLogger("app.child")


def child(lock):
    log.info("from the child before it blocks")
    # SIGTERM handled by another thread while the main thread waits on a semaphore: the
    # signal is caught but does not interrupt the wait (as when it arrives just before it).
    def other():
        time.sleep(0.5)
        signal.pthread_kill(threading.get_ident(), signal.SIGTERM)
    threading.Thread(target=other, daemon=True).start()
    lock.acquire()  # held by the parent: blocks for good unless the handler runs


if __name__ == "__main__":
    context = multiprocessing.get_context(METHOD)
    lock = context.Lock()
    lock.acquire()
    process = context.Process(target=child, args=(lock,))
    started = time.monotonic()
    process.start()
    process.join(30)
    print("MARK child", process.exitcode, round(time.monotonic() - started, 1), flush=True)
    if process.exitcode is None:
        process.kill()
"""


@pytest.mark.parametrize("method", METHODS)
def test_a_sigterm_that_misses_the_blocked_main_thread_still_ends_the_child(
    server: FaultServer, tmp_path: Path, method: str
) -> None:
    program = LOST_WAKEUP.replace("METHOD", repr(method))
    code, stderr, lines = run_program(program, server.url, tmp_path, timeout=90)
    assert code == 0, stderr
    [mark] = [line for line in lines if line.startswith("MARK child")]
    _, _, exitcode, seconds = mark.split()
    assert exitcode == str(-15), (mark, stderr)  # ended by SIGTERM, as without the handler
    assert float(seconds) < 15, mark
    assert wait_until(lambda: "from the child before it blocks" in server.arrivals(), 10)


MAIN_ONLY = """
import logging, multiprocessing, sys, warnings
import eventlog_handler

log = logging.getLogger("app.pool")


def work(item):
    log.info("item %d", item)
    return item


if __name__ == "__main__":
    warnings.simplefilter("ignore", DeprecationWarning)
    eventlog_handler.setup(tags=["pool"])  # only here: children spawned anew never run this
    context = multiprocessing.get_context(sys.argv[1] if len(sys.argv) > 1 else METHOD)
    with context.Pool(4) as pool:
        assert sum(pool.map(work, range(400))) == sum(range(400))
    log.info("pool done")
"""


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_setup_under_main_reaches_spawned_workers(
    server: FaultServer, tmp_path: Path, method: str
) -> None:
    program = MAIN_ONLY.replace("METHOD", repr(method))
    code, stderr, _ = run_program(program, server.url, tmp_path, timeout=90)
    assert code == 0, stderr
    expected = {f"item {index}" for index in range(400)} | {"pool done"}
    assert wait_until(lambda: expected <= set(server.arrivals()), 10)
    missing = expected - set(server.arrivals())
    assert missing == set(), sorted(missing)[:10]
    assert all("pool" in event.get("tags", []) for event in server.accepted)  # its settings too
    assert "could not be sent" not in stderr, stderr


KEY_IN_CODE = """
import logging, multiprocessing, os, subprocess, sys
import eventlog_handler

log = logging.getLogger("app.pool")


def work(item):
    log.info("item %d", item)
    return item


if __name__ == "__main__":
    eventlog_handler.setup(api_key=KEY, server_url=URL)  # a key from a vault, not the env
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        assert sum(pool.map(work, range(20))) == sum(range(20))
    # Any other program this one starts sees its environment.
    shown = subprocess.run(["env"], capture_output=True, text=True).stdout
    print("key in a subprocess's environment:", KEY in shown, flush=True)
"""


def test_a_key_given_in_code_reaches_spawned_workers_but_no_environment(
    server: FaultServer, tmp_path: Path
) -> None:
    key = "KeyGivenInCode0123456789abcdefghijABCDEFG"
    program = KEY_IN_CODE.replace("KEY", repr(key), 1).replace("URL", repr(server.url), 1)
    program = program.replace("KEY in shown", f"{key!r} in shown")
    code, stderr, stdout = run_program(
        program, server.url, tmp_path, timeout=90, EVENTLOG_API_KEY=""
    )
    assert code == 0, stderr
    assert "key in a subprocess's environment: False" in stdout
    expected = {f"item {index}" for index in range(20)}
    assert wait_until(lambda: expected <= set(server.arrivals()), 10)
    authorizations = {seen.headers.get("authorization") for seen in server.requests}
    assert authorizations == {f"Bearer {key}"}


NEW_AUTHKEY = """
import logging, multiprocessing, os, sys
import eventlog_handler

log = logging.getLogger("app.pool")


def work(item):
    log.warning("item %d", item)
    return item


if __name__ == "__main__":
    eventlog_handler.setup(api_key=KEY, server_url=URL)
    # A program may set its own key for its managers and listeners after setup(); the spawned
    # children then can't open what setup() sealed with the old one.
    multiprocessing.current_process().authkey = os.urandom(32)
    for first, method in ((0, "spawn"), (4, "forkserver")):
        with multiprocessing.get_context(method).Pool(2) as pool:
            assert pool.map(work, range(first, first + 4)) == list(range(first, first + 4))
"""


def test_spawned_workers_are_set_up_after_the_program_changes_its_authkey(
    server: FaultServer, tmp_path: Path
) -> None:
    key = "KeyGivenInCode0123456789abcdefghijABCDEFG"
    program = NEW_AUTHKEY.replace("KEY", repr(key), 1).replace("URL", repr(server.url), 1)
    code, stderr, _ = run_program(program, server.url, tmp_path, timeout=90, EVENTLOG_API_KEY="")
    assert code == 0, stderr
    assert wait_until(lambda: len(server.accepted) >= 8, 10), (server.arrivals(), stderr)
    assert set(server.arrivals()) == {f"item {item}" for item in range(8)}
    authorizations = {seen.headers.get("authorization") for seen in server.requests}
    assert authorizations == {f"Bearer {key}"}


PROCESS_RAISES = """
import logging, multiprocessing, sys
import eventlog_handler

if sys.argv[2] == "top":
    eventlog_handler.setup()


def boom(n):
    logging.getLogger("app.child").warning("about to fail")
    raise ValueError(f"boom {n}")


if __name__ == "__main__":
    if sys.argv[2] == "main":
        eventlog_handler.setup()  # spawn and forkserver children never run this
    process = multiprocessing.get_context(sys.argv[1]).Process(target=boom, args=(7,))
    process.start()
    process.join()
    print("exit code", process.exitcode, flush=True)
"""


@pytest.mark.parametrize("where", ["top", "main"])
@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_an_exception_that_ends_a_process_is_reported_once(
    server: FaultServer, tmp_path: Path, method: str, where: str
) -> None:
    # multiprocessing catches what ends a Process's run() and prints it itself: neither the
    # child's sys.excepthook nor the parent sees it, and the child ends with exit code 1.
    # setup() at the module's top level, or under `if __name__ == "__main__":`.
    completed = run_script(PROCESS_RAISES, server.url, tmp_path, method, where, timeout=60)
    assert completed.returncode == 0, completed.stderr
    assert "exit code 1" in completed.stdout
    assert "ValueError: boom 7" in completed.stderr  # still printed, as without the package
    assert wait_until(lambda: len(server.accepted) >= 2, 10), (server.accepted, completed.stderr)
    errors = [event for event in server.accepted if event.get("type") == "error"]
    assert len(errors) == 1, server.accepted
    error = errors[0]
    assert error["data"]["@submission_method"] == "unhandled_process_exception"
    assert error["data"]["process"].startswith(("ForkProcess", "SpawnProcess", "ForkServerProcess"))
    assert error["@simple_error"]["message"] == "boom 7", error
    assert "eventlog_handler" not in error["@simple_error"]["stack_trace"]  # the user's stack
    assert "about to fail" in [event.get("message") for event in server.accepted]


ONE_BUG = """
import logging, multiprocessing, sys
import eventlog_handler

eventlog_handler.setup()
log = logging.getLogger(__name__)


class TotalError(Exception):
    pass


def compute_total():
    raise TotalError("no total")


def job():
    name = multiprocessing.current_process().name
    try:
        compute_total()
    except TotalError:
        log.exception("total failed in %s", name)
    log.error("no invoice in %s", name)  # no exception: stacked by its call site


if __name__ == "__main__":
    job()
    for method in ("fork", "spawn", "forkserver"):
        process = multiprocessing.get_context(method).Process(target=job, name=method)
        process.start()
        process.join()
"""


def test_one_bug_is_one_stack_whatever_process_it_happens_in(
    server: FaultServer, tmp_path: Path
) -> None:
    # A spawned or forkserver child imports the program's main module as "__mp_main__": its
    # frames, exception types and loggers must still be the program's "__main__", or one bug
    # becomes a stack per start method (and a new one when Python's default start method
    # changes).
    completed = run_script(ONE_BUG, server.url, tmp_path, timeout=90)
    assert completed.returncode == 0, completed.stderr
    assert wait_until(lambda: len(server.accepted) >= 8, 10), (server.accepted, completed.stderr)
    names = ("MainProcess", "fork", "spawn", "forkserver")
    events = {event["message"]: event for event in server.accepted}
    errors = [events[f"total failed in {name}"] for name in names]
    logs = [events[f"no invoice in {name}"] for name in names]
    assert "__mp_main__" not in json.dumps(server.accepted)
    for same in (errors, logs):
        signatures = {json.dumps(event["data"]["@stack"], sort_keys=True) for event in same}
        assert len(signatures) == 1, signatures
        assert {event["source"] for event in same} == {"__main__"}
    signature = errors[0]["data"]["@stack"]["signature_data"]
    assert signature["frames"] == "in __main__.job > __main__.compute_total", signature
    assert signature["type"] == "__main__.TotalError", signature
    assert logs[0]["data"]["@stack"]["signature_data"]["site"] == "at __main__.job"
    for event in errors:
        frames = event["@simple_error"]["data"]["@frames"]
        assert {frame["module"] for frame in frames if frame["in_app"]} == {"__main__"}


CLOSED_BEFORE_CHILDREN = """
import logging, multiprocessing, os
import eventlog_handler

log = logging.getLogger("app")


def child():
    log.warning("from a child started after close()")


def started_before():
    log.warning("from a child started before close()")


if __name__ == "__main__":
    handle = eventlog_handler.setup()
    log.warning("before close()")
    # This starts the fork server, with the environment as it is now.
    process = multiprocessing.get_context("forkserver").Process(target=started_before)
    process.start()
    process.join()
    handle.close(5)
    print("left for children:", "EVENTLOG_HANDLER_CHILD_SETUP" in os.environ, flush=True)
    # spawn reads the environment; the fork server's children see its environment; fork copies
    # the closed setup.
    for method in ("spawn", "forkserver", "fork"):
        process = multiprocessing.get_context(method).Process(target=child)
        process.start()
        process.join()
    print("children done", flush=True)
"""


def test_children_started_after_close_send_nothing(server: FaultServer, tmp_path: Path) -> None:
    # close() undoes setup(): a child spawned afterwards must not set itself up from what
    # setup() left in the environment for its children.
    completed = run_script(CLOSED_BEFORE_CHILDREN, server.url, tmp_path, timeout=90)
    assert completed.returncode == 0, completed.stderr
    assert "left for children: False" in completed.stdout, completed.stdout
    assert "children done" in completed.stdout
    assert sorted(event["message"] for event in server.accepted) == [
        "before close()",
        "from a child started before close()",
    ]


FORK_SERVER_PRELOADS = """
import logging, multiprocessing, sys
import eventlog_handler

log = logging.getLogger("app")


def work():
    log.warning("from a child of a fork server that preloaded %s", sys.argv[1])


if __name__ == "__main__":
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(sys.argv[1].split(","))  # a common start-up speed-up
    eventlog_handler.setup()
    process = context.Process(target=work)
    process.start()
    process.join()
"""


@pytest.mark.parametrize("preload", ["eventlog_handler", "__main__,eventlog_handler"])
def test_a_fork_server_that_preloads_the_package_sets_up_its_children(
    server: FaultServer, tmp_path: Path, preload: str
) -> None:
    completed = run_script(FORK_SERVER_PRELOADS, server.url, tmp_path, preload, timeout=60)
    assert completed.returncode == 0, completed.stderr
    expected = f"from a child of a fork server that preloaded {preload}"
    assert wait_until(lambda: expected in server.arrivals(), 10), completed.stderr


CLOSED_AND_GRANDCHILDREN = """
import logging, multiprocessing, sys
import eventlog_handler

log = logging.getLogger("app")


def grandchild(who):
    log.warning("from a grandchild of %s, %s", who, multiprocessing.get_start_method())


def child(who, close_first):
    if close_first:  # this child ran the parent's setup() (no public name has it): close it
        eventlog_handler._setup.current().close(5)
    for method in ("spawn", "forkserver"):
        grand = multiprocessing.get_context(method).Process(target=grandchild, args=(who,))
        grand.start()
        grand.join()


if __name__ == "__main__":
    handle = eventlog_handler.setup()
    # A spawned child that closes the setup it ran: its children are not set up.
    process = multiprocessing.get_context("spawn").Process(target=child, args=("closer", True))
    process.start()
    process.join()
    # This starts the fork server, with the environment as it is now, then the parent closes.
    process = multiprocessing.get_context("forkserver").Process(target=child, args=("open", False))
    process.start()
    process.join()
    handle.close(5)
    process = multiprocessing.get_context("forkserver").Process(target=child, args=("late", False))
    process.start()
    process.join()
    print("done", flush=True)
"""


def test_a_closed_setup_reaches_no_grandchild(server: FaultServer, tmp_path: Path) -> None:
    completed = run_script(CLOSED_AND_GRANDCHILDREN, server.url, tmp_path, timeout=90)
    assert completed.returncode == 0, completed.stderr
    assert "done" in completed.stdout
    assert wait_until(lambda: len(server.accepted) >= 2, 10), completed.stderr
    time.sleep(0.5)  # anything late would have come by now
    # A child that still had the setup sets up both of its children; a child that closed it,
    # or that was started after the parent closed it (under a fork server that kept the
    # setup in its environment), sets up none.
    assert sorted(server.arrivals()) == [
        "from a grandchild of open, forkserver",
        "from a grandchild of open, spawn",
    ]


IMPORTED_IN_THE_TARGET = """
import multiprocessing, sys

sys.path.insert(0, sys.argv[1])
import jobs  # the program's module of jobs; it does not import eventlog_handler at its top

if __name__ == "__main__":
    import eventlog_handler

    eventlog_handler.setup()
    for method in ("spawn", "forkserver"):
        process = multiprocessing.get_context(method).Process(target=jobs.job, args=(method,))
        process.start()
        process.join()
"""

JOBS = """
import logging


def job(method):
    import eventlog_handler  # first imported here, in the child, as the job starts

    logging.getLogger("app.jobs").warning("from a %s child that imported the package late", method)
"""


def test_a_child_that_imports_the_package_in_its_target_delivers_at_exit(
    server: FaultServer, tmp_path: Path
) -> None:
    # A fork server's child ends through os._exit: no atexit; the flush must be there anyway.
    (tmp_path / "jobs.py").write_text(JOBS)
    completed = run_script(IMPORTED_IN_THE_TARGET, server.url, tmp_path, str(tmp_path), timeout=60)
    assert completed.returncode == 0, completed.stderr
    expected = {
        f"from a {method} child that imported the package late"
        for method in ("spawn", "forkserver")
    }
    assert wait_until(lambda: expected <= set(server.arrivals()), 10), completed.stderr


BEFORE_SEND_EVERYWHERE = """
import logging, multiprocessing, os, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hooks  # the program's module of hooks: it imports eventlog_handler, then defines them
import eventlog_handler

log = logging.getLogger("app")


class Expected(Exception):
    pass


def scrub(event, hint=None):
    event["message"] = event["message"].replace("4111-1111-1111-1111", "[card]")
    return event


def work():
    name = multiprocessing.current_process().name
    log.warning("card 4111-1111-1111-1111 in %s", name)
    try:
        raise Expected("not a failure")
    except Expected:
        log.exception("expected in %s", name)


if __name__ == "__main__":
    hook = {"path": "__main__.scrub", "function": scrub, "module": hooks.scrub}[sys.argv[1]]
    eventlog_handler.setup(
        before_send=hook, ignore_exceptions=(kind for kind in [Expected]), tags={"everywhere"}
    )
    work()
    for method in ("fork", "forkserver", "spawn"):
        process = multiprocessing.get_context(method).Process(target=work, name=method)
        process.start()
        process.join()
"""

HOOKS = """
import eventlog_handler


def scrub(event, hint=None):
    event["message"] = event["message"].replace("4111-1111-1111-1111", "[card]")
    return event
"""


@pytest.mark.parametrize("given", ["path", "function", "module"])
def test_before_send_and_ignored_exceptions_hold_in_every_child(
    server: FaultServer, tmp_path: Path, given: str
) -> None:
    (tmp_path / "hooks.py").write_text(HOOKS)
    # A spawned child runs the parent's setup() while it imports the main module: "__main__.scrub"
    # is not defined yet then, nor is a module's that imports the package first. A function or
    # an exception class travels as its import path; a generator is used up by the parent; a
    # set is not JSON.
    completed = run_script(BEFORE_SEND_EVERYWHERE, server.url, tmp_path, given, timeout=60)
    assert completed.returncode == 0, completed.stderr
    expected = {f"card [card] in {name}" for name in ("MainProcess", "fork", "forkserver", "spawn")}
    assert wait_until(lambda: expected <= set(server.arrivals()), 10), completed.stderr
    time.sleep(0.5)  # an unscrubbed or unignored event would have come by now
    assert set(server.arrivals()) == expected
    assert all(event["tags"] == ["everywhere"] for event in server.accepted), server.accepted
    assert "eventlog_handler" not in completed.stderr


UNREACHABLE = """
import logging, multiprocessing, sys
import eventlog_handler

log = logging.getLogger("app")


class Scrubber:
    def __init__(self, key):
        self.key = key  # what the hook needs: the object's repr must not reach stderr

    def scrub(self, event, hint=None):
        return event


def scrub(event, hint=None):
    return event


def work():
    log.warning("from a spawned child")


if __name__ == "__main__" and sys.argv[-1] in ("lambda", "bound"):
    hooks = {"lambda": lambda event, hint: event, "bound": Scrubber(KEY).scrub}
    eventlog_handler.setup(before_send=hooks[sys.argv[-1]])
    log.warning("from the parent")
    process = multiprocessing.get_context("spawn").Process(target=work)
    process.start()
    process.join()
"""

#: The same program run with ``python -c``: a spawned child has no main module to import, so
#: ``__main__.scrub`` leads nowhere in it (a notebook, a program read from stdin likewise).
MAIN_WITHOUT_A_FILE = """
import logging, multiprocessing, sys
sys.path.insert(0, sys.argv[1])
import eventlog_handler, jobs


def scrub(event, hint=None):
    return event


eventlog_handler.setup(before_send=scrub)
logging.getLogger("app").warning("from the parent")
process = multiprocessing.get_context("spawn").Process(target=jobs.work)
process.start()
process.join()
"""

WORK_MODULE = """
import logging

import eventlog_handler  # the program's modules use the package too


def work():
    logging.getLogger("app").warning("from a spawned child")
"""


@pytest.mark.parametrize("hook", ["lambda", "bound", "main without a file"])
def test_a_child_the_parents_setup_cannot_reach_says_why(
    server: FaultServer, tmp_path: Path, hook: str
) -> None:
    # Never set up without its before_send: the hook may be what keeps secrets off the server.
    key = "KeyGivenInCode0123456789abcdefghijABCDEFG"
    if hook == "main without a file":
        (tmp_path / "jobs.py").write_text(WORK_MODULE)
        completed = run_python(server.url, ["-c", MAIN_WITHOUT_A_FILE, str(tmp_path)], timeout=60)
    else:
        program = UNREACHABLE.replace("KEY", repr(key))
        completed = run_script(program, server.url, tmp_path, hook, timeout=60)
    assert completed.returncode == 0, completed.stderr
    assert wait_until(lambda: "from the parent" in server.arrivals(), 10), completed.stderr
    said = [line for line in completed.stderr.splitlines() if line.startswith("eventlog_handler")]
    assert len(said) == 1, completed.stderr
    assert "(SpawnProcess-1) does not run its parent's setup(): " in said[0], said
    reason = {
        "lambda": "before_send (<lambda>) has no import path to travel by; give a function "
        "defined at a module's top level, or its import path",
        "bound": "before_send (Scrubber.scrub) has no import path",
        "main without a file": "its before_send '__main__.scrub' can't be imported here",
    }[hook]
    assert reason in said[0], said
    assert key not in completed.stderr
    time.sleep(0.5)  # the child's warning would have come by now
    assert list(server.arrivals()) == ["from the parent"]


WHEN_STARTED = """
import logging, multiprocessing
import eventlog_handler

log = logging.getLogger("app")


def work(when):
    log.warning("%s, %s", when, multiprocessing.current_process().name)


def processes(when):
    return [
        multiprocessing.get_context(method).Process(target=work, args=(when,), name=method)
        for method in ("fork", "forkserver", "spawn")
    ]


def run(made):
    for process in made:
        process.start()
        process.join()


if __name__ == "__main__":
    made_before_setup = processes("made before setup(), started after")
    handle = eventlog_handler.setup()
    run(made_before_setup)
    made_before_close = processes("made before close(), started after")
    handle.close(5)
    run(made_before_close)
    print("done", flush=True)
"""


def test_a_child_has_the_setup_in_place_when_it_starts(server: FaultServer, tmp_path: Path) -> None:
    # As a forked child does, whatever the start method: not as when its object was made.
    code, stderr, stdout = run_program(WHEN_STARTED, server.url, tmp_path, timeout=60)
    assert code == 0, stderr
    assert "done" in stdout
    expected = {
        f"made before setup(), started after, {name}" for name in ("fork", "forkserver", "spawn")
    }
    assert wait_until(lambda: expected <= set(server.arrivals()), 10), stderr
    time.sleep(0.5)  # a child started after close() would have sent by now
    assert set(server.arrivals()) == expected


BAD_KEY_POOL = """
import logging, multiprocessing, sys
import eventlog_handler

log = logging.getLogger("app.pool")


def work(item):
    log.warning("item %d", item)
    return item


def own_setup():
    eventlog_handler.setup(server_url="htp://127.0.0.1:1")


if __name__ == "__main__":
    eventlog_handler.setup(api_key="pasted with a space")  # every child runs it too
    for method in ("spawn", "forkserver"):
        with multiprocessing.get_context(method).Pool(3) as pool:
            assert pool.map(work, range(6)) == list(range(6))
    # A worker's own setup() is the worker's to hear about.
    with multiprocessing.get_context("spawn").Pool(1, initializer=own_setup) as pool:
        assert pool.map(work, range(2)) == [0, 1]
    print("pools done", flush=True)
"""


def test_a_misconfiguration_is_said_once_not_once_per_worker(
    server: FaultServer, tmp_path: Path
) -> None:
    # Each spawned or forkserver worker runs the parent's setup(), bad key and all; the parent
    # has said what is wrong with it, for the whole program.
    code, stderr, stdout = run_program(BAD_KEY_POOL, server.url, tmp_path, timeout=90)
    assert code == 0, stderr
    assert "pools done" in stdout
    said = [line for line in stderr.splitlines() if line.startswith("eventlog_handler:")]
    assert len(said) == 2, said
    assert "nothing will be sent: setting 'api_key'" in said[0], said
    assert "nothing will be sent: setting 'server_url'" in said[1], said
    assert "pasted with a space" not in stderr  # the key itself is never printed
    assert server.accepted == []


POOL_BLOCKS_NO_SERVER = """
import logging, multiprocessing, re, statistics, sys, time, warnings
import eventlog_handler

warnings.simplefilter("ignore", DeprecationWarning)  # fork() with a worker thread (3.12+)
eventlog_handler.setup()
log = logging.getLogger("app.pool")


def work(item):
    log.warning("item %d", item)
    return item


if __name__ == "__main__":
    took = []
    for block in range(8):
        started = time.monotonic()
        with multiprocessing.get_context(sys.argv[1]).Pool(2) as pool:
            pool.map(work, range(4), chunksize=1)
        took.append(time.monotonic() - started)
    print("median block", round(statistics.median(took), 3), flush=True)
"""


@pytest.mark.parametrize("method", ["fork"])  # spawn's start-up alone is near a second here
def test_pool_blocks_do_not_wait_for_a_server_that_is_not_running(
    tmp_path: Path, method: str
) -> None:
    # The exit flush of a program retries a refused connection for a second (a collector
    # started with it may still take the events); a pool worker's exit is part of the
    # program's work, which Pool.__exit__ waits for: every block took a second more. The
    # events are still counted as not sent, on stderr.
    url = f"http://127.0.0.1:{dead_port()}"
    completed = run_script(POOL_BLOCKS_NO_SERVER, url, tmp_path, method, timeout=120)
    assert completed.returncode == 0, completed.stderr
    median = float(completed.stdout.split("median block")[1])
    assert median < 0.9, (median, completed.stderr[-2000:])
    unsent = re.findall(r"(\d+) event\(s\) could not be sent", completed.stderr)
    assert sum(map(int, unsent)) == 8 * 4, completed.stderr[-2000:]


RESTART_AT_WORKER_EXIT = """
import logging, multiprocessing, os, sys, time
import eventlog_handler

handle = eventlog_handler.setup()
log = logging.getLogger("app.worker")


def worker(folder):
    log.warning("reached the server")
    assert handle.flush(10)
    open(os.path.join(folder, "flushed"), "w").close()
    while not os.path.exists(os.path.join(folder, "go")):
        time.sleep(0.01)
    log.warning("logged while the server restarts")  # sent by the worker's exit flush


if __name__ == "__main__":
    process = multiprocessing.get_context("fork").Process(target=worker, args=(sys.argv[1],))
    process.start()
    process.join()
"""


class _Events(http.server.BaseHTTPRequestHandler):
    messages: list[str] = []

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        if self.path.startswith("/api/v2/events"):
            self.messages.extend(event.get("message") for event in json.loads(body))
        self.send_response(202)
        self.send_header("Content-Length", "0")
        self.end_headers()


def test_a_worker_that_reached_the_server_waits_out_its_restart_at_exit(tmp_path: Path) -> None:
    # A multiprocessing child that never reached the server does not wait for it at its exit
    # (see above); one that did (a long-lived worker) retries a refused connection as a
    # program does, and a server restarting meanwhile gets its last events.
    handler = type("Events", (_Events,), {"messages": []})
    first = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    port = first.server_address[1]
    threading.Thread(target=first.serve_forever, daemon=True).start()
    script = tmp_path / "program.py"
    script.write_text(RESTART_AT_WORKER_EXIT)
    program = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path)],
        env=child_env(f"http://127.0.0.1:{port}"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    second = None
    try:
        assert wait_until(lambda: (tmp_path / "flushed").exists(), 30), program.stderr
        first.shutdown()
        first.server_close()  # the restart begins: every connection is refused
        second = http.server.ThreadingHTTPServer(
            ("127.0.0.1", port), handler, bind_and_activate=False
        )
        second.allow_reuse_address = True
        second.server_bind()  # bound, not listening yet
        (tmp_path / "go").touch()
        time.sleep(0.3)
        second.server_activate()  # back
        threading.Thread(target=second.serve_forever, daemon=True).start()
        _, stderr = program.communicate(timeout=30)
    finally:
        program.kill()
        if second is not None:
            second.shutdown()
            second.server_close()
    assert program.returncode == 0, stderr
    assert handler.messages == ["reached the server", "logged while the server restarts"], stderr
