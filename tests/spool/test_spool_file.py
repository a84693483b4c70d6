"""The spool's files: rows in and out, bounds, and claiming the files of ended processes."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from eventlog_handler.delivery._spool import SUFFIX, Spool

ROOT = Path(__file__).resolve().parents[2]


def test_rows_round_trip_oldest_first_and_deletes_shrink_counts(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    own = spool.own()
    own.append([(100.0 + i, i % 3 == 0, f'{{"n":{i}}}'.encode()) for i in range(10)])
    assert own.count == 10
    rows = own.oldest(4, 10_000)
    assert [row.body for row in rows] == [f'{{"n":{i}}}'.encode() for i in range(4)]
    assert [row.is_error for row in rows] == [True, False, False, True]
    assert own.delete(row.id for row in rows) == 4
    assert own.count == 6
    assert own.oldest(100, 16)[0].body == b'{"n":4}'  # at least one row, then the byte limit
    assert len(own.oldest(100, 16)) == 2


def test_eviction_takes_logs_before_errors_and_expiry_by_age(tmp_path: Path) -> None:
    own = Spool(tmp_path).own()
    own.append([(float(i), i < 5, b"x" * 100) for i in range(20)])  # 5 errors, 15 logs
    logs, errors = own.evict_oldest(target_bytes=800)
    assert (logs, errors) == (12, 0)
    assert own.count == 8
    assert sum(row.is_error for row in own.oldest(100, 10**6)) == 5
    assert own.expire(before=3.0) == 3  # the errors created at 0, 1 and 2
    assert own.count == 5


def test_eviction_counts_the_chunks_deleted_before_a_disk_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Eviction deletes a chunk of 500 at a time; the rows of the chunks deleted before a
    disk error are in ``counts`` (the spool's caller settles them as dropped)."""
    own = Spool(tmp_path).own()
    own.append([(float(i), False, b"x" * 100) for i in range(3_000)])
    select = own._select_ids
    calls = []

    def failing_on_the_third(sql: str, parameters: tuple[object, ...]) -> list[tuple[int, int]]:
        calls.append(sql)
        if len(calls) == 3:
            raise sqlite3.OperationalError("disk I/O error")
        return select(sql, parameters)

    monkeypatch.setattr(own, "_select_ids", failing_on_the_third)
    counts = [0, 0]
    with pytest.raises(sqlite3.OperationalError):
        own.evict_oldest(target_bytes=0, counts=counts)
    assert own.count == 2_000
    assert counts == [1_000, 0]


def test_rows_survive_reopening(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    own = spool.own()
    own.append([(1.0, False, b'{"a":1}')])
    path = own.path
    own.close(remove_if_empty=True)  # not empty: the file stays
    assert path.exists()


def test_a_live_process_file_is_not_claimed_an_ended_ones_is(tmp_path: Path) -> None:
    code = textwrap.dedent(
        f"""
        import sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from eventlog_handler.delivery._spool import Spool
        own = Spool({str(tmp_path)!r}).own()
        own.append([(time.time(), False, b'{{"from":"child"}}')])
        print("ready", flush=True)
        sys.stdin.readline()
        """
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        assert Spool(tmp_path).claim_orphans() == []  # its owner is alive: locked
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(10)
    # The child ended without cleaning up: its file is an orphan now, claimed exactly once.
    first = Spool(tmp_path).claim_orphans()
    second = Spool(tmp_path).claim_orphans()
    assert len(first) == 1 and second == []
    [orphan] = first
    assert [row.body for row in orphan.oldest(10, 10_000)] == [b'{"from":"child"}']
    orphan.delete(row.id for row in orphan.oldest(10, 10_000))
    orphan.close()
    assert not list(tmp_path.glob(f"*{SUFFIX}"))  # empty files are removed


def test_forked_child_starts_its_own_file(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    parent_file = spool.own().path
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        os.close(read)
        child_file = spool.own().path
        os.write(write, str(child_file).encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    child_file = os.read(read, 4096).decode()
    os.close(read)
    assert child_file and child_file != str(parent_file)


def test_rows_being_sent_are_not_evicted(tmp_path: Path) -> None:
    own = Spool(tmp_path).own()
    own.append([(float(i), False, b"y" * 100) for i in range(10)])
    sending = [row.id for row in own.oldest(3, 10_000)]
    own.reserved.update(sending)
    assert own.evict_oldest(target_bytes=0) == (7, 0)
    assert [row.id for row in own.oldest(10, 10_000)] == sending


def test_a_large_append_is_written_whole_and_in_order(tmp_path: Path) -> None:
    own = Spool(tmp_path).own()
    rows = [
        (float(i), i % 50 == 0, f'{{"n":{i},"pad":"{"p" * (i % 900)}"}}'.encode())
        for i in range(1_000)
    ]
    assert own.append(rows) == 1_000  # many transactions of CHUNK_ROWS / CHUNK_BYTES
    assert not own.full
    assert own.count == 1_000 and own.bytes == sum(len(row[2]) for row in rows)
    assert [row.body for row in own.oldest(1_000, 10**9)] == [row[2] for row in rows]


def test_delete_counts_only_live_rows(tmp_path: Path) -> None:
    own = Spool(tmp_path).own()
    own.append([(1.0, False, b'{"a":1}'), (2.0, False, b'{"b":2}')])
    first = own.oldest(1, 10_000)[0].id
    assert own.delete([first, first, 999_999]) == 1  # repeated and unknown ids: not counted
    assert own.delete([first]) == 0
    assert own.count == 1 and own.bytes == len(b'{"b":2}')


def test_a_file_removed_while_open_is_made_again_with_its_rows_and_their_ids(
    tmp_path: Path,
) -> None:
    import shutil

    directory = tmp_path / "spool"
    own = Spool(directory).own()
    own.append([(100.0 + i, False, f'{{"n":{i}}}'.encode()) for i in range(10)])
    sending = own.oldest(4, 10_000)  # on their way to the service when the file goes
    shutil.rmtree(directory)
    assert own.append([(200.0, True, b'{"n":10}')]) == 1
    assert own.path.exists() and Path(f"{own.path}.lock").exists()
    assert own.count == 11
    assert own.delete(row.id for row in sending) == 4  # the same ids: the right rows go
    bodies = [row.body for row in own.oldest(100, 10**6)]
    assert bodies == [f'{{"n":{i}}}'.encode() for i in range(4, 11)]
    own.close(remove_if_empty=False)
    again = sqlite3.connect(str(own.path))
    try:
        assert again.execute("SELECT COUNT(*) FROM events").fetchone() == (7,)
    finally:
        again.close()


def test_a_roll_ups_row_counts_as_the_events_it_stands_for(tmp_path: Path) -> None:
    """A roll-up's event stands for ``count`` captured events: the file counts them, and
    reading, deleting and evicting it give that many, not 1."""
    own = Spool(tmp_path).own()
    own.append([(1.0, False, b'{"message":"dup","count":50}', 50), (2.0, False, b"{}")])
    assert own.count == 51
    assert [row.weight for row in own.oldest(10, 10_000)] == [50, 1]
    assert own.evict_oldest(own.bytes - 2) == (50, 0)  # the oldest row: the roll-up's
    assert own.count == 1


def test_a_count_in_an_events_own_json_is_not_its_weight(tmp_path: Path) -> None:
    """``count`` is a field of the service's events that a program may set: a row whose JSON
    has it stands for one event unless it was written as a roll-up's."""
    own = Spool(tmp_path).own()
    own.append([(1.0, False, b'{"type":"usage","count":10}')])
    assert own.count == 1
    [row] = own.oldest(10, 10_000)
    assert row.weight == 1
    assert own.delete([row.id]) == 1


def test_a_file_of_an_earlier_version_without_weights_is_read_as_one_event_per_row(
    tmp_path: Path,
) -> None:
    path = tmp_path / f"host-1-abcd{SUFFIX}"
    db = sqlite3.connect(path)
    db.execute(
        "CREATE TABLE events (id INTEGER PRIMARY KEY AUTOINCREMENT, created REAL NOT NULL, "
        "is_error INTEGER NOT NULL, body BLOB NOT NULL)"
    )
    db.executemany(
        "INSERT INTO events (created, is_error, body) VALUES (?, ?, ?)",
        [(1.0, 0, b'{"count":7}'), (2.0, 1, b"{}")],
    )
    db.commit()
    db.close()
    [orphan] = Spool(tmp_path).claim_orphans()
    assert orphan.count == 2
    rows = orphan.oldest(10, 10_000)
    assert [(row.weight, row.is_error) for row in rows] == [(1, False), (1, True)]
    assert orphan.delete(row.id for row in rows) == 2
