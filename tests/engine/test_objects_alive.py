"""What a log call leaves alive for the garbage collector to count.

CPython's collector runs after about 700 new container objects that are still alive, on
whichever thread allocates the next one: every object a call keeps until the worker takes it,
and every object the worker keeps beyond the batch, brings a pause on the logging threads
sooner (``python benchmarks/caller_tail.py`` measures how often). The standard library's
``QueueHandler`` keeps two per call (the record's copy and its dict); so does this package.

The count is the process's, whatever thread allocates: each measure runs in a fresh
interpreter, where no other test's thread runs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.processes import marks, run_program

PROGRAM = """
import gc, logging, json, time
import eventlog_handler
from eventlog_handler.capture._records import capture_record
from eventlog_handler.delivery._ledger import Ledger
from eventlog_handler.delivery._pipeline import Pipeline
from eventlog_handler.delivery._rollup import Rollup
from eventlog_handler.delivery._server_settings import ServerSettings
from eventlog_handler.settings import Settings

SETTINGS = Settings(api_key="k" * 40)

def alive_after(action):
    gc.collect()
    gc.disable()  # the count then only grows and shrinks with what is alive
    try:
        before = gc.get_count()[0]
        action()
        return gc.get_count()[0] - before
    finally:
        gc.enable()

def entries(count, first):
    made = []
    for index in range(first, first + count):
        record = logging.LogRecord(
            "app", logging.WARNING, __file__, 1, "user %s did %d things", ("ann", index), None
        )
        record.__dict__.update(a=1, b="two")
        made.append(capture_record(record, SETTINGS))
    return made

# 1. The caller: 400 warnings the worker does not take (nothing is due for a minute).
handler = eventlog_handler.EventLogHandler(
    api_key="k" * 40,
    server_url="http://127.0.0.1:9",
    flush_interval=60,
    shutdown_timeout=0.1,
    server_settings=False,  # no request of the worker's own during the measure
)
logger = logging.getLogger("objects_alive")
logger.propagate = False
logger.setLevel(logging.DEBUG)
logger.addHandler(handler)
for index in range(50):  # caches and the worker's start
    logger.warning("user %s did %d things", "ann", index, extra={"a": 1, "b": "two"})
time.sleep(0.5)  # the worker started and sleeps: nothing is due for a minute

def calls():
    for index in range(400):
        logger.warning("user %s did %d things", "ann", index, extra={"a": 1, "b": "two"})

kept = alive_after(calls)
print("MARK caller", json.dumps({"kept": kept, "queued": handler.stats()["queued"]}))
logger.removeHandler(handler)
handler.close()

# 2. The worker's pipeline: a batch of 500 entries, with and without the roll-up.
for window in (60.0, 0.0):
    server = ServerSettings()
    pipeline = Pipeline(SETTINGS, Ledger(), Rollup(window), lambda: server)
    pipeline.run(entries(500, 0))  # caches, the scrubber, the version
    batch = entries(500, 1_000)
    result = []
    grown = alive_after(lambda: result.append(pipeline.run(batch)))
    events = result[0][0]
    print("MARK pipeline_%d" % window, json.dumps({
        "grown": grown,
        "events": len(events),
        "left": len(batch),
        "message": events[0]["message"],
        "data": events[0]["data"],
    }))
"""


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, object]]:
    tmp_path: Path = tmp_path_factory.mktemp("objects_alive")
    status, stderr, lines = run_program(PROGRAM, "http://127.0.0.1:9", tmp_path)
    assert status == 0, stderr
    return marks(lines)


def test_a_warning_with_arguments_and_extras_keeps_two_objects_until_the_worker_takes_it(
    measured: dict[str, dict[str, object]],
) -> None:
    """The entry and its copy of the extras; the arguments' tuple is not kept (the message is
    formatted at the call)."""
    caller = measured["caller"]
    assert caller["queued"] == 450  # the worker took none of them
    kept = caller["kept"]
    assert isinstance(kept, int)
    assert kept / 400 <= 2.05, kept


@pytest.mark.parametrize("window", [60, 0], ids=["roll-up", "no roll-up"])
def test_the_worker_frees_each_entry_as_its_event_is_built(
    measured: dict[str, dict[str, object]], window: int
) -> None:
    """A batch of 500 entries becomes 500 events with no more objects alive than it took
    (each entry freed once its event is done; the roll-up keeps no pair per message)."""
    run = measured[f"pipeline_{window}"]
    # Kept to the end of the batch, the entries made this about +500 (and +1,000 with their
    # arguments' tuples and the roll-up's pairs).
    grown = run["grown"]
    assert isinstance(grown, int)
    assert grown < 50, grown
    assert run["events"] == 500 and run["left"] == 0  # the entries were taken off the list
    assert run["message"] == "user ann did 1000 things"
    data = run["data"]
    assert isinstance(data, dict)
    assert {"a": 1, "b": "two"}.items() <= data.items()
