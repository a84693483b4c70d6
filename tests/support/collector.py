"""Talking to the local collector in tests: a small HTTP client and problem-body checks.

The ``requests`` session ignores proxy settings from the environment, so nothing leaves the
machine.
"""

from __future__ import annotations

import gzip
import json
from typing import Any

import requests

from eventlog_handler.collector import Collector


class Client:
    """A thin ``requests`` wrapper bound to a collector's URL."""

    def __init__(self, collector: Collector) -> None:
        self.collector = collector
        self.session = requests.Session()
        self.session.trust_env = False

    def close(self) -> None:
        self.session.close()

    def request(
        self, method: str, path: str, token: str | None = None, **kwargs: Any
    ) -> requests.Response:
        headers = dict(kwargs.pop("headers", None) or {})
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        kwargs.setdefault("timeout", 10)
        return self.session.request(method, self.collector.url + path, headers=headers, **kwargs)

    def get(self, path: str, token: str | None = None, **kwargs: Any) -> requests.Response:
        return self.request("GET", path, token, **kwargs)

    def post_events(
        self,
        body: Any,
        token: str | None = None,
        *,
        compress: bool = False,
        path: str = "/api/v2/events",
        headers: dict[str, str] | None = None,
    ) -> requests.Response:
        """POST ``body`` (JSON-encoded unless bytes) with the project token by default."""
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        sent = {"Content-Type": "application/json", **(headers or {})}
        if compress:
            data = gzip.compress(data)
            sent["Content-Encoding"] = "gzip"
        token = self.collector.project_token if token is None else token
        return self.request("POST", path, token, data=data, headers=sent)


def assert_problem(response: requests.Response, status: int) -> dict[str, Any]:
    """The response has ``status`` and an RFC 7807 body; returns the body."""
    assert response.status_code == status, (response.status_code, response.text)
    assert response.headers["Content-Type"].startswith("application/problem+json")
    body = response.json()
    assert body["status"] == status
    assert body["title"]
    assert body["type"]
    assert body["instance"].startswith("/")
    return dict(body)
