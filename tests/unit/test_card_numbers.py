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
    assert "4111" not in str(event)
