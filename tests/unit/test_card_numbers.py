"""Payment card numbers are masked in every string an event carries, and under card-like keys;
numbers that only look long (ids, order numbers, timestamps, phone numbers) are left alone."""

from __future__ import annotations

import logging

import pytest

from eventlog_handler import EventLogHandler
from eventlog_handler.settings import DEFAULT_DATA_EXCLUSIONS, MASK
from eventlog_handler.wire._jsonsafe import is_excluded
from eventlog_handler.wire._scrub import Scrubber, is_card_number, mask_card_numbers
from tests.support.capture import CaptureServer, deliver
from tests.support.constants import API_KEY, FAST

CARDS = [
    "4111111111111111",  # Visa
    "4111 1111 1111 1111",
    "4111-1111-1111-1111",
    "4222222222222",  # Visa, 13 digits
    "5500005555555559",  # Mastercard
    "2223003122003222",  # Mastercard 2-series
    "378282246310005",  # American Express
    "3714 496353 98431",
    "6011111111111117",  # Discover
    "3530111333300000",  # JCB
    "30569309025904",  # Diners
    "6200000000000005",  # UnionPay
]

NOT_CARDS = [
    "order 1234567890123456",  # no issuer's prefix
    "1732500000000",  # a timestamp in milliseconds
    "1732500000000123",
    "9999999999999999",
    "4111111111111112",  # a Visa prefix, but the check digit is wrong
    "+49 170 1234567",
    "550e8400-e29b-41d4-a716-446655440000",
    "2026-11-25T12:00:00.1234567+01:00",
    "v4.1111.1111.1111.1111",
    "id-4111111111111111-x",  # part of a longer word
]


@pytest.mark.parametrize("card", CARDS)
def test_card_numbers_are_masked_in_text(card: str) -> None:
    assert mask_card_numbers(f"paid with {card} today") == f"paid with {MASK} today"
    assert is_card_number(card.replace(" ", "").replace("-", ""))


@pytest.mark.parametrize("text", NOT_CARDS)
def test_long_numbers_that_are_not_cards_stay(text: str) -> None:
    assert mask_card_numbers(text) == text


def test_the_scrubber_masks_cards_in_every_string_of_an_event() -> None:
    scrubber = Scrubber((), DEFAULT_DATA_EXCLUSIONS)
    event = {
        "message": "charge 4111 1111 1111 1111 declined",
        "data": {"note": "retry with 5500005555555559", "order": "1234567890123456"},
    }
    scrubbed = scrubber.event(event, copy=True)
    assert scrubbed["message"] == f"charge {MASK} declined"
    assert scrubbed["data"]["note"] == f"retry with {MASK}"
    assert scrubbed["data"]["order"] == "1234567890123456"


@pytest.mark.parametrize(
    ("key", "masked"),
    [
        ("card", True),
        ("card_number", True),
        ("pan", True),
        ("card_pan", True),
        ("panNumber", True),
        ("cc", True),
        ("cc_number", True),
        ("span", False),
        ("span_id", False),
        ("bcc", False),
        ("company", False),
        ("panel", False),
    ],
)
def test_card_like_keys(key: str, masked: bool) -> None:
    assert is_excluded(key, DEFAULT_DATA_EXCLUSIONS) is masked


def test_a_card_number_never_reaches_the_service() -> None:
    server = CaptureServer().start()
    handler = EventLogHandler(API_KEY, server.url, **FAST)
    logger = logging.getLogger("cards.test")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("card %s declined", "4111-1111-1111-1111", extra={"pan": "4111111111111111"})
        [event] = deliver(handler, server, 1)
    finally:
        logger.removeHandler(handler)
        server.stop()
    assert event["message"] == f"card {MASK} declined"
    assert event["data"]["pan"] == MASK
    # Anywhere else in the event (its time and reference id are made here, and their digits
    # may happen to read "4111": a CI run's time did).
    made_here = ("date", "reference_id")
    assert "4111" not in str({key: value for key, value in event.items() if key not in made_here})


# -- numbers next to each other: one card number only when grouped as cards are printed --------

#: Ordinary numbers in a row whose digits, run together, have an issuer's prefix and pass the
#: Luhn check: counters and ids, phone numbers, dates and times. None is grouped like a card.
NUMBERS_IN_A_ROW = [
    "burst 30000005 11573",  # the user trial: a counter and an id
    "burst 30000005-11573",
    "ids 41234564 90123",
    "ids 12345678 90123",
    "order 4111 11",
    "order 4111 11 6011 009",
    "id 36 1234567 123 458",
    "pids 6011 2 3 4 5 6 7 8 9 0",
    "call +44 7911 123456 5",
    "call +1 555 123 4567",
    "at 30 11 2025 14 05 31",
    "at 2026-11-25 12:00:00.123 took 4111 ms",
    "1234 5678 9012 3456",  # grouped like a card, but no issuer's prefix
    "4111 1111 1111 1112",  # a card's grouping and prefix, a wrong check digit
    "4111-1111-1111-1111-0000",  # 20 digits in dashed groups: an id, not a card
    "4111-1111 1111-1111",  # separators mixed
    "4111  1111 1111 1111",  # two spaces
    "41111 1111 1111 111",  # a first group of 5 digits
    "4111 11111111 1111",
]


@pytest.mark.parametrize("text", NUMBERS_IN_A_ROW)
def test_numbers_in_a_row_that_are_not_grouped_like_a_card_stay(text: str) -> None:
    assert mask_card_numbers(text) == text
    scrubber = Scrubber((), DEFAULT_DATA_EXCLUSIONS)
    assert scrubber.text(text) == text
    event = {"type": "log", "message": text, "source": "app", "data": {"note": text}}
    assert scrubber.flat_event(dict(event, data={"note": text})) == event


def test_the_trial_messages_are_not_rolled_up_into_one() -> None:
    """The trial: messages with a counter and an id kept their text, so no two are made equal
    by the mask."""
    scrubber = Scrubber((), DEFAULT_DATA_EXCLUSIONS)
    messages = [
        f"burst {counter} {ident}" for counter, ident in [(30000005, 11573), (30000006, 11573)]
    ]
    assert [scrubber.text(message) for message in messages] == messages


#: Test card numbers written as they are printed (Visa, Mastercard, American Express, Discover,
#: a 19-digit Visa), and unbroken.
GROUPED_CARDS = [
    "4111 1111 1111 1111",
    "4111-1111-1111-1111",
    "4111111111111111",
    "3782 822463 10005",  # American Express: 4-6-5
    "3782-822463-10005",
    "378282246310005",
    "3056 930902 5904",  # Diners: 4-6-4
    "5555 5555 5555 4444",
    "5555-5555-5555-4444",
    "5555555555554444",
    "6011 1111 1111 1117",
    "6011111111111117",
    "4111 1111 1111 1111 003",  # 19 digits: 4-4-4-4-3
    "4111-1111-1111-1111-003",
    "4111111111111111003",
    "4222 2222 2222 2",  # 13 digits: 4-4-4-1
    # any Unicode digits: Arabic-Indic
    "4111 1111 1111 1111".translate({48 + d: 0x660 + d for d in range(10)}),
]


@pytest.mark.parametrize("card", GROUPED_CARDS)
def test_card_numbers_in_every_grouping_are_masked(card: str) -> None:
    assert is_card_number(card.replace(" ", "").replace("-", ""))
    for text in (card, f"paid with {card} today", f"card: {card}.", f"({card})"):
        assert mask_card_numbers(text) == text.replace(card, MASK)
    scrubber = Scrubber((), DEFAULT_DATA_EXCLUSIONS)
    event = {"message": f"charge {card} declined", "data": {"note": card, "line": f"with {card}"}}
    scrubbed = scrubber.event(event, copy=True)
    assert scrubbed["message"] == f"charge {MASK} declined"
    assert scrubbed["data"] == {"note": MASK, "line": f"with {MASK}"}
    flat = scrubber.flat_event({"type": "log", "message": f"charge {card}", "data": {"n": card}})
    assert flat["message"] == f"charge {MASK}" and flat["data"]["n"] == MASK


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("card 4111 1111 1111 1111 123", f"card {MASK} 123"),  # a CVV after it
        ("card 4111 1111 1111 1111 12 25", f"card {MASK} 12 25"),  # an expiry after it
        ("qty 2 4111 1111 1111 1111", f"qty 2 {MASK}"),
        ("ids 1234 4111 1111 1111 1111", f"ids 1234 {MASK}"),
        ("4111 1111 1111 1111 5555 5555 5555 4444", f"{MASK} {MASK}"),
        ("order 12 4111111111111111 7", f"order 12 {MASK} 7"),
        ("2026-11-25 4111-1111-1111-1111", f"2026-11-25 {MASK}"),
    ],
)
def test_a_card_number_next_to_other_numbers_is_masked_alone(text: str, expected: str) -> None:
    assert mask_card_numbers(text) == expected


def test_the_scrubber_masks_grouped_cards_and_leaves_numbers_in_a_row_in_a_whole_event() -> None:
    scrubber = Scrubber((), DEFAULT_DATA_EXCLUSIONS)
    event = {
        "type": "error",
        "message": "burst 30000005 11573",
        "source": "shop.pay",
        "tags": ["ids 41234564 90123"],
        "data": {
            "attempt": "at 30 11 2025 14 05 31",
            "note": "paid with 3782 822463 10005, retry 5555-5555-5555-4444",
            "nested": {"lines": ["card 4111 1111 1111 1111 003", "pids 6011 2 3 4 5 6 7 8 9 0"]},
            "@simple_error": {
                "message": "declined 6011111111111117",
                "type": "CardError",
                "stack_trace": "  File pay.py, line 30000005 11573\n    charge(4111-1111-1111-1111)",
            },
        },
    }
    scrubbed = scrubber.event(event, copy=True)
    assert scrubbed["message"] == "burst 30000005 11573"
    assert scrubbed["tags"] == ["ids 41234564 90123"]
    assert scrubbed["data"]["attempt"] == "at 30 11 2025 14 05 31"
    assert scrubbed["data"]["note"] == f"paid with {MASK}, retry {MASK}"
    assert scrubbed["data"]["nested"]["lines"] == [f"card {MASK}", "pids 6011 2 3 4 5 6 7 8 9 0"]
    error = scrubbed["data"]["@simple_error"]
    assert error["message"] == f"declined {MASK}"
    assert error["stack_trace"] == f"  File pay.py, line 30000005 11573\n    charge({MASK})"
    assert event["message"] == "burst 30000005 11573"  # the copy, not the event, was changed
    for card in ("3782", "5555", "4111", "6011111111111117"):
        assert card not in str(scrubbed)
