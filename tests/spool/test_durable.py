"""The engine with a disk spool: outages, SIGKILL, restarts and processes sharing a directory."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from eventlog_handler.delivery import _engine as transport
from eventlog_handler.delivery._spool import SUFFIX
from eventlog_handler.settings import Settings
from eventlog_handler.wire._events import error_event
from eventlog_handler.wire._logs import log_event
from tests.support.constants import TRANSPORT_API_KEY as API_KEY
from tests.support.constants import TRANSPORT_FAST as FAST
from tests.support.faultserver import FaultServer
from tests.support.processes import child_env
from tests.support.waits import dead_port, free_port, poll_until, wait_until

ROOT = Path(__file__).resolve().parents[2]


def make(url: str, spool: Path, **options: Any) -> transport.Engine:
    values = {**FAST, "spool_path": str(spool), "spool_scan_interval": 0.05, **options}
    return transport.Engine(
        Settings.from_options({"server_url": url, "api_key": API_KEY, **values}, environ={})
    )


def settled(stats: dict[str, Any]) -> bool:
    return stats["queued"] == 0 and stats["in_flight"] == 0


def wait_settled(engine: transport.Engine, timeout: float = 20.0) -> dict[str, Any]:
    """Wait until nothing is queued or in flight (everything delivered, dropped or on disk)."""
    stats = poll_until(engine.stats, settled, timeout, step=0.01)
    if not settled(stats):
        raise AssertionError(f"not settled: {stats}")
    return stats


def log_steadily(engine: transport.Engine, events: list[dict[str, Any]], room: int) -> None:
    """Log like a program that keeps running through an outage: at its own pace, never more
    than ``room`` events ahead of the worker (a burst bigger than the memory queue is a
    different case, covered in tests/transport)."""
    for index, event in enumerate(events):
        engine.enqueue(event)
        if index % room == room - 1:
            wait_until(lambda: engine.stats()["queued"] < room, 10, step=0.002)


def accounted(stats: dict[str, Any]) -> int:
    return (
        stats["delivered"]
        + stats["dropped_total"]
        + stats["queued"]
        + stats["in_flight"]
        + stats["spooled"]
    )


def test_outage_longer_than_the_queue_loses_nothing(tmp_path: Path) -> None:
    port = free_port()
    engine = make(f"http://127.0.0.1:{port}", tmp_path / "spool", queue_size=200, batch_size=50)
    try:
        events = [log_event(f"during outage {index}", level="Info") for index in range(3_000)]
        refs = [event["reference_id"] for event in events]
        log_steadily(engine, events, room=100)  # fifteen times the memory queue in all
        assert not engine.flush(0.2)
        stats = wait_settled(engine)
        assert stats["captured"] == 3_000 == accounted(stats)
        assert stats["dropped"]["queue_full"] == 0
        assert stats["spooled"] > 2_000  # the overflow went to disk, not out of the window
        with FaultServer(port=port) as server:
            assert engine.flush(20.0), engine.stats()
            stats = engine.stats()
            assert stats["delivered"] == 3_000 and stats["dropped_total"] == 0
            assert sorted(server.accepted_ids()) == sorted(refs)
            assert server.duplicates == []
    finally:
        engine.shutdown(1.0)


def test_events_being_written_to_disk_count_against_the_memory_budget(tmp_path: Path) -> None:
    """During an outage the worker moves what piles up in memory to the spool. Until the write
    ends, those events are still in memory, so they count against ``memory_budget`` (they did
    not: the buffer's bytes were freed when the worker took them, and logging threads could
    fill it again while a write to a slow disk held as much again)."""
    port = free_port()
    engine = make(f"http://127.0.0.1:{port}", tmp_path / "spool", queue_size=1_000, batch_size=50)
    spooling = engine.spooling
    assert spooling is not None
    write = spooling.spill_entries
    seen: list[tuple[int, int]] = []  # (bytes counted in flight, bytes of the entries written)

    def watched(entries: list[Any]) -> Any:
        seen.append((engine.ledger.in_flight_bytes, sum(entry.size for entry in entries)))
        return write(entries)

    spooling.spill_entries = watched  # type: ignore[method-assign]
    try:
        events = [log_event(f"during outage {index}", level="Info") for index in range(2_000)]
        log_steadily(engine, events, room=200)
        stats = wait_settled(engine)
        assert stats["captured"] == 2_000 == accounted(stats)
        assert seen, "nothing piled up in memory during a pause (the case is not exercised)"
        assert all(counted >= held > 0 for counted, held in seen), seen
    finally:
        engine.shutdown(1.0)


def test_spool_stays_within_its_byte_bound_evicting_logs_first(tmp_path: Path) -> None:
    port = free_port()
    engine = make(
        f"http://127.0.0.1:{port}",
        tmp_path / "spool",
        queue_size=1_000,
        batch_size=100,
        spool_max_bytes=1_000_000,
    )
    try:
        filler = "x" * 900
        try:
            raise ValueError("kept")
        except ValueError as exc:
            error = error_event(exc)
        events = [log_event(f"log {index} {filler}", level="Info") for index in range(3_000)]
        events += [error] + [log_event(f"later {i} {filler}", level="Info") for i in range(500)]
        log_steadily(engine, events, room=500)  # about 3.5 MB of events against a 1 MB bound
        engine.flush(0.2)
        stats = wait_settled(engine)
        assert stats["captured"] == accounted(stats)
        assert stats["dropped"]["spool_full"] > 0
        disk = sum(path.stat().st_size for path in (tmp_path / "spool").iterdir())
        assert disk <= 1_000_000, disk
        with FaultServer(port=port) as server:
            assert engine.flush(20.0), engine.stats()
            ids = server.accepted_ids()
            assert error["reference_id"] in ids, engine.stats()  # errors outlive log eviction
            assert server.duplicates == []
            stats = engine.stats()
            assert stats["delivered"] + stats["dropped_total"] == stats["captured"]
    finally:
        engine.shutdown(1.0)


SCRIPT = """
import json, os, sys, time
sys.path.insert(0, {root!r})
from eventlog_handler.delivery import _engine as transport
from eventlog_handler.wire._logs import log_event
from eventlog_handler.settings import Settings
settings = Settings.from_options(
    {{"server_url": {url!r}, "api_key": {key!r}, "spool_path": {spool!r},
      "spool_all": {spool_all!r}, "flush_interval": 0.05, "error_delay": 0.0,
      "retry_initial": 0.01, "max_backoff": 0.05, "timeout": 2.0, "shutdown_timeout": 3.0,
      "spool_scan_interval": 0.05}},
    environ={{}},
)
engine = transport.get_engine(settings)
"""


def script(url: str, spool: Path, body: str, spool_all: bool = True) -> str:
    head = SCRIPT.format(
        root=str(ROOT), url=url, key=API_KEY, spool=str(spool), spool_all=spool_all
    )
    return head + textwrap.dedent(body)


def replay(port: int, spool: Path, prefix: str, total: int) -> tuple[list[str], list[Any]]:
    """A next start of the program with ``spool``, its server up on ``port``, until ``total``
    events were replayed: the messages that start with ``prefix`` the server took, sorted,
    and the reference ids it got twice."""
    url = f"http://127.0.0.1:{port}"
    with FaultServer(port=port) as server:
        body = f"""
        deadline = time.monotonic() + 20
        while engine.stats()["replayed"]["delivered"] < {total} and time.monotonic() < deadline:
            time.sleep(0.02)
            engine.enqueue(log_event("tick", level="Debug"))
        """
        again = subprocess.run(
            [sys.executable, "-c", script(url, spool, body, spool_all=False)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert again.returncode == 0, again.stderr
        messages = sorted(e["message"] for e in server.accepted if e["message"].startswith(prefix))
        return messages, list(server.duplicates)


def test_sigkill_mid_outage_then_restart_delivers_every_event_once(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    spool = tmp_path / "spool"
    body = """
    refs = []
    for i in range(400):
        event = log_event(f"before the kill {i}", level="Info")
        refs.append(event["reference_id"])
        engine.enqueue(event)
    deadline = time.monotonic() + 20
    while engine.stats()["spooled"] < 400 and time.monotonic() < deadline:
        time.sleep(0.01)
    print(json.dumps({"refs": refs, "stats": engine.stats()}), flush=True)
    time.sleep(60)
    """
    victim = subprocess.Popen(
        [sys.executable, "-c", script(url, spool, body)], stdout=subprocess.PIPE, text=True
    )
    assert victim.stdout is not None
    report = json.loads(victim.stdout.readline())
    assert report["stats"]["spooled"] == 400, report["stats"]
    victim.send_signal(signal.SIGKILL)
    victim.wait(10)
    assert victim.returncode == -signal.SIGKILL
    assert list(spool.glob(f"*{SUFFIX}"))

    with FaultServer(port=port) as server:
        restart = """
        deadline = time.monotonic() + 20
        while engine.stats()["replayed"]["delivered"] < 400 and time.monotonic() < deadline:
            engine.enqueue(log_event("after restart", level="Info"))
            engine.flush(0.5)
        print(json.dumps(engine.stats()), flush=True)
        """
        completed = subprocess.run(
            [sys.executable, "-c", script(url, spool, restart, spool_all=False)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert completed.returncode == 0, completed.stderr
        stats = json.loads(completed.stdout.splitlines()[-1])
        assert stats["replayed"] == {"delivered": 400, "dropped": 0}
        before = [event for event in server.accepted if event["message"] != "after restart"]
        assert sorted(event["reference_id"] for event in before) == sorted(report["refs"])
        assert server.duplicates == []
    assert not list(spool.glob(f"*{SUFFIX}"))  # replayed files are removed


def keep_in_spool(url: str, spool: Path, prefix: str, count: int) -> Any:
    """A program that logs ``count`` events while nothing listens at ``url`` and exits: they
    are kept in ``spool``."""
    body = f"""
    for i in range({count}):
        engine.enqueue(log_event(f"{prefix} {{i}}", level="Info"))
    engine.flush(0.3)
    """
    return subprocess.run(
        [sys.executable, "-c", script(url, spool, body, spool_all=False)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_exit_during_an_outage_keeps_events_for_the_next_start(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    spool = tmp_path / "spool"
    completed = keep_in_spool(url, spool, "at exit", 120)
    assert completed.returncode == 0, completed.stderr
    assert "120 event(s) kept in the spool" in completed.stderr
    assert "could not be sent" not in completed.stderr
    kept, duplicates = replay(port, spool, "at exit", 120)
    assert kept == sorted(f"at exit {i}" for i in range(120))
    assert duplicates == []


@pytest.mark.parametrize(
    ("removed", "after"), [("directory", 60), ("directory", 0), ("database", 60)]
)
def test_a_spool_removed_while_in_use_keeps_what_it_held(
    tmp_path: Path, removed: str, after: int
) -> None:
    """A cleanup that removes the spool directory (``rm -rf``, a tmp reaper), or the database
    files only, while the program runs: the open file went on taking writes after its name was
    gone, and the exit said the events were kept on disk where nothing was. ``after``: events
    logged after the removal (none: only the exit finds it)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    spool = tmp_path / "spool"
    remove = (
        f"shutil.rmtree({str(spool)!r})"
        if removed == "directory"
        else f"[p.unlink() for p in pathlib.Path({str(spool)!r}).glob('*.sqlite3*')"
        " if not p.name.endswith('.lock')]"
    )
    body = f"""
    import pathlib, shutil
    for i in range(60):
        engine.enqueue(log_event(f"kept {{i}}", level="Info"))
    deadline = time.monotonic() + 20
    while engine.stats()["spooled"] < 60 and time.monotonic() < deadline:
        time.sleep(0.01)
    {remove}
    for i in range(60, 60 + {after}):
        engine.enqueue(log_event(f"kept {{i}}", level="Info"))
    engine.flush(0.3)
    """
    completed = subprocess.run(
        [sys.executable, "-c", script(url, spool, body)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert completed.returncode == 0, completed.stderr
    total = 60 + after
    assert f"{total} event(s) kept in the spool" in completed.stderr
    assert len(list(spool.glob(f"*{SUFFIX}"))) == 1  # made again, with every row
    kept, duplicates = replay(port, spool, "kept", total)
    assert kept == sorted(f"kept {i}" for i in range(total))
    assert duplicates == []


def test_a_spool_file_removed_during_an_outage_is_made_again_before_a_crash(
    tmp_path: Path,
) -> None:
    """During an outage the worker waits to retry inside the delivery, not in its scans of
    the spool: a file removed then was not made again, and a crash lost what it held."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    spool = tmp_path / "spool"
    body = f"""
    import pathlib
    for i in range(10):
        engine.enqueue(log_event(f"held {{i}}", level="Error"))
    deadline = time.monotonic() + 20
    while engine.stats()["spooled"] < 10 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.5)  # the worker is in its retry pause now
    for path in pathlib.Path({str(spool)!r}).glob("*.sqlite3*"):
        if not path.name.endswith(".lock"):
            path.unlink()
    time.sleep(2.5)
    os._exit(0)  # a crash: no exit flush
    """
    slow = (
        script(url, spool, body)
        .replace('"retry_initial": 0.01', '"retry_initial": 20.0')
        .replace('"max_backoff": 0.05', '"max_backoff": 60.0')
        .replace('"spool_scan_interval": 0.05', '"spool_scan_interval": 0.5')
    )
    crashed = subprocess.run(
        [sys.executable, "-c", slow], capture_output=True, text=True, timeout=60
    )
    assert crashed.returncode == 0, crashed.stderr
    assert len(list(spool.glob(f"*{SUFFIX}"))) == 1  # made again while the program ran
    held, _ = replay(port, spool, "held", 10)
    assert held == sorted(f"held {i}" for i in range(10))


@pytest.mark.parametrize("processes", [8])
def test_processes_sharing_one_spool_directory(tmp_path: Path, processes: int) -> None:
    """Eight processes write one directory through an outage, then replay it: no lock errors,
    and no event arrives twice."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    spool = tmp_path / "spool"
    writer = """
    name = sys.argv[1]
    for i in range(150):
        engine.enqueue(log_event(f"{name} event {i}", level="Info"))
    """
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", script(url, spool, writer, spool_all=True), f"p{n}"],
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(processes)
    ]
    errors = [run.communicate(timeout=90)[1] for run in runs]
    assert all(run.returncode == 0 for run in runs), errors
    assert not any("locked" in err or "Traceback" in err for err in errors), errors
    assert len(list(spool.glob(f"*{SUFFIX}"))) == processes

    with FaultServer(port=port) as server:
        reader = f"""
        from pathlib import Path
        deadline = time.monotonic() + 60
        spool_dir = Path({str(spool)!r})
        while list(spool_dir.glob("*{SUFFIX}")) and time.monotonic() < deadline:
            time.sleep(0.05)
        engine.flush(5)
        print(json.dumps(engine.stats()["replayed"]), flush=True)
        """
        readers = [
            subprocess.Popen(
                [sys.executable, "-c", script(url, spool, reader, spool_all=False)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        outputs = [run.communicate(timeout=90) for run in readers]
        assert all(run.returncode == 0 for run in readers), outputs
        replayed = [json.loads(out.splitlines()[-1])["delivered"] for out, _ in outputs]
        assert sum(replayed) == 150 * processes  # the two readers split the files, no overlap
        messages = [e["message"] for e in server.accepted if e["message"] != "tick"]
        assert sorted(messages) == sorted(
            f"p{n} event {i}" for n in range(processes) for i in range(150)
        )
        assert server.duplicates == []
    assert not list(spool.glob(f"*{SUFFIX}"))
    assert os.path.isdir(spool)


def test_rows_expired_before_a_disk_error_are_counted_as_expired(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Making room on disk deletes the rows past the 3-day window first; a disk error after
    that must not leave them counted as spooled (they are dropped, as ``expired``)."""

    engine = make(f"http://127.0.0.1:{dead_port()}", tmp_path / "spool", spool_all=True)
    try:
        for index in range(10):
            engine.enqueue(log_event(f"first {index}", level="Info"))
        assert wait_settled(engine)["spooled"] == 10
        spooling = engine.spooling
        assert spooling is not None
        own = spooling.spool.own()
        with own._guard:  # the rows on disk are now 4 days old (the file is the engine's alone)
            assert own._db is not None
            own._db.execute("UPDATE events SET created = ?", (time.time() - 4 * 24 * 3600,))

        def failing() -> int:
            raise OSError(5, "Input/output error")

        monkeypatch.setattr(spooling.spool, "disk_bytes", failing)
        for index in range(5):
            engine.enqueue(log_event(f"second {index}", level="Info"))
        wait_settled(engine)
        stats = poll_until(
            engine.stats, lambda now: now["dropped"].get("expired", 0) >= 10, 10, step=0.01
        )
        assert stats["dropped"]["expired"] == 10, stats
        assert stats["spooled"] == 5, stats
        assert stats["captured"] == accounted(stats) == 15, stats
    finally:
        engine.shutdown(1.0)


def test_a_flush_in_the_next_process_waits_for_the_replay(tmp_path: Path) -> None:
    """A short job that starts with the spool of an earlier run and flushes without logging
    (a cron job whose run had nothing to say): flush() returned True at once, before the
    worker had looked at the directory, and the kept events waited for yet another start."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    spool = tmp_path / "spool"
    completed = keep_in_spool(url, spool, "kept", 50)
    assert "50 event(s) kept in the spool" in completed.stderr, completed.stderr
    with FaultServer(port=port) as server:
        engine = make(url, spool, spool_scan_interval=30.0)
        try:
            assert engine.flush(10.0)  # nothing logged: only what the last run kept
            assert sorted(event["message"] for event in server.accepted) == sorted(
                f"kept {i}" for i in range(50)
            )
        finally:
            engine.shutdown(1.0)


def test_a_read_only_file_of_an_ended_process_is_left_alone_and_said(tmp_path: Path) -> None:
    """A spool file left by an earlier run that can be read here, not written (another
    user's; here a read-only bind mount of the file, which holds for root too): its events
    were sent, their rows could not be deleted, and the worker stopped on that error; every
    flush() started one again, which sent them again (a duplicate each time), and what the
    program logged after was never sent."""
    spool = tmp_path / "spool"
    first = """
        import logging, eventlog_handler
        eventlog_handler.setup(spool_path=SPOOL, shutdown_timeout=0.5)
        logging.getLogger("app").error("left in the spool")
        """.replace("SPOOL", repr(str(spool)))
    env = child_env(f"http://127.0.0.1:{free_port()}")
    subprocess.run([sys.executable, "-c", textwrap.dedent(first)], env=env, timeout=60, check=True)
    [left] = list(spool.glob(f"*{SUFFIX}"))
    bound = subprocess.run(["mount", "--bind", str(left), str(left)], capture_output=True)
    if bound.returncode != 0:
        pytest.skip(f"a bind mount is not allowed here: {bound.stderr!r}")
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(left)], check=True)
        _read_only_orphan(spool)
    finally:
        if subprocess.run(["umount", str(left)], check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(left)], check=False)


def _read_only_orphan(spool: Path) -> None:
    second = """
        import logging, tempfile, eventlog_handler
        handle = eventlog_handler.setup(spool_path=SPOOL)
        print("MARK flushed", [handle.flush(3) for _ in range(3)], flush=True)
        logging.getLogger("app").error("logged after")
        print("MARK settled", handle.flush(5), flush=True)
        """.replace("SPOOL", repr(str(spool)))
    with FaultServer() as server:
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(second)],
            env=child_env(server.url),
            capture_output=True,
            text=True,
            timeout=60,
        )
        messages = [event["message"] for event in server.accepted]
    assert done.returncode == 0, done.stderr
    assert "MARK flushed [True, True, True]" in done.stdout, done.stdout + done.stderr
    assert "MARK settled True" in done.stdout, done.stdout + done.stderr
    assert messages == ["logged after"], messages
    assert server.duplicates == []
    assert done.stderr.count("read-only") == 1, done.stderr
    assert "the delivery worker stopped" not in done.stderr


def test_a_file_whose_sent_rows_cannot_be_deleted_is_sent_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Deleting the rows the service took fails for a file of an ended process (its disk
    fails): the file is let go and not claimed again here (it was, at every scan, and its
    events sent again each time)."""
    from eventlog_handler.delivery import _spool_file

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    spool = tmp_path / "spool"
    keep_in_spool(url, spool, "kept", 3)
    [left] = list(spool.glob(f"*{SUFFIX}"))
    delete = _spool_file.SpoolFile.delete

    def failing(self: Any, ids: Any, events: Any = None) -> int:
        if self.path == left:
            raise sqlite3.OperationalError("disk I/O error")
        return delete(self, ids, events)

    monkeypatch.setattr(_spool_file.SpoolFile, "delete", failing)
    with FaultServer(port=port) as server:
        engine = make(url, spool, spool_scan_interval=0.1)
        try:
            assert engine.flush(5.0)
            time.sleep(1.0)  # ten scans
            assert sorted(event["message"] for event in server.accepted) == [
                "kept 0",
                "kept 1",
                "kept 2",
            ]
            assert len(server.requests) == 1, server.statuses()
        finally:
            engine.shutdown(1.0)
    assert "left alone by this process" in capsys.readouterr().err


FLOOD_THROUGH_DISK = """
import json, logging, sys, time
import eventlog_handler
logging.getLogger().addHandler(logging.NullHandler())
handle = eventlog_handler.setup(spool_path=sys.argv[1], spool_all=True, flush_interval=60)
log = logging.getLogger("flood")
for i in range(5_000):
    log.info("flood %d", i)
began = time.monotonic()
# Full batches go at once; what is left, less than a batch, waits for flush_interval.
while handle.stats()["delivered"] < 4_500 and time.monotonic() - began < 30:
    time.sleep(0.05)
result = {"delivered": handle.stats()["delivered"], "seconds": time.monotonic() - began}
result["flushed"] = handle.flush(10)
result["after_flush"] = handle.stats()["delivered"]
print(json.dumps(result), flush=True)
"""


def test_full_batches_written_to_the_spool_are_sent_at_once(tmp_path: Path) -> None:
    """``spool_all=True``: every event goes to disk before it is sent, and what was written
    waited ``flush_interval`` to be sent, even full batches: a flood arrived in bursts, one per
    interval (with the default 3 s, the benchmark's sink saw no progress for 3 s at a time; with
    ``flush_interval=60``, a minute). In memory, a full batch is sent at once; what is left,
    less than a batch, waits for the interval (or a flush), as in memory."""
    with FaultServer(keep_events=False) as server:
        done = subprocess.run(
            [sys.executable, "-c", FLOOD_THROUGH_DISK, str(tmp_path / "spool")],
            env=child_env(server.url),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout.strip().splitlines()[-1])
        assert result["delivered"] >= 4_500, (result, done.stderr)  # every full batch
        assert result["seconds"] < 20, result  # not a minute per batch
        assert result["flushed"] and result["after_flush"] == 5_000, result
        assert server.accepted_count() == 5_000
