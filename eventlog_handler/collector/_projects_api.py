"""The project endpoints of the API: projects, their settings, tokens, and logging in."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from eventlog_handler.collector._accounts import TokenRecord
from eventlog_handler.collector._formats import DateFormatError, parse_date
from eventlog_handler.collector._http_helpers import (
    MAXIMUM_SKIP,
    int_arg,
    json_document,
    paging_headers,
    project_in_scope,
    read_body,
    token_project,
)
from eventlog_handler.collector._messages import Request, Response, empty_response, json_response
from eventlog_handler.collector._problems import HttpError
from eventlog_handler.collector._storage import Storage
from eventlog_handler.collector._throttle import LoginGuard

__all__ = ["TOKEN_SCOPES", "ProjectsApi"]

TOKEN_SCOPES = ("client", "user", "global")
_MAX_SETTING_KEY = 200
_MAX_SETTING_VALUE = 10_000


def check_guard(guard: LoginGuard, client: str, account: str | None) -> None:
    """429 with ``Retry-After`` when logins of ``account`` or from ``client`` are refused for now."""
    wait = guard.retry_after(client, account)
    if wait is not None:
        raise HttpError(
            429,
            f"Too many failed logins; try again in {wait} s.",
            headers={"Retry-After": str(wait)},
            title="Too many failed logins.",
        )


class ProjectsApi:
    """Projects, settings, tokens and login over a :class:`Storage`."""

    def __init__(
        self, storage: Storage, *, max_body_bytes: int, guard: LoginGuard | None = None
    ) -> None:
        self.storage = storage
        self.max_body_bytes = max_body_bytes
        self.guard = guard if guard is not None else LoginGuard()

    def _json_body(self, request: Request, *, required: bool) -> Any:
        raw = read_body(request, self.max_body_bytes, required=required)
        if raw is None or not raw.strip():
            return None
        return json_document(raw)

    # -- projects ----------------------------------------------------------------------------

    def list_projects(self, request: Request, token: TokenRecord | None) -> Response:
        """``GET /api/v2/projects``: ``page`` (from 1), ``limit`` (default 10, at most 1000);
        ``X-Result-Count`` and ``Link`` as the service writes them."""
        assert token is not None
        page = int_arg(request, "page", 1)
        limit = int_arg(request, "limit", 10, 1000)
        skip = (page - 1) * limit
        if skip > MAXIMUM_SKIP:
            return json_response(200, [])
        projects, total = self.storage.list_projects(token.organization_id, skip, limit)
        has_more = skip + len(projects) < total
        return json_response(200, projects, paging_headers(request, page, limit, total, has_more))

    def get_project(self, request: Request, token: TokenRecord | None) -> Response:
        """``GET /api/v2/projects/{id}``."""
        assert token is not None
        project_id = project_in_scope(self.storage, token, request.params["project_id"])
        return json_response(200, self.storage.get_project(project_id))

    # -- settings ----------------------------------------------------------------------------

    def get_config(self, request: Request, token: TokenRecord | None) -> Response:
        """``GET /api/v2/projects/config?v=N``: the settings, or 304 when ``v`` is current."""
        assert token is not None
        project_id = token_project(self.storage, request, token)
        version, settings = self.storage.project_config(project_id)
        current = (request.arg("v") or "").strip()
        headers = {"X-Exceptionless-ConfigVersion": str(version)}
        if current.isascii() and current.isdigit() and int(current) == version:
            return empty_response(304, headers)
        return json_response(200, {"version": version, "settings": settings}, headers)

    def _setting_key(self, request: Request) -> str:
        key = request.params.get("key") or request.arg("key") or ""
        if not key.strip():
            raise HttpError(400, "Name the setting: '?key=<KEY>'.", errors={"key": ["Required."]})
        if len(key) > _MAX_SETTING_KEY:
            raise HttpError(400, f"A setting's key is at most {_MAX_SETTING_KEY} characters.")
        return key

    def set_config(self, request: Request, token: TokenRecord | None) -> Response:
        """``POST /api/v2/projects/{id}/config?key=<KEY>`` with ``{"value": "<string>"}`` (or a
        bare JSON string): set a setting and bump the configuration version (200)."""
        assert token is not None
        project_id = project_in_scope(self.storage, token, request.params["project_id"])
        key = self._setting_key(request)
        body = self._json_body(request, required=True)
        value = body.get("value") if isinstance(body, dict) else body
        if not isinstance(value, str) or not value.strip():
            raise HttpError(
                400,
                'Send the value as {"value": "<string>"} (not empty).',
                errors={"value": ["A non-empty string is required."]},
            )
        if len(value) > _MAX_SETTING_VALUE:
            raise HttpError(400, f"A setting's value is at most {_MAX_SETTING_VALUE} characters.")
        self.storage.set_project_setting(project_id, key, value)
        return empty_response(200)

    def delete_config(self, request: Request, token: TokenRecord | None) -> Response:
        """``DELETE /api/v2/projects/{id}/config?key=<KEY>``: remove a setting (200; the
        version is bumped when the setting existed)."""
        assert token is not None
        project_id = project_in_scope(self.storage, token, request.params["project_id"])
        self.storage.set_project_setting(project_id, self._setting_key(request), None)
        return empty_response(200)

    # -- tokens ------------------------------------------------------------------------------

    def create_token(self, request: Request, token: TokenRecord | None) -> Response:
        """``POST /api/v2/projects/{id}/tokens``: 201 with the token and a ``Location``.

        A user-scoped token may do this here (the service answers 403 to any API token and
        wants a logged-in user); the collector follows the interface document.
        """
        assert token is not None
        project_id = project_in_scope(self.storage, token, request.params["project_id"])
        body = self._json_body(request, required=False)
        if body is None:
            body = {}
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
            token.organization_id, project_id, scopes, notes, expires, token.user_id
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
            if scope not in TOKEN_SCOPES:
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

    # -- login -------------------------------------------------------------------------------

    def login(self, request: Request, token: TokenRecord | None) -> Response:
        """``POST /api/v2/auth/login`` with ``{"email", "password"}``: 200 ``{"token": ...}``,
        a new user-scoped token; 401 for wrong credentials."""
        body = self._json_body(request, required=True)
        if not isinstance(body, dict):
            raise HttpError(400, 'Send {"email": "...", "password": "..."}.')
        email, password = body.get("email"), body.get("password")
        errors: dict[str, list[str]] = {}
        if not isinstance(email, str) or not email.strip():
            errors["email"] = ["An e-mail address is required."]
        if not isinstance(password, str) or not password:
            errors["password"] = ["A password is required."]
        if errors:
            raise HttpError(
                422,
                "The login request is invalid.",
                errors=errors,
                title="One or more validation errors occurred.",
            )
        assert isinstance(email, str) and isinstance(password, str)
        check_guard(self.guard, request.client, email)
        user = self.storage.check_login(email.strip(), password)
        if user is None:
            self.guard.failed(request.client, email)
            raise HttpError(401, "Invalid e-mail address or password.", title="Login failed.")
        self.guard.succeeded(email)
        created = self.storage.create_token(
            user.organization_id, None, ["user", "client"], f"Login of {user.email}", None, user.id
        )
        return json_response(200, {"token": created["id"]})
