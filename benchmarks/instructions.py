"""Machine instructions per event, counted by valgrind: steady where timings are not.

    python benchmarks/instructions.py                          # this work tree
    python benchmarks/instructions.py --package-dir ../other   # another commit (a git worktree)
    python benchmarks/instructions.py --events 5000            # quicker, a little less exact

On a shared or virtual machine, timings of the same code move by 10-30 % from one run to the
next, so a change that saves a few percent of a log call can't be seen in them. The count of
machine instructions the process runs (callgrind's ``Ir``) moves by well under 1 %. It weighs
neither cache misses nor the wait for the interpreter lock: it tells whether a change does
less work, and :mod:`run` tells what that is worth.

Each part is counted as the difference of two runs of a child process, the same set-up with and
without the measured loop, divided by the events:

- ``caller``: ``logger.warning("user %s did %d things", "ann", n, extra={"a": 1, "b": "two"})``
  into an ``EventLogHandler`` whose worker is kept from starting (the entries stay queued:
  one thread, so the count is the same every run), and ``no-op``: the same call into a
  handler that does nothing (the :mod:`logging` module's own share);
- ``worker``: the same records, captured beforehand, through the worker's pipeline
  (``Pipeline.run``: build, scrub, roll-up), in batches of 500; ``+ encode, compress``: and
  made into a request body as the worker does (``encode_parts``, ``compress``; compressing runs
  without the interpreter lock in the worker);
- ``error``: ``logger.error("job %d failed", n)`` without an exception, a few calls deep (the
  event carries its call site's six frames with their source lines, and the trace log of the
  errors before it), captured beforehand; the worker's part: built, scrubbed, encoded and
  compressed (a tenth of ``--events``: each costs as many instructions as about ten warnings).

The parts use the package's internals (the pipeline, the capture), not only its public API.
Needs ``valgrind`` (Debian: ``apt-get install valgrind``); about a minute per 20,000 events and
part.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
BATCH = 500

#: (label, part, loop) of each count; ``loop`` is what the child runs between its set-up and
#: its exit.
COUNTS = (
    ("caller: logger.warning(extra=)", "caller", "log"),
    ("no-op handler: logger.warning(extra=)", "noop", "log"),
    ("worker: pipeline (build, scrub, roll-up)", "worker", "pipeline"),
    ("worker: + encode, compress", "worker", "post"),
    ("worker: logger.error, no exception: all", "error", "post"),
)


def _errors(logger: object, count: int) -> None:
    """``count`` errors logged a few calls deep (their call site's frames are sent)."""
    for index in range(count):
        _two(logger, index)


def _two(logger: object, index: int) -> None:
    _one(logger, index)


def _one(logger: Any, index: int) -> None:
    logger.error("job %d failed", index)


def child(part: str, loop: str, events: int) -> None:
    """The measured process: set up ``part``, run ``loop`` (``none``: set-up only), exit."""
    import logging

    import eventlog_handler

    handler = eventlog_handler.EventLogHandler(
        api_key="k" * 40,
        server_url="http://127.0.0.1:9",  # never reached: nothing is sent
        queue_size=events + BATCH,
        memory_budget=1 << 31,
        flush_interval=3600,
    )
    engine = handler.engine
    engine.intake.start_worker = lambda: False  # one thread: the count is the same every run
    logger = logging.getLogger("instructions")
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    if part == "noop":

        class Noop(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                pass

        logger.addHandler(Noop())
    else:
        logger.addHandler(handler)
    if part in ("caller", "noop"):
        if loop != "none":
            warning = logger.warning
            for index in range(events):
                warning("user %s did %d things", "ann", index, extra={"a": 1, "b": "two"})
        done(f"queued {handler.stats()['queued']}")

    from eventlog_handler.capture._records import capture_record
    from eventlog_handler.delivery._batches import encode_parts

    try:  # the worker's level (a tree before 2b3d19c has a compress of its own there)
        from eventlog_handler.api._client import compress as compress_at
        from eventlog_handler.delivery._batches import WORKER_LEVEL

        def compress(body: bytes) -> tuple[bytes, bool]:
            return compress_at(body, WORKER_LEVEL)
    except ImportError:
        from eventlog_handler.delivery._batches import compress  # type: ignore[attr-defined,no-redef]

    settings = handler.settings
    batches = []
    if part == "error":
        _errors(logger, events)
        buffer = engine.intake.buffer
        taken = list(buffer.errors)
        buffer.errors.clear()
        buffer.bytes = 0
        batches = [taken[start : start + BATCH] for start in range(0, len(taken), BATCH)]
    for start in range(0, events if part == "worker" else 0, BATCH):
        batch = []
        for index in range(start, min(events, start + BATCH)):
            record = logger.makeRecord(
                "instructions",
                logging.WARNING,
                __file__,
                1,
                "user %s did %d things",
                ("ann", index),
                None,
                extra={"a": 1, "b": "two"},
            )
            batch.append(capture_record(record, settings))
        batches.append(batch)
    pipeline = engine.pipeline
    pipeline.version  # noqa: B018 - set-up, not counted: the app's version is looked up once
    pipeline.scrubber()  # ... and the scrubber made once
    limit = settings.max_raw_batch_bytes
    built = posted = 0
    if loop != "none":
        for batch in batches:
            made, created, weights = pipeline.run(batch)
            built += len(made)
            if loop == "post":
                for post in encode_parts(made, created, limit, weights):
                    posted += len(compress(post.body())[0])
    done(f"built {built} compressed {posted}")


def done(what: str) -> None:
    """Say what the child did (the smoke test reads it) and exit without the exit flush,
    which is not what is counted."""
    sys.stdout.write(what + "\n")
    sys.stdout.flush()
    os._exit(0)


#: What a child must say it did (:func:`done`), by part and loop.
EXPECTED = {
    ("caller", "log"): "queued {events}",
    ("caller", "none"): "queued 0",
    ("noop", "log"): "queued 0",
    ("noop", "none"): "queued 0",
    ("worker", "pipeline"): "built {events} compressed 0",
    ("worker", "post"): "built {events} compressed",
    ("worker", "none"): "built 0 compressed 0",
    ("error", "post"): "built {events} compressed",
    ("error", "none"): "built 0 compressed 0",
}


def count(package_dir: Path, part: str, loop: str, events: int) -> int:
    """Instructions of one child run (valgrind's total for the process); the child must have
    done its work."""
    env = dict(os.environ, PYTHONPATH=str(package_dir), PYTHONHASHSEED="0")
    done = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--callgrind-out-file=/dev/null",
            sys.executable,
            __file__,
            "--child",
            part,
            loop,
            str(events),
        ],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    found = re.search(r"Collected : (\d+)", done.stderr)
    expected = EXPECTED[part, loop].format(events=events)
    if done.returncode != 0 or found is None or not done.stdout.startswith(expected):
        sys.exit(
            f"instructions: the {part}/{loop} run failed (expected {expected!r}, "
            f"got {done.stdout.strip()!r}):\n{done.stderr[-2000:]}"
        )
    return int(found.group(1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=20_000, help="events per count")
    parser.add_argument(
        "--package-dir",
        metavar="DIR",
        default=str(REPO),
        help="import eventlog_handler from DIR (default: this work tree)",
    )
    parser.add_argument(
        "--child", nargs=3, metavar=("PART", "LOOP", "EVENTS"), help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    if args.child:
        child(args.child[0], args.child[1], int(args.child[2]))
        return 0
    if shutil.which("valgrind") is None:
        parser.error("valgrind is not installed (Debian: apt-get install valgrind)")
    package_dir = Path(args.package_dir).resolve()
    if not (package_dir / "eventlog_handler" / "__init__.py").is_file():
        parser.error(f"no eventlog_handler package in {package_dir}")
    events = max(BATCH, args.events)
    print(
        f"eventlog_handler from {package_dir}; {events:,} events per count; {sys.version.split()[0]}"
    )
    print(f"{'part':44s} {'instructions/event':>18s}")
    baselines: dict[str, int] = {}
    for label, part, loop in COUNTS:
        n = max(BATCH, events // 10) if part == "error" else events
        if part not in baselines:
            baselines[part] = count(package_dir, part, "none", n)
        measured = count(package_dir, part, loop, n)
        print(f"{label:44s} {(measured - baselines[part]) / n:18,.0f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
