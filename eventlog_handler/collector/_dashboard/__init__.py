"""The collector's dashboard: stacks, their events, search, one event in full, project settings.

=====================================  ====================================================
``GET /``                              the stacks (open ones first), filters, sparklines
``GET /stacks/{id}``                   one stack: status buttons, counts, its events
``POST /stacks/{id}/status``           set a stack's status (open, fixed, ignored)
``GET /events``                        every event, newest first, searchable, cursor pages
``GET /events/{id}``                   one event, each known data key in its own block
``GET /events/{id}/json``              the event's raw JSON
``GET /sessions``                      the sessions: user, start, duration, heartbeats, end
``GET /projects/{id}/settings``        a project's settings; ``POST`` changes them
``GET /about``                         how to connect; where the collector differs
=====================================  ====================================================

Forms carry a token (kept in the database, so it survives restarts) and are refused without
it or when the browser says they come from another site, so a web page elsewhere cannot change
anything here.
"""

from __future__ import annotations

import hmac
import json
import secrets
import time
from collections.abc import Mapping
from urllib.parse import parse_qs

from eventlog_handler.collector._accounts import TokenRecord
from eventlog_handler.collector._dashboard._about import about_body
from eventlog_handler.collector._dashboard._event_detail import event_body
from eventlog_handler.collector._dashboard._events import (
    DEFAULT_ROWS,
    MAX_ROWS,
    event_query,
    event_summary,
    events_body,
)
from eventlog_handler.collector._dashboard._layout import (
    Page,
    clip,
    first,
    int_param,
    not_found,
    page,
    redirect,
)
from eventlog_handler.collector._dashboard._sessions import sessions_body
from eventlog_handler.collector._dashboard._settings import settings_body
from eventlog_handler.collector._dashboard._sparkline import WINDOWS
from eventlog_handler.collector._dashboard._stacks import (
    spark_start,
    stack_body,
    stacks_body,
)
from eventlog_handler.collector._events_api import EventsApi
from eventlog_handler.collector._eventstore import STACK_STATUSES
from eventlog_handler.collector._filters import EventQuery, parse_filter
from eventlog_handler.collector._messages import Request, Response, json_response
from eventlog_handler.collector._problems import HttpError
from eventlog_handler.collector._sessions import SESSION_START
from eventlog_handler.collector._storage import StackQuery, Storage

__all__ = ["DEFAULT_REFRESH", "Dashboard"]

DEFAULT_REFRESH = 5
_FORM_LIMIT = 64 * 1024
_STACK_ROWS = 50


def _refresh(query: Mapping[str, list[str]], paged: bool) -> int:
    default = 0 if paged else DEFAULT_REFRESH
    return int_param(query, "refresh", default, 3600)


#: Which stacks the list shows: errors, logs (every other type) or all (errors first, apart).
KINDS = ("errors", "logs", "all")
KIND_COOKIE = "eventlog_stacks"


def _cookie(request: Request, name: str) -> str:
    """A cookie's value from the request, or ``""``."""
    for header in request.headers.get_all("Cookie") or []:
        for pair in str(header).split(";"):
            key, _, value = pair.strip().partition("=")
            if key == name:
                return value.strip()
    return ""


class Dashboard:
    """The pages, over a :class:`Storage` (and the events endpoints' recent notes)."""

    def __init__(self, storage: Storage, events_api: EventsApi) -> None:
        self.storage = storage
        self.events_api = events_api
        self._form_token: str | None = None

    @property
    def form_token(self) -> str:
        """The token the dashboard's forms carry."""
        if self._form_token is None:
            self._form_token = self.storage.ensure_meta_value(
                "dashboard_form_token", lambda: secrets.token_urlsafe(24)
            )
        return self._form_token

    def _projects(self) -> list[tuple[str, str]]:
        return list(self.storage.project_names().items())

    def _notes(self) -> list[str]:
        names = self.storage.project_names()
        return [
            f"{time.strftime('%H:%M:%S', time.gmtime(note.time))} UTC, "
            f"{names.get(note.project_id, note.project_id)}: {note.text}"
            for note in self.events_api.notes
        ]

    # -- forms -------------------------------------------------------------------------------

    def _form(self, request: Request) -> dict[str, str]:
        """The posted form, after checking it comes from a page of this collector."""
        site = (request.headers.get("Sec-Fetch-Site") or "").lower()
        if site and site not in ("same-origin", "none"):
            raise HttpError(403, "Forms are only accepted from the collector's own pages.")
        origin = (request.headers.get("Origin") or "").strip()
        host = (request.headers.get("Host") or "").strip()
        if origin and origin != "null" and host and origin.split("://", 1)[-1] != host:
            raise HttpError(403, "Forms are only accepted from the collector's own pages.")
        length_text = (request.headers.get("Content-Length") or "0").strip()
        length = int(length_text) if length_text.isdigit() else -1
        if length < 0 or length > _FORM_LIMIT:
            raise HttpError(413 if length > 0 else 411, "The form is too large or has no length.")
        raw = request.read_body(length) if length else b""
        fields = {
            key: values[0]
            for key, values in parse_qs(raw.decode("utf-8", "replace")).items()
            if values
        }
        if not hmac.compare_digest(fields.get("token", ""), self.form_token):
            raise HttpError(403, "The form has expired; reload the page and try again.")
        return fields

    # -- stacks ------------------------------------------------------------------------------

    def stacks_page(self, request: Request, token: TokenRecord | None) -> Response:
        """``GET /``: the stacks."""
        query = request.query
        status, project, event_type, sort, text = (
            first(query, name) for name in ("status", "project", "type", "sort", "q")
        )
        statuses: tuple[str, ...] = ("open", "regressed")
        if status in STACK_STATUSES:
            statuses = (status,)
        elif status == "all":
            statuses = ()
        chosen = first(query, "kind")
        remembered = _cookie(request, KIND_COOKIE)
        kind = chosen if chosen in KINDS else remembered if remembered in KINDS else "all"
        selection = StackQuery(
            project_ids=[project] if project else [],
            types=[event_type] if event_type else ["error"] if kind == "errors" else [],
            exclude_types=["error"] if kind == "logs" else [],
            statuses=list(statuses),
            sort=sort or "recent",
            limit=_STACK_ROWS,
        )
        if text:
            selection.event_query = parse_filter(text, EventQuery())
        after = first(query, "after") or None
        stacks, following, total = self.storage.page_stacks(selection, after=after)
        spark_name = first(query, "spark") or "24h"
        label, seconds, bars = WINDOWS.get(spark_name, WINDOWS["24h"])
        start = spark_start(seconds, bars)
        occurrences = self.storage.occurrences(
            [stack["id"] for stack in stacks], start, seconds, bars
        )
        counts = self.storage.stack_counts([project] if project else [])
        body = stacks_body(
            stacks,
            following,
            total,
            counts,
            occurrences,
            (start, seconds, label),
            query,
            self._projects(),
            self.storage.distinct_types(),
            self._notes(),
            kind,
        )
        response = page(Page("Stacks", body, here="/", refresh=_refresh(query, bool(after))))
        if chosen in KINDS and chosen != remembered:  # the user's choice, kept for next time
            response.headers["Set-Cookie"] = (
                f"{KIND_COOKIE}={chosen}; Path=/; Max-Age=31536000; SameSite=Lax; HttpOnly"
            )
        return response

    def stack_page(self, request: Request, token: TokenRecord | None) -> Response:
        """``GET /stacks/{id}``: one stack and its events."""
        stack = self.storage.get_stack(request.params["stack_id"])
        if stack is None:
            return not_found("No such stack")
        query = request.query
        limit = int_param(query, "limit", DEFAULT_ROWS, MAX_ROWS) or DEFAULT_ROWS
        selection = EventQuery(limit=limit, stack_ids=[stack["id"]])
        older, newer = first(query, "older") or None, first(query, "newer") or None
        result = self.storage.page_events(selection, older_than=older, newer_than=newer)
        sparks = []
        for name in ("1h", "24h"):
            label, seconds, bars = WINDOWS[name]
            start = spark_start(seconds, bars)
            counts = self.storage.occurrences([stack["id"]], start, seconds, bars)[stack["id"]]
            sparks.append((label, counts, start, seconds))
        project = self.storage.get_project(stack["project_id"]) or {}
        params = {"limit": str(limit)} if limit != DEFAULT_ROWS else {}
        body = stack_body(
            stack, str(project.get("name", "")), result, sparks, self.form_token, params
        )
        refresh = _refresh(query, bool(older or newer))
        return page(Page(str(stack["title"]), body, here="/", refresh=refresh))

    def set_status(self, request: Request, token: TokenRecord | None) -> Response:
        """``POST /stacks/{id}/status``: set the status, then back to the stack."""
        fields = self._form(request)
        stack_id = request.params["stack_id"]
        try:
            self.storage.set_stack_status(stack_id, fields.get("status", ""))
        except KeyError:
            return not_found("No such stack")
        except ValueError as exc:
            raise HttpError(400, str(exc)) from None
        return redirect(f"/stacks/{stack_id}")

    # -- events ------------------------------------------------------------------------------

    def events_page(self, request: Request, token: TokenRecord | None) -> Response:
        """``GET /events``: every event, newest first, searchable, paged by cursor."""
        query = request.query
        limit = int_param(query, "limit", DEFAULT_ROWS, MAX_ROWS) or DEFAULT_ROWS
        selection = event_query(query, limit)
        older, newer = first(query, "older") or None, first(query, "newer") or None
        result = self.storage.page_events(selection, older_than=older, newer_than=newer)
        body = events_body(result, query, self._projects(), self.storage.distinct_types())
        refresh = _refresh(query, bool(older or newer))
        return page(Page("Events", body, here="/events", refresh=refresh))

    def sessions_page(self, request: Request, token: TokenRecord | None) -> Response:
        """``GET /sessions``: the sessions (their start events), newest first, paged by
        cursor."""
        query = request.query
        limit = int_param(query, "limit", DEFAULT_ROWS, MAX_ROWS) or DEFAULT_ROWS
        selection = event_query(query, limit)
        selection.types = [SESSION_START]
        selection.levels = []
        older, newer = first(query, "older") or None, first(query, "newer") or None
        result = self.storage.page_events(selection, older_than=older, newer_than=newer)
        body = sessions_body(result, query, self._projects())
        refresh = _refresh(query, bool(older or newer))
        return page(Page("Sessions", body, here="/sessions", refresh=refresh))

    def event_page(self, request: Request, token: TokenRecord | None) -> Response:
        """``GET /events/{id}``: one event in full."""
        event = self.storage.get_event(request.params["event_id"])
        if event is None:
            return not_found("No such event", "/events", "Back to the events")
        project = self.storage.get_project(str(event.get("project_id"))) or {}
        stack = self.storage.get_stack(str(event.get("stack_id")))
        body = event_body(
            event,
            str(project.get("name", "")),
            stack,
            self.storage.neighbours(str(event["id"])),
            self.storage.event_note(str(event["id"])),
        )
        return page(Page(clip(event_summary(event), 80), body, here="/events"))

    def event_json(self, request: Request, token: TokenRecord | None) -> Response:
        """``GET /events/{id}/json``: the stored document, indented."""
        event = self.storage.get_event(request.params["event_id"])
        if event is None:
            return not_found("No such event", "/events", "Back to the events")
        response = json_response(200, event)
        response.body = json.dumps(event, ensure_ascii=True, indent=2, default=str).encode()
        response.headers.update(
            {
                "Content-Security-Policy": "default-src 'none'; frame-ancestors 'none'",
                "Cache-Control": "no-store",
            }
        )
        return response

    # -- settings ----------------------------------------------------------------------------

    def settings_page(self, request: Request, token: TokenRecord | None) -> Response:
        """``GET /projects/{id}/settings``."""
        project = self.storage.get_project(request.params["project_id"])
        if project is None:
            return not_found("No such project")
        version, settings = self.storage.project_config(str(project["id"]))
        message = first(request.query, "saved")
        notice = {"set": "Saved.", "deleted": "Deleted."}.get(message, "")
        body = settings_body(project, self._projects(), version, settings, self.form_token, notice)
        return page(Page(f"Settings of {project['name']}", body, here="/settings"))

    def save_setting(self, request: Request, token: TokenRecord | None) -> Response:
        """``POST /projects/{id}/settings``: ``action=set`` with ``key`` and ``value``, or
        ``action=delete`` with ``key``."""
        fields = self._form(request)
        project_id = request.params["project_id"]
        if self.storage.get_project(project_id) is None:
            return not_found("No such project")
        key = fields.get("key", "").strip()
        if not key or len(key) > 200:
            raise HttpError(400, "A setting needs a key of at most 200 characters.")
        if fields.get("action") == "delete":
            self.storage.set_project_setting(project_id, key, None)
            return redirect(f"/projects/{project_id}/settings?saved=deleted")
        value = fields.get("value", "").strip()
        if not value or len(value) > 10_000:
            raise HttpError(400, "A setting needs a value of at most 10,000 characters.")
        self.storage.set_project_setting(project_id, key, value)
        return redirect(f"/projects/{project_id}/settings?saved=set")

    def settings_home(self, request: Request, token: TokenRecord | None) -> Response:
        """``GET /settings``: the first project's settings."""
        projects = self._projects()
        if not projects:
            return not_found("No projects")
        return redirect(f"/projects/{projects[0][0]}/settings")

    # -- about -------------------------------------------------------------------------------

    def about_page(self, request: Request, token: TokenRecord | None) -> Response:
        """``GET /about``."""
        body = about_body(request.base_url, self._notes())
        return page(Page("About", body, here="/about"))
