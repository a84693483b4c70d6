"""The event endpoints of the API: submitting (POST and GET), reading, sessions and their
heartbeats, stacks and user descriptions.

Submitting answers as the service does: 202 for a POST (200 for ``GET .../submit``), once the
events are read; they are stored right after the answer is sent, on the same thread
(:mod:`~eventlog_handler.collector._pending`: every read waits for that, so events can be read as
soon as the answer arrives). Besides the service's headers, the answer carries two of the
collector's own, ``X-Events-Accepted`` (events read from the body) and ``X-Events-Discarded``
(dropped by the service's rules: too old, a type too long), which make tests and debugging
easier; clients must not rely on them. Events whose reference id was received in the last 24
hours are discarded when stored (the dashboard notes it).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from decimal import Decimal, InvalidOperation
from typing import Any

from eventlog_handler.collector._accounts import TokenRecord
from eventlog_handler.collector._auth import QUERY_TOKEN_NAMES
from eventlog_handler.collector._eventstore import kept_body
from eventlog_handler.collector._filters import EventQuery, parse_filter, parse_sort
from eventlog_handler.collector._formats import DateFormatError, parse_date
from eventlog_handler.collector._http_helpers import (
    DECOMPRESSION_FACTOR,
    MAXIMUM_SKIP,
    content_length,
    cursor_headers,
    int_arg,
    json_document,
    media_type,
    paging_headers,
    project_in_scope,
    read_body,
    token_project,
)
from eventlog_handler.collector._ingest import Received, decode_body, read_events
from eventlog_handler.collector._messages import Request, Response, empty_response, json_response
from eventlog_handler.collector._normalize import NormalizedEvent, Normalizer, is_valid_reference_id
from eventlog_handler.collector._pending import PendingStores
from eventlog_handler.collector._problems import HttpError
from eventlog_handler.collector._sessions import SESSION_START
from eventlog_handler.collector._storage import Storage, StorageClosed

__all__ = ["EVENT_MEDIA_TYPES", "EventsApi", "IngestNote"]

logger = logging.getLogger("eventlog_handler.collector")

EVENT_MEDIA_TYPES = ("application/json", "text/plain")
_GEO_RE = re.compile(r"^\s*-?\d{1,3}(?:\.\d+)?\s*,\s*-?\d{1,3}(?:\.\d+)?\s*$")
_NOTES = 100


@dataclass(frozen=True)
class IngestNote:
    """Something the collector did to a request's events that a client may not expect."""

    time: float
    project_id: str
    text: str


def _matches_exclusion(key: str, patterns: list[str]) -> bool:
    lowered = key.lower()
    for pattern in patterns:
        pattern = pattern.strip().lower()
        if not pattern:
            continue
        if pattern.startswith("*") and pattern.endswith("*") and len(pattern) > 1:
            if pattern[1:-1] in lowered:
                return True
        elif pattern.endswith("*"):
            if lowered.startswith(pattern[:-1]):
                return True
        elif pattern.startswith("*"):
            if lowered.endswith(pattern[1:]):
                return True
        elif lowered == pattern:
            return True
    return False


_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")


def _description_problems(description: dict[str, Any]) -> dict[str, list[str]]:
    """What the service's validator says of a user description: at least an e-mail address or
    a description, and an e-mail address that is one."""
    problems: dict[str, list[str]] = {}
    email = description.get("email_address")
    text = description.get("description")
    if email is not None and (not isinstance(email, str) or not _EMAIL.match(email.strip())):
        problems["email_address"] = ["Please specify a valid email address."]
    if text is not None and not isinstance(text, str):
        problems["description"] = ["The description must be text."]
    has_email = isinstance(email, str) and email.strip()
    has_text = isinstance(text, str) and text.strip()
    if not has_email and not has_text and not problems:
        problems["description"] = ["Please specify an email address or a description."]
    return problems


class EventsApi:
    """The event endpoints over a :class:`Storage`."""

    def __init__(
        self,
        storage: Storage,
        *,
        max_body_bytes: int,
        on_events: Callable[[], None] | None = None,
    ) -> None:
        self.storage = storage
        self.max_body_bytes = max_body_bytes
        self._on_events = on_events
        self._notes: deque[IngestNote] = deque(maxlen=_NOTES)
        self._notes_lock = threading.Lock()
        self.pending = PendingStores()
        #: Acknowledged batches whose events could not be stored (a full disk): stored again
        #: after the next store that works (they wait in ``unstored``, as after a crash).
        self._failed: set[int] = set()

    @property
    def notes(self) -> list[IngestNote]:
        """What the collector recently noted about received events, newest first."""
        with self._notes_lock:
            return list(reversed(self._notes))

    def _note(self, project_id: str, text: str) -> None:
        with self._notes_lock:
            self._notes.append(IngestNote(time.time(), project_id, text))

    def _store(
        self,
        token: TokenRecord,
        project_id: str,
        events: list[NormalizedEvent],
        normalizer: Normalizer,
        status: int,
        request: Request,
        body: Received | None = None,
    ) -> Response:
        """Answer (``status``), then store the events (see :mod:`._pending`). The body is kept
        with the request's ``User-Agent`` (``@submission_client`` of its events)."""
        for problem in normalizer.problems:
            self._note(project_id, f"Dropped an event: {problem}.")
        if normalizer.dropped > len(normalizer.problems):
            self._note(project_id, f"Dropped {normalizer.dropped} events in one request.")
        if body is not None and body.note:
            self._note(project_id, f"{len(events)} event(s) stored as text. {body.note}")
        response = empty_response(status)
        response.headers["X-Events-Accepted"] = str(len(events))
        response.headers["X-Events-Discarded"] = str(normalizer.dropped)
        version, _ = self.storage.project_config(project_id)
        response.headers["X-Exceptionless-ConfigVersion"] = str(version)
        if events:
            # Durable before the answer: the body is committed first (a crash after the 202
            # loses nothing: the collector stores it when it starts again), and its events are
            # stored right after the answer, while the client prepares its next request.
            kept = replace(
                body if body is not None else kept_body(events),
                user_agent=request.headers.get("User-Agent") or "",
            )
            try:
                batch = self.storage.receive_batch(
                    token.organization_id, project_id, normalizer.now_ts, kept
                )
            except StorageClosed:
                raise HttpError(503, "The collector is shutting down.") from None
            ticket = self.pending.begin()

            def store() -> None:
                try:
                    self._insert(token.organization_id, project_id, events, normalizer, kept, batch)
                finally:
                    self.pending.end(ticket)

            response.after = store
        return response

    def _insert(
        self,
        organization_id: str,
        project_id: str,
        events: list[NormalizedEvent],
        normalizer: Normalizer,
        body: Received | None,
        batch: int | None = None,
    ) -> None:
        try:
            outcome = self.storage.insert_events(
                organization_id, project_id, events, normalizer.now, body=body, batch=batch
            )
        except StorageClosed:
            return
        except Exception:
            logger.exception("the collector could not store %d events", len(events))
            self._note(
                project_id,
                f"{len(events)} event(s) could not be stored (see the log); they are stored "
                "once storing works again.",
            )
            if batch is not None:
                with self._notes_lock:
                    self._failed.add(batch)
            return
        if self._failed:
            self._store_failed()
        if outcome.duplicates:
            self._note(
                project_id,
                f"Discarded {outcome.duplicates} event(s) whose reference id was received in "
                "the last 24 hours (a retried batch).",
            )
        if outcome.stored and self._on_events is not None:
            self._on_events()

    def _store_failed(self) -> None:
        """Store the batches whose storing failed before (a store works again)."""
        with self._notes_lock:
            failed, self._failed = self._failed, set()
        try:
            stored = self.storage.store_unstored(failed)
        except StorageClosed:
            return
        except Exception:
            logger.exception("the collector could not store %d earlier batch(es)", len(failed))
            with self._notes_lock:
                self._failed |= failed
            return
        if stored and self._on_events is not None:
            self._on_events()

    # -- submitting --------------------------------------------------------------------------

    def post_events(self, request: Request, token: TokenRecord | None) -> Response:
        """``POST /api/v2/events`` and ``/api/v2/projects/{id}/events``: 202 when stored.

        JSON and plain text are accepted; a body that is not events becomes log events, one
        per line, as on the service.
        """
        assert token is not None
        project_id = token_project(self.storage, request, token)
        if media_type(request) not in EVENT_MEDIA_TYPES:
            raise HttpError(415, "Send events as 'Content-Type: application/json' (or text/plain).")
        length = content_length(request, self.max_body_bytes)
        if not length:
            raise HttpError(411, "A request body with a Content-Length is required.")
        raw = request.read_body(length)
        encoding = (request.headers.get("Content-Encoding") or "identity").strip().lower()
        decoded = decode_body(raw, encoding, self.max_body_bytes * DECOMPRESSION_FACTOR)
        kept_as = encoding if encoding in ("gzip", "x-gzip", "deflate") else "identity"
        normalizer = Normalizer()
        events, kept = read_events(decoded, Received(raw, kept_as), normalizer)
        return self._store(token, project_id, events, normalizer, 202, request, kept)

    def submit_by_get(self, request: Request, token: TokenRecord | None) -> Response:
        """``GET /api/v2/events/submit[/{type}]`` (and by project): one event from the query
        parameters, answered 200 as on the service. ``type``, ``source``, ``message``,
        ``reference``, ``date``, ``count``, ``value``, ``geo``, ``tags`` (comma-separated),
        ``identity`` and ``identity.name`` fill the event; any other parameter goes into
        ``data`` (unless ``@@DataExclusions`` names it); a value that does not parse is
        ignored."""
        assert token is not None
        parameters = [
            (key, [value for value in values if value])
            for key, values in request.query.items()
            if key and key.lower() not in QUERY_TOKEN_NAMES and any(values)
        ]
        if not parameters:
            return empty_response(200)
        project_id = token_project(self.storage, request, token)
        _, settings = self.storage.project_config(project_id)
        exclusions = (settings.get("@@DataExclusions") or "").split(",")
        event: dict[str, Any] = {"type": request.params.get("type") or "log"}
        data: dict[str, Any] = {}
        identity = name = None
        for key, values in parameters:
            first = values[0]
            lowered = key.lower()
            if lowered in ("type", "source", "message"):
                event[lowered] = first
            elif lowered == "reference":
                event["reference_id"] = first
            elif lowered == "date":
                try:
                    parse_date(first)
                    event["date"] = first
                except DateFormatError:
                    pass
            elif lowered == "count":
                if re.fullmatch(r"[+-]?\d{1,9}", first.strip()):
                    event["count"] = int(first)
            elif lowered == "value":
                try:
                    number = Decimal(first.strip())
                    if number.is_finite():
                        event["value"] = int(number) if number == int(number) else float(number)
                except (InvalidOperation, ValueError):
                    pass
            elif lowered == "geo":
                if _GEO_RE.match(first):
                    event["geo"] = ",".join(part.strip() for part in first.split(","))
            elif lowered == "tags":
                tags = [tag for value in values for tag in value.split(",") if tag]
                event["tags"] = list(dict.fromkeys(tags))
            elif lowered == "identity":
                identity = first
            elif lowered in ("identity.name", "identityname"):
                name = first
            elif not _matches_exclusion(key, exclusions):
                data[key] = values if len(values) > 1 else first
        if identity or name:
            user: dict[str, Any] = {"identity": identity} if identity else {}
            if name:
                user["name"] = name
            data["@user"] = user
        if data:
            event["data"] = data
        if "reference_id" in event and not is_valid_reference_id(event["reference_id"]):
            event["reference_id"] = "invalid-reference-id"
        normalizer = Normalizer()
        normalized = normalizer.event(dict(event))
        kept = [normalized] if normalized else []
        return self._store(token, project_id, kept, normalizer, 200, request)

    def heartbeat(self, request: Request, token: TokenRecord | None) -> Response:
        """``GET /api/v2/events/session/heartbeat?id=...&close=true|false``: 200.

        ``id`` is a session id, or the identity of the user of an open session; the session
        counts the heartbeat and its last activity becomes now; ``close=true`` ends it (see
        :mod:`~eventlog_handler.collector._sessions`). Without ``id``, or for no open session,
        nothing changes and the answer is 200 all the same, as on the service; a token of no
        project gets 400."""
        assert token is not None
        identifier = (request.arg("id") or "").strip()
        close_text = (request.arg("close") or "false").strip().lower()
        if close_text not in ("true", "false"):
            raise HttpError(
                400,
                "'close' must be true or false.",
                errors={"close": [f"The value {close_text[:40]!r} is not valid."]},
            )
        if not identifier:
            return empty_response(200)
        project_id = token_project(self.storage, request, token)
        try:
            self.storage.record_heartbeat(project_id, identifier, time.time(), close_text == "true")
        except StorageClosed:
            raise HttpError(503, "The collector is shutting down.") from None
        return empty_response(200)

    def user_description(self, request: Request, token: TokenRecord | None) -> Response:
        """``POST /api/v2/events/by-ref/{reference_id}/user-description``: 202.

        The description is attached to the project's event with that reference id as
        ``data["@user_description"]`` if the event is stored; otherwise it is dropped.
        """
        assert token is not None
        project_id = token_project(self.storage, request, token)
        reference_id = request.params["reference_id"]
        if not is_valid_reference_id(reference_id):  # the service's route does not match it
            raise HttpError(404, f"No resource at {request.path[:200]}.")
        body = read_body(request, self.max_body_bytes, required=True)
        assert body is not None
        value = json_document(body)
        if not isinstance(value, dict):
            raise HttpError(400, "The user description must be a JSON object.")
        description = {
            key: value[key] for key in ("email_address", "description", "data") if key in value
        }
        problems = _description_problems(description)
        if problems:
            raise HttpError(
                422,
                "The user description is invalid.",
                errors=problems,
                title="One or more validation errors occurred.",
            )
        self.storage.add_user_description(project_id, reference_id, description)
        return empty_response(202)

    # -- reading -----------------------------------------------------------------------------

    def list_sessions(self, request: Request, token: TokenRecord | None) -> Response:
        """``GET /api/v2/events/sessions`` (also by project): the session start events, as
        :meth:`list_events` lists events (the filter's ``type`` terms are replaced). Each shows
        its session: ``value`` (duration in seconds), ``data["sessionend"]`` once it ended,
        ``data["@heartbeats"]`` and ``data["@last_heartbeat"]``."""
        return self.list_events(request, token, types=[SESSION_START])

    def list_events(
        self,
        request: Request,
        token: TokenRecord | None,
        *,
        types: list[str] | None = None,
        reference_id: str | None = None,
    ) -> Response:
        """``GET /api/v2/events`` (also by project and by stack): ``filter``, ``sort``, ``page``
        and ``limit`` (at most 100), or the cursors ``after``/``before`` (an event id).

        As on the service, a request with ``page`` gets page links (none once the next page
        would skip 1,000 rows); one without gets cursor links, ``previous`` with
        ``before=<id>`` and ``next`` with ``after=<id>``, which reach every event."""
        assert token is not None
        query = EventQuery(organization_id=token.organization_id)
        if "project_id" in request.params:
            query.scope_project_id = project_in_scope(
                self.storage, token, request.params["project_id"]
            )
        else:
            query.scope_project_id = token.project_id
        if "stack_id" in request.params:
            stack = self.storage.get_stack(request.params["stack_id"])
            if stack is None or stack["organization_id"] != token.organization_id:
                raise HttpError(404, "No such stack.")
            query.stack_ids.append(stack["id"])
        page = int_arg(request, "page", 1)
        limit = int_arg(request, "limit", 10, 100)
        query.ascending = parse_sort(request.arg("sort"))
        parse_filter(request.arg("filter") or "", query)
        if types is not None:
            query.types = list(types)
        if reference_id is not None:
            query.reference_ids = [reference_id]
        query.limit = limit
        after, before = request.arg("after"), request.arg("before")
        if after or before:
            return self._cursor_page(request, query, after, before)
        if not (request.arg("page") or "").strip():
            return self._first_cursor_page(request, query)
        skip = (page - 1) * limit
        if skip > MAXIMUM_SKIP:
            return json_response(200, [])
        query.offset = skip
        events, total = self.storage.query_events(query)
        has_more = skip + len(events) < total
        return json_response(200, events, paging_headers(request, page, limit, total, has_more))

    def _first_cursor_page(self, request: Request, query: EventQuery) -> Response:
        """The first page of a cursor listing: no ``previous`` link, a ``next`` link (after its
        last event) while more follow."""
        limit = query.limit
        query.limit = limit + 1
        events, total = self.storage.query_events(query)
        more = len(events) > limit
        events = events[:limit]
        following = events[-1]["id"] if more and events else None
        headers = cursor_headers(request, limit, None, following)
        headers["X-Result-Count"] = str(total)
        return json_response(200, events, headers)

    def _cursor_page(
        self, request: Request, query: EventQuery, after: str | None, before: str | None
    ) -> Response:
        if after:
            found = self.storage.events_after(query, after)
        else:
            assert before is not None
            query.ascending = not query.ascending
            found = self.storage.events_after(query, before)
            if found is not None:
                found = (found[0][::-1], found[1])
        if found is None:
            raise HttpError(
                400, "The cursor is not a known event id.", errors={"after": ["Unknown id."]}
            )
        events, more = found
        following = preceding = None
        if events:
            if after:
                following = events[-1]["id"] if more else None
                preceding = events[0]["id"]
            else:
                following = events[-1]["id"]
                preceding = events[0]["id"] if more else None
        headers = cursor_headers(request, query.limit, preceding, following)
        headers["X-Result-Count"] = str(self.storage.count_events(query))
        return json_response(200, events, headers)

    def get_event(self, request: Request, token: TokenRecord | None) -> Response:
        """``GET /api/v2/events/{id}``: the stored event, or 404."""
        assert token is not None
        event = self.storage.get_event(request.params["event_id"])
        if (
            event is None
            or event.get("organization_id") != token.organization_id
            or (token.project_id is not None and event.get("project_id") != token.project_id)
        ):
            raise HttpError(404, "No such event.")
        return json_response(200, event)

    def get_by_reference(self, request: Request, token: TokenRecord | None) -> Response:
        """``GET /api/v2/events/by-ref/{reference_id}``: as on the service, a list (paged like
        ``GET /api/v2/events``) of the stored events with that reference id in the token's
        organization (and project); ``[]`` when there is none. A malformed id matches no
        route (404)."""
        reference_id = request.params["reference_id"]
        if not is_valid_reference_id(reference_id):
            raise HttpError(404, f"No resource at {request.path[:200]}.")
        return self.list_events(request, token, reference_id=reference_id)

    # -- stacks ------------------------------------------------------------------------------

    def _stack(self, request: Request, token: TokenRecord) -> dict[str, Any]:
        stack = self.storage.get_stack(request.params["stack_id"])
        if (
            stack is None
            or stack["organization_id"] != token.organization_id
            or (token.project_id is not None and stack["project_id"] != token.project_id)
        ):
            raise HttpError(404, "No such stack.")
        return stack

    @staticmethod
    def _public(stack: dict[str, Any]) -> dict[str, Any]:
        return {key: value for key, value in stack.items() if key not in ("first_ts", "last_ts")}

    def get_stack(self, request: Request, token: TokenRecord | None) -> Response:
        """``GET /api/v2/stacks/{id}``."""
        assert token is not None
        return json_response(200, self._public(self._stack(request, token)))

    def change_status(self, request: Request, token: TokenRecord | None) -> Response:
        """``POST /api/v2/stacks/{id}/change-status?status=open|fixed|regressed|ignored``."""
        assert token is not None
        stack = self._stack(request, token)
        status = (request.arg("status") or "").strip().lower()
        try:
            self.storage.set_stack_status(stack["id"], status)
        except ValueError as exc:
            raise HttpError(400, str(exc), errors={"status": [str(exc)]}) from None
        return empty_response(200)

    def mark_fixed(self, request: Request, token: TokenRecord | None) -> Response:
        """``POST /api/v2/stacks/{id}/mark-fixed`` (fixed) and ``DELETE`` (open again)."""
        assert token is not None
        stack = self._stack(request, token)
        status = "open" if request.method == "DELETE" else "fixed"
        self.storage.set_stack_status(stack["id"], status)
        return empty_response(200)
