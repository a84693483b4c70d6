"""Payment card numbers in text: found by shape, an issuer's prefix and the Luhn check, and
masked (:func:`mask_card_numbers`; the scrubber of :mod:`eventlog_handler.wire._scrub` and the
frames' source context use it).

A card number is written unbroken (13 to 19 digits) or in the groups cards are printed in,
separated by single spaces or by single dashes (one kind throughout): 4-4-4-4 (16 digits),
4-4-4-4-3 (19), 4-6-5 (American Express, 15), 4-6-4 (Diners, 14), 4-4-4-1 to 4-4-4-3 (13 to 15).
Numbers that merely follow each other (``burst 30000005 11573``: a counter and an id) are not
one card number even when their digits together pass the check: one digit run in ten does.
"""

from __future__ import annotations

import re

from eventlog_handler.settings import MASK

#: A card number candidate, not part of a longer word or dashed id: unbroken, or in a card's
#: groups (the separator ``sep`` the same throughout). Every repetition is bounded and the
#: groups have fixed sizes, so a failed attempt costs a few steps: no backtracking hazard.
#: After a space-separated candidate more digits may follow (a CVV, an expiry, an amount).
_CARD = re.compile(
    r"(?<![\w.-])(?![01789])(?:"  # no issuer's prefix starts with 0, 1, 7, 8 or 9
    r"\d{13,19}"  # unbroken
    r"|\d{4}(?P<sep>[ -])(?:"
    r"\d{4}(?P=sep)\d{4}(?P=sep)(?:\d{4}(?:(?P=sep)\d{3})?|\d{1,3})"  # 4-4-4-4(-3), 4-4-4-1..3
    r"|\d{6}(?P=sep)\d{4,5}"  # 4-6-4, 4-6-5
    r"))(?![\w-])"
)

#: An ASCII digit to its double with the double's digits summed (``7``: 14, 1 + 4 = 5).
_DOUBLED = bytes(range(256)).translate(
    bytes.maketrans(b"0123456789", bytes((2 * d if d < 5 else 2 * d - 9) for d in range(10)))
)


def is_card_number(digits: str) -> bool:
    """Whether ``digits`` (13 to 19 digits, separators removed) is a payment card number: an
    issuer's prefix (Visa, Mastercard, American Express, Discover, JCB, Diners, UnionPay,
    Maestro) and a valid Luhn check digit. The prefix keeps ids, order numbers and millisecond
    timestamps (``17…``) that happen to pass the check from being masked."""
    if not 13 <= len(digits) <= 19 or not digits.isdecimal():
        return False
    if not digits.isascii():  # other Unicode digits (``\d`` finds them): as ASCII ones
        digits = "".join([str(int(char)) for char in digits])
    four = int(digits[:4])
    two, three = four // 100, four // 10
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
    # Luhn: the digits from the right, every second one doubled (its digits summed), in C loops
    kept, doubled = digits[::-2].encode(), digits[-2::-2].encode()
    return (sum(kept) - 48 * len(kept) + sum(doubled.translate(_DOUBLED))) % 10 == 0


def mask_card_numbers(text: str) -> str:
    """``text`` with every payment card number in it masked (see :func:`is_card_number` and
    the groupings of :data:`_CARD`)."""
    search = _CARD.search
    found = search(text)
    if found is None:
        return text
    pieces: list[str] = []
    done = 0
    while found is not None:
        start = found.start()
        end = _card_end(found)
        if end:
            pieces.append(text[done:start])
            pieces.append(MASK)
            done = end
            found = search(text, end)
        else:  # not a card: one may still start at a later group of these digits
            found = search(text, start + 1)
    if not pieces:
        return text
    pieces.append(text[done:])
    return "".join(pieces)


def _card_end(found: re.Match[str]) -> int:
    """Where the card number a candidate holds ends (``0``: it holds none). A 19-digit
    candidate in groups of spaces may be a card number of 16 and three digits more."""
    candidate = found.group(0)
    sep = found.group("sep")
    digits = candidate if sep is None else candidate.replace(sep, "")
    if is_card_number(digits):
        return found.end()
    if sep == " " and len(digits) == 19 and is_card_number(digits[:16]):
        return found.start() + 19  # 4-4-4-4: 16 digits and 3 spaces
    return 0
