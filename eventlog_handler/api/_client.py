"""The requests-based client of the service's REST API v2.

>>> client = Client("http://127.0.0.1:5000", token)          # doctest: +SKIP
>>> client.submit({"message": "Disk space is low"})          # doctest: +SKIP
>>> [project.name for project in client.list_projects()]     # doctest: +SKIP
>>> session = Client("https://ex.example").login(email, pw)  # doctest: +SKIP

Every answer that is not a success raises a subclass of :class:`~eventlog_handler.api._errors.ApiError`
(see :mod:`eventlog_handler.api._errors`); a request that got no answer raises
:class:`~eventlog_handler.api._errors.TransportError`. The token travels only in the
``Authorization`` header, only to ``server_url``'s origin, and is masked in ``repr`` and in
every message; a password travels only in the body of the login request. A password in
``server_url`` (or a token as its user) is ``[excluded]`` in ``repr`` and in every error's URL
(:func:`~eventlog_handler.settings.shown_url`).
"""

from __future__ import annotations

import gzip
import json

# ``requests`` imports netrc lazily, on a session's first request. A process that forks while
# its delivery worker is in that import leaves the child an import lock nobody will release,
# and the child's worker blocks on it for good: imported here, before any thread exists.
import netrc  # noqa: F401
import os
import warnings
from collections.abc import Iterable, Iterator, Mapping
from typing import Any
from urllib.parse import quote, urljoin, urlsplit, urlunsplit

import requests

from eventlog_handler import _values as checks
from eventlog_handler._values import is_loopback_url
from eventlog_handler._version import __version__
from eventlog_handler.api import _errors as errors
from eventlog_handler.api._answers import (
    Answer,
    SubmitResult,
    _int_header,
    api_error,
    check_event_answer,
    submit_result,
    transport_error,
)
from eventlog_handler.api._models import Project, ProjectConfig, Token
from eventlog_handler.settings import (
    mask_secret,
    shown_url,
    validate_server_url,
    validate_token,
)
from eventlog_handler.wire._events import encode
from eventlog_handler.wire._jsonsafe import to_jsonable

#: Bodies larger than this are gzip-compressed.
GZIP_THRESHOLD = 1024

EVENTS_PATH = "/api/v2/events"

#: ``name/version`` with one slash: the service records it as the event's
#: ``@submission_client`` (name and version), so nothing else goes in this header.
USER_AGENT = f"eventlog-handler/{__version__}"

#: The largest page the service serves when listing projects.
PROJECTS_PAGE_LIMIT = 1000

#: Title of the real server's answer to a token (not a login session) creating tokens.
TOKEN_AUTH_CANNOT_CREATE = "Token authentication cannot create tokens."


class InsecureTransportWarning(UserWarning):
    """A token would travel over plain ``http://`` to a host that is not loopback."""


class IncompleteListWarning(UserWarning):
    """A listing ended with fewer rows than the service counted (``X-Result-Count``).

    The real service gives no next page once a page would skip 1,000 rows or more, so the
    rows past that are not reachable by paging. :attr:`received` and :attr:`total` say how
    many arrived and how many the service counted.
    """

    def __init__(self, message: str, received: int, total: int) -> None:
        super().__init__(message)
        self.received = received
        self.total = total


class TokenCreationRefusedError(errors.PermissionDeniedError):
    """403 to a token creation: the real service lets only a login session create tokens
    (``"Token authentication cannot create tokens."``), never an API token, whatever its
    scopes. Log in (:meth:`Client.login`, or ``eventlog login``) and use that token."""

    def _describe(self) -> str:
        return (
            f"{super()._describe()}: only a login session can create tokens; log in "
            "(eventlog login, or Client.login) and use that session token"
        )


def compress(body: bytes, level: int = 6) -> tuple[bytes, bool]:
    """``body`` gzip-compressed at ``level`` when it is over :data:`GZIP_THRESHOLD`, and
    whether it was. Event posts of the delivery worker are made at level 1
    (:data:`eventlog_handler.delivery._batches.WORKER_LEVEL`)."""
    if len(body) <= GZIP_THRESHOLD:
        return body, False
    return gzip.compress(body, compresslevel=level, mtime=0), True


def batch_body(encoded_events: Iterable[bytes]) -> bytes:
    """A JSON array from events already encoded with :func:`eventlog_handler.wire._events.encode`."""
    return b"[" + b",".join(encoded_events) + b"]"


class Client:
    """One server, one token, one ``requests.Session`` (re-made in a forked child)."""

    def __init__(
        self,
        server_url: str,
        token: str | None = None,
        *,
        timeout: float | tuple[float | None, float | None] | None = 10.0,
        verify: bool | str = True,
        session: requests.Session | None = None,
        warn_insecure: bool = True,
    ) -> None:
        self.server_url = validate_server_url("server_url", server_url)
        self._token = validate_token("token", token) if token is not None else None
        self.timeout = _timeout(timeout)
        self.verify = verify
        self._session = session
        self._session_pid = os.getpid()
        if (
            warn_insecure
            and not is_loopback_url(self.server_url)
            and self.server_url.startswith("http://")
        ):
            warnings.warn(
                f"eventlog_handler: the token would be sent over plain http:// to "
                f"{urlsplit(self.server_url).hostname}; use https://",
                InsecureTransportWarning,
                stacklevel=2,
            )

    def __repr__(self) -> str:
        token = mask_secret(self._token) if self._token is not None else None
        return f"Client({shown_url(self.server_url)!r}, token={token!r})"

    # -- plumbing ---------------------------------------------------------------------------

    @property
    def session(self) -> requests.Session:
        """The session of this process; a forked child gets a new one."""
        if self._session is None or self._session_pid != os.getpid():
            session = requests.Session()
            session.headers["User-Agent"] = USER_AGENT
            session.trust_env = True
            self._session = session
            self._session_pid = os.getpid()
        return self._session

    def close(self) -> None:
        """Close the session's connections."""
        if self._session is not None and self._session_pid == os.getpid():
            self._session.close()
        self._session = None

    def _request(
        self,
        method: str,
        path_or_url: str,
        *,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        params: Mapping[str, Any] | None = None,
        anonymous: bool = False,
        password: str | None = None,
    ) -> requests.Response:
        url = path_or_url if "://" in path_or_url else self.server_url + path_or_url
        all_headers = {"Accept": "application/json"}
        if not anonymous:
            if self._token is None:
                raise ValueError(
                    "eventlog_handler: no token: pass token= to Client() or call login() first"
                )
            all_headers["Authorization"] = f"Bearer {self._token}"
        all_headers.update(headers or {})
        try:
            response = self.session.request(
                method,
                url,
                data=body,
                headers=all_headers,
                params=params,
                timeout=self.timeout,
                verify=self.verify,
                allow_redirects=False,
                # Else requests sends a user and password of the URL as Basic auth, in place
                # of the token (the event sender sends the token, as the service wants).
                auth=None if anonymous else _as_is,
            )
        except requests.RequestException as exc:
            raise transport_error(exc, url) from None
        if response.status_code >= 300 and response.status_code != 304:
            # A server that echoes the request must not make the error print its secrets.
            raise api_error(Answer.of(response), (None if anonymous else self._token, password))
        return response

    # -- events -----------------------------------------------------------------------------

    def submit(
        self, event_or_events: Mapping[str, Any] | Iterable[Mapping[str, Any]]
    ) -> SubmitResult:
        """Post one event (a mapping) or a batch (a list of them); 202 on success.

        Values are made JSON-safe first, so any mapping can be passed. An empty batch is a
        :class:`ValueError` (the service answers 411 to an empty array).
        """
        if isinstance(event_or_events, Mapping):
            body = encode(to_jsonable(dict(event_or_events)))
            count = 1
        else:
            given: Any = event_or_events  # the annotation says what it should be
            if isinstance(given, (str, bytes)):
                raise ValueError(
                    "submit() takes an event (a mapping such as {'message': ...}) or a list "
                    f"of them, got a text: {given[:40]!r}"
                )
            batch = list(given)
            odd = [type(item).__name__ for item in batch if not isinstance(item, Mapping)]
            if odd:
                raise ValueError(
                    f"submit() takes events as mappings, got {', '.join(sorted(set(odd)))}"
                )
            events = [encode(to_jsonable(dict(event))) for event in batch]
            if not events:
                raise ValueError("submit() needs at least one event")
            body, count = batch_body(events), len(events)
        return self.post_events(body, count)

    def post_events(self, body: bytes, count: int = 1) -> SubmitResult:
        """Post an encoded JSON body (an object or an array of ``count`` events)."""
        payload, gzipped = compress(body)
        return self.post_payload(payload, gzipped, count)

    def post_payload(self, payload: bytes, gzipped: bool, count: int = 1) -> SubmitResult:
        """Post a body already made by :func:`compress` (``gzipped`` says whether it is)."""
        headers = {"Content-Type": "application/json"}
        if gzipped:
            headers["Content-Encoding"] = "gzip"
        response = self._request("POST", EVENTS_PATH, body=payload, headers=headers)
        answer = Answer.of(response)
        check_event_answer(answer)
        return submit_result(answer, count, len(payload))

    def post_user_description(
        self,
        reference_id: str,
        email_address: str | None = None,
        description: str | None = None,
        data: Mapping[str, Any] | None = None,
    ) -> None:
        """What a user said about the event with ``reference_id``:
        ``POST /api/v2/events/by-ref/{reference_id}/user-description`` (202; a project token).

        The body uses the service's field names, ``email_address`` and ``description``
        (422 when both are missing or the email is not valid)."""
        body: dict[str, Any] = {}
        if email_address is not None:
            body["email_address"] = email_address
        if description is not None:
            body["description"] = description
        if data:
            body["data"] = to_jsonable(dict(data))
        self._request(
            "POST",
            f"{EVENTS_PATH}/by-ref/{quote(reference_id, safe='')}/user-description",
            body=encode(body),
            headers={"Content-Type": "application/json"},
        )

    def heartbeat(self, session_id: str, close: bool = False) -> None:
        """A session's heartbeat (``close=True``: its end):
        ``GET /api/v2/events/session/heartbeat?id=...&close=...`` (200; a project token)."""
        self._request(
            "GET",
            f"{EVENTS_PATH}/session/heartbeat",
            params={"id": session_id, "close": "true" if close else "false"},
        )

    # -- login ------------------------------------------------------------------------------

    def login(self, email: str, password: str) -> str:
        """Log in with an email address and password; returns the session token.

        ``POST /api/v2/auth/login``: the token authenticates as the user (on the real server,
        the only kind of token that may create project tokens). The client uses it from then
        on. A wrong email or password is an
        :class:`~eventlog_handler.api._errors.AuthenticationError` (401). Repeated failures get an
        account's logins refused for a while, the right password too: the local collector
        answers 429 with ``Retry-After`` past 10 failures of an account (30 of an address) in 15
        minutes, a :class:`~eventlog_handler.api._errors.RateLimitedError` whose ``retry_after``
        says when to try again. The password is sent only in this request's body and appears
        in no message.
        """
        if not isinstance(email, str) or not email.strip():
            raise ValueError("eventlog_handler: login needs an email address")
        if not isinstance(password, str) or not password:
            raise ValueError("eventlog_handler: login needs a password")
        response = self._request(
            "POST",
            "/api/v2/auth/login",
            body=json.dumps({"email": email.strip(), "password": password}).encode(),
            headers={"Content-Type": "application/json"},
            anonymous=True,
            password=password,
        )
        data = _json(response)
        token = data.get("token") if isinstance(data, dict) else None
        if not isinstance(token, str) or not token.strip():
            raise errors.ApiError(
                response.status_code, title="the login answer has no token", url=response.url
            )
        self._token = validate_token("token", token)
        return self._token

    # -- projects and tokens ----------------------------------------------------------------

    def iter_projects(self, page_size: int = PROJECTS_PAGE_LIMIT) -> Iterator[Project]:
        """Every project of the caller, page after page (``Link: rel="next"``).

        Pages are as large as the service allows (1,000). A next link that names another
        origin (a proxy rewrote it) is followed on ``server_url`` with the same path and
        query: the token never goes anywhere else. When the listing ends with fewer projects
        than the service counted (``X-Result-Count``; the real service stops giving next
        links past 1,000 skipped rows), an :class:`IncompleteListWarning` says how many are
        missing.
        """
        return self._projects(_page_size(page_size), stacklevel=2)

    def _projects(self, page_size: int, stacklevel: int) -> Iterator[Project]:
        url: str | None = PROJECTS_PATH
        params: dict[str, Any] | None = {"page": 1, "limit": page_size}
        seen: set[str] = set()
        received = 0
        total: int | None = None
        while url:
            response = self._request("GET", url, params=params)
            data = _json(response)
            if not isinstance(data, list):
                raise errors.ApiError(
                    response.status_code,
                    title="expected a JSON array of projects",
                    url=response.url,
                )
            total = _int_header(response.headers, "X-Result-Count")
            for item in data:
                received += 1
                yield Project.from_json(item)
            next_url = response.links.get("next", {}).get("url")
            if not next_url or not data:
                break
            next_url = self._next_page(next_url, response.url)
            if next_url in seen:
                break
            seen.add(next_url)
            url, params = next_url, None
        if total is not None and received < total:
            warnings.warn(
                IncompleteListWarning(
                    f"eventlog_handler: listed {received} of {total} projects; the server "
                    f"gave no page past row {received}",
                    received,
                    total,
                ),
                stacklevel=stacklevel,
            )

    def list_projects(self, page_size: int = PROJECTS_PAGE_LIMIT) -> list[Project]:
        """All projects of the caller, following every page (see :meth:`iter_projects`)."""
        return list(self._projects(_page_size(page_size), stacklevel=3))

    def create_token(
        self, project_id: str, scopes: Iterable[str] = ("client",), notes: str | None = None
    ) -> Token:
        """Generate a project token (201 Created; 200 is tolerated).

        On the real server this needs a login session (:meth:`login`): any API token gets
        a :class:`TokenCreationRefusedError` (403).
        """
        if isinstance(scopes, str):  # list("user") would be four scopes of one letter each
            raise ValueError(
                f"eventlog_handler: scopes must be a list of scope names, like [{scopes!r}], "
                f"got the text {scopes!r}"
            )
        names = list(scopes) if isinstance(scopes, Iterable) else None
        if names is None or not all(isinstance(name, str) for name in names):
            raise ValueError(
                f"eventlog_handler: scopes must be a list of scope names, like ['client'], "
                f"got {scopes!r}"
            )
        payload: dict[str, Any] = {"scopes": names}
        if notes is not None:
            payload["notes"] = notes
        try:
            response = self._request(
                "POST",
                f"{_project_path(project_id)}/tokens",
                body=json.dumps(payload).encode(),
                headers={"Content-Type": "application/json"},
            )
        except errors.PermissionDeniedError as exc:
            raise TokenCreationRefusedError(
                exc.status, title=exc.title, errors=exc.errors, body=exc.body, url=exc.url
            ) from None
        data = _json(response)
        try:
            return Token.from_json(data)
        except ValueError as exc:
            raise errors.ApiError(response.status_code, title=str(exc), url=response.url) from None

    # -- reading events ---------------------------------------------------------------------

    def list_events(
        self,
        filter: str | None = None,
        *,
        sort: str = "-date",
        limit: int = 100,
        page: int | None = None,
    ) -> list[dict[str, Any]]:
        """The newest events (``GET /api/v2/events``, one page, the first unless ``page``
        says; a user token), matching the service's ``filter`` syntax (``type:error``),
        ``sort`` as the service sorts."""
        limit = checks.number("limit", limit, minimum=1, integer=True)
        params: dict[str, Any] = {"sort": sort, "limit": min(limit, 100)}  # the service's most
        if page is not None:
            params["page"] = checks.number("page", page, minimum=1, integer=True)
        if filter:
            params["filter"] = filter
        found = _json(self._request("GET", EVENTS_PATH, params=params))
        return [item for item in found if isinstance(item, dict)] if isinstance(found, list) else []

    # -- settings ---------------------------------------------------------------------------

    def get_config(self, version: int | None = None) -> dict[str, Any] | None:
        """The project's client configuration, or ``None`` when ``version`` is current (304).

        ``GET /api/v2/projects/config?v=N`` with a project token (API key).
        """
        params = {"v": version} if version is not None else None
        response = self._request("GET", CONFIG_PATH, params=params)
        if response.status_code == 304:
            return None
        data = _json(response)
        return data if isinstance(data, dict) else {}

    def project_config(self, project_id: str | None = None) -> ProjectConfig:
        """A project's settings and their version.

        With ``project_id`` (and a user token): ``GET /api/v2/projects/{id}/config``; without,
        the project of this client's project token (``GET /api/v2/projects/config``).
        """
        path = CONFIG_PATH if project_id is None else f"{_project_path(project_id)}/config"
        response = self._request("GET", path)
        try:
            return ProjectConfig.from_json(_json(response))
        except ValueError as exc:
            raise errors.ApiError(response.status_code, title=str(exc), url=response.url) from None

    def set_project_setting(self, project_id: str, key: str, value: str) -> None:
        """Set one setting of a project (user token); the project's config version goes up.

        ``POST /api/v2/projects/{id}/config?key=KEY`` with ``{"value": VALUE}``. The service
        trims both and refuses blank ones (400), so they are refused here first.
        """
        name = _setting_key(key)
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"eventlog_handler: setting {name!r} needs a value that is not blank")
        self._request(
            "POST",
            f"{_project_path(project_id)}/config",
            params={"key": name},
            body=json.dumps({"value": value.strip()}).encode(),
            headers={"Content-Type": "application/json"},
        )

    def delete_project_setting(self, project_id: str, key: str) -> None:
        """Remove one setting of a project (user token); removing a missing key is not an
        error. ``DELETE /api/v2/projects/{id}/config?key=KEY``."""
        self._request(
            "DELETE", f"{_project_path(project_id)}/config", params={"key": _setting_key(key)}
        )

    # -- links ------------------------------------------------------------------------------

    def _next_page(self, url: str, base: str) -> str:
        """The URL of the next page on ``server_url``: a link to another origin is re-based
        (same path and query), and it must name the project listing."""
        absolute = urljoin(base, url)
        here, there = urlsplit(self.server_url), urlsplit(absolute)
        path = there.path
        if (here.scheme, here.netloc) != (there.scheme, there.netloc):
            prefix = here.path.rstrip("/")
            if prefix and not path.startswith(prefix + "/"):
                path = prefix + path
            absolute = urlunsplit((here.scheme, here.netloc, path, there.query, ""))
        if path.rstrip("/") != urlsplit(self.server_url + PROJECTS_PATH).path:
            raise errors.ApiError(
                200, title=f"the next page link does not name the project list: {path[:200]}"
            )
        return absolute


PROJECTS_PATH = "/api/v2/projects"
CONFIG_PATH = "/api/v2/projects/config"


def _project_path(project_id: Any) -> str:
    if (
        not isinstance(project_id, str)
        or not project_id.strip()
        or project_id in (".", "..")
        or any(ch in project_id for ch in "/?#\\")
        or not project_id.isprintable()
    ):
        raise ValueError(f"not a project id: {project_id!r}")
    return f"{PROJECTS_PATH}/{quote(project_id, safe='')}"


def _timeout(timeout: Any) -> float | tuple[float | None, float | None] | None:
    """Seconds to connect and to read (a number), or ``(connect, read)``; ``None``: no limit,
    as in requests."""
    if not isinstance(timeout, tuple):
        return _seconds(timeout)
    if len(timeout) != 2:
        raise ValueError(
            "eventlog_handler: setting 'timeout' must be seconds or a pair (connect, read), "
            f"got {timeout!r}"
        )
    return (_seconds(timeout[0]), _seconds(timeout[1]))


def _seconds(value: Any) -> float | None:
    if value is None:
        return None
    return checks.seconds("timeout", value, minimum=0.001)  # as the setting of the handler


def _page_size(page_size: Any) -> int:
    if isinstance(page_size, bool) or not isinstance(page_size, int):
        raise ValueError(f"eventlog_handler: page_size must be an integer, got {page_size!r}")
    if not 1 <= page_size <= PROJECTS_PAGE_LIMIT:
        raise ValueError(
            f"eventlog_handler: page_size must be between 1 and {PROJECTS_PAGE_LIMIT}, "
            f"got {page_size}"
        )
    return page_size


def _setting_key(key: Any) -> str:
    if not isinstance(key, str) or not key.strip():
        raise ValueError("eventlog_handler: a setting needs a key that is not blank")
    name = key.strip()
    if not name.isprintable() or len(name) > 1000:
        raise ValueError(f"eventlog_handler: not a setting key: {name[:100]!r}")
    return name


# -- answers -> errors ------------------------------------------------------------------------


def _json(response: requests.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        raise errors.ApiError(
            response.status_code,
            title="the answer is not JSON",
            body=response.text[:500],
            url=response.url,
        ) from None


def _as_is(request: Any) -> Any:
    """An ``auth`` that leaves the request's own ``Authorization`` header alone."""
    return request
