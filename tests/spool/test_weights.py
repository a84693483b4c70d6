"""What the spool's rows stand for in the engine's counts: a roll-up's row is ``count``
captured events wherever it goes (sent, evicted); any other row is one, whatever its JSON says."""

from __future__ import annotations

import sqlite3
import time
import types
from pathlib import Path
from typing import Any

from eventlog_handler.delivery._delivery import Delivery
from eventlog_handler.delivery._intake import Intake
from eventlog_handler.delivery._ledger import Ledger
from eventlog_handler.delivery._retry import RetryPolicy
from eventlog_handler.delivery._spool import Spool, target_tag
from eventlog_handler.delivery._spooling import SpoolTraffic
from eventlog_handler.delivery._state import RunState
from eventlog_handler.settings import Settings


class Accepting:
    """A client that takes every post."""

    def post_payload(self, payload: bytes, gzipped: bool, count: int) -> Any:
        return types.SimpleNamespace(bytes_sent=len(payload), config_version=None)

    def close(self) -> None:
        pass


def _traffic(directory: Path, **options: Any) -> tuple[Ledger, Spool, SpoolTraffic, Delivery]:
    settings = Settings(
        api_key="k" * 40,
        server_url="http://127.0.0.1:9",
        spool_path=str(directory),
        server_settings=False,
        **options,
    )
    ledger, state = Ledger(), RunState()
    intake = Intake(settings, ledger, state)
    spool = Spool(directory, settings.spool_max_bytes, target_tag(settings.api_key))
    assert spool.check() is None
    traffic = SpoolTraffic(spool, settings, ledger, intake, state, lambda entries: ([], [], None))
    delivery = Delivery(
        settings,
        ledger,
        intake,
        state,
        RetryPolicy(),
        lambda timeout=None: Accepting(),
        lambda version: None,
        traffic,
    )
    return ledger, spool, traffic, delivery


def _spill(
    ledger: Ledger, traffic: SpoolTraffic, events: list[dict[str, Any]], weights: list[int]
) -> None:
    with ledger.lock:
        ledger.captured += sum(weights)
        ledger.in_flight += sum(weights)
    traffic.spill_events(events, [time.time()] * len(events), weights)


def _accounted(ledger: Ledger) -> int:
    return ledger.delivered + sum(ledger.dropped.values()) + ledger.in_flight + ledger.spooled


def test_a_roll_up_evicted_from_the_spool_is_counted_as_all_its_events(tmp_path: Path) -> None:
    """A roll-up of 50 was spooled as 50 and evicted as 1: ``spooled`` kept 49 events with no
    row behind them, so every later ``flush()`` waited out its timeout."""
    ledger, spool, traffic, _ = _traffic(tmp_path, spool_max_bytes=100_000)
    _spill(ledger, traffic, [{"type": "log", "message": "dup", "count": 50}], [50])
    assert ledger.spooled == 50
    _spill(
        ledger,
        traffic,
        [{"type": "log", "message": "x" * 20_000 + str(i)} for i in range(5)],
        [1] * 5,
    )
    own = spool.own()
    assert ledger.dropped["spool_full"] >= 50  # the roll-up went first, the oldest log
    assert ledger.spooled == own.count
    assert _accounted(ledger) == ledger.captured == 55
    spool.close()


def test_an_events_own_count_does_not_count_it_as_delivered_many_times(tmp_path: Path) -> None:
    ledger, spool, traffic, delivery = _traffic(tmp_path)
    _spill(ledger, traffic, [{"type": "usage", "message": "m", "count": 10}], [1])
    assert ledger.spooled == 1
    traffic.send_file(spool.own(), delivery)
    assert (ledger.captured, ledger.delivered, ledger.spooled) == (1, 1, 0)
    spool.close()


class _CorruptOnDelete:
    """A connection whose DELETE meets a corrupt page (the rest works)."""

    def __init__(self, db: Any) -> None:
        self.__dict__["db"] = db

    def __getattr__(self, name: str) -> Any:
        return getattr(self.db, name)

    def execute(self, sql: str, *args: Any) -> Any:
        if sql.startswith("DELETE FROM events"):
            error = sqlite3.DatabaseError("database disk image is malformed")
            error.sqlite_errorcode = 11  # type: ignore[attr-defined]
            raise error
        return self.db.execute(sql, *args)


def test_a_sent_roll_up_whose_rows_cannot_be_deleted_counts_as_all_its_events(
    tmp_path: Path,
) -> None:
    """The service took the roll-up of 10 and two events; deleting their rows then found the
    file corrupt: its rows were counted as 3 delivered and 9 lost."""
    ledger, spool, traffic, delivery = _traffic(tmp_path)
    events = [{"type": "log", "message": "dup", "count": 10}, {"message": "a"}, {"message": "b"}]
    _spill(ledger, traffic, events, [10, 1, 1])
    own = spool.own()
    own._db = _CorruptOnDelete(own._db)  # type: ignore[assignment]
    traffic.send_file(own, delivery)
    assert (ledger.delivered, sum(ledger.dropped.values()), ledger.spooled) == (12, 0, 0)
    spool.close()
