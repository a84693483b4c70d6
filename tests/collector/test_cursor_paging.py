"""Event lists without ``page``: cursor links (``before``/``after``) that reach every event, as
the service gives them; with ``page``, page links that stop before a skip of 1,000."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

from eventlog_handler.collector import Collector
from eventlog_handler.collector._formats import format_event_date
from tests.support.collector import Client

_TOTAL = 1100


def _links(header: str) -> dict[str, str]:
    return {rel: url for url, rel in re.findall(r'<([^>]+)>;\s*rel="(\w+)"', header)}


def _seed(client: Client, total: int = _TOTAL) -> None:
    """``total`` log events; every fourth shares its date with the one before (the order of
    equal dates must hold across pages), and every tenth is an error."""
    now = datetime.now(timezone.utc)
    batch = []
    for i in range(total):
        seconds = total - (i - 1 if i % 4 == 3 else i)
        event = {
            "message": f"event {i:04d}",
            "date": format_event_date(now - timedelta(seconds=seconds)),
            "source": "paging",
        }
        if i % 10 == 0:
            event["@simple_error"] = {"type": "KeyError", "message": "k", "stack_trace": "tb"}
        batch.append(event)
    response = client.post_events(batch, compress=True)
    assert response.status_code == 202
    assert response.headers["X-Events-Accepted"] == str(total)


def _walk(client: Client, url: str, token: str, rel: str = "next") -> tuple[list[str], int]:
    """Follow ``rel`` links from ``url``; the ids seen, in order, and the pages fetched."""
    seen: list[str] = []
    pages = 0
    while url:
        response = client.session.get(url, headers={"Authorization": f"Bearer {token}"}, timeout=10)
        assert response.status_code == 200, response.text
        body = response.json()
        if rel == "previous":
            body = body[::-1]
        seen += [event["id"] for event in body]
        pages += 1
        assert pages < 100, "the links go round in circles"
        url = _links(response.headers.get("Link", "")).get(rel, "")
    return seen, pages


def test_cursor_links_reach_every_event_past_a_thousand(
    client: Client, collector: Collector
) -> None:
    _seed(client)
    first = client.get("/api/v2/events", collector.user_token, params={"limit": 100})
    assert first.status_code == 200
    assert first.headers["X-Result-Count"] == str(_TOTAL)
    links = _links(first.headers["Link"])
    assert set(links) == {"next"}  # the first page has nothing before it
    assert "after=" in links["next"] and "page=" not in links["next"]
    assert "limit=100" in links["next"]

    seen, pages = _walk(client, collector.url + "/api/v2/events?limit=100", collector.user_token)
    assert pages == 11
    assert len(seen) == _TOTAL
    assert len(set(seen)) == _TOTAL  # every event exactly once
    expected = [event["id"] for event in collector.events(limit=_TOTAL)]
    assert seen == expected  # newest first, across pages

    # The last page has no next link; its previous link (before=) walks back to the start.
    last = client.session.get(
        collector.url + f"/api/v2/events?limit=100&after={expected[999]}",
        headers={"Authorization": f"Bearer {collector.user_token}"},
        timeout=10,
    )
    assert [event["id"] for event in last.json()] == expected[1000:]
    assert last.headers["X-Result-Count"] == str(_TOTAL)
    back = _links(last.headers["Link"])
    assert set(back) == {"previous"}
    assert "before=" in back["previous"]
    walked_back, _ = _walk(client, back["previous"], collector.user_token, "previous")
    assert walked_back[::-1] == expected[:1000]


def test_cursor_links_keep_the_filter_and_the_sort(client: Client, collector: Collector) -> None:
    _seed(client)
    url = collector.url + "/api/v2/events?limit=7&filter=type:error&sort=date"
    seen, _ = _walk(client, url, collector.user_token)
    errors = [event["id"] for event in collector.events(type="error", limit=_TOTAL)]
    assert len(errors) == _TOTAL // 10
    assert seen == errors[::-1]  # oldest first


def test_cursor_links_on_the_project_and_stack_lists(client: Client, collector: Collector) -> None:
    _seed(client)
    project_url = f"{collector.url}/api/v2/projects/{collector.project_id}/events?limit=100"
    seen, pages = _walk(client, project_url, collector.user_token)
    assert len(seen) == len(set(seen)) == _TOTAL
    assert pages == 11
    stack_id = collector.events(type="log", limit=1)[0]["stack_id"]
    stack_url = f"{collector.url}/api/v2/stacks/{stack_id}/events?limit=100"
    seen, _ = _walk(client, stack_url, collector.user_token)
    assert len(seen) == len(set(seen)) == _TOTAL - _TOTAL // 10


def test_page_links_stop_before_a_skip_of_a_thousand(client: Client, collector: Collector) -> None:
    _seed(client)
    url = collector.url + "/api/v2/events?limit=100&page=1"
    seen, pages = _walk(client, url, collector.user_token)
    assert pages == 9  # (9 + 1) x 100 would skip 1,000 rows: no next link on page 9
    assert len(seen) == 900
    ninth = client.get("/api/v2/events", collector.user_token, params={"limit": 100, "page": 9})
    links = _links(ninth.headers["Link"])
    assert set(links) == {"previous"}
    assert "page=8" in links["previous"]
    assert ninth.headers["X-Result-Count"] == str(_TOTAL)


def test_an_empty_list_has_no_links(client: Client, collector: Collector) -> None:
    response = client.get("/api/v2/events", collector.user_token)
    assert response.status_code == 200
    assert response.json() == []
    assert "Link" not in response.headers
    assert response.headers["X-Result-Count"] == "0"
