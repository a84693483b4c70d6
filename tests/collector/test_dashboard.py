"""The HTML dashboard: listing, filters, the event page, escaping and bounds."""

from __future__ import annotations

import re
from typing import Any

import pytest

from eventlog_handler.collector import Collector
from tests.collector.helpers import Client

HOSTILE = '<script>alert("x")</script>'


def _page(client: Client, path: str, **params: Any) -> str:
    response = client.get(path, params=params)
    assert response.status_code == 200, response.text
    assert response.headers["Content-Type"] == "text/html; charset=utf-8"
    return response.text


def _scripts_are_only_the_nonced_refresh(page: str) -> None:
    for tag in re.findall(r"<script[^>]*>", page, flags=re.IGNORECASE):
        assert re.fullmatch(r'<script nonce="[A-Za-z0-9_-]+">', tag), tag


def test_events_are_listed_newest_first_with_links(client: Client, collector: Collector) -> None:
    client.post_events([{"message": "first message"}, {"message": "second message"}])
    page = _page(client, "/")
    assert "first message" in page
    assert "second message" in page
    for event in collector.events():
        assert f'href="/events/{event["id"]}"' in page
    assert "Showing 2 of 2 events" in page


def test_empty_dashboard(client: Client) -> None:
    assert "No events yet." in _page(client, "/")


def test_security_headers_and_refresh(client: Client) -> None:
    response = client.get("/")
    policy = response.headers["Content-Security-Policy"]
    nonce = re.search(r"'nonce-([^']+)'", policy)
    assert nonce is not None
    assert f'<script nonce="{nonce.group(1)}">' in response.text
    assert "location.reload()" in response.text
    assert "default-src 'none'" in policy
    assert "<script" not in _page(client, "/", refresh=0)


def test_event_content_is_escaped_everywhere(client: Client, collector: Collector) -> None:
    event = {
        "type": "error",
        "message": HOSTILE,
        "source": '<img src=x onerror="alert(1)">',
        "tags": ["<b>tag</b>"],
        "reference_id": "escape-test-1",
        "@level": "<i>Error</i>",
        "@user": {"identity": "<u>id</u>", "name": '"><script>1</script>'},
        "data": {HOSTILE: "<svg onload=alert(1)>", "nested": {"x": "</pre><script>2</script>"}},
        "@simple_error": {
            "message": "</p><script>3</script>",
            "type": "<Exc>",
            "stack_trace": 'File "a.py", line 1\n</pre><script>4</script>',
            "inner": {"message": "<inner>", "type": "<InnerType>", "stack_trace": "<tb2>"},
        },
    }
    assert client.post_events(event).status_code == 202
    stored = collector.events()[0]
    for path in ("/", f"/events/{stored['id']}"):
        page = _page(client, path)
        _scripts_are_only_the_nonced_refresh(page)
        for raw in (
            "<img",
            "<svg",
            "<b>tag",
            "<u>id",
            "<i>Error",
            "<Exc>",
            "<inner>",
            "<tb2>",
            "</pre><script>",
            "</p><script>",
        ):
            assert raw not in page, (path, raw)
    detail = _page(client, f"/events/{stored['id']}")
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in detail
    assert "&lt;Exc&gt;" in detail
    assert "&lt;/pre&gt;&lt;script&gt;4&lt;/script&gt;" in detail


def test_event_page_shows_error_chain_and_details(client: Client, collector: Collector) -> None:
    error = {
        "message": "outer failure",
        "type": "RuntimeError",
        "stack_trace": 'Traceback (most recent call last):\n  File "app.py", line 10, in run\n',
        "inner": {
            "message": "middle failure",
            "type": "KeyError",
            "stack_trace": 'File "store.py", line 5, in get',
            "inner": {"message": "root cause", "type": "OSError", "stack_trace": "File io.py"},
        },
    }
    client.post_events(
        {
            "type": "error",
            "date": None,
            "source": "app.worker",
            "tags": ["payments"],
            "@level": "Fatal",
            "@user": {"identity": "u-42", "name": "Ann"},
            "@simple_error": error,
            "data": {"order": {"id": 7, "items": [1, 2]}},
        }
    )
    event = collector.events()[0]
    page = _page(client, f"/events/{event['id']}")
    for text in (
        "outer failure",
        "RuntimeError",
        "File &quot;app.py&quot;, line 10, in run",
        "Inner error 1",
        "middle failure",
        "KeyError",
        "store.py",
        "Inner error 2",
        "root cause",
        "OSError",
        "Fatal",
        "app.worker",
        "Ann (u-42)",
        "payments",
        event["date"],
        "&quot;order&quot;: {",
    ):
        assert text in page, text
    assert page.index("outer failure") < page.index("middle failure") < page.index("root cause")


def test_event_page_formats_structured_stack_frames(client: Client, collector: Collector) -> None:
    client.post_events(
        {
            "@error": {
                "message": "dotnet style",
                "type": "System.Exception",
                "stack_trace": [
                    {
                        "declaring_namespace": "App",
                        "declaring_type": "Worker",
                        "name": "Run",
                        "file_name": "Worker.cs",
                        "line_number": 12,
                    }
                ],
            }
        }
    )
    page = _page(client, f"/events/{collector.events()[0]['id']}")
    assert "at App.Worker.Run in Worker.cs:line 12" in page


def test_unknown_event_page_is_404(client: Client) -> None:
    response = client.get("/events/" + "0" * 24)
    assert response.status_code == 404
    assert "No such event" in response.text


def test_filters(client: Client, collector: Collector) -> None:
    other = collector.create_project("Other <project>")
    other_token = collector.create_token(other["id"])
    client.post_events(
        [
            {"message": "plain log", "@level": "Info"},
            {
                "type": "error",
                "message": "error one",
                "@level": "Error",
                "@simple_error": {"message": "needle inside", "type": "E"},
            },
            {"type": "feature", "message": "usage"},
        ]
    )
    client.post_events({"message": "other project log"}, token=other_token)

    def listed(**params: Any) -> set[str]:
        page = _page(client, "/", refresh=0, **params)
        rows = re.findall(r'<td class="msg"><a [^>]*>([^<]*)</a>', page)
        return {row.split(" — ")[0] for row in rows}

    assert listed() == {"plain log", "error one", "usage", "other project log"}
    assert listed(project=other["id"]) == {"other project log"}
    assert listed(project=collector.project_id) == {"plain log", "error one", "usage"}
    assert listed(type="error") == {"error one"}
    assert listed(type="feature") == {"usage"}
    assert listed(level="Error") == {"error one"}
    assert listed(level="info") == {"plain log"}
    assert listed(q="needle") == {"error one"}
    assert listed(q="PROJECT") == {"other project log"}
    assert listed(q="type:log") == {"plain log", "other project log"}
    page = _page(client, "/", project=other["id"])
    assert "Other &lt;project&gt;" in page
    assert f'<option value="{other["id"]}" selected>' in page


@pytest.mark.parametrize("limit", ["5", "junk"])
def test_rows_are_bounded(client: Client, collector: Collector, limit: str) -> None:
    client.post_events([{"message": f"row {i}"} for i in range(60)])
    page = _page(client, "/", limit=limit)
    expected = 5 if limit == "5" else 50
    assert page.count('<td class="msg">') == expected
    assert f"Showing {expected} of 60 events" in page


def test_huge_values_are_clipped(client: Client, collector: Collector) -> None:
    big = "y" * 1_200_000
    response = client.post_events(
        {
            "message": "big",
            "data": {"blob": big},
            "@simple_error": {
                "message": "z" * 100_000,
                "type": "Big",
                "stack_trace": "s" * 500_000,
            },
        },
        compress=True,
    )
    assert response.status_code == 202
    event = collector.events()[0]
    detail = client.get(f"/events/{event['id']}")
    assert detail.status_code == 200
    assert len(detail.content) < 400_000
    assert "more characters]" in detail.text
    index = client.get("/")
    assert len(index.content) < 50_000
