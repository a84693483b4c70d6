"""Reading what is left of a damaged spool file (:func:`eventlog_handler.delivery._disk.salvage`):
how many rows it says were lost."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from eventlog_handler.delivery._disk import salvage

SCHEMA = (
    "CREATE TABLE events (id INTEGER PRIMARY KEY AUTOINCREMENT, created REAL NOT NULL, "
    "is_error INTEGER NOT NULL, body BLOB NOT NULL, weight INTEGER NOT NULL DEFAULT 1)"
)


def damaged(path: Path, rows: int, sent: int, *leaves: int) -> int:
    """A spool file of ``rows`` events whose first ``sent`` were sent (deleted), with its
    ``leaves`` (their places among the leaf pages of events) zeroed, as a bad sector reads
    back; returns how many rows those pages held. (Random bytes would make each run another
    case: some read as a page, with rows of their own.)"""
    db = sqlite3.connect(path)
    db.execute(SCHEMA)
    db.executemany(
        "INSERT INTO events (created, is_error, body) VALUES (?, 0, ?)",
        [(float(index), b'{"message": "event %d"}' % index + b" " * 200) for index in range(rows)],
    )
    db.execute("DELETE FROM events WHERE id <= ?", (sent,))
    db.commit()
    try:
        pages = db.execute(
            "SELECT pageno, ncell FROM dbstat WHERE name = 'events' AND pagetype = 'leaf' "
            "ORDER BY path"
        ).fetchall()
    except sqlite3.Error:
        pytest.skip("this sqlite3 has no dbstat table to find a page by")
    size = db.execute("PRAGMA page_size").fetchone()[0]
    db.close()
    with open(path, "r+b") as file:
        for leaf in leaves:
            file.seek((pages[leaf][0] - 1) * size)
            file.write(bytes(size))  # as a bad sector reads back: zeros
    return sum(pages[leaf][1] for leaf in leaves)


def salvaged(path: Path) -> tuple[int | None, int]:
    kept: list[object] = []
    db = sqlite3.connect(path)
    try:
        lost, complete = salvage(db, lambda rows: kept.extend(rows) or True)
    finally:
        db.close()
    assert complete
    return lost, len(kept)


def test_damage_among_rows_sent_long_ago_is_not_counted_as_their_loss(tmp_path: Path) -> None:
    """2,900 of 3,000 events were sent and deleted, and the page of the oldest left is bad:
    the ids of the 2,900 counted as lost ("about 2916")."""
    path = tmp_path / "spool.sqlite3"
    on_bad_page = damaged(path, 3_000, 2_900, 0)
    lost, kept = salvaged(path)
    assert kept == 100 - on_bad_page > 0  # every row after the bad page
    assert lost is None  # how many can't be told: said so, not a number 30 times too large


def test_damage_among_rows_never_sent_is_estimated(tmp_path: Path) -> None:
    path = tmp_path / "spool.sqlite3"
    on_bad_page = damaged(path, 3_000, 0, 3)
    lost, kept = salvaged(path)
    assert (kept, lost) == (3_000 - on_bad_page, on_bad_page)


def test_every_readable_row_between_bad_pages_is_kept(tmp_path: Path) -> None:
    """Past a run of ids that can't be read, the steps that double jumped over readable rows
    that came after it."""
    path = tmp_path / "spool.sqlite3"
    on_bad_pages = damaged(path, 20_000, 0, *range(5, 45, 2))
    lost, kept = salvaged(path)
    assert (kept, lost) == (20_000 - on_bad_pages, on_bad_pages)


def test_a_good_page_between_runs_of_bad_ones_is_kept(tmp_path: Path) -> None:
    """Searching ahead from a bad run, a step that landed in a second bad run passed the good
    rows between the two."""
    path = tmp_path / "spool.sqlite3"
    on_bad_pages = damaged(path, 20_000, 0, *range(5, 25), *range(26, 46))
    lost, kept = salvaged(path)
    assert kept == 20_000 - on_bad_pages
    assert lost == on_bad_pages

    path = tmp_path / "sent.sqlite3"
    on_bad_pages = damaged(path, 3_000, 2_900, 0, -1)  # the first and the last leaf
    lost, kept = salvaged(path)
    assert (kept, lost) == (100 - on_bad_pages, None)
