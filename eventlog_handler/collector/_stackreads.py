"""Stacks in the collector's store: listing, counting, status changes, occurrences."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from eventlog_handler.collector._eventreads import EventReads
from eventlog_handler.collector._filters import EventQuery
from eventlog_handler.collector._formats import format_utc, utc_now
from eventlog_handler.collector._storebase import _CHUNK

STACK_STATUSES = ("open", "fixed", "regressed", "ignored")


@dataclass
class StackQuery:
    """What to select from the stacks. ``statuses`` empty means any; ``event_query`` keeps
    only the stacks with at least one matching event."""

    project_ids: list[str] = field(default_factory=list)
    types: list[str] = field(default_factory=list)
    exclude_types: list[str] = field(default_factory=list)
    statuses: list[str] = field(default_factory=list)
    event_query: EventQuery | None = None
    sort: str = "recent"
    limit: int = 50


_STACK_SORTS = {
    "recent": "last_ts",
    "frequent": "total",
    "new": "first_ts",
    "users": "users",
}


class StackReads(EventReads):
    """Listing and changing stacks."""

    _STACK_FIELDS = (
        "id, organization_id, project_id, signature_hash, signature_info, type, title, status,"
        " date_fixed_ts, first_ts, last_ts, total, events, users, created_utc, updated_utc, seq"
    )

    @staticmethod
    def _stack_resource(row: Sequence[Any]) -> dict[str, Any]:
        (
            stack_id,
            organization_id,
            project_id,
            signature_hash,
            signature_info,
            kind,
            title,
            status,
            fixed_ts,
            first_ts,
            last_ts,
            total,
            events,
            users,
            created,
            updated,
            _,
        ) = row
        return {
            "id": stack_id,
            "organization_id": organization_id,
            "project_id": project_id,
            "type": kind,
            "status": status,
            "title": title,
            "signature_hash": signature_hash,
            "signature_info": json.loads(signature_info),
            "first_occurrence": format_utc(datetime.fromtimestamp(first_ts, timezone.utc)),
            "last_occurrence": format_utc(datetime.fromtimestamp(last_ts, timezone.utc)),
            "date_fixed": (
                None
                if fixed_ts is None
                else format_utc(datetime.fromtimestamp(fixed_ts, timezone.utc))
            ),
            "total_occurrences": int(total),
            "event_count": int(events),
            "users": int(users),
            "created_utc": created,
            "updated_utc": updated,
            "first_ts": float(first_ts),
            "last_ts": float(last_ts),
        }

    def get_stack(self, stack_id: str) -> dict[str, Any] | None:
        """A stack, or None."""
        with self._locked() as db:
            row = db.execute(
                f"SELECT {self._STACK_FIELDS} FROM stacks WHERE id = ?", (stack_id,)
            ).fetchone()
        return None if row is None else self._stack_resource(row)

    def _stack_where(self, query: StackQuery) -> tuple[list[str], list[Any]]:
        clauses: list[str] = []
        params: list[Any] = []
        for column, values in (
            ("project_id", query.project_ids),
            ("type", query.types),
            ("status", query.statuses),
        ):
            if values:
                clauses.append(f"s.{column} IN ({','.join('?' * len(values))})")
                params.extend(values)
        if query.exclude_types:
            clauses.append(f"s.type NOT IN ({','.join('?' * len(query.exclude_types))})")
            params.extend(query.exclude_types)
        if query.event_query is not None:
            inner, inner_params = self._where(query.event_query)
            if inner:
                clauses.append(
                    "EXISTS (SELECT 1 FROM events e WHERE e.stack_seq = s.seq AND "
                    + " AND ".join(inner)
                    + ")"
                )
                params.extend(inner_params)
        return clauses, params

    def page_stacks(
        self, query: StackQuery, *, after: str | None = None
    ) -> tuple[list[dict[str, Any]], str | None, int]:
        """One page of stacks in the query's order (descending), starting after the stack
        ``after``; the stacks, the cursor of the next page (None at the end) and the total."""
        column = _STACK_SORTS.get(query.sort, "last_ts")
        with self._locked() as db:
            clauses, params = self._stack_where(query)
            total = int(
                db.execute(
                    "SELECT COUNT(*) FROM stacks s" + self._sql_where(clauses), params
                ).fetchone()[0]
            )
            if after:
                row = db.execute(
                    f"SELECT {column}, seq FROM stacks WHERE id = ?", (after,)
                ).fetchone()
                if row is not None:
                    clauses.append(f"(s.{column}, s.seq) < (?, ?)")
                    params.extend(row)
            rows = db.execute(
                f"SELECT {', '.join('s.' + name.strip() for name in self._STACK_FIELDS.split(','))}"
                f" FROM stacks s{self._sql_where(clauses)}"
                f" ORDER BY s.{column} DESC, s.seq DESC LIMIT ?",
                (*params, query.limit + 1),
            ).fetchall()
        stacks = [self._stack_resource(row) for row in rows[: query.limit]]
        following = stacks[-1]["id"] if len(rows) > query.limit and stacks else None
        return stacks, following, total

    def set_stack_status(self, stack_id: str, status: str) -> dict[str, Any]:
        """Set a stack's status (``open``, ``fixed``, ``regressed``, ``ignored``); marking it
        fixed remembers when, so a later event regresses it. ``KeyError`` for an unknown stack,
        ``ValueError`` for an unknown status."""
        if status not in STACK_STATUSES:
            raise ValueError(f"unknown status {status!r}; use one of {', '.join(STACK_STATUSES)}")
        now = utc_now()
        with self._transaction() as db:
            cursor = db.execute(
                "UPDATE stacks SET status = ?, date_fixed_ts = ?, updated_utc = ? WHERE id = ?",
                (
                    status,
                    now.timestamp() if status == "fixed" else None,
                    format_utc(now),
                    stack_id,
                ),
            )
            if cursor.rowcount == 0:
                raise KeyError(f"no stack {stack_id!r}")
        stack = self.get_stack(stack_id)
        assert stack is not None
        return stack

    def stack_counts(self, project_ids: Sequence[str] = ()) -> dict[str, int]:
        """How many stacks have each status."""
        where, params = "", list(project_ids)
        if project_ids:
            where = f" WHERE project_id IN ({','.join('?' * len(project_ids))})"
        with self._locked() as db:
            rows = db.execute(
                f"SELECT status, COUNT(*) FROM stacks{where} GROUP BY status", params
            ).fetchall()
        return {str(row[0]): int(row[1]) for row in rows}

    def occurrences(
        self, stack_ids: Sequence[str], start: float, bucket: float, buckets: int
    ) -> dict[str, list[int]]:
        """Occurrences (summed ``count``, 1 when absent) per stack in ``buckets`` buckets of
        ``bucket`` seconds from ``start``, by event date."""
        result = {stack_id: [0] * buckets for stack_id in stack_ids}
        if not stack_ids:
            return result
        end = start + bucket * buckets
        with self._locked() as db:
            seqs: dict[int, str] = {}
            for offset in range(0, len(stack_ids), _CHUNK):
                chunk = list(stack_ids[offset : offset + _CHUNK])
                found = db.execute(
                    f"SELECT seq, id FROM stacks WHERE id IN ({','.join('?' * len(chunk))})",
                    chunk,
                ).fetchall()
                seqs.update((int(seq), str(stack_id)) for seq, stack_id in found)
            ordered = list(seqs)
            for offset in range(0, len(ordered), _CHUNK):
                chunk_seqs = ordered[offset : offset + _CHUNK]
                rows = db.execute(
                    "SELECT stack_seq, CAST((date_ts - ?) / ? AS INTEGER),"
                    " SUM(occurrences) FROM events"
                    f" WHERE stack_seq IN ({','.join('?' * len(chunk_seqs))})"
                    " AND date_ts >= ? AND date_ts < ? GROUP BY 1, 2",
                    (start, bucket, *chunk_seqs, start, end),
                ).fetchall()
                for stack_seq, index, count in rows:
                    if 0 <= index < buckets:
                        result[seqs[stack_seq]][index] = int(count)
        return result
