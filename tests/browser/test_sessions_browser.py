"""Sessions and the event types in a real browser (headless Chromium): the Sessions tab, the
events list's type tabs, a session's event page. Screenshots as in ``conftest.py``."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from eventlog_handler.collector import Collector
from eventlog_handler.collector._formats import format_event_date
from tests.browser.conftest import PHONE, no_horizontal_scroll
from tests.support.collector import Client


def _ago(minutes: float) -> str:
    return format_event_date(datetime.now(timezone.utc) - timedelta(minutes=minutes))


def _seed(client: Client, collector: Collector) -> None:
    batch: list[dict[str, Any]] = [
        {
            "type": "session",
            "reference_id": f"session-user-{i:02d}",
            "date": _ago(60 - i),
            "@user": {"identity": f"u-{i}", "name": f"User {i}"},
        }
        for i in range(4)
    ]
    batch += [
        {"type": "usage", "source": "checkout.coupon"},
        {"type": "404", "source": "/no/such/page"},
        {"type": "log", "message": "cache warmed", "@level": "Info"},
    ]
    assert client.post_events(batch).status_code == 202
    for identifier, close in (("u-3", "false"), ("u-3", "false"), ("session-user-00", "true")):
        params = {"id": identifier, "close": close}
        heartbeat = "/api/v2/events/session/heartbeat"
        assert client.get(heartbeat, collector.project_token, params=params).status_code == 200


def _shoot(page: Any, folder: Path, name: str) -> None:
    path = folder / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 1000


def test_the_sessions_tab(
    page: Any, collector: Collector, client: Client, screenshots: Path
) -> None:
    _seed(client, collector)
    page.goto(collector.url + "/?refresh=0")
    page.locator("header.top nav").get_by_role("link", name="Sessions").click()
    page.wait_for_url(re.compile(r"/sessions$"))
    assert page.locator("h1").inner_text() == "Sessions"
    rows = page.locator("table.sessions tbody tr")
    assert rows.count() == 4
    newest = rows.nth(0)
    assert "u-3" in newest.inner_text()
    assert "User 3" in newest.inner_text()
    assert newest.locator('td[data-label="Heartbeats"]').inner_text() == "2"
    assert newest.locator(".badge").inner_text() == "active"
    assert re.fullmatch(
        r"5[67] min \d\d s", newest.locator('td[data-label="Duration"]').inner_text()
    )
    oldest = rows.nth(3)
    assert oldest.locator(".badge").count() == 0  # ended
    assert "just now" in oldest.inner_text()
    assert re.fullmatch(r"1 h 00 min", oldest.locator('td[data-label="Duration"]').inner_text())
    _shoot(page, screenshots, "sessions")

    newest.get_by_role("link").first.click()
    page.wait_for_url(re.compile(r"/events/[0-9a-f]{24}$"))
    assert page.locator("h1").inner_text() == "Session of u-3"
    assert "@heartbeats" in page.inner_text("main")
    _shoot(page, screenshots, "session-event")

    page.goto(collector.url + "/sessions")
    page.set_viewport_size(PHONE)
    page.reload()
    no_horizontal_scroll(page)
    _shoot(page, screenshots, "sessions-phone")


def test_the_event_type_tabs(
    page: Any, collector: Collector, client: Client, screenshots: Path
) -> None:
    _seed(client, collector)
    page.goto(collector.url + "/events?refresh=0")
    rows = page.locator("table.events tbody tr")
    assert rows.count() == 7
    tabs = page.locator("nav.tabs.types")
    tabs.get_by_role("link", name="Feature usage").click()
    page.wait_for_url(re.compile(r"type=usage"))
    assert rows.count() == 1
    assert "Feature used: checkout.coupon" in rows.first.inner_text()
    assert page.locator("nav.tabs.types a.here").inner_text() == "Feature usage"
    assert page.locator('select[name="type"]').input_value() == "usage"
    _shoot(page, screenshots, "events-usage")

    page.locator("nav.tabs.types").get_by_role("link", name="Not found").click()
    page.wait_for_url(re.compile(r"type=404"))
    assert rows.count() == 1
    assert "Not found: /no/such/page" in rows.first.inner_text()

    page.locator('select[name="type"]').select_option("session")
    page.get_by_role("button", name="Search").click()
    page.wait_for_url(re.compile(r"type=session"))
    assert rows.count() == 4
    page.locator("nav.tabs.types").get_by_role("link", name="All").click()
    page.wait_for_url(re.compile(r"/events$"))
    assert rows.count() == 7
    page.set_viewport_size(PHONE)
    page.reload()
    no_horizontal_scroll(page)
    _shoot(page, screenshots, "events-types-phone")
