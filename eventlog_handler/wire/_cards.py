"""Payment card numbers in text: found by shape, an issuer's prefix and the Luhn check, and
masked (:func:`mask_card_numbers`; the scrubber of :mod:`eventlog_handler.wire._scrub` and the
frames' source context use it)."""

from __future__ import annotations

import re

from eventlog_handler.settings import MASK

#: 13 to 19 digits, in groups separated by single spaces or dashes, not part of a longer word.
_CARD = re.compile(r"(?<![\w.-])(?:\d[ -]?){12,18}\d(?![\w-])")


def is_card_number(digits: str) -> bool:
    """Whether ``digits`` (13 to 19 digits, separators removed) is a payment card number: an
    issuer's prefix (Visa, Mastercard, American Express, Discover, JCB, Diners, UnionPay,
    Maestro) and a valid Luhn check digit. The prefix keeps ids, order numbers and millisecond
    timestamps (``17…``) that happen to pass the check from being masked."""
    if not 13 <= len(digits) <= 19 or not digits.isdigit():
        return False
    two, three, four = int(digits[:2]), int(digits[:3]), int(digits[:4])
    issuer = (
        digits[0] == "4"
        or 51 <= two <= 55
        or 2221 <= four <= 2720
        or two in (34, 37, 36, 38, 62, 65, 50)
        or 56 <= two <= 58
        or four == 6011
        or 644 <= three <= 649
        or 3528 <= four <= 3589
        or 300 <= three <= 305
    )
    if not issuer:
        return False
    total = 0
    for index, char in enumerate(reversed(digits)):
        value = ord(char) - 48
        if index % 2:
            value *= 2
            if value > 9:
                value -= 9
        total += value
    return total % 10 == 0


def mask_card_numbers(text: str) -> str:
    """``text`` with every payment card number in it masked (see :func:`is_card_number`)."""
    return _CARD.sub(_mask_card, text)


def _mask_card(found: re.Match[str]) -> str:
    digits = found.group(0).replace(" ", "").replace("-", "")
    return MASK if is_card_number(digits) else found.group(0)
