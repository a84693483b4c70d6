"""Reading events from the collector's store: by id, by query, in cursor pages, neighbours.

Reading an event applies the service's rules again to its part of the body, with its time of
receipt, which gives the event as it was stored. Listings are newest first by event date;
:meth:`EventReads.page_events` pages with a cursor (an event id), so any number of events can be
walked without an offset.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from eventlog_handler.collector._accounts import clean_text, dumps
from eventlog_handler.collector._filters import EventQuery
from eventlog_handler.collector._storebase import (
    _FROM,
    _ROW,
    _ROW_COLUMNS,
    StoreBase,
    event_id,
    parse_event_id,
)


@dataclass
class EventPage:
    """One page of a cursor listing: the events (newest first), the cursors of the pages
    before and after it (None at either end), the rows matching and the rank of the first."""

    events: list[dict[str, Any]]
    newer: str | None
    older: str | None
    total: int
    first_rank: int


class EventReads(StoreBase):
    """Listing and reading events."""

    @staticmethod
    def _where(query: EventQuery) -> tuple[list[str], list[Any]]:
        """The conditions of ``query`` on events aliased ``e``."""
        clauses: list[str] = []
        params: list[Any] = []

        def any_of(column: str, values: Sequence[Any], lookup: str = "") -> None:
            marks = "= ?" if len(values) == 1 else f"IN ({','.join('?' * len(values))})"
            if lookup:
                clauses.append(f"e.{column} IN (SELECT seq FROM {lookup} WHERE id {marks})")
            else:
                clauses.append(f"e.{column} {marks}")
            params.extend(values)

        if query.organization_id is not None:
            clauses.append("e.project_seq IN (SELECT seq FROM projects WHERE organization_id = ?)")
            params.append(query.organization_id)
        if query.scope_project_id is not None:
            any_of("project_seq", [query.scope_project_id], "projects")
        if query.project_ids:
            any_of("project_seq", query.project_ids, "projects")
        if query.stack_ids:
            any_of("stack_seq", query.stack_ids, "stacks")
        if query.types:
            any_of("type", query.types)
        if query.levels:
            any_of("level", [level.lower() for level in query.levels])
        if query.sources:
            exact = [source for source in query.sources if not source.endswith("*")]
            prefixes = [source.rstrip("*") for source in query.sources if source.endswith("*")]
            either: list[str] = []
            if exact:
                either.append(f"e.source IN ({','.join('?' * len(exact))})")
                params.extend(exact)
            for prefix in prefixes:  # source:shop.* (a range, so the index serves it)
                either.append("(e.source >= ? AND e.source < ?)")
                params.extend((prefix, prefix + "\U0010ffff"))
            clauses.append("(" + " OR ".join(either) + ")")
        if query.reference_ids:
            any_of("reference_id", query.reference_ids)
            clauses.append("e.reference_id <> ''")  # the index holds only these
        if query.identities:
            any_of("user_identity", query.identities)
        if query.tags:
            clauses.append("(" + " OR ".join("instr(e.tags, ?) > 0" for _ in query.tags) + ")")
            params.extend(dumps(tag) for tag in query.tags)
        for term in query.text:
            clauses.append("instr(e.search_text, ?) > 0")
            params.append(clean_text(term.lower()))
        return clauses, params

    @staticmethod
    def _sql_where(clauses: list[str]) -> str:
        return (" WHERE " + " AND ".join(clauses)) if clauses else ""

    def _count(self, db: sqlite3.Connection, clauses: list[str], params: Sequence[Any]) -> int:
        return int(
            db.execute(
                "SELECT COUNT(*) FROM events e" + self._sql_where(clauses), params
            ).fetchone()[0]
        )

    def query_events(self, query: EventQuery) -> tuple[list[dict[str, Any]], int]:
        """A page of events matching ``query`` (offset and limit), and how many match in all."""
        clauses, params = self._where(query)
        order = "ASC" if query.ascending else "DESC"
        with self._locked() as db:
            total = self._count(db, clauses, params)
            rows = db.execute(
                f"SELECT {_ROW}{_FROM}{self._sql_where(clauses)}"
                f" ORDER BY e.date_ts {order}, e.seq {order} LIMIT ? OFFSET ?",
                (*params, query.limit, query.offset),
            ).fetchall()
            return [self._document(db, row) for row in rows], total

    @staticmethod
    def _position(db: sqlite3.Connection, text: str | None) -> tuple[float, int] | None:
        parsed = parse_event_id(text or "")
        if parsed is None:
            return None
        row = db.execute(
            "SELECT e.date_ts, e.seq, b.received_ts" + _FROM + " WHERE e.seq = ?", (parsed[1],)
        ).fetchone()
        if row is None or int(row[2]) & 0xFFFFFFFF != parsed[0]:
            return None
        return float(row[0]), int(row[1])

    def events_after(
        self, query: EventQuery, after: str
    ) -> tuple[list[dict[str, Any]], bool] | None:
        """The events that follow the event ``after`` in the query's order (the API's ``after``
        cursor); None when that event does not exist. Also whether more follow."""
        with self._locked() as db:
            position = self._position(db, after)
            if position is None:
                return None
            clauses, params = self._where(query)
            direction = ">" if query.ascending else "<"
            order = "ASC" if query.ascending else "DESC"
            clauses.append(f"(e.date_ts, e.seq) {direction} (?, ?)")
            rows = db.execute(
                f"SELECT {_ROW}{_FROM}{self._sql_where(clauses)}"
                f" ORDER BY e.date_ts {order}, e.seq {order} LIMIT ?",
                (*params, *position, query.limit + 1),
            ).fetchall()
            events = [self._document(db, row) for row in rows[: query.limit]]
        return events, len(rows) > query.limit

    def page_events(
        self, query: EventQuery, *, older_than: str | None = None, newer_than: str | None = None
    ) -> EventPage:
        """One page (``query.limit`` rows) of the matching events, newest first: the newest
        ones, those just older than the event ``older_than``, or just newer than ``newer_than``.
        An unknown cursor event starts from the newest."""
        limit = query.limit
        with self._locked() as db:
            clauses, params = self._where(query)
            total = self._count(db, clauses, params)
            cursor_id = older_than or newer_than
            position = self._position(db, cursor_id) if cursor_id else None
            going_newer = position is not None and newer_than is not None and not older_than
            rows = self._page_rows(db, clauses, params, position, going_newer, limit)
            if going_newer and len(rows) < limit:
                rows = self._page_rows(db, clauses, params, None, False, limit)
            first_rank = 1
            if rows:
                first_rank += self._count(
                    db,
                    [*clauses, "(e.date_ts, e.seq) > (?, ?)"],
                    (*params, rows[0][_ROW_COLUMNS], rows[0][0]),
                )
            events = [self._document(db, row) for row in rows]
        newer = older = None
        if events:
            newer = events[0]["id"] if first_rank > 1 else None
            older = events[-1]["id"] if first_rank + len(events) - 1 < total else None
        return EventPage(events, newer, older, total, first_rank)

    def _page_rows(
        self,
        db: sqlite3.Connection,
        clauses: list[str],
        params: list[Any],
        position: tuple[float, int] | None,
        going_newer: bool,
        limit: int,
    ) -> list[Any]:
        """Rows (:data:`_ROW` and ``date_ts``) of one page, newest first."""
        page_clauses, page_params = list(clauses), list(params)
        if position is not None:
            page_clauses.append(f"(e.date_ts, e.seq) {'>' if going_newer else '<'} (?, ?)")
            page_params.extend(position)
        order = "ASC" if going_newer else "DESC"
        rows = db.execute(
            f"SELECT {_ROW}, e.date_ts{_FROM}{self._sql_where(page_clauses)}"
            f" ORDER BY e.date_ts {order}, e.seq {order} LIMIT ?",
            (*page_params, limit),
        ).fetchall()
        if going_newer:
            rows.reverse()
        return rows

    def count_events(self, query: EventQuery) -> int:
        """How many events match ``query``."""
        clauses, params = self._where(query)
        with self._locked() as db:
            return self._count(db, clauses, params)

    def _row_by_id(self, db: sqlite3.Connection, text: str, columns: str) -> Any:
        parsed = parse_event_id(text)
        if parsed is None:
            return None
        row = db.execute(
            f"SELECT b.received_ts, {columns}{_FROM} WHERE e.seq = ?", (parsed[1],)
        ).fetchone()
        if row is None or int(row[0]) & 0xFFFFFFFF != parsed[0]:
            return None
        return row[1:]

    def get_event(self, event_id: str) -> dict[str, Any] | None:
        """One stored event, or None."""
        with self._locked() as db:
            row = self._row_by_id(db, event_id, _ROW)
            return None if row is None else self._document(db, row)

    def event_note(self, event_id: str) -> str | None:
        """The collector's own note on an event (why it was stored as text), or None."""
        with self._locked() as db:
            row = self._row_by_id(db, event_id, "b.note")
        return None if row is None or row[0] is None else str(row[0])

    def neighbours(self, event_id_text: str) -> tuple[str | None, str | None]:
        """The ids of the next newer and next older event of the same stack."""
        with self._locked() as db:
            row = self._row_by_id(db, event_id_text, "e.stack_seq, e.date_ts, e.seq")
            if row is None:
                return None, None
            newer = db.execute(
                "SELECT b.received_ts, e.seq" + _FROM + " WHERE e.stack_seq = ?"
                " AND (e.date_ts, e.seq) > (?, ?) ORDER BY e.date_ts, e.seq LIMIT 1",
                tuple(row),
            ).fetchone()
            older = db.execute(
                "SELECT b.received_ts, e.seq" + _FROM + " WHERE e.stack_seq = ?"
                " AND (e.date_ts, e.seq) < (?, ?) ORDER BY e.date_ts DESC, e.seq DESC LIMIT 1",
                tuple(row),
            ).fetchone()
        return (
            event_id(newer[0], newer[1]) if newer else None,
            event_id(older[0], older[1]) if older else None,
        )

    def distinct_types(self, limit: int = 50) -> list[str]:
        """The event types seen (from the stacks), most frequent first."""
        with self._locked() as db:
            rows = db.execute(
                "SELECT type FROM stacks GROUP BY type ORDER BY SUM(events) DESC, type LIMIT ?",
                (limit,),
            ).fetchall()
        return [str(row[0]) for row in rows]
