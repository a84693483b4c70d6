"""Where a secret value in a text starts and ends: the password of a URL, the value after a
name (quoted, bracketed or bare) and a ``Bearer`` token. What is masked, and when, is
:class:`eventlog_handler.wire._scrub.Scrubber`'s."""

from __future__ import annotations

import re
from collections.abc import Callable

from eventlog_handler.settings import MASK

#: After ``://``: ``user:password@``; the user ends at the first ``:`` (it may hold an ``@``, an
#: e-mail address), the password runs to the last ``@`` of the authority.
_USERINFO = re.compile(r"[^\s:/?#\"'<>]*:(?P<password>[^\s/?#\"'<>]+)@")
#: ... or a token as the user, without a password (``https://ghp_x1y2...@github.com``, as git
#: takes a personal access token): 16 characters or more, with a letter and a digit.
_TOKEN_USER = re.compile(r"(?P<password>(?=[\w.~%+-]*\d)(?=[\w.~%+-]*[A-Za-z])[\w.~%+-]{16,})@")
#: Between a name's separator and its value: blanks, and an auth scheme (``Bearer``, ...).
_LEAD = re.compile(r"[ \t]*(?:(?i:bearer|basic|token|digest|negotiate|ntlm|apikey)[ \t]+(?=\S))?")
#: A quoted value (the group is what is masked), or a bare one (up to a terminator).
_DOUBLE_QUOTED = re.compile(r"\"((?:[^\"\\\n]|\\.)*)\"")
_SINGLE_QUOTED = re.compile(r"'((?:[^'\\\n]|\\.)*)'")
_BARE = re.compile(r"[^\s\"'&;,<>)\]}]+")
#: A string literal's prefix before its quote (``b'...'``, ``rb"..."``): a bytes or raw value.
_PREFIX = re.compile(r"(?i:[bfru]{1,2})(?=[\"'])")
#: Characters a bracketed value (``[...]``, ``{...}``, ``(...)``) is searched for its end in,
#: at most, and all the values of one text together (:data:`MAX_BRACKETED_TEXT`).
MAX_BRACKETED = 20_000
MAX_BRACKETED_TEXT = 1_000_000
#: The opening bracket of each closing one.
_OPENER = {"]": "[", "}": "{", ")": "("}
#: What a single quote that opens a string follows.
_OPENS_QUOTE = frozenset("([{,:=> \t\n")
#: A lone ``Bearer <token>``.
_BEARER = re.compile(r"(?<![\w\-])(?P<scheme>[Bb]earer|BEARER)[ \t]+(?P<token>[\w\-.~+/]{8,}=*)")


def url_passwords(text: str) -> str:
    """Mask the password of every ``scheme://user:password@host`` in ``text``, and a token
    that stands as the user (``scheme://token@host``)."""
    pieces: list[str] = []
    done = 0
    at = text.find("://")
    while at >= 0:
        found = _USERINFO.match(text, at + 3) or _TOKEN_USER.match(text, at + 3)
        if found is not None and found.group("password") != MASK:
            pieces.append(text[done : found.start("password")])
            pieces.append(MASK)
            done = found.end("password")
        at = text.find("://", max(at + 3, done))
    if not pieces:
        return text
    pieces.append(text[done:])
    return "".join(pieces)


def value_span(text: str, at: int, budget: list[int] | None = None) -> tuple[int, int] | None:
    """Where the value after a separator at ``at`` is (what to mask), or ``None`` when there is
    no value or it is masked already. A quoted value is its content; a bracketed one runs to
    its closing bracket (or, unbalanced, to the end of the line); a bare one to a terminator.
    ``budget``: characters the search for closing brackets may still look at in ``text`` (the
    caller's, for all its values: a text of many unbalanced brackets costs one pass)."""
    lead = _LEAD.match(text, at)
    start = at if lead is None else lead.end()
    first = text[start : start + 1]
    if first.isalpha():
        prefix = _PREFIX.match(text, start)
        if prefix is not None:  # a literal's prefix: its quoted content is the value
            start = prefix.end()
            first = text[start]
    if first == '"' or first == "'":
        quoted = (_DOUBLE_QUOTED if first == '"' else _SINGLE_QUOTED).match(text, start)
        if quoted is None:
            return None
        span = quoted.span(1)
    elif first == "[" or first == "{" or first == "(":  # a list, a dict, a tuple (a repr)
        if text.startswith(MASK, start):
            return None
        span = (start, _closing_bracket(text, start, budget or [MAX_BRACKETED_TEXT]))
    else:
        bare = _BARE.match(text, start)
        if bare is None:
            return None
        span = bare.span()
    if span[0] == span[1] or text[span[0] : span[1]] == MASK:
        return None
    return span


def _closing_bracket(text: str, start: int, budget: list[int]) -> int:
    """The end of the bracketed value at ``start``.

    A list or a dict (``[``, ``{``) ends at the later of two closings, looked for within
    :data:`MAX_BRACKETED` characters: the bracket that matches it in kind, out of quotes
    (:func:`_matching`), and the first ``]`` or ``}`` that brings the count of ``[`` and ``{``
    back to none, out of double quotes (the previous release's rule). Each misses some values that the
    other finds whole; the later end never shows what either would mask. Unbalanced, it runs
    to the end of its line. A tuple (``(``) ends at its matching ``)`` within its line, or at
    the line's end (an emoticon's ``:(`` opens nothing for lines further on).

    ``budget``: characters the searches of the text's unbalanced values may still look at
    (each looks 20,000 characters ahead, so many of them would take long); once it is spent,
    the value runs to the end of the text (what is not looked at is masked, not shown)."""
    if budget[0] <= 0:
        return len(text)
    line_end = text.find("\n", start)
    if line_end < 0:
        line_end = len(text)
    tuple_ = text[start] == "("
    own = min(line_end if tuple_ else len(text), start + MAX_BRACKETED)
    limit = min(own, start + budget[0])
    end, looked = _matching(text, start, limit)
    ends = [line_end if end is None else end]
    if not tuple_:
        other, also = _matching(text, start, limit, by_kind=False)
        ends.append(line_end if other is None else other)
        end = None if other is None else end
        looked = max(looked, also)
    if end is None:
        budget[0] -= looked  # unbalanced: the next values may look at this text again
        if limit < own:  # the text's budget ran out first: the rest is masked
            return len(text)
    return max(ends)  # (values found whole don't overlap: one pass in all)


def _matching(text: str, start: int, limit: int, by_kind: bool = True) -> tuple[int | None, int]:
    """The end of the bracket at ``start``, or ``None`` if not found before ``limit``; and the
    characters looked at. ``by_kind``: a bracket closes only its own kind (a ``)`` in ``[1) a,
    2) b]`` closes nothing), and single quotes that open a string count too (after a bracket,
    a comma, a colon, ``=``, ``>``, a blank, or a string prefix after one of them: ``b'('``;
    not the apostrophe of ``can't``). Otherwise (the previous release's rule, for
    :func:`_closing_bracket`'s second look) ``[`` and ``{`` count against ``]`` and ``}``
    alike, and only double quotes."""
    opens, closes = ("[{(", "]})") if by_kind else ("[{", "]}")
    opened: list[str] = []
    quote = ""
    index = start
    while index < limit:
        char = text[index]
        if quote:
            if char == "\\":
                index += 1
            elif char == quote:
                quote = ""
        elif char == '"' or (by_kind and char == "'" and _opens_string(text, index)):
            quote = char
        elif char in opens:
            opened.append(char)
        elif char in closes and opened and (not by_kind or opened[-1] == _OPENER[char]):
            opened.pop()
            if not opened:
                return index + 1, index + 1 - start
        index += 1
    return None, index - start


def _opens_string(text: str, index: int) -> bool:
    before = text[index - 1]
    return before in _OPENS_QUOTE or (before in "bBuUrRfF" and text[index - 2] in _OPENS_QUOTE)


def bearer_tokens(text: str) -> str:
    """Mask the token of every ``Bearer <token>`` in ``text``."""
    return _BEARER.sub(_mask_bearer, text)


def _mask_bearer(found: re.Match[str]) -> str:
    if found.group("token") == MASK:
        return found.group(0)
    return f"{found.group('scheme')} {MASK}"


def mask_arguments(argv: list[str], excluded: Callable[[str], bool]) -> list[str]:
    """``argv`` with the values of options that ``excluded`` names masked: ``--api-key X``,
    ``--password=X``, ``token=X``."""
    masked: list[str] = []
    hide_next = False
    for text in argv:
        if hide_next:
            masked.append(MASK)
            hide_next = False
            continue
        name, sep, _value = text.partition("=")
        if excluded(name.lstrip("-")):
            if sep:
                masked.append(f"{name}={MASK}")
                continue
            hide_next = text.startswith("-")
        masked.append(text)
    return masked
