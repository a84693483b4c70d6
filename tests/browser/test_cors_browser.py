"""A web page on another origin posts an event to the collector as ``@exceptionless/browser``
does (``fetch`` with ``Authorization`` and JSON, so the browser asks first: a CORS preflight),
in a real browser (headless Chromium). The preflight was answered 405 and the browser blocked
the post: a browser app could not use the collector, as it can the service."""

from __future__ import annotations

import functools
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from eventlog_handler.collector import Collector
from tests.support.collector import Client


@pytest.fixture
def app_origin(tmp_path: Path, collector: Collector) -> Iterator[str]:
    """A page served from another loopback origin that posts one event to ``collector``."""
    (tmp_path / "app.html").write_text(
        f"""<html><body><pre id="out">pending</pre><script>
        fetch("{collector.url}/api/v2/events", {{
          method: "POST",
          headers: {{"Authorization": "Bearer {collector.project_token}",
                     "Content-Type": "application/json"}},
          body: JSON.stringify({{message: "from a browser app"}})
        }}).then(r => document.getElementById("out").textContent = "status " + r.status
                       + " version " + r.headers.get("X-Exceptionless-ConfigVersion"))
          .catch(e => document.getElementById("out").textContent = "blocked " + e);
        </script></body></html>"""
    )
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.RequestHandlerClass.log_message = lambda *args: None  # type: ignore[method-assign]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_browser_app_on_another_origin_posts_an_event(
    page: Any, app_origin: str, collector: Collector
) -> None:
    page.goto(f"{app_origin}/app.html")
    page.wait_for_function("document.getElementById('out').textContent !== 'pending'")
    # The answer was readable, an exposed header too.
    assert page.inner_text("#out").startswith("status 202 version "), page.inner_text("#out")
    http = Client(collector)
    try:
        events = http.get("/api/v2/events", collector.user_token).json()
    finally:
        http.close()
    assert [event["message"] for event in events] == ["from a browser app"]
