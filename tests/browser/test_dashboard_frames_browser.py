"""An error a program sent, in a real browser (headless Chromium): the application's frames open
with their source, library frames folded until clicked, the locals, and the stack list's
culprit line. Screenshots are kept (see ``conftest.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from eventlog_handler.collector import Collector
from tests.support.shop_program import ABOVE, FAILING, run_shop


def _shoot(page: Any, folder: Path, name: str) -> None:
    path = folder / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 1000


def test_an_error_page_with_source_locals_and_folded_library_frames(
    page: Any, collector: Collector, screenshots: Path, tmp_path: Path
) -> None:
    run_shop(collector.url, collector.project_token, tmp_path)
    page.goto(collector.url + "/?refresh=0")
    row = page.locator("table.stacks tbody tr").filter(has_text="ZeroDivisionError")
    assert row.locator("small.culprit").inner_text() == "in shop.checkout.check_item"
    _shoot(page, screenshots, "stack-list-culprit")

    error = next(event for event in collector.events() if event["type"] == "error")
    page.goto(collector.url + f"/events/{error['id']}")
    failing = page.locator("details.frame.app").filter(has_text="shop.checkout.check_item")
    source = failing.locator("table.source")
    assert source.is_visible()  # the application's frame is open
    assert ABOVE in source.inner_text()
    assert FAILING in failing.locator("tr.here").inner_text()
    assert failing.locator("table.locals").is_visible()
    assert "hunter2" not in page.inner_text("main")
    library = page.locator("details.frame.library").first
    assert not library.locator("table.source").is_visible()  # folded
    _shoot(page, screenshots, "error-frames")
    library.locator("summary").click()
    assert library.locator("table.source").is_visible()  # a click opens it
    _shoot(page, screenshots, "error-frames-library-open")
