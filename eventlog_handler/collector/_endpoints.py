"""The collector's routes: the service's API v2 and the dashboard pages.

:class:`Api` matches a :class:`~eventlog_handler.collector._messages.Request` to a route, finds
who sent it (:mod:`~eventlog_handler.collector._auth`: 401 for unknown, disabled or expired
credentials, 403 for a missing scope), applies the throttle (429; never to heartbeats and
configuration reads, as on the service) and calls the endpoint. Endpoints raise
:class:`HttpError` for every refusal, so each answer that is not a success carries an RFC 7807
problem body.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass

from eventlog_handler.collector._accounts import TokenRecord
from eventlog_handler.collector._auth import Credentials, read_credentials
from eventlog_handler.collector._dashboard import Dashboard
from eventlog_handler.collector._events_api import EventsApi
from eventlog_handler.collector._formats import utc_now
from eventlog_handler.collector._http_helpers import DECOMPRESSION_FACTOR
from eventlog_handler.collector._messages import Request, Response, problem_response
from eventlog_handler.collector._problems import HttpError
from eventlog_handler.collector._projects_api import ProjectsApi, check_guard
from eventlog_handler.collector._storage import Storage
from eventlog_handler.collector._throttle import LoginGuard, Throttle

__all__ = ["DECOMPRESSION_FACTOR", "DEFAULT_MAX_BODY_BYTES", "Api", "Route"]

DEFAULT_MAX_BODY_BYTES = 200_000
_BASIC_CACHE = 64

Endpoint = Callable[[Request, "TokenRecord | None"], Response]


@dataclass(frozen=True)
class Route:
    """One method and path pattern, the endpoint answering it, the scope it needs (None: no
    credentials), whether the throttle counts it and whether it reads what was posted (it then
    first waits for the posts answered before it to be stored)."""

    method: str
    pattern: re.Pattern[str]
    endpoint: Endpoint
    scope: str | None
    throttled: bool = True
    reads: bool = True


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
        self.events = EventsApi(storage, max_body_bytes=max_body_bytes, on_events=on_events)
        self.guard = LoginGuard()
        self.projects = ProjectsApi(storage, max_body_bytes=max_body_bytes, guard=self.guard)
        self.dashboard = Dashboard(storage, self.events)
        self._basic_logins: dict[tuple[str, str], TokenRecord] = {}
        self._basic_lock = threading.Lock()
        self.routes: list[Route] = []
        oid = r"[^/]+"
        add = self._add
        events, projects, pages = self.events, self.projects, self.dashboard
        # The dashboard (no credentials; the Host check and form tokens protect it).
        add("GET", r"/", pages.stacks_page)
        add("GET", rf"/stacks/(?P<stack_id>{oid})", pages.stack_page)
        add("POST", rf"/stacks/(?P<stack_id>{oid})/status", pages.set_status)
        add("GET", r"/events", pages.events_page)
        add("GET", rf"/events/(?P<event_id>{oid})/json", pages.event_json)
        add("GET", rf"/events/(?P<event_id>{oid})", pages.event_page)
        add("GET", r"/sessions", pages.sessions_page)
        add("GET", rf"/projects/(?P<project_id>{oid})/settings", pages.settings_page)
        add("POST", rf"/projects/(?P<project_id>{oid})/settings", pages.save_setting)
        add("GET", r"/settings", pages.settings_home)
        add("GET", r"/about", pages.about_page)
        # The API.
        add("POST", r"/api/v2/auth/login", projects.login, reads=False)
        add("GET", r"/api/v2/events/session/heartbeat", events.heartbeat, "client", False)
        submit = r"/events/submit(?:/(?P<type>[^/]+))?"
        add("GET", "/api/v2" + submit, events.submit_by_get, "client", reads=False)
        add(
            "POST",
            rf"/api/v2/events/by-ref/(?P<reference_id>{oid})/user-description",
            events.user_description,
            "client",
        )
        add("POST", r"/api/v2/events", events.post_events, "client", reads=False)
        add("GET", r"/api/v2/events", events.list_events, "user")
        add("GET", r"/api/v2/events/sessions", events.list_sessions, "user")
        by_ref = rf"/api/v2/events/by-ref/(?P<reference_id>{oid})"
        add("GET", by_ref, events.get_by_reference, "user")
        add("GET", rf"/api/v2/events/(?P<event_id>{oid})", events.get_event, "user")
        add("GET", rf"/api/v2/stacks/(?P<stack_id>{oid})/events", events.list_events, "user")
        add("GET", rf"/api/v2/stacks/(?P<stack_id>{oid})", events.get_stack, "user")
        stack = rf"/api/v2/stacks/(?P<stack_id>{oid})"
        add("POST", stack + "/change-status", events.change_status, "user")
        add("POST", stack + "/mark-fixed", events.mark_fixed, "user")
        add("DELETE", stack + "/mark-fixed", events.mark_fixed, "user")
        add("GET", r"/api/v2/projects", projects.list_projects, "user")
        add("GET", r"/api/v2/projects/config", projects.get_config, "client", False, False)
        project = rf"/api/v2/projects/(?P<project_id>{oid})"
        add("GET", project + submit, events.submit_by_get, "client", reads=False)
        add("POST", project + "/events", events.post_events, "client", reads=False)
        add("GET", project + "/events", events.list_events, "user")
        add("GET", project + "/events/sessions", events.list_sessions, "user")
        add("GET", project + "/config", projects.get_config, "client", False, False)
        add("POST", project + r"/config(?:/(?P<key>[^/]+))?", projects.set_config, "user")
        add("DELETE", project + r"/config(?:/(?P<key>[^/]+))?", projects.delete_config, "user")
        add("POST", project + "/tokens", projects.create_token, "user")
        add("GET", project, projects.get_project, "user")
        add("GET", rf"/api/v2/tokens/(?P<token_id>{oid})", projects.get_token, "user")

    def _add(
        self,
        method: str,
        path: str,
        endpoint: Endpoint,
        scope: str | None = None,
        throttled: bool = True,
        reads: bool = True,
    ) -> None:
        self.routes.append(
            Route(method, re.compile(f"^{path}$"), endpoint, scope, throttled, reads)
        )

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

    def _login_basic(self, credentials: Credentials, client: str) -> TokenRecord | None:
        assert credentials.email is not None and credentials.password is not None
        key = (credentials.email.lower(), credentials.password)
        with self._basic_lock:
            known = self._basic_logins.get(key)
        if known is not None:
            return known
        check_guard(self.guard, client, credentials.email)
        user = self.storage.check_login(credentials.email, credentials.password)
        if user is None:
            self.guard.failed(client, credentials.email)
            return None
        self.guard.succeeded(credentials.email)
        principal = TokenRecord(
            id=f"user:{user.id}",
            organization_id=user.organization_id,
            project_id=None,
            scopes=("user", "client"),
            is_disabled=False,
            expires_ts=None,
            user_id=user.id,
        )
        with self._basic_lock:
            if len(self._basic_logins) >= _BASIC_CACHE:
                self._basic_logins.clear()
            self._basic_logins[key] = principal
        return principal

    def _authenticate(self, request: Request) -> TokenRecord:
        credentials = read_credentials(request.headers, request.query)
        challenge = {"WWW-Authenticate": 'Bearer realm="eventlog collector"'}
        if not credentials.present:
            raise HttpError(
                401,
                "Send 'Authorization: Bearer <token>' (or Token, Basic, ?access_token=).",
                headers=challenge,
            )
        if credentials.token is None:
            principal = self._login_basic(credentials, request.client)
            if principal is None:
                raise HttpError(401, "The e-mail address or password is wrong.", headers=challenge)
            return principal
        token = self.storage.get_token(credentials.token)
        if token is None or not token.is_usable(utc_now().timestamp()):
            raise HttpError(401, "The token is unknown, disabled or expired.", headers=challenge)
        return token

    def _call(self, route: Route, request: Request) -> Response:
        if route.reads:
            self.events.pending.wait()
        if route.scope is None:
            return route.endpoint(request, None)
        token = self._authenticate(request)
        if not token.has_scope(route.scope):
            raise HttpError(403, f"This token lacks the '{route.scope}' scope.")
        rate_headers: dict[str, str] = {}
        if route.throttled:
            verdict = self.throttle.hit(token.organization_id)
            if not verdict.allowed:
                raise HttpError(
                    429,
                    f"More than {verdict.limit} requests in 15 minutes for this organization.",
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
        if (
            response.status in (200, 202, 304)
            and token.project_id is not None
            and "X-Exceptionless-ConfigVersion" not in response.headers
        ):
            try:
                version, _ = self.storage.project_config(token.project_id)
            except KeyError:
                pass
            else:
                response.headers["X-Exceptionless-ConfigVersion"] = str(version)
        return response
