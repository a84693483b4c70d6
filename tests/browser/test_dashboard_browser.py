"""The dashboard in a real browser (headless Chromium): what a person sees and clicks.

Each test leaves screenshots of what it looked at (see ``conftest.py``), at desktop width and
at a phone's 390 px, where nothing may need scrolling sideways.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from eventlog_handler.collector import Collector
from tests.browser.conftest import PHONE, no_horizontal_scroll
from tests.support.collector import Client

TRACE = (
    "Traceback (most recent call last):\n"
    '  File "shop/checkout.py", line 41, in pay\n'
    "    card = cards[order.card_id]\n"
    "KeyError: 'card-7'"
)


def _shoot(page: Any, folder: Path, name: str) -> None:
    path = folder / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 1000


def _at_phone_width(page: Any, folder: Path, name: str) -> None:
    page.set_viewport_size(PHONE)
    page.reload()
    no_horizontal_scroll(page)
    _shoot(page, folder, name + "-phone")


def _seed_errors_and_logs(client: Client) -> None:
    error = {"type": "KeyError", "message": "'card-7'", "stack_trace": TRACE}
    batch: list[dict[str, Any]] = [
        {
            "type": "error",
            "source": "shop.checkout",
            "@level": "Error",
            "@simple_error": error,
            "@user": {"identity": f"u-{i % 12}", "name": f"User {i % 12}"},
        }
        for i in range(150)
    ]
    batch += [
        {"message": f"cache warmed in {i} ms", "source": "shop.cache", "@level": "Info"}
        for i in range(40)
    ]
    batch += [
        {
            "type": "error",
            "@simple_error": {
                "type": "TimeoutError",
                "message": "the payment provider did not answer in 30 s",
                "stack_trace": 'File "shop/pay.py", line 9, in call',
            },
        }
    ]
    assert client.post_events(batch, compress=True).status_code == 202


def test_the_stack_list(page: Any, collector: Collector, client: Client, screenshots: Path) -> None:
    _seed_errors_and_logs(client)
    page.goto(collector.url + "/?refresh=0")
    rows = page.locator("table.stacks tbody tr")
    assert rows.count() == 3
    key_error = rows.filter(has_text="KeyError: 'card-7'")
    assert key_error.locator('td[data-label="Count"]').inner_text() == "150"
    assert key_error.locator('td[data-label="Users"]').inner_text() == "12"
    assert key_error.locator("svg.spark rect").count() == 24
    assert "just now" in key_error.locator('td[data-label="Last"]').inner_text()
    assert page.locator("nav.tabs a.here").inner_text().startswith("Open")
    _shoot(page, screenshots, "stack-list")
    _at_phone_width(page, screenshots, "stack-list")


def test_a_stack_and_its_status(
    page: Any, collector: Collector, client: Client, screenshots: Path
) -> None:
    _seed_errors_and_logs(client)
    page.goto(collector.url + "/?refresh=0")
    page.get_by_role("link", name="KeyError: 'card-7'").click()
    page.wait_for_url(re.compile(r"/stacks/[0-9a-f]{24}"))
    assert page.locator("h1").inner_text() == "KeyError: 'card-7'"
    assert page.locator("table.events tbody tr").count() == 50
    assert page.locator(".stats").first.inner_text().count("150") == 2  # occurrences, events
    _shoot(page, screenshots, "stack")

    page.get_by_role("button", name="Mark fixed").click()
    page.wait_for_load_state()
    assert page.locator(".badge.fixed").count() == 1
    assert page.get_by_role("button", name="Mark fixed").is_disabled()
    _shoot(page, screenshots, "stack-fixed")

    error = {"type": "KeyError", "message": "'card-7'", "stack_trace": TRACE}
    assert client.post_events({"type": "error", "@simple_error": error}).status_code == 202
    page.reload()
    assert page.locator(".badge.regressed").count() == 1
    assert "happened again" in page.inner_text("main")
    _shoot(page, screenshots, "stack-regressed")

    page.get_by_role("button", name="Ignore").click()
    page.wait_for_load_state()
    assert page.locator(".badge.ignored").count() == 1
    page.goto(collector.url + "/?refresh=0")
    assert page.get_by_role("link", name="KeyError: 'card-7'").count() == 0
    page.get_by_role("link", name=re.compile(r"^Ignored")).click()
    assert page.get_by_role("link", name="KeyError: 'card-7'").count() == 1
    _at_phone_width(page, screenshots, "stack")


def test_an_error_event_with_chained_causes_and_its_trace(
    page: Any, collector: Collector, client: Client, screenshots: Path
) -> None:
    event = {
        "type": "error",
        "source": "shop.checkout",
        "message": "checkout failed for order 1001",
        "tags": ["checkout", "eu"],
        "@level": "Error",
        "@user": {"identity": "u-42", "name": "Ann"},
        "@trace": [
            "DEBUG cart loaded with 3 items",
            "INFO order 1001 placed",
            "WARNING stock for SKU-1 is low",
        ],
        "@request": {
            "http_method": "POST",
            "host": "shop.example",
            "path": "/checkout",
            "client_ip_address": "203.0.113.9",
            "user_agent": "Mozilla/5.0",
            "headers": {"Accept": ["text/html"]},
        },
        "@environment": {"machine_name": "web-1", "process_id": 4242, "o_s_name": "Linux"},
        "@simple_error": {
            "type": "shop.PaymentError",
            "message": "payment for order 1001 failed",
            "stack_trace": 'Traceback (most recent call last):\n  File "shop/checkout.py", '
            "line 20, in checkout\n    _charge(order)\nshop.PaymentError: payment failed",
            "data": {
                "@frames": [  # source lines of a program's width, wider than a phone
                    {
                        "module": "shop.checkout",
                        "function": "checkout",
                        "filename": "shop/checkout.py",
                        "lineno": 20,
                        "in_app": True,
                        "pre_context": [
                            "    order = orders.get(number) or fetch_order_from_the_warehouse(number)"
                        ],
                        "context_line": "    _charge(order, provider=settings.PAYMENT_PROVIDER, retries=3)",
                        "post_context": [
                            "    return render_receipt(order, template='receipt.html')"
                        ],
                    }
                ]
            },
            "inner": {
                "type": "KeyError",
                "message": "'cvv'",
                "stack_trace": TRACE,
                "inner": {"type": "OSError", "message": "card vault unreachable"},
            },
        },
        "data": {"order": {"id": 1001, "total": 59.9}},
    }
    assert client.post_events(event).status_code == 202
    (stored,) = collector.events()
    page.goto(collector.url + f"/events/{stored['id']}")
    assert page.locator("h1").inner_text().startswith("checkout failed for order 1001")
    errors = page.locator("section.error-block")
    assert errors.count() == 3
    assert errors.nth(0).locator("h2").inner_text() == "Error: shop.PaymentError"
    assert errors.nth(1).locator("h2").inner_text() == "Caused by: KeyError"
    assert errors.nth(2).locator("h2").inner_text() == "Caused by: OSError"
    assert "card = cards[order.card_id]" in errors.nth(1).locator("pre.stack").inner_text()
    trace = page.locator("section.trace-block pre").inner_text()
    assert trace.splitlines() == event["@trace"]
    assert "POST https://shop.example/checkout" not in page.inner_text("main")  # not secure
    assert "POST http://shop.example/checkout" in page.inner_text("section.request-block")
    assert "web-1" in page.inner_text("section.environment-block")
    assert "Ann" in page.inner_text("section.user-block")
    assert '"@simple_error"' not in page.content()  # raw JSON only on request
    assert "_@" not in page.inner_text("main")  # each known key shown once, in its block
    assert [h.strip() for h in page.locator("section.data-block h2").all_inner_texts()] == ["order"]
    _shoot(page, screenshots, "error-event")
    _at_phone_width(page, screenshots, "error-event")

    page.set_viewport_size({"width": 1280, "height": 900})
    page.get_by_role("link", name="Raw JSON").click()
    assert '"@simple_error"' in page.inner_text("body")


def test_search_with_the_syntax_explained(
    page: Any, collector: Collector, client: Client, screenshots: Path
) -> None:
    _seed_errors_and_logs(client)
    page.goto(collector.url + "/events?refresh=0")
    help_box = page.locator("details.help")
    assert not help_box.locator("table").is_visible()
    help_box.locator("summary").click()
    assert help_box.locator("table").is_visible()
    assert "level:warn" in help_box.inner_text()
    _shoot(page, screenshots, "search-help")

    page.fill('input[name="q"]', "type:error payment")
    page.get_by_role("button", name="Search").click()
    page.wait_for_url(re.compile(r"q=type%3Aerror"))
    rows = page.locator("table.events tbody tr")
    assert rows.count() == 1
    assert "TimeoutError" in rows.first.inner_text()
    page.fill('input[name="q"]', "level:info")
    page.get_by_role("button", name="Search").click()
    page.wait_for_load_state()
    assert page.locator("table.events tbody tr").count() == 40
    assert "Events 1-40 of 40" in page.inner_text("main")
    _shoot(page, screenshots, "search")
    _at_phone_width(page, screenshots, "search")


def test_paging_past_a_thousand_events(
    page: Any, collector: Collector, client: Client, screenshots: Path
) -> None:
    total = 1_100
    for start in range(0, total, 550):
        batch = [
            {"message": f"event {i:05d}", "source": "pager"} for i in range(start, start + 550)
        ]
        assert client.post_events(batch, compress=True).status_code == 202
    page.goto(collector.url + "/events")
    seen: list[str] = []
    pages = 0
    while True:
        pages += 1
        cells = page.locator("table.events td.msg a").all_inner_texts()
        seen += cells
        older = page.get_by_role("link", name="Older →").first
        if older.count() == 0:
            break
        older.click()
        page.wait_for_load_state()
    assert pages == 22
    assert len(seen) == total and len(set(seen)) == total
    assert seen[0] == "event 01099" and seen[-1] == "event 00000"
    assert "Events 1,051-1,100 of 1,100" in page.inner_text("main")
    _shoot(page, screenshots, "events-last-page")
    page.get_by_role("link", name="← Newer").first.click()
    page.wait_for_load_state()
    assert "Events 1,001-1,050 of 1,100" in page.inner_text("main")


def test_project_settings_can_be_edited(page: Any, collector: Collector, screenshots: Path) -> None:
    page.goto(collector.url + "/")
    page.get_by_role("link", name="Settings").click()
    page.wait_for_url(re.compile(r"/projects/[0-9a-f]{24}/settings"))
    assert "No settings" in page.inner_text("main")
    page.fill('input[name="key"]', "@@log:*")
    page.fill('input[name="value"]', "Warn")
    page.get_by_role("button", name="Save").click()
    page.wait_for_load_state()
    assert "Saved." in page.inner_text("main")
    assert "Log events from every source are sent from level Warn up." in page.inner_text("main")
    assert page.locator("table.settings tbody tr").count() == 1
    _shoot(page, screenshots, "settings")
    _at_phone_width(page, screenshots, "settings")
    page.get_by_role("button", name="Delete @@log:*").click()
    page.wait_for_load_state()
    assert "Deleted." in page.inner_text("main")
    http = Client(collector)
    try:
        config = http.get("/api/v2/projects/config", collector.project_token).json()
    finally:
        http.close()
    assert config == {"version": 2, "settings": {}}


def test_about_page_fits_a_phone(page: Any, collector: Collector, screenshots: Path) -> None:
    page.goto(collector.url + "/about")
    assert "Where it differs from the service, on purpose" in page.inner_text("main")
    _shoot(page, screenshots, "about")
    _at_phone_width(page, screenshots, "about")
