"""The service's lengths (tags, ``message``, ``source``, ``type``) are counted as C# counts them,
in UTF-16 code units: a character past U+FFFF (an emoji) is 2. A tag of 60 emoji is 120 units
and the service drops it; a message of 1,500 emoji is 3,000 and the service cuts it, maybe in
the middle of a surrogate pair."""

from __future__ import annotations

import logging

import pytest

from eventlog_handler import _values
from eventlog_handler.collector import _normalize
from eventlog_handler.delivery._buffer import Entry
from eventlog_handler.delivery._finish import finish
from eventlog_handler.settings import Settings
from eventlog_handler.wire import _conform, _events
from eventlog_handler.wire._jsonsafe import MAX_STRING, to_jsonable, truncate
from eventlog_handler.wire._logs import flat_data, log_event

EMOJI = "😀"  # U+1F600: 2 UTF-16 code units


def units(text: str) -> int:
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def whole(text: str) -> bool:
    """No half of a surrogate pair in ``text`` (it encodes as UTF-8)."""
    text.encode("utf-8")
    return True


@pytest.mark.parametrize(
    "text", ["", "plain", "é" * 10, "中文" * 7, EMOJI, EMOJI * 60, "a" + EMOJI * 3 + "b", "\udc80"]
)
def test_utf16_len_counts_as_csharp(text: str) -> None:
    assert _values.utf16_len(text) == units(text)


def test_a_tag_of_60_emoji_is_120_units_and_not_sent() -> None:
    assert _events.normalize_tags([EMOJI * 60, EMOJI * 50, "é" * 100, "x" * 101]) == [
        EMOJI * 50,
        "é" * 100,
    ]


def test_a_message_of_1500_emoji_is_cut_to_2000_units_without_splitting_one() -> None:
    for text in (EMOJI * 1500, "a" + EMOJI * 1500, ("ab" + EMOJI) * 700):
        event = log_event(text, source=EMOJI * 1200)
        for name in ("message", "source"):
            cut = event[name]
            assert units(cut) <= 2000, name
            assert units(cut) >= 1990, name  # cut close to the limit, not far below it
            assert whole(cut) and cut.endswith("chars]")
            assert text.startswith(cut.split("…")[0]) or name == "source"


def test_the_worker_builder_cuts_as_the_builder_of_the_callers_thread() -> None:
    settings = Settings(api_key="k" * 40)
    entry = Entry(
        settings, None, logging.INFO, EMOJI * 1200, EMOJI * 1500, 0.0, 0.0, None, 0, None, ()
    )
    event = finish(entry)
    assert units(event["message"]) <= 2000 and event["message"].endswith("chars]")
    assert units(event["source"]) <= 2000
    # A data value: the flat builder leaves to the general one what the general one cuts.
    data = {"text": EMOJI * (MAX_STRING // 2 + 10)}
    assert flat_data(dict(data), ()) is None
    assert units(to_jsonable(data)["text"]) <= MAX_STRING


def test_text_within_the_limit_is_the_same_object() -> None:
    for text in ("x" * 2000, "é" * 2000, EMOJI * 1000, "x" * 999 + EMOJI):
        assert truncate(text, 2000) is text
    assert truncate("x" * 2001, 2000) != "x" * 2001


def test_a_hooks_event_is_made_to_fit_in_units_too() -> None:
    before = {"type": "log", "tags": ["a"]}
    event = {"message": EMOJI * 1500, "type": EMOJI * 51, "tags": [EMOJI * 60, "b"]}
    restored = _conform.conform(event, _conform.before_hook(before))
    assert units(event["message"]) <= 2000 and whole(event["message"])
    assert restored == ["type"] and event["type"] == "log"  # 102 units: given back
    assert event["tags"] == ["b"]


def test_settings_tags_and_environment_are_counted_in_units() -> None:
    with pytest.raises(ValueError, match="an emoji counts 2"):
        Settings.from_options({"api_key": "k" * 40, "tags": [EMOJI * 60]})
    with pytest.raises(ValueError, match="an emoji counts 2"):
        Settings.from_options({"api_key": "k" * 40, "environment": EMOJI * 60})
    assert Settings.from_options({"api_key": "k" * 40, "tags": [EMOJI * 50]}).tags == (EMOJI * 50,)


def test_the_local_collector_counts_as_the_service() -> None:
    assert _normalize.utf16_len(EMOJI * 60) == 120
    cut = _normalize._cut(EMOJI * 1500)
    assert units(cut) == 2000 and whole(cut)
    assert _normalize._cut("x" * 3000) == "x" * 2000
    assert _normalize._cut("short") == "short"
