"""The HTML dashboard over HTTP: stacks, a stack, events with cursor paging and search, one
event in full, settings, forms and their protection, escaping and bounds.

What a person sees in a browser (layout, clicks, phone width) is in ``tests/browser``.
"""

from __future__ import annotations

import json
import re
from html import unescape
from typing import Any

import pytest
import requests

from eventlog_handler.collector import Collector
from eventlog_handler.collector._dashboard._about import DIFFERENCES
from eventlog_handler.collector._filters import FILTER_HELP
from tests.support.collector import Client

HOSTILE = '<script>alert("x")</script>'
TRACE = 'Traceback (most recent call last):\n  File "app.py", line 10, in run\nKeyError: x'


def _page(client: Client, path: str, **params: Any) -> str:
    response = client.get(path, params=params)
    assert response.status_code == 200, response.text
    assert response.headers["Content-Type"] == "text/html; charset=utf-8"
    return response.text


def _links(page: str, rel: str) -> list[str]:
    return [unescape(href) for href in re.findall(rf'<a rel="{rel}" href="([^"]+)"', page)]


def _form_token(page: str) -> str:
    match = re.search(r'name="token" value="([^"]+)"', page)
    assert match is not None, "no form token on the page"
    return unescape(match.group(1))


def _scripts_are_only_the_nonced_refresh(page: str) -> None:
    for tag in re.findall(r"<script[^>]*>", page, flags=re.IGNORECASE):
        assert re.fullmatch(r'<script nonce="[A-Za-z0-9_-]+">', tag), tag


def _error(message: str = "x") -> dict[str, Any]:
    return {"type": "KeyError", "message": message, "stack_trace": TRACE}


# -- the stack list -------------------------------------------------------------------------


def test_the_landing_page_is_the_stack_list(client: Client, collector: Collector) -> None:
    batch: list[dict[str, Any]] = [
        {"@simple_error": _error(), "@user": {"identity": f"u-{i % 3}"}} for i in range(150)
    ]
    batch += [{"message": "cache warmed", "source": "app.cache", "@level": "Info"}]
    assert client.post_events(batch, compress=True).status_code == 202
    page = _page(client, "/", refresh=0)
    rows = re.findall(r'<a class="title" href="/stacks/([0-9a-f]{24})">([^<]*)</a>', page)
    # Errors first, apart from the log stacks (each group most recent first).
    assert [unescape(title) for _, title in rows] == ["KeyError: x", "app.cache"]
    assert page.index(">Errors</h2>") < page.index(">Logs and other events</h2>")
    error_stack = next(s for s in collector.stacks() if s["type"] == "error")
    row = page[page.index(f'href="/stacks/{error_stack["id"]}"') :].split("</tr>")[0]
    assert 'data-label="Count">150<' in row
    assert 'data-label="Users">3<' in row
    assert row.count("<time ") == 2  # first and last seen
    assert '<svg class="spark"' in row and "150 occurrences" in row
    assert "Open <small>2</small>" in page
    assert "How to search" in page


def test_empty_dashboard_says_how_to_start(client: Client) -> None:
    page = _page(client, "/")
    assert "No events yet" in page
    assert 'href="/about"' in page


def test_stack_list_filters_status_tabs_and_paging(client: Client, collector: Collector) -> None:
    other = collector.create_project("Other")
    token = collector.create_token(other["id"])
    client.post_events([{"message": f"log {i:02d}", "source": f"src.{i:02d}"} for i in range(55)])
    client.post_events({"@simple_error": _error(), "tags": ["payments"]}, token=token)
    stacks = {stack["title"]: stack for stack in collector.stacks()}
    collector.set_stack_status(stacks["src.00"]["id"], "fixed")
    collector.set_stack_status(stacks["src.01"]["id"], "ignored")

    def titles(**params: str) -> list[str]:
        page = _page(client, "/", refresh="0", **params)
        return [unescape(t) for t in re.findall(r'<a class="title" href="[^"]+">([^<]*)</a>', page)]

    first_page = titles()
    assert len(first_page) == 50 and "src.00" not in first_page and "src.01" not in first_page
    page = _page(client, "/", refresh="0")
    (more,) = re.findall(r'<a rel="next" href="([^"]+)">More stacks', page)
    rest = titles(**dict(pair.split("=") for pair in unescape(more).split("?")[1].split("&")))
    assert len(set(first_page) | set(rest)) == 54
    assert titles(status="fixed") == ["src.00"]
    assert titles(status="ignored") == ["src.01"]
    assert len(titles(status="all")) == 50
    assert "56 stacks, most recently seen first." in _page(client, "/", status="all")
    assert titles(project=other["id"]) == ["KeyError: x"]
    assert titles(type="error") == ["KeyError: x"]
    assert titles(q="tag:payments") == ["KeyError: x"]
    assert titles(q="source:src.07") == ["src.07"]
    assert titles(sort="frequent", q="type:error") == ["KeyError: x"]


# -- one stack ----------------------------------------------------------------------------------


def test_stack_page_shows_counts_status_and_its_events(
    client: Client, collector: Collector
) -> None:
    client.post_events([{"@simple_error": _error(f"#{i}")} for i in range(3)])
    client.post_events({"message": "unrelated", "source": "other"})
    stack = next(s for s in collector.stacks() if s["type"] == "error")
    page = _page(client, f"/stacks/{stack['id']}", refresh=0)
    assert "<h1>KeyError: #0</h1>" in page
    assert "<small>Occurrences</small><b>3</b>" in page
    assert re.search(r'<button class="primary" type="submit" name="status" value="open" disabled',
                     page)  # fmt: skip
    assert page.count('href="/events/') == 3 * 2  # the time and the message link
    assert "unrelated" not in page
    assert "ExceptionType" in page and "StackTrace" in page
    assert page.count('<svg class="spark"') == 2


def test_setting_a_status_through_the_page(client: Client, collector: Collector) -> None:
    client.post_events({"@simple_error": _error()})
    (stack,) = collector.stacks()
    page = _page(client, f"/stacks/{stack['id']}")
    action = f"{collector.url}/stacks/{stack['id']}/status"
    response = client.session.post(
        action,
        data={"token": _form_token(page), "status": "fixed"},
        headers={"Origin": collector.url, "Sec-Fetch-Site": "same-origin"},
        allow_redirects=False,
        timeout=10,
    )
    assert response.status_code == 303
    assert response.headers["Location"] == f"/stacks/{stack['id']}"
    assert collector.stacks()[0]["status"] == "fixed"
    assert 'class="badge fixed"' in _page(client, f"/stacks/{stack['id']}")


@pytest.mark.parametrize(
    ("data", "headers"),
    [
        ({"status": "fixed"}, {}),
        ({"status": "fixed", "token": "forged"}, {}),
        ({"status": "fixed", "token": None}, {"Sec-Fetch-Site": "cross-site"}),
        ({"status": "fixed", "token": None}, {"Origin": "http://evil.example"}),
    ],
    ids=["no-token", "wrong-token", "cross-site", "foreign-origin"],
)
def test_forms_from_elsewhere_are_refused(
    client: Client, collector: Collector, data: dict[str, Any], headers: dict[str, str]
) -> None:
    client.post_events({"@simple_error": _error()})
    (stack,) = collector.stacks()
    if "token" in data and data["token"] is None:
        data["token"] = _form_token(_page(client, f"/stacks/{stack['id']}"))
    response = client.session.post(
        f"{collector.url}/stacks/{stack['id']}/status",
        data=data,
        headers=headers,
        allow_redirects=False,
        timeout=10,
    )
    assert response.status_code == 403
    assert collector.stacks()[0]["status"] == "open"


# -- events ------------------------------------------------------------------------------------


def test_events_page_pages_past_a_thousand_events_with_cursors(
    client: Client, collector: Collector
) -> None:
    total = 1_050
    for start in range(0, total, 350):
        batch = [{"message": f"event {i:04d}"} for i in range(start, start + 350)]
        assert client.post_events(batch, compress=True).status_code == 202
    seen: list[str] = []
    url = "/events"
    pages = 0
    while url:
        page = _page(client, url)
        seen += [
            unescape(m) for m in re.findall(r'<a href="/events/[0-9a-f]{24}">(event \d+)</a>', page)
        ]
        pages += 1
        following = _links(page, "next")
        url = following[0] if following else ""
        if pages == 2:
            assert "Events 51-100 of 1,050" in page
    assert pages == 21
    assert len(seen) == total and len(set(seen)) == total
    assert seen == sorted(seen, reverse=True)  # newest first: the same second, order received
    last_page = page
    newer = _links(last_page, "prev")[0]
    assert "Events 951-1,000 of 1,050" in _page(client, newer)


def test_events_page_search_and_its_help(client: Client, collector: Collector) -> None:
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

    def listed(**params: str) -> set[str]:
        page = _page(client, "/events", refresh="0", **params)
        rows = re.findall(r'<td class="what msg">.*?<a href="/events/[^"]+">([^<]*)</a>', page)
        return {unescape(row).split(" — ")[0] for row in rows}

    assert listed() == {"plain log", "error one", "usage", "other project log"}
    assert listed(project=other["id"]) == {"other project log"}
    assert listed(type="error") == {"error one"}
    assert listed(level="info") == {"plain log"}
    assert listed(q="needle") == {"error one"}
    assert listed(q="PROJECT") == {"other project log"}
    assert listed(q="type:log") == {"plain log", "other project log"}
    assert listed(q="level:error type:error") == {"error one"}
    page = _page(client, "/events", project=other["id"])
    assert "Other &lt;project&gt;" in page
    assert f'<option value="{other["id"]}" selected>' in page
    for term, _ in FILTER_HELP:
        assert f"<code>{term.replace(chr(34), '&quot;')}</code>" in page


def test_event_page_shows_each_known_data_key_in_its_own_block(
    client: Client, collector: Collector
) -> None:
    error = {
        "message": "outer failure",
        "type": "RuntimeError",
        "stack_trace": TRACE,
        "inner": {
            "message": "middle failure",
            "type": "KeyError",
            "stack_trace": 'File "store.py", line 5, in get',
            "inner": {"message": "root cause", "type": "OSError", "data": {"errno": 5}},
        },
    }
    client.post_events(
        {
            "type": "error",
            "source": "app.worker",
            "tags": ["payments"],
            "@level": "Fatal",
            "@user": {"identity": "u-42", "name": "Ann", "data": {"plan": "pro"}},
            "@simple_error": error,
            "@trace": ["opening cart", "charging card"],
            "@request": {
                "http_method": "POST",
                "host": "shop.example",
                "port": 443,
                "is_secure": True,
                "path": "/checkout",
                "query_string": {"step": "2"},
                "client_ip_address": "203.0.113.9",
                "user_agent": "curl/8",
                "headers": {"Accept": ["text/html"]},
                "cookies": {"session": "[masked]"},
                "post_data": {"card": "[masked]"},
            },
            "@environment": {
                "machine_name": "web-1",
                "process_id": 4242,
                "o_s_name": "Linux",
                "runtime_version": "3.12.1",
                "custom_env": "yes",
            },
            "data": {"order": {"id": 7, "items": [1, 2]}, "note": "plain value"},
        }
    )
    event = collector.events()[0]
    page = _page(client, f"/events/{event['id']}")
    blocks = {
        "error-block": ["outer failure", "RuntimeError", "File &quot;app.py&quot;, line 10"],
        "error-block inner": ["Caused by", "middle failure", "root cause", "errno"],
        "trace-block": ["opening cart\ncharging card"],
        "request-block": ["POST https://shop.example/checkout?step=2", "203.0.113.9", "curl/8",
                          "Accept", "text/html", "session", "card"],
        "user-block": ["u-42", "Ann", "plan", "pro"],
        "environment-block": ["Machine", "web-1", "Process id", "4242", "Operating system",
                              "Linux", "custom_env"],
        "data-block": ["order", "plain value"],
    }  # fmt: skip
    for css, texts in blocks.items():
        assert f'class="card {css}' in page, css
        for text in texts:
            assert text in page, (css, text)
    assert page.index("outer failure") < page.index("middle failure") < page.index("root cause")
    assert "Fatal" in page and "app.worker" in page and "payments" in page
    assert '"@simple_error"' not in page  # no raw JSON on the page
    assert f'href="/events/{event["id"]}/json"' in page
    raw = client.get(f"/events/{event['id']}/json")
    assert raw.headers["Content-Type"].startswith("application/json")
    assert json.loads(raw.text) == event


def test_event_page_navigates_within_its_stack(client: Client, collector: Collector) -> None:
    client.post_events([{"@simple_error": _error(f"#{i}")} for i in range(3)])
    newest, middle, oldest = collector.events()
    page = _page(client, f"/events/{middle['id']}")
    assert _links(page, "prev") == [f"/events/{newest['id']}"]
    assert _links(page, "next") == [f"/events/{oldest['id']}"]
    assert f'href="/stacks/{middle["stack_id"]}"' in page


def test_event_content_is_escaped_everywhere(client: Client, collector: Collector) -> None:
    event = {
        "type": "error",
        "message": HOSTILE,
        "source": '<img src=x onerror="alert(1)">',
        "tags": ["<b>tag</b>"],
        "reference_id": "escape-test-1",
        "@level": "<i>Error</i>",
        "@user": {"identity": "<u>id</u>", "name": '"><script>1</script>'},
        "@trace": ["</pre><script>5</script>"],
        "@request": {"path": "<svg onload=alert(6)>", "headers": {"<x>": ["</td>"]}},
        "@stack": {"title": "<h1>manual</h1>", "signature_data": {"k": "<v>"}},
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
    paths = ("/", "/events", f"/events/{stored['id']}", f"/stacks/{stored['stack_id']}", "/about")
    for path in paths:
        page = _page(client, path)
        _scripts_are_only_the_nonced_refresh(page)
        for raw in ("<img", "<svg onload", "<b>tag", "<u>id", "<i>Error", "<Exc>", "<inner>",
                    "<tb2>", "</pre><script>", "</p><script>", "<h1>manual", "<x>"):  # fmt: skip
            assert raw not in page, (path, raw)
    detail = _page(client, f"/events/{stored['id']}")
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in detail
    assert "&lt;Exc&gt;" in detail
    assert "&lt;/pre&gt;&lt;script&gt;4&lt;/script&gt;" in detail


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
    assert len(client.get("/").content) < 80_000
    assert len(client.get("/events").content) < 80_000


# -- settings, about, headers ---------------------------------------------------------------


def test_settings_page_shows_and_edits_settings(client: Client, collector: Collector) -> None:
    collector.set_project_setting("@@log:app.db", "Warn")
    page = _page(client, "/settings")  # follows the redirect to the first project
    assert "Settings of Local Project" in page
    assert "<code>@@log:app.db</code>" in page
    assert "Log events from sources matching app.db are sent from level Warn up." in page
    for key in ("@@log:&lt;source&gt;", "@@error:&lt;exception type&gt;", "@@DataExclusions"):
        assert key in page
    action = f"{collector.url}/projects/{collector.project_id}/settings"
    token = _form_token(page)
    saved = client.session.post(
        action,
        data={"token": token, "action": "set", "key": "@@error:*Timeout*", "value": "false"},
        allow_redirects=False,
        timeout=10,
    )
    assert saved.status_code == 303
    config = client.get("/api/v2/projects/config", collector.project_token).json()
    assert config["settings"] == {"@@log:app.db": "Warn", "@@error:*Timeout*": "false"}
    assert config["version"] == 2
    deleted = client.session.post(
        action,
        data={"token": token, "action": "delete", "key": "@@log:app.db"},
        allow_redirects=False,
        timeout=10,
    )
    assert deleted.status_code == 303
    page = _page(client, unescape(deleted.headers["Location"]))
    assert "Deleted." in page
    assert "@@log:app.db" not in page
    assert "Events of type error matching *Timeout* are not sent." in page
    refused = client.session.post(
        action, data={"action": "set", "key": "k", "value": "v"}, allow_redirects=False, timeout=10
    )
    assert refused.status_code == 403


def test_about_page_says_where_the_collector_differs(client: Client, collector: Collector) -> None:
    page = _page(client, "/about")
    for topic, _ in DIFFERENCES:
        assert f"<th>{topic}</th>" in page
    assert "Token authentication cannot create tokens." in unescape(page)
    assert collector.url in page
    assert collector.project_token not in page and collector.user_token not in page
    assert collector.admin_password not in page


def test_security_headers_and_refresh(client: Client, collector: Collector) -> None:
    response = client.get("/")
    policy = response.headers["Content-Security-Policy"]
    nonce = re.search(r"'nonce-([^']+)'", policy)
    assert nonce is not None
    assert f'<script nonce="{nonce.group(1)}">' in response.text
    assert "location.reload()" in response.text
    assert "default-src 'none'" in policy and "form-action 'self'" in policy
    assert response.headers["X-Frame-Options"] == "DENY"
    assert "<script" not in _page(client, "/", refresh=0)
    client.post_events([{"message": f"m{i}"} for i in range(60)])
    older = _links(_page(client, "/events"), "next")[0]
    assert "<script" not in _page(client, older)  # a page back in time does not reload


def test_unknown_pages_are_404(client: Client) -> None:
    for path in ("/events/" + "0" * 24, "/stacks/" + "0" * 24, "/projects/nope/settings"):
        response = client.get(path)
        assert response.status_code == 404
        assert response.headers["Content-Type"].startswith("text/html")


def test_a_request_for_another_host_name_is_refused(collector: Collector) -> None:
    session = requests.Session()
    session.trust_env = False
    try:
        refused = session.get(collector.url + "/", headers={"Host": "rebound.example"}, timeout=10)
        assert refused.status_code == 421
        assert session.get(
            collector.url + "/", headers={"Host": f"localhost:{collector.port}"}, timeout=10
        ).ok
    finally:
        session.close()
