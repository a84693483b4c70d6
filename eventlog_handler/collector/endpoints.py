"""The collector's routes: the service's API v2 and the dashboard pages.

:class:`Api` matches a :class:`~eventlog_handler.collector.messages.Request` to a route, checks
the bearer token (401 unknown/disabled/expired, 403 missing scope), applies the throttle (429)
and calls the endpoint. Endpoints raise :class:`HttpError` for every refusal, so each answer
that is not a success carries an RFC 7807 problem body.

Besides the service's headers, a 202 for posted events carries two of the collector's own,
``X-Events-Stored`` and ``X-Events-Discarded`` (expired or duplicate reference ids), which
make tests and debugging easier; clients must not rely on them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from eventlog_handler.collector import dashboard
from eventlog_handler.collector.filters import EventQuery, parse_filter, parse_sort
from eventlog_handler.collector.formats import DateFormatError, parse_date, utc_now
from eventlog_handler.collector.ingest import decode_body, normalize_events, parse_events
from eventlog_handler.collector.messages import (
    Request,
    Response,
    empty_response,
    json_response,
    problem_response,
)
from eventlog_handler.collector.problems import HttpError
from eventlog_handler.collector.storage import Storage, TokenRecord
from eventlog_handler.collector.throttle import Throttle

__all__ = ["DECOMPRESSION_FACTOR", "DEFAULT_MAX_BODY_BYTES", "Api"]

DEFAULT_MAX_BODY_BYTES = 200_000
DECOMPRESSION_FACTOR = 10
_TOKEN_SCOPES = ("client", "user", "global")
_REFERENCE_RE = re.compile(r"^[A-Za-z0-9-]{8,100}$")
_DIGITS_RE = re.compile(r"^[0-9]{1,18}$")
_MAX_PAGE = 1_000_000

Endpoint = Callable[[Request, "TokenRecord | None"], Response]


@dataclass(frozen=True)
class Route:
    """One method and path pattern, the endpoint answering it and the scope it needs."""

    method: str
    pattern: re.Pattern[str]
    endpoint: Endpoint
    scope: str | None


def _media_type(request: Request) -> str:
    return (request.headers.get("Content-Type") or "").split(";")[0].strip().lower()


class Api:
    """Routing, authentication, throttling and the endpoints, over a :class:`Storage`."""

    def __init__(
        self,
        storage: Storage,
        *,
        throttle: Throttle,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        on_events: Callable[[], None] | None = None,
    ) -> None:
        self.storage = storage
        self.throttle = throttle
        self.max_body_bytes = max_body_bytes
        self._on_events = on_events
        oid = r"[^/]+"
        table: list[tuple[str, str, Endpoint, str | None]] = [
            ("GET", r"/", self.dashboard_index, None),
            ("GET", r"/events/(?P<event_id>[0-9a-f]{24})", self.dashboard_event, None),
            ("GET", r"/api/v2/events/session/heartbeat", self.heartbeat, "client"),
            (
                "POST",
                rf"/api/v2/events/by-ref/(?P<reference_id>{oid})/user-description",
                self.user_description,
                "client",
            ),
            ("POST", r"/api/v2/events", self.post_events, "client"),
            ("GET", r"/api/v2/events", self.list_events, "client"),
            ("GET", rf"/api/v2/events/(?P<event_id>{oid})", self.get_event, "client"),
            ("GET", r"/api/v2/projects", self.list_projects, "user"),
            ("GET", r"/api/v2/projects/config", self.get_config, "client"),
            ("POST", rf"/api/v2/projects/(?P<project_id>{oid})/events", self.post_events, "client"),
            ("GET", rf"/api/v2/projects/(?P<project_id>{oid})/events", self.list_events, "client"),
            ("GET", rf"/api/v2/projects/(?P<project_id>{oid})/config", self.get_config, "client"),
            ("POST", rf"/api/v2/projects/(?P<project_id>{oid})/tokens", self.create_token, "user"),
            ("GET", rf"/api/v2/projects/(?P<project_id>{oid})", self.get_project, "user"),
            ("GET", rf"/api/v2/tokens/(?P<token_id>{oid})", self.get_token, "user"),
        ]
        self.routes = [
            Route(method, re.compile(f"^{path}$"), endpoint, scope)
            for method, path, endpoint, scope in table
        ]

    # -- dispatch ----------------------------------------------------------------------------

    def handle(self, request: Request) -> Response:
        """Answer one request; never raises :class:`HttpError`."""
        try:
            return self._dispatch(request)
        except HttpError as error:
            return problem_response(error, request.path)

    def _dispatch(self, request: Request) -> Response:
        path = request.path.rstrip("/") or "/"
        method = "GET" if request.method == "HEAD" else request.method
        allowed: list[str] = []
        for route in self.routes:
            match = route.pattern.match(path)
            if match is None:
                continue
            if route.method != method:
                allowed.append(route.method)
                continue
            request.params = {k: v for k, v in match.groupdict().items() if v is not None}
            return self._call(route, request)
        if allowed:
            methods = sorted(set(allowed) | ({"HEAD"} if "GET" in allowed else set()))
            raise HttpError(
                405,
                f"{request.method} is not allowed here; use {', '.join(methods)}.",
                headers={"Allow": ", ".join(methods)},
            )
        raise HttpError(404, f"No resource at {request.path[:200]}.")

    def _authenticate(self, request: Request) -> TokenRecord:
        header = request.headers.get("Authorization") or ""
        scheme, _, value = header.strip().partition(" ")
        key = value.strip() if scheme.lower() == "bearer" else ""
        if not key:
            key = request.arg("access_token") or ""
        challenge = {"WWW-Authenticate": 'Bearer realm="eventlog collector"'}
        if not key:
            raise HttpError(401, "Send 'Authorization: Bearer <token>'.", headers=challenge)
        token = self.storage.get_token(key)
        if token is None or not token.is_usable(utc_now().timestamp()):
            raise HttpError(401, "The token is unknown, disabled or expired.", headers=challenge)
        return token

    def _call(self, route: Route, request: Request) -> Response:
        if route.scope is None:
            return route.endpoint(request, None)
        token = self._authenticate(request)
        if not token.has_scope(route.scope):
            raise HttpError(403, f"This token lacks the '{route.scope}' scope.")
        verdict = self.throttle.hit(token.organization_id)
        if not verdict.allowed:
            raise HttpError(
                429, f"More than {verdict.limit} requests in 15 minutes for this organization."
            )
        rate_headers = {
            "X-RateLimit-Limit": str(verdict.limit),
            "X-RateLimit-Remaining": str(verdict.remaining),
        }
        try:
            response = route.endpoint(request, token)
        except HttpError as error:
            response = problem_response(error, request.path)
        response.headers.update(rate_headers)
        if response.status in (200, 202, 304) and token.project_id is not None:
            try:
                version, _ = self.storage.project_config(token.project_id)
            except KeyError:
                pass
            else:
                response.headers["X-Exceptionless-ConfigVersion"] = str(version)
        return response

    # -- helpers -----------------------------------------------------------------------------

    def _project_in_scope(self, token: TokenRecord, project_id: str) -> str:
        """``project_id`` if the token may act on it, else 404 (as the service answers)."""
        if token.project_id is not None and token.project_id != project_id:
            raise HttpError(404, "This token belongs to another project.")
        project = self.storage.get_project(project_id)
        if project is None or project["organization_id"] != token.organization_id:
            raise HttpError(404, f"No project {project_id[:40]!r}.")
        return project_id

    def _token_project(self, request: Request, token: TokenRecord) -> str:
        """The project a request acts on: from the path, else the token's own (400 if none)."""
        path_project = request.params.get("project_id")
        if path_project is not None:
            return self._project_in_scope(token, path_project)
        if token.project_id is None:
            raise HttpError(
                400,
                "This token is not bound to a project: use a project token (API key).",
            )
        return token.project_id

    def _content_length(self, request: Request) -> int | None:
        """The body's declared length, None when there is none; 400/411/413 when unusable."""
        if request.headers.get("Transfer-Encoding"):
            raise HttpError(411, "Send a Content-Length; chunked bodies are not accepted.")
        values = request.headers.get_all("Content-Length") or []
        if not values:
            return None
        if len(set(values)) > 1 or not _DIGITS_RE.match(values[0].strip()):
            raise HttpError(400, "The Content-Length header is invalid.")
        length = int(values[0].strip())
        if length > self.max_body_bytes:
            raise HttpError(413, f"The request body is larger than {self.max_body_bytes} bytes.")
        return length

    def _read_json_body(self, request: Request, *, required: bool) -> bytes | None:
        """Check the headers, then read and decode the body (None if absent and optional)."""
        length = self._content_length(request)
        if not length:
            if required:
                raise HttpError(411, "A request body with a Content-Length is required.")
            return None
        if _media_type(request) != "application/json":
            raise HttpError(415, "Send the body as 'Content-Type: application/json'.")
        raw = request.read_body(length)
        return decode_body(
            raw,
            request.headers.get("Content-Encoding"),
            self.max_body_bytes * DECOMPRESSION_FACTOR,
        )

    @staticmethod
    def _int_arg(request: Request, name: str, default: int, maximum: int | None = None) -> int:
        raw = request.arg(name)
        if raw is None or raw.strip() == "":
            return default
        if not _DIGITS_RE.match(raw.strip()):
            raise HttpError(
                400,
                f"'{name}' must be a positive integer.",
                errors={name: ["Must be a positive integer."]},
            )
        value = int(raw.strip())
        if value < 1:
            return default
        return min(value, maximum) if maximum is not None else value

    @staticmethod
    def _paging_headers(request: Request, page: int, limit: int, total: int) -> dict[str, str]:
        def url(target: int) -> str:
            pairs = [
                (key, value)
                for key, values in request.query.items()
                if key not in ("page", "limit", "access_token")
                for value in values
            ]
            pairs += [("page", str(target)), ("limit", str(limit))]
            return f"{request.base_url}{request.path}?{urlencode(pairs)}"

        links = []
        if page > 1:
            links.append(f'<{url(page - 1)}>; rel="previous"')
        if page * limit < total:
            links.append(f'<{url(page + 1)}>; rel="next"')
        headers = {"X-Result-Count": str(total)}
        if links:
            headers["Link"] = ", ".join(links)
        return headers

    # -- events ------------------------------------------------------------------------------

    def post_events(self, request: Request, token: TokenRecord | None) -> Response:
        """``POST /api/v2/events`` and ``/api/v2/projects/{id}/events``: 202 when accepted."""
        assert token is not None
        project_id = self._token_project(request, token)
        if _media_type(request) != "application/json":
            raise HttpError(415, "Send events as 'Content-Type: application/json'.")
        body = self._read_json_body(request, required=True)
        assert body is not None
        items = parse_events(body)
        outcome = normalize_events(items, utc_now())
        ids, duplicates = self.storage.insert_events(
            token.organization_id, project_id, outcome.events
        )
        if ids and self._on_events is not None:
            self._on_events()
        response = empty_response(202)
        response.headers["X-Events-Stored"] = str(len(ids))
        response.headers["X-Events-Discarded"] = str(outcome.expired + duplicates)
        return response

    def list_events(self, request: Request, token: TokenRecord | None) -> Response:
        """``GET /api/v2/events``: ``filter``, ``sort``, ``page``, ``limit`` (≤ 100)."""
        assert token is not None
        query = EventQuery(organization_id=token.organization_id)
        if "project_id" in request.params:
            query.scope_project_id = self._project_in_scope(token, request.params["project_id"])
        else:
            query.scope_project_id = token.project_id
        page = self._int_arg(request, "page", 1, _MAX_PAGE)
        limit = self._int_arg(request, "limit", 10, 100)
        query.ascending = parse_sort(request.arg("sort"))
        query.offset, query.limit = (page - 1) * limit, limit
        parse_filter(request.arg("filter") or "", query)
        events, total = self.storage.query_events(query)
        return json_response(200, events, self._paging_headers(request, page, limit, total))

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

    def heartbeat(self, request: Request, token: TokenRecord | None) -> Response:
        """``GET /api/v2/events/session/heartbeat?id=...&close=...``: 200."""
        return empty_response(200)

    def user_description(self, request: Request, token: TokenRecord | None) -> Response:
        """``POST /api/v2/events/by-ref/{reference_id}/user-description``: 202.

        The description is attached to the project's event with that reference id as
        ``data["@user_description"]`` if the event is stored; otherwise it is dropped.
        """
        assert token is not None
        project_id = self._token_project(request, token)
        reference_id = request.params["reference_id"]
        if not _REFERENCE_RE.match(reference_id):
            raise HttpError(400, "Invalid reference id.")
        body = self._read_json_body(request, required=True)
        assert body is not None
        try:
            value = json.loads(body.decode("utf-8-sig"))
        except (ValueError, RecursionError) as exc:
            raise HttpError(400, f"The request body is not valid JSON: {str(exc)[:200]}.") from None
        if not isinstance(value, dict):
            raise HttpError(400, "The user description must be a JSON object.")
        description = {
            key: value[key] for key in ("email_address", "description", "data") if key in value
        }
        self.storage.add_user_description(project_id, reference_id, description)
        return empty_response(202)

    # -- projects and tokens -----------------------------------------------------------------

    def list_projects(self, request: Request, token: TokenRecord | None) -> Response:
        """``GET /api/v2/projects``: ``page`` (from 1), ``limit`` (default 10, at most 1000)."""
        assert token is not None
        page = self._int_arg(request, "page", 1, _MAX_PAGE)
        limit = self._int_arg(request, "limit", 10, 1000)
        projects, total = self.storage.list_projects(
            token.organization_id, (page - 1) * limit, limit
        )
        return json_response(200, projects, self._paging_headers(request, page, limit, total))

    def get_project(self, request: Request, token: TokenRecord | None) -> Response:
        """``GET /api/v2/projects/{id}``."""
        assert token is not None
        project_id = self._project_in_scope(token, request.params["project_id"])
        return json_response(200, self.storage.get_project(project_id))

    def get_config(self, request: Request, token: TokenRecord | None) -> Response:
        """``GET /api/v2/projects/config?v=N``: the settings, or 304 when ``v`` is current."""
        assert token is not None
        project_id = self._token_project(request, token)
        version, settings = self.storage.project_config(project_id)
        current = (request.arg("v") or "").strip()
        if _DIGITS_RE.match(current) and int(current) == version:
            return empty_response(304)
        return json_response(200, {"version": version, "settings": settings})

    def create_token(self, request: Request, token: TokenRecord | None) -> Response:
        """``POST /api/v2/projects/{id}/tokens``: 201 with the token and a ``Location``."""
        assert token is not None
        project_id = self._project_in_scope(token, request.params["project_id"])
        raw = self._read_json_body(request, required=False)
        body: Any = {}
        if raw is not None and raw.strip():
            try:
                body = json.loads(raw.decode("utf-8-sig"))
            except (ValueError, RecursionError) as exc:
                raise HttpError(
                    400, f"The request body is not valid JSON: {str(exc)[:200]}."
                ) from None
        if not isinstance(body, dict):
            raise HttpError(400, "The request body must be a JSON object.")
        errors: dict[str, list[str]] = {}
        scopes = self._scopes(body.get("scopes"), errors)
        notes = body.get("notes")
        if notes is not None and not isinstance(notes, str):
            errors["notes"] = ["'notes' must be a string."]
        expires: datetime | None = None
        raw_expires = body.get("expires_utc")
        if raw_expires is not None:
            try:
                if not isinstance(raw_expires, str):
                    raise DateFormatError("not a string")
                expires = parse_date(raw_expires)
                expires.timestamp()
            except (DateFormatError, OverflowError, ValueError):
                errors["expires_utc"] = ["'expires_utc' must be an ISO 8601 date-time."]
        if errors:
            raise HttpError(
                422,
                "The token request is invalid.",
                errors=errors,
                title="One or more validation errors occurred.",
            )
        created = self.storage.create_token(
            token.organization_id, project_id, scopes, notes, expires
        )
        location = f"{request.base_url}/api/v2/tokens/{created['id']}"
        return json_response(201, created, {"Location": location})

    @staticmethod
    def _scopes(raw: Any, errors: dict[str, list[str]]) -> list[str]:
        if raw is None:
            raw = []
        if not isinstance(raw, list) or not all(isinstance(scope, str) for scope in raw):
            errors["scopes"] = ["'scopes' must be an array of strings."]
            return []
        scopes: list[str] = []
        for scope in (item.strip().lower() for item in raw):
            if scope not in _TOKEN_SCOPES:
                errors.setdefault("scopes", []).append(
                    f"Invalid scope {scope[:40]!r}: use client, user or global."
                )
            elif scope not in scopes:
                scopes.append(scope)
        if not scopes:
            scopes = ["client"]
        if "global" in scopes and "user" not in scopes:
            scopes.append("user")
        if "user" in scopes and "client" not in scopes:
            scopes.append("client")
        return scopes

    def get_token(self, request: Request, token: TokenRecord | None) -> Response:
        """``GET /api/v2/tokens/{id}`` (the ``Location`` of a created token)."""
        assert token is not None
        found = self.storage.get_token_resource(request.params["token_id"])
        if found is None or found["organization_id"] != token.organization_id:
            raise HttpError(404, "No such token.")
        return json_response(200, found)

    # -- dashboard ---------------------------------------------------------------------------

    def dashboard_index(self, request: Request, token: TokenRecord | None) -> Response:
        """``GET /``: the latest events, filterable."""
        return dashboard.index_page(self.storage, request.query)

    def dashboard_event(self, request: Request, token: TokenRecord | None) -> Response:
        """``GET /events/{id}``: one event in full."""
        return dashboard.event_page(self.storage, request.params["event_id"])
