"""The engine's traffic with the durable spool (:mod:`eventlog_handler.delivery._spool`).

Events go to disk when they can't be delivered promptly: while the service is failing (a
backoff is under way), when the memory buffer is half full, at exit, and always first with
``spool_all``. From disk they are sent oldest first when they are due; files of processes that
ended are claimed and replayed.

The disk may fail too, and memory stays bounded whatever it does:

- **Full.** What fits is written and kept; what does not stays in memory, in flight (said once
  on stderr), and for :data:`FULL_BACKOFF` seconds nothing more is sent to disk: events wait in
  the bounded memory buffer, where the oldest logs are evicted as ``queue_full`` when it fills.
  (``spool_full`` counts what the ``spool_max_bytes`` bound evicts, and unreadable files.)
- **Corrupt.** A file that can't be read is moved into ``quarantine/`` by the spool layer; its
  events are counted as dropped (``spool_full``) and stderr says so once per file.

Only the worker (or, at exit, the exiting thread) runs this code.
"""

from __future__ import annotations

import math
import sqlite3
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from eventlog_handler.delivery._batches import Part
from eventlog_handler.delivery._buffer import Entry, entry_size
from eventlog_handler.delivery._disk import is_full
from eventlog_handler.delivery._intake import Intake
from eventlog_handler.delivery._ledger import Ledger
from eventlog_handler.delivery._retry import EXPIRY_MARGIN_SECONDS
from eventlog_handler.delivery._spool import Row, Spool, SpoolCorrupt, SpoolFile
from eventlog_handler.delivery._state import RunState
from eventlog_handler.delivery._stderr import say, say_once
from eventlog_handler.settings import Settings
from eventlog_handler.wire._events import MAX_AGE_SECONDS, fit
from eventlog_handler.wire._jsonsafe import safe_str


class Sending(Protocol):
    """What sending from disk asks of the delivery (:class:`~._delivery.Delivery`), which the
    worker passes to :meth:`SpoolTraffic.work`: the delivery holds the spool traffic (it
    spills during an outage), so the spool traffic is handed the delivery where it sends."""

    def deliver(self, parts: deque[Part]) -> bool: ...

    def settle_part(self, part: Part, reason: str | None) -> None: ...


#: Disk bytes a spooled event takes per byte of its JSON (row, page and journal overhead).
SPOOL_OVERHEAD = 1.15
#: Seconds without writes to the spool after it was found full.
FULL_BACKOFF = 10.0

_Row = tuple[float, bool, bytes, int]  # created, is_error, JSON, weight


def is_serious(event: dict[str, Any]) -> bool:
    """Errors, and logs at ``Error``/``Fatal``: kept longest when room runs out."""
    return event.get("type") == "error" or event.get("@level") in ("Error", "Fatal")


def is_error(event: dict[str, Any]) -> bool:
    return event.get("type") == "error"


class SpoolTraffic:
    """Spill, bound and replay for one engine (see the module docstring)."""

    def __init__(
        self,
        spool: Spool,
        settings: Settings,
        ledger: Ledger,
        intake: Intake,
        state: RunState,
        finish: Callable[[list[Entry]], tuple[list[dict[str, Any]], list[float], Any]],
    ) -> None:
        self.spool = spool
        self.settings = settings
        self.ledger = ledger
        self.intake = intake
        self.state = state
        #: Finished events for entries, without the roll-up: one event per entry.
        self.finish = finish
        self.orphans: list[SpoolFile] = []
        #: Whether the directory was looked at for files of ended processes yet.
        self.scanned = False
        self.next_scan = 0.0
        #: When this process's own rows are next due for sending.
        self.due = math.inf
        self._full_until = 0.0
        self._full_said = False
        #: The directory's size after an eviction that gave no byte back (0: none did).
        self._no_gain = 0
        #: Whether stderr said that the spool can't be written (for another reason than space).
        self._failed_said = False
        #: The weight of the last copy :meth:`spill_parts` wrote (``copy=True``).
        self.copied = 0

    @property
    def directory(self) -> Path:
        """The spool directory."""
        return self.spool.directory

    def is_own(self, file: SpoolFile) -> bool:
        return file is self.spool.own_file

    def accepting(self) -> bool:
        """Whether events may go to disk now (not while the disk is known to be full, nor
        after the exit flush closed the spool)."""
        return not self.intake.finished and time.monotonic() >= self._full_until

    def should_spill(self) -> bool:
        """Whether in-memory events go to disk now rather than to the service."""
        if not self.accepting():
            return False
        return (
            self.settings.spool_all
            or self.intake.retrying
            or len(self.intake.buffer) > self.settings.queue_size // 2
        )

    def due_at(self, now: float) -> float:
        """When the spool next has work: replaying other files, or sending our own rows."""
        due = self.next_scan
        if self.orphans and not self.intake.retrying:
            due = now
        if self.ledger.spooled:
            due = min(due, now if self.state.hurried else self.due)
        return due

    def replay_pending(self) -> bool:
        """Whether files of ended processes may wait to be sent: before the first look at the
        directory, or while claimed files are not sent yet."""
        return not self.scanned or bool(self.orphans)

    # -- sending from disk --------------------------------------------------------------------

    def work(self, delivery: Sending) -> None:
        """Look for files of ended processes now and then; send spooled events when due."""
        now = time.monotonic()
        if now >= self.next_scan:
            self.next_scan = now + self.settings.spool_scan_interval
            try:
                self.orphans.extend(self.spool.claim_orphans())
                self.keep_in_place()
            except (OSError, sqlite3.Error) as exc:
                self.ledger.last_error = f"spool: {type(exc).__name__}: {safe_str(exc)}"
        self._say_quarantined()
        for orphan in list(self.orphans):
            try:
                if not self.send_file(orphan, delivery):
                    return
            except (OSError, sqlite3.Error) as exc:  # sent rows it can't delete: left alone
                self.ledger.last_error = f"spool: {type(exc).__name__}: {safe_str(exc)}"
                self.spool.let_go(orphan.path, f"{type(exc).__name__}: {safe_str(exc)}")
                self._say_quarantined()
            orphan.close()
            self.orphans.remove(orphan)
        if not self.scanned:
            with self.ledger.lock:  # a flush waits for the first replay (replay_pending)
                self.scanned = True
                self.ledger.changed.notify_all()
        own = self.spool.own_file
        due = own is not None and self.ledger.spooled and self.due_at(now) <= now
        if due and own is not None and self.send_file(own, delivery):
            with self.ledger.lock:
                self.due = math.inf

    def send_file(self, file: SpoolFile, delivery: Sending) -> bool:
        """Send a spool file's events, oldest first; ``False`` if the service failed."""
        oldest_allowed = time.time() - MAX_AGE_SECONDS + EXPIRY_MARGIN_SECONDS
        while file.count > 0 and not self.intake.finished:
            try:
                rows = file.oldest(self.settings.batch_size, self.settings.max_raw_batch_bytes)
            except SpoolCorrupt:
                self._lost(file)
                return True
            except sqlite3.Error as exc:
                self.ledger.last_error = f"spool: {type(exc).__name__}: {safe_str(exc)}"
                return False
            if not rows:
                return True
            expired = [row for row in rows if row.created < oldest_allowed]
            if expired:
                delivery.settle_part(Part.from_rows(file, expired), "expired")
            fresh = [row for row in rows if row.created >= oldest_allowed]
            unreadable = [row for row in fresh if not _an_event(row.body)]
            if unreadable:  # one in a batch made its JSON array invalid, stored as a text log
                self._drop_unreadable(file, delivery, unreadable)
                fresh = [row for row in fresh if _an_event(row.body)]
            if not fresh:
                continue
            file.reserved.update(row.id for row in fresh)
            try:
                sent = delivery.deliver(deque([Part.from_rows(file, fresh)]))
            finally:
                file.reserved.difference_update(row.id for row in fresh)
                self._lost(file)
            if not sent:
                with self.ledger.lock:
                    self.due = time.monotonic()
                return False
        return True

    def _drop_unreadable(self, file: SpoolFile, delivery: Sending, rows: list[Row]) -> None:
        """Rows that hold no event's JSON (a damaged or foreign file): dropped, and said once
        per file."""
        delivery.settle_part(Part.from_rows(file, rows), "spool_full")
        say_once(
            f"unreadable rows {file.path}",
            f"eventlog_handler: {len(rows)} row(s) of the spool file {file.path.name} hold no "
            "event (a damaged file?): they were dropped, and the file's other events sent.",
        )

    def _lost(self, file: SpoolFile) -> None:
        """Count the rows a file lost when it was found corrupt (the spool moved it aside)."""
        rows = file.take_lost()
        if rows:
            with self.ledger.lock:
                if self.is_own(file):
                    self.ledger.spooled = max(0, self.ledger.spooled - rows)
                    self.ledger.dropped["spool_full"] += rows
                else:
                    self.ledger.replayed["dropped"] += rows
        if file.quarantined is not None and file in self.orphans:
            self.orphans.remove(file)
        self._say_quarantined()

    def _say_quarantined(self) -> None:
        for path, why in self.spool.take_unopened():
            fate = (
                "left alone by this process (its events were sent, and its rows could not be "
                "deleted)"
                if self.spool.is_let_go(path)
                else f"tried again every {self.settings.spool_scan_interval:g} s"
            )
            say(
                f"eventlog_handler: the spool file {Path(path).name} of an ended process could "
                f"not be sent from ({safe_str(why)}); it stays on disk, {fate}."
            )
        for path in self.spool.take_quarantined():
            kept, lost = self.spool.take_damage(path) or (0, None)
            if lost:
                with self.ledger.lock:
                    self.ledger.replayed["dropped"] += lost
            how_many = f" (about {lost}: an estimate from the row ids that could not be read)"
            if not kept:
                say(
                    f"eventlog_handler: the spool file {Path(path).name} could not be read and "
                    f"was moved to {path}; its events are lost{how_many if lost else ''}."
                )
                continue
            say(
                f"eventlog_handler: the spool file {Path(path).name} could not be read whole "
                f"(damaged pages) and was moved to {path}; its {kept} readable event(s) are sent "
                f"from a copy, and those on the damaged pages are lost"
                f"{how_many if lost is not None else ' (how many can not be told)'}."
            )

    # -- writing to disk ----------------------------------------------------------------------

    def spill_events(
        self, events: list[dict[str, Any]], created: list[float], weights: list[int] | None
    ) -> deque[Part] | None:
        """Move finished in-flight events from memory to this process's spool file. ``None``:
        the spool can't be used now (nothing was done). Else what the disk had no room for
        (empty when all was written): still in flight, for the caller to send from memory."""
        if not self.accepting():
            return None
        fitted = [fit(event) for event in events]
        part = Part(
            [pair[0] for pair in fitted],
            [pair[1] for pair in fitted],
            list(created),
            weights=weights,
        )
        parts = deque([part])
        self.spill_parts(parts)  # what a full (or failing) disk did not take stays in parts
        return parts

    def spill_entries(self, entries: list[Entry]) -> deque[Part] | None:
        """Finish in-flight entries and write them to the spool (the roll-up is left out: one
        event per entry); what the disk had no room for is returned, as by
        :meth:`spill_events`. ``None``: the spool can't take them now, and they went back to
        the front of the buffer."""
        events, created, _ = self.finish(entries)
        if not events:
            return deque()
        left = self.spill_events(events, created, None)
        if left is not None:
            return left
        now = time.monotonic()
        ready = [
            Entry(self.settings, event, 0, None, None, when, now, is_error=is_error(event))
            for event, when in zip(events, created, strict=True)
        ]
        for entry in ready:
            entry.size = entry_size(entry)
        with self.ledger.lock:
            self.intake.give_back(ready)
        return None

    def spill_parts(self, parts: deque[Part], *, copy: bool = False) -> bool:
        """Write in-memory parts to the spool; they stop being in flight and become spooled.
        ``False`` when the spool can't take them all now: what it could not take is left in
        ``parts`` (the parts as they were, or one part of what a full disk had no room for).

        ``copy``: write a copy of what fits without evicting anything and leave the parts as they
        are, in flight (a request on the wire at exit, whose outcome the service has yet to
        tell); :attr:`copied` is then the weight written."""
        self.copied = 0
        if not self.accepting():
            return False
        rows: list[_Row] = []
        has_error = False
        for part in parts:
            bodies = part.per_event()
            for index, body in enumerate(bodies):
                serious = is_serious(part.events[index]) if part.events else False
                has_error = has_error or serious
                weight = part.weights[index] if part.weights is not None else 1
                rows.append((part.created[index], serious, body, weight))
        total = sum(row[3] for row in rows)
        try:
            own = self.spool.own()
            rows, dropped = self._bound(rows, evict=not copy)  # dropped: incoming, no room
            written = own.append(rows)
        except (OSError, sqlite3.Error) as exc:
            self.ledger.last_error = f"spool: {type(exc).__name__}: {safe_str(exc)}"
            self._full_until = time.monotonic() + FULL_BACKOFF
            if not is_full(exc):
                self._unwritable(exc)
            return False
        self._failed_said = False
        if copy:
            self._lost(own)
            self.copied = sum(row[3] for row in rows[:written])
            return not dropped and written == len(rows)
        parts.clear()
        left = rows[written:]
        if left:  # no room on the disk: these stay in memory, in flight
            parts.append(
                Part(
                    [],
                    [row[2] for row in left],
                    [row[0] for row in left],
                    weights=[row[3] for row in left],
                )
            )
        stored = sum(row[3] for row in rows[:written])
        unwritten = sum(row[3] for row in left)
        now = time.monotonic()
        ledger = self.ledger
        with ledger.lock:
            ledger.in_flight = max(0, ledger.in_flight - (total - unwritten))
            ledger.dropped["spool_full"] += dropped  # settled only now that the write is done
            ledger.spooled += stored
            delay = self.settings.error_delay if has_error else self.settings.flush_interval
            if ledger.spooled >= self.settings.batch_size:  # a full batch waits no longer
                delay = 0.0  # (as in memory): a flood with spool_all is sent as it comes
            if stored:
                self.due = min(self.due, now + delay)
            ledger.changed.notify_all()
        self._lost(own)
        if own.full or left:
            self._disk_full(own, unwritten)
        else:
            self._full_said = False
            try:
                self._bound_disk(own)
            except (OSError, sqlite3.Error) as exc:
                ledger.last_error = f"spool: {type(exc).__name__}: {safe_str(exc)}"
        return not left

    def _unwritable(self, exc: OSError | sqlite3.Error) -> None:
        """Say once (again only after a write succeeded) that the spool can't be written."""
        if self._failed_said:
            return
        self._failed_said = True
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else safe_str(exc)
        fate = (
            "the events the exit could not send are not kept"
            if self.state.closing
            else f"events are kept in memory only until it can (tried again every "
            f"{FULL_BACKOFF:g} s; past queue_size={self.settings.queue_size} the oldest logs "
            f"are dropped as queue_full)"
        )
        say(
            f"eventlog_handler: the spool {self.spool.directory} can't be written ({reason}); {fate}."
        )

    def _disk_full(self, own: SpoolFile, unwritten: int) -> None:
        self._full_until = time.monotonic() + FULL_BACKOFF
        reason = own.full_error or "no space left"
        self.ledger.last_error = f"spool full: {reason}"
        if not self._full_said:
            self._full_said = True
            kept = (
                f"the {own.count} event(s) written before are kept"
                if own.count
                else "nothing of this process's is on disk"
            )
            say(
                f"eventlog_handler: the spool {self.spool.directory} is out of disk space "
                f"({reason}): {kept}; {unwritten} event(s) could not be "
                f"written and wait in memory, with the events that follow until there is room "
                f"(up to {self.settings.queue_size}; past that the oldest logs are dropped as "
                f"queue_full)."
            )

    def _bound(self, rows: list[_Row], evict: bool = True) -> tuple[list[_Row], int]:
        """Make room for ``rows`` within ``spool_max_bytes`` for the whole directory, and drop
        rows past the 3-day window. Logs go first, the oldest first (those on disk, then the
        incoming ones); errors only when there is no log left. Without ``evict`` (a copy of
        events the service may have stored already), nothing on disk makes room: only what
        fits of ``rows`` is written, its logs left out first. Returns the rows to write and
        the weight of the incoming ones it left out, which the caller settles (``spool_full``)
        once the write is done (if it fails, they are still in flight); rows it evicted from
        the disk are settled here."""
        own = self.spool.own()
        limit = self.settings.spool_max_bytes
        dropped = expired = 0
        evicted = [0, 0]  # (logs, errors), counted as they go (an error may come between)
        try:
            expired = own.expire(time.time() - MAX_AGE_SECONDS + EXPIRY_MARGIN_SECONDS)
            on_disk = own.disk_bytes()
            others = max(0, self.spool.disk_bytes() - on_disk)
            # Bytes of JSON that fit: what the file takes per byte of JSON, as measured once it
            # holds some (pages, indexes, freed pages), in three quarters of the bound; the
            # rest is for the journal, which grows while a read holds its checkpoint back.
            # Not past twice the estimate: a file emptied by a replay keeps its pages (reused
            # by the next rows), and read as overhead they would leave room for next to none.
            overhead = SPOOL_OVERHEAD
            if own.bytes >= 65_536:
                overhead = min(max(overhead, on_disk / own.bytes), 2 * SPOOL_OVERHEAD)
            budget = int((limit * 0.75 - others) / overhead)
            incoming = sum(len(row[2]) for row in rows)
            if own.bytes + incoming > budget:
                logs_first = sorted(rows, key=lambda row: row[1])  # incoming logs, then errors
                room = budget - own.bytes
                if evict and room < incoming:  # first, old logs on disk
                    own.evict_oldest(max(0, budget - incoming), errors=False, counts=evicted)
                    room = budget - own.bytes
                while logs_first and incoming > room and (not logs_first[0][1] or not evict):
                    row = logs_first.pop(0)  # then the oldest incoming logs
                    incoming -= len(row[2])
                    dropped += row[3]
                if evict and incoming > room:  # nothing but errors left: the oldest go
                    own.evict_oldest(max(0, budget - incoming), errors=True, counts=evicted)
                kept = set(map(id, logs_first))
                rows = [row for row in rows if id(row) in kept]
        except (OSError, sqlite3.Error) as exc:
            self.ledger.last_error = f"spool: {type(exc).__name__}: {safe_str(exc)}"
            dropped = 0  # the rows are written as they came; what was deleted is settled below
        with self.ledger.lock:
            self.ledger.spooled = max(0, self.ledger.spooled - expired - sum(evicted))
            self.ledger.dropped["expired"] += expired
            self.ledger.dropped["spool_full"] += sum(evicted)
        return rows, dropped

    def _bound_disk(self, own: SpoolFile) -> None:
        """After a write: if the files really take more than the bound, give their free pages
        back to the file system; if that is not enough, evict old logs in proportion and give
        their space back too. An eviction that gave nothing back (a file of an earlier version
        keeps its pages) is not done again before the directory grows past what it left: it
        would drop events for nothing."""
        limit = self.settings.spool_max_bytes
        if self.spool.disk_bytes() <= limit:
            return
        own.compact()
        total = self.spool.disk_bytes()
        if total <= max(limit, self._no_gain):
            return
        others = total - own.disk_bytes()
        share = max(0.0, (limit - others) / max(1, total - others))
        evicted = own.evict_oldest(int(own.bytes * share * 0.85))
        own.compact()
        left = self.spool.disk_bytes()
        self._no_gain = left if left >= total else 0
        with self.ledger.lock:
            self.ledger.spooled = max(0, self.ledger.spooled - sum(evicted))
            self.ledger.dropped["spool_full"] += sum(evicted)

    def keep_in_place(self) -> None:
        """This process's file made again if a cleanup removed it (the worker checks now and
        then; the exit, before it says what was kept)."""
        own = self.spool.own_file
        if own is not None:
            own.keep_in_place()

    # -- exit ---------------------------------------------------------------------------------

    def left_from_earlier(self) -> int:
        """Events of files of ended processes this one claimed and has not sent (all of them
        stay in the spool, for the next start)."""
        return sum(max(0, orphan.count) for orphan in list(self.orphans))

    def close(self) -> None:
        for orphan in self.orphans:
            orphan.close()
        self.orphans = []
        self.spool.close()


def _an_event(body: bytes) -> bool:
    """Whether a spool row's body may be an event's JSON (an object): the check that keeps a
    damaged row from making its whole batch invalid JSON, which the service takes as text."""
    return body[:1] == b"{" and (body[-1:] == b"}" or body.rstrip()[-1:] == b"}")
