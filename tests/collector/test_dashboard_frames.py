"""The dashboard shows what an error event carries for the person fixing it: the application's
frames open and library frames folded, the source around each failing line, the locals (secrets
masked), where a stack's errors come from and why its events are one stack; errors apart from
logs, the choice remembered; a rolled-up event's count in words."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import requests

from eventlog_handler.collector import Collector
from tests.support.collector import Client
from tests.support.shop_program import ABOVE, FAILING, run_shop


@pytest.fixture
def shop(collector: Collector, tmp_path: Path) -> list[dict[str, Any]]:
    run_shop(collector.url, collector.project_token, tmp_path)
    return collector.events()


def _html(collector: Collector, path: str, **kwargs: Any) -> requests.Response:
    answer = requests.get(collector.url + path, timeout=10, **kwargs)
    assert answer.status_code == 200, answer.text[:500]
    return answer


def test_an_error_page_shows_source_locals_and_folded_library_frames(
    collector: Collector, shop: list[dict[str, Any]]
) -> None:
    error = next(event for event in shop if event["type"] == "error")
    page = _html(collector, f"/events/{error['id']}").text
    app_frames = re.findall(r'<details class="frame app" open>(.*?)</details>', page, re.S)
    library = re.findall(r'<details class="frame library">(.*?)</details>', page, re.S)
    assert len(app_frames) >= 2 and library, page[:3000]
    failing = next(frame for frame in app_frames if "shop.checkout.check_item</code>" in frame)
    assert ABOVE.replace('"', "&quot;") in failing  # the source two lines above the raise
    here = re.search(r'<tr class="here">(.*?)</tr>', failing, re.S)
    assert here is not None and FAILING in here.group(1)
    assert "<h4>Locals</h4>" in failing and "<th>count</th><td><code>0</code>" in failing
    # Secrets among the locals are masked, by name and by value.
    assert "hunter2-secret" not in page and "abcdefghijklmnopqrstuvwxyz" not in page
    assert all("json" in frame for frame in library)  # the standard library is not the app's


def test_a_log_error_without_an_exception_shows_its_call_site(
    collector: Collector, shop: list[dict[str, Any]]
) -> None:
    logged = next(
        event for event in shop if event.get("message") == "payment failed for order 1001"
    )
    page = _html(collector, f"/events/{logged['id']}").text
    assert "Call site" in page
    assert re.search(
        r'<details class="frame app" open><summary><code>shop\.checkout\.fail_quietly', page
    )


def test_the_stack_list_names_the_culprit_and_the_stack_says_why_it_groups(
    collector: Collector, shop: list[dict[str, Any]]
) -> None:
    page = _html(collector, "/?refresh=0").text
    assert '<small class="culprit">in shop.checkout.check_item</small>' in page
    error = next(event for event in shop if event["type"] == "error")
    stack = _html(collector, f"/stacks/{error['stack_id']}").text
    why = re.search(r'<p class="why">(.*?)</p>', stack, re.S)
    assert why is not None
    assert "the exception type ZeroDivisionError" in why.group(1)
    assert "shop.checkout.check_item" in why.group(1)
    assert "Line numbers and library frames do not count" in why.group(1)


def test_a_culprit_at_module_level_is_named() -> None:
    from eventlog_handler.collector._dashboard._frames import culprit

    assert culprit({"frames": "in shop.cli.<module>"}) == "in shop.cli.<module>"
    assert culprit({"frames": "in shop.cli.<module> > shop.cli.<lambda>"}) == (
        "in shop.cli.<lambda>"
    )  # the list showed an empty "in " for both


def test_errors_and_logs_are_apart_and_the_choice_is_remembered(
    collector: Collector, client: Client
) -> None:
    error = {"type": "KeyError", "message": "x", "stack_trace": "KeyError: x"}
    client.post_events(
        [{"type": "error", "@simple_error": error}, {"message": "m", "source": "a.b"}]
    )
    session = requests.Session()
    everything = session.get(collector.url + "/?refresh=0", timeout=10).text
    assert everything.index(">Errors</h2>") < everything.index(">Logs and other events</h2>")
    logs = session.get(collector.url + "/?refresh=0&kind=logs", timeout=10)
    assert "eventlog_stacks=logs" in logs.headers.get("Set-Cookie", "")
    titles = re.findall(r'<a class="title" href="[^"]+">([^<]*)</a>', logs.text)
    assert titles == ["a.b"]
    again = session.get(collector.url + "/?refresh=0", timeout=10).text  # the cookie says logs
    assert re.findall(r'<a class="title" href="[^"]+">([^<]*)</a>', again) == ["a.b"]
    kinds = again.split('<nav class="kinds">')[1].split("</nav>")[0]
    assert re.search(r'<a class="here" href="[^"]*">Logs</a>', kinds), kinds
    errors = session.get(collector.url + "/?refresh=0&kind=errors", timeout=10).text
    assert re.findall(r'<a class="title" href="[^"]+">([^<]*)</a>', errors) == ["KeyError: x"]


def test_a_rolled_up_event_says_what_its_count_stands_for(
    collector: Collector, client: Client
) -> None:
    line = "12:00:01.123 Error shop.pay: card declined"
    client.post_events(
        {
            "message": "card declined",
            "count": 25,
            "@trace": [line.replace("01.123", f"{i:02d}.000") for i in range(25)],
        }
    )
    (event,) = collector.events()
    page = _html(collector, f"/events/{event['id']}").text
    assert "stands for 25 identical events" in page
    trace = re.search(r'<pre class="trace">(.*?)</pre>', page, re.S)
    assert trace is not None
    first = line.replace("01.123", "00.000")
    assert trace.group(1).splitlines() == [first, "    … the same line 24 more times"]
