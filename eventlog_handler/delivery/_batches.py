"""Requests in the making: events with their JSON, split by size, and where they came from.

A :class:`Part` is the body of one ``POST /api/v2/events``. It remembers each event's time and,
for events read back from the disk spool, the file and row they live in, so that the engine can
settle exactly those events (deliver, drop, or keep) whatever the service answers.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from eventlog_handler.delivery._courtesy import none
from eventlog_handler.delivery._spool import Row, SpoolFile
from eventlog_handler.wire._events import MAX_EVENT_BYTES, encode_batch, fit


class Part:
    """Events of one request: their dicts (when in memory), JSON, times and spool rows.

    Either ``bodies`` holds each event's JSON, or the whole array's JSON was made in one pass
    (the fast path); splitting or spooling a part encodes its events one by one.
    """

    __slots__ = ("_body", "bodies", "created", "events", "origin", "rows", "shrunk", "weights")

    def __init__(
        self,
        events: list[dict[str, Any]],
        bodies: list[bytes],
        created: list[float],
        *,
        body: bytes | None = None,
        origin: SpoolFile | None = None,
        rows: list[int] | None = None,
        shrunk: bool = False,
        weights: list[int] | None = None,
    ) -> None:
        self.events = events
        #: How many captured events each event stands for (a roll-up's ``count``); ``None``:
        #: one each.
        self.weights = weights
        self.bodies = bodies
        self.created = created
        self.origin = origin
        self.rows = rows or []
        self.shrunk = shrunk
        self._body = body

    def __len__(self) -> int:
        return len(self.created)

    def weight(self) -> int:
        """How many captured events this part stands for."""
        return sum(self.weights) if self.weights is not None else len(self.created)

    @classmethod
    def from_rows(cls, origin: SpoolFile, rows: list[Row]) -> Part:
        """A part of events read back from a spool file."""
        weights = [row.weight for row in rows]
        return cls(
            [],
            [row.body for row in rows],
            [row.created for row in rows],
            origin=origin,
            rows=[row.id for row in rows],
            weights=weights if any(weight != 1 for weight in weights) else None,
        )

    def per_event(self) -> list[bytes]:
        """Each event's JSON (encoding events one by one if the part was made in one pass)."""
        if len(self.bodies) != len(self.created):
            fitted = [fit(event) for event in self.events]
            self.events = [pair[0] for pair in fitted]
            self.bodies = [pair[1] for pair in fitted]
        return self.bodies

    def halves(self) -> tuple[Part, Part]:
        """The first and second half of this part."""
        self.per_event()
        mid = len(self) // 2
        return (self._slice(0, mid), self._slice(mid, len(self)))

    def _slice(self, start: int, stop: int) -> Part:
        return Part(
            self.events[start:stop],
            self.bodies[start:stop],
            self.created[start:stop],
            origin=self.origin,
            rows=self.rows[start:stop],
            weights=self.weights[start:stop] if self.weights is not None else None,
        )

    def body(self) -> bytes:
        """The JSON array."""
        if self._body is None:
            self._body = b"[" + b",".join(self.bodies) + b"]"
        return self._body

    def shrunk_copy(self) -> Part:
        """This single-event part with the event shrunk to a quarter (marked as trimmed)."""
        body = self.body()
        event = self.events[0] if self.events else json.loads(self.bodies[0])
        smaller_event, smaller = fit(event, max(2_000, min(len(body) // 4, 32_000)))
        return Part(
            [smaller_event],
            [smaller],
            self.created[:1],
            origin=self.origin,
            rows=self.rows[:1],
            shrunk=True,
            weights=self.weights[:1] if self.weights is not None else None,
        )


#: The gzip level of event posts (:func:`~eventlog_handler.api._client.compress`): on
#: batches of log events level 1 compresses within a few percent of level 6 (about 30 to 1) in
#: half the time, and the time is spent outside the interpreter lock.
WORKER_LEVEL = 1


def encode_parts(
    events: list[dict[str, Any]],
    created: list[float],
    max_raw_bytes: int,
    weights: list[int] | None = None,
    courtesy: Callable[[], None] = none,
) -> list[Part]:
    """In-memory events as parts, each under ``max_raw_bytes`` of JSON.

    The common case (a batch well under the limits) is one ``json.dumps`` of the whole list,
    more than twice as fast as encoding events one by one; only a batch that is too big is
    encoded event by event, shrinking any single event over :data:`MAX_EVENT_BYTES`.
    """
    if not events:
        return []
    limit = min(max_raw_bytes, MAX_EVENT_BYTES)
    body = _encode_in_chunks(events, limit, courtesy)
    if body is not None:
        return [Part(events, [], created, body=body, weights=weights)]
    fitted = []
    for event in events:
        fitted.append(fit(event))
        courtesy()  # large events (errors) take long: logging threads don't wait for them
    whole = Part(
        [pair[0] for pair in fitted], [pair[1] for pair in fitted], created, weights=weights
    )
    return list(split_by_size(whole, max_raw_bytes))


#: Events encoded in one call at most (a call holds the interpreter until it returns).
ENCODE_CHUNK = 100


def _encode_in_chunks(
    events: list[dict[str, Any]], limit: int, courtesy: Callable[[], None]
) -> bytes | None:
    """The JSON array of ``events`` when it is at most ``limit`` bytes, else ``None``.

    Encoded :data:`ENCODE_CHUNK` events at a time (a ``courtesy`` between chunks: see
    :mod:`eventlog_handler.delivery._courtesy`), giving up as soon as the limit is passed.
    """
    if len(events) <= ENCODE_CHUNK:
        body = encode_batch(events)
        return body if len(body) <= limit else None
    pieces: list[bytes] = []
    size = 2
    for start in range(0, len(events), ENCODE_CHUNK):
        piece = encode_batch(events[start : start + ENCODE_CHUNK])[1:-1]
        size += len(piece) + 1
        if size > limit:
            return None
        pieces.append(piece)
        courtesy()
    return b"[" + b",".join(pieces) + b"]"


def split_by_size(part: Part, max_raw_bytes: int) -> Iterator[Part]:
    """``part`` cut into consecutive parts whose JSON arrays stay under ``max_raw_bytes``."""
    bodies = part.per_event()
    start, size = 0, 2
    for index, body in enumerate(bodies):
        if index > start and size + len(body) + 1 > max_raw_bytes:
            yield part._slice(start, index)
            start, size = index, 2
        size += len(body) + 1
    if start < len(bodies):
        yield part._slice(start, len(bodies))
