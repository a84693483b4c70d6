"""A real browser for the dashboard's tests: Debian's headless Chromium, driven by Playwright.

Playwright is the test dependency (``pip install -e '.[dev]'``); its own browser download is
never used (``executable_path`` points at the system's Chromium). The tests skip, saying why,
only when no Chromium is installed; a missing Playwright next to an installed Chromium fails.

Screenshots go to ``tests/browser/screenshots/<python>/`` (git-ignored), or to the directory
named by ``EVENTLOG_SCREENSHOTS``.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.fixtures import collector as collector  # in memory, on 127.0.0.1
from tests.support.fixtures import collector_client as client  # noqa: F401 - its HTTP Client

#: The launch flags that keep a headless Chromium quiet and on this machine.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-proxy-server",
]
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 900}


def find_chromium() -> str | None:
    """``EVENTLOG_CHROMIUM``, else Debian's ``chromium`` (or ``chromium-browser``) on PATH."""
    configured = os.environ.get("EVENTLOG_CHROMIUM")
    if configured:
        return configured if Path(configured).exists() else None
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.fixture(scope="session")
def screenshots() -> Path:
    """Where screenshots are kept."""
    configured = os.environ.get("EVENTLOG_SCREENSHOTS")
    version = f"py{sys.version_info[0]}.{sys.version_info[1]}"
    base = Path(configured) if configured else Path(__file__).parent / "screenshots"
    folder = base / version
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="module")  # its event loop stops with the module: later tests need none
def browser() -> Iterator[Any]:
    """One headless Chromium for the module (Playwright's event loop runs until it stops)."""
    executable = find_chromium()
    if executable is None:
        pytest.skip(
            "no Chromium on this machine: install Debian's (apt-get install chromium) or set "
            "EVENTLOG_CHROMIUM to a Chromium executable"
        )
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail(
            f"Chromium is at {executable} but Playwright is missing: pip install -e '.[dev]'"
        )
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=executable, args=CHROMIUM_ARGS, headless=True
        )
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh page (its own context: no cookies or storage shared) at desktop size."""
    context = browser.new_context(viewport=DESKTOP)
    context.set_default_timeout(15_000)
    opened = context.new_page()
    try:
        yield opened
    finally:
        context.close()


def no_horizontal_scroll(page: Any) -> None:
    """The page fits the viewport's width (nothing to scroll sideways)."""
    width = page.evaluate("document.documentElement.scrollWidth")
    viewport = page.viewport_size["width"]
    assert width <= viewport + 1, f"the page is {width}px wide in a {viewport}px viewport"
