"""Secrets in text: masked in every string an event carries, before it is stored or sent.

Data exclusions (:func:`eventlog_handler.wire._jsonsafe.is_excluded`) mask values by their *key*.
Secrets also travel inside text: a database URL in an exception message, a signed URL in
``@request``, an ``Authorization`` header pasted into a log line, the handler's own API key in a
stack trace. A :class:`Scrubber` masks, in any string:

- URL credentials, any scheme: ``postgres://admin:hunter2@db/x`` →
  ``postgres://admin:[excluded]@db/x`` (the user name stays, the password goes);
- values of secret-named assignments: ``?api_key=abc&page=2`` → ``?api_key=[excluded]&page=2``,
  ``password: hunter2``, ``"token": "abc"``, ``Password=abc;Host=db`` (the name matched like a
  data key, so ``page=2`` or ``author: ann`` stay as they are);
- authentication headers written as text: ``Authorization: Bearer abc`` →
  ``Authorization: Bearer [excluded]``, and a lone ``Bearer <token>``;
- the given secrets themselves (the API key of the engine) wherever they appear.

A quoted value is masked up to its closing quote, a ``[...]`` or ``{...}`` value up to its
closing bracket (to the end of the line when there is none), and a bare value up to white
space, a quote, ``&``, ``;``, ``,``, ``<``, ``>`` or a closing bracket.

:meth:`Scrubber.event` applies :meth:`Scrubber.text` to every string of a JSON-ready event (its
message, source, tags, ``data`` at any depth, ``@simple_error`` with its data, inner chain and
stack trace, ``@request``, ``@user``, ``@environment``, ``@trace`` lines, and keys) and masks
the values of excluded keys where keys are the user's (``data``, ``@user.data``, the headers,
cookies and query of ``@request``, ``@simple_error.data``): exclusions that arrived after an
event was captured, the service's ``@@DataExclusions``, still apply. The keys of the service's
own objects (``@simple_error.type``, ``@user.name``, ...) are never masked.

Scrubbing runs on the delivery worker, for every event: a string without ``:``, ``=``,
``bearer`` or a given secret is returned as it is after a few substring checks, and what was
found about each dict key is remembered. So is the result for the last texts that had to be
searched (:data:`_MEMO_CHARS` characters of them at most): an error storm repeats one stack
trace thousands of times, and a trace log line travels with up to 25 consecutive errors. And so
is the result for each frame of ``@frames``, by place, used again for a frame equal to the one
remembered: the frames of an error that comes again, with their source lines, are most of its
text.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from typing import Any

__all__ = ["MIN_SECRET_LENGTH", "Scrubber", "is_card_number", "mask_card_numbers"]

from eventlog_handler.settings import DEFAULT_DATA_EXCLUSIONS, MASK, Settings
from eventlog_handler.wire._cards import is_card_number, mask_card_numbers
from eventlog_handler.wire._frames import copy_frame
from eventlog_handler.wire._jsonsafe import ExclusionMatcher, exclusion_matcher
from eventlog_handler.wire._spans import (
    MAX_BRACKETED_TEXT,
    bearer_tokens,
    mask_arguments,
    url_passwords,
    value_span,
)

#: Dict keys a scrubber remembers what it found about.
_CACHE_KEYS = 10_000
#: Texts whose scrubbed result a scrubber remembers, at most (and characters of them, at most);
#: past either bound the memo starts over. Texts longer than :data:`_MEMO_LONGEST` are not kept.
_MEMO_TEXTS = 4_096
_MEMO_CHARS = 2_000_000
_MEMO_LONGEST = 100_000
#: Frames whose scrubbed result a scrubber remembers (by file, line and function).
_MEMO_FRAMES = 512
#: Given secrets shorter than this are not searched for in text (they would mask common words).
MIN_SECRET_LENGTH = 6

#: Top-level fields of an event that carry no free text.
_NOT_TEXT = frozenset(("type", "date", "reference_id", "count", "value", "@level"))


class Scrubber:
    """Masks secrets in text and in JSON-ready events.

    ``secrets``: strings to mask wherever they appear (the API key; ``None`` and strings shorter
    than :data:`MIN_SECRET_LENGTH` are ignored). ``exclusions``: the words and ``*`` patterns
    that name secret keys (data keys, and the names in ``name=value`` text). Build one per
    engine, and a new one when the exclusions change (construction is cheap: the key matcher
    of each exclusions tuple is cached).
    """

    __slots__ = (
        "_clean_sources",
        "_clean_values",
        "_excluded",
        "_flat_keys",
        "_frames_memo",
        "_key_info",
        "_memo",
        "_memo_chars",
        "_secrets",
        "_short",
    )

    def __init__(
        self,
        secrets: Iterable[str | None] = (),
        exclusions: Collection[str] = DEFAULT_DATA_EXCLUSIONS,
    ) -> None:
        found = {secret for secret in secrets if secret and len(secret) >= MIN_SECRET_LENGTH}
        self._secrets: tuple[str, ...] = tuple(sorted(found, key=len, reverse=True))
        self._excluded: ExclusionMatcher = exclusion_matcher(tuple(exclusions))
        self._key_info: dict[str, tuple[int, str | None]] = {}
        #: Data keys, and what :meth:`flat_event` does with their values.
        self._flat_keys: dict[str, int] = {}
        #: Texts that had to be searched, with their result (``None``: nothing to mask).
        self._memo: dict[str, str | None] = {}
        self._memo_chars = 0
        #: Frames (``@frames``) seen, by place: the frame as it came, and as scrubbed (``None``:
        #: the same).
        self._frames_memo: dict[Any, tuple[dict[str, Any], dict[str, Any] | None]] = {}
        #: Strings shorter than this, without ``:`` or ``=``, hold nothing to mask: no given
        #: secret, no card number (13 digits), no bearer token (15 characters with its scheme).
        self._short = min((13, *(len(secret) for secret in self._secrets)))
        #: Sources (logger names) found to hold nothing to mask.
        self._clean_sources: set[str] = set()
        #: Per data key, the last text found clean: not searched again when it comes back.
        self._clean_values: dict[str, str] = {}

    @classmethod
    def for_settings(
        cls,
        settings: Settings,
        secrets: Iterable[str | None] = (),
        exclusions: Collection[str] = (),
    ) -> Scrubber:
        """The scrubber of ``settings``: its API key plus ``secrets``, its data exclusions
        plus ``exclusions`` (the service's ``@@DataExclusions``)."""
        return cls((settings.api_key, *secrets), (*settings.data_exclusions, *exclusions))

    def __repr__(self) -> str:
        return f"<Scrubber secrets={len(self._secrets)}>"

    # -- text ---------------------------------------------------------------------------------

    def text(self, text: str, repeats: bool = False) -> str:
        """``text`` with its secrets masked (the same object when there is nothing to mask).

        Texts with ``:`` or ``=`` (the costly search) are remembered; with ``repeats`` (a
        list's lines: an error's source lines and trace lines, which come again in event
        after event) also those long enough for the card number search. Distinct texts, such
        as ids in data, are not, so that they don't push the repeated ones out."""
        if ":" not in text and "=" not in text and (not repeats or len(text) < 13):
            return self._search(text)  # a few substring checks: nothing worth remembering
        memo = self._memo
        known = memo.get(text, text)
        if known is not text:
            return text if known is None else known
        scrubbed = self._search(text)
        size = len(text)
        if size <= _MEMO_LONGEST:
            if len(memo) >= _MEMO_TEXTS or self._memo_chars + size > _MEMO_CHARS:
                memo.clear()
                self._memo_chars = 0
            memo[text] = None if scrubbed is text else scrubbed
            self._memo_chars += size
        return scrubbed

    def _search(self, text: str) -> str:
        """:meth:`text`, searched for (not remembered)."""
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, MASK)
        if ":" in text:
            if "@" in text and "://" in text:
                text = url_passwords(text)
            text = self._assignments(text)
        elif "=" in text:
            text = self._assignments(text)
        if "earer" in text or "EARER" in text:
            text = bearer_tokens(text)
        if len(text) >= 13:
            text = mask_card_numbers(text)
        return text

    def _assignments(self, text: str) -> str:
        """Mask the values after secret names: ``name=value``, ``"name": "value"``, ..."""
        pieces: list[str] = []
        done = 0
        excluded = self._excluded
        budget = [MAX_BRACKETED_TEXT]  # for all the bracketed values of the text together
        colon, equals = text.find(":"), text.find("=")
        while colon >= 0 or equals >= 0:  # each separator, left to right (str.find is fast)
            if equals < 0 or 0 <= colon < equals:
                at, colon = colon, text.find(":", colon + 1)
            else:
                at, equals = equals, text.find("=", equals + 1)
            after = at + 1
            if text.startswith(">", after) and text[at] == "=":  # ``=>``
                after += 1
            if at < done or text.startswith("=", after):  # masked already, or ``==``, ``:=``
                continue
            end = at  # the name ends before blanks and a closing quote
            while end > done and text[end - 1] in " \t":
                end -= 1
            if end > done and text[end - 1] in "\"'":
                end -= 1
            start = end
            while start > done and (text[start - 1].isalnum() or text[start - 1] in "_.-"):
                start -= 1
            if start == end or not excluded(text[start:end]):
                continue
            span = value_span(text, after, budget)
            if span is None:
                continue
            if text[at] == ":" and text[start:end].lower() in _COOKIE_HEADERS:
                span = _cookie_line(text, span)
            pieces.append(text[done : span[0]])
            pieces.append(MASK)
            done = span[1]
        if not pieces:
            return text
        pieces.append(text[done:])
        return "".join(pieces)

    # -- events -------------------------------------------------------------------------------

    def event(self, event: dict[str, Any], *, copy: bool = False) -> dict[str, Any]:
        """Mask the secrets of a JSON-ready event, in place (the default) or in a copy.

        With ``copy=True`` the given event is left as it was; the copy shares the parts that
        had nothing to mask.
        """
        result = dict(event) if copy else event
        text = self.text
        for key, value in event.items():
            if key in _NOT_TEXT:
                continue
            if type(value) is str:
                scrubbed: Any = text(value)
            else:
                shape = _TOP_SHAPES.get(key, _PLAIN)
                scrubbed = self._dict(value, copy, 1, shape, shape in _USER_DATA)
            if scrubbed is not value:
                result[key] = scrubbed
        return result

    def flat_event(self, event: dict[str, Any], plain_message: bool = False) -> dict[str, Any]:
        """:meth:`event` (in place) for the common log event: its message, source and the
        plain values of a flat ``data``. Anything else (a user, tags, nested data) goes
        through :meth:`event`. About a third of the cost for the same result.

        A message with nothing to mask but perhaps a card number (:meth:`_plain`) and fewer
        than 13 digits (:func:`_few_digits`) is not searched: the card number search is the
        costly part, and most messages are distinct, so remembering them would not help.
        ``plain_message``: the caller knows the message holds nothing to mask (a batch's
        messages looked at together, :meth:`plain_texts`), so it is not looked at again.
        """
        if "@user" in event or "tags" in event or len(event) > 7:
            return self.event(event)
        data = event.get("data")
        text = self.text
        if data is not None:
            if type(data) is not dict:
                return self.event(event)
            keys, short, clean = self._flat_keys, self._short, self._clean_values
            for key, value in data.items():
                kind = type(value)
                if kind is dict or kind is list:
                    return self.event(event)
                found = keys.get(key)
                if found is None:
                    if type(key) is not str:
                        return self.event(event)
                    found = self._learn_flat_key(key)
                if found == _KEY_TEXT:  # a key that holds a secret itself
                    return self.event(event)
                if value is None:
                    continue
                if found == _MASKED:
                    data[key] = MASK
                elif kind is str and not (
                    len(value) < short and ":" not in value and "=" not in value
                ):
                    if clean.get(key) is value:
                        continue  # the very text found clean last time (``@version``)
                    scrubbed = text(value)
                    if scrubbed is not value:
                        data[key] = scrubbed
                    elif len(value) <= 1_000 and len(clean) < _CACHE_KEYS:
                        clean[key] = value  # (up to 1,000 characters)
        message = event.get("message")
        if (
            not plain_message
            and type(message) is str
            and not (_few_digits(message) and self._plain(message))
        ):
            event["message"] = text(message)
        source = event.get("source")
        if type(source) is str and source not in self._clean_sources:
            scrubbed = text(source)
            if scrubbed is source and len(self._clean_sources) < _CACHE_KEYS:
                self._clean_sources.add(source)
            event["source"] = scrubbed
        return event

    def _learn_flat_key(self, key: str) -> int:
        """What :meth:`flat_event` does with a data key (remembered): masks its value
        (an excluded name, ``@`` keys included), hands the event to :meth:`event` (the key
        itself holds something to mask), or neither."""
        info = self._key_info.get(key) or self._learn_key(key)
        found = _KEY_TEXT if info[1] is not None else _MASKED if self._excluded(key) else _PLAIN
        if len(self._flat_keys) < _CACHE_KEYS:
            self._flat_keys[key] = found
        return found

    def plain_texts(self, texts: list[Any], longest: int | None = None) -> bool:
        """Whether no text of ``texts`` holds anything to mask (:meth:`text` would return each
        unchanged), looked at all together: a batch's messages cost one join and a few scans
        instead of a look at each. ``False`` also when one is not exactly a ``str`` or is longer
        than ``longest`` (the caller cuts those, with a mark), or when the look can't tell
        (non-ASCII text, a separator somewhere, a line with 13 digits or more): then each is
        looked at alone.

        Sound because the texts are joined with newlines: a text's secret, separator or bearer
        scheme is in the joined text, and a card number (ASCII digits, spaces and dashes) lies
        within one line of it, which would hold 13 digits or more.
        """
        if not _STR.issuperset(map(type, texts)):
            # Not a string (an error's ready event: None), or a subclass of str: what is sent
            # is its str(), which need not be the characters a join sees.
            return False
        joined = "\n".join(texts)
        if not joined.isascii() or not self._plain(joined):
            return False
        if longest is not None and texts and max(map(len, texts)) > longest:
            return False
        digits = joined.encode().translate(None, _NOT_DIGIT_OR_NEWLINE)
        return max(map(len, digits.split(b"\n"))) < 13

    def _plain(self, text: str) -> bool:
        """Whether ``text`` holds nothing to mask but, perhaps, a card number: no ``:`` or
        ``=`` (URL credentials and assignments need one), no ``bearer``, no given secret."""
        if ":" in text or "=" in text or "earer" in text or "EARER" in text:
            return False
        for secret in self._secrets:  # noqa: SIM110 - a loop: no generator per message
            if secret in text:
                return False
        return True

    def data(self, value: Any) -> Any:
        """A copy of a JSON value with its text scrubbed and the values of excluded keys
        masked at any depth (parts with nothing to mask are shared, not copied)."""
        return self._any(value, True, True, 0)

    def _any(self, value: Any, copy: bool, keyed: bool, depth: int) -> Any:
        """Any JSON value: strings scrubbed; when ``keyed``, values of excluded keys masked."""
        kind = type(value)
        if kind is str:
            return self.text(value)
        if kind is dict:
            return self._dict(value, copy, depth, _KEYED if keyed else _PLAIN, keyed)
        if kind is list or kind is tuple:
            if depth > _MAX_DEPTH:
                return MASK
            items: Any = value
            text = self.text
            for index, item in enumerate(value):
                if type(item) is str:  # lines of text (source, trace): one call each, not two
                    scrubbed = text(item, True)
                else:
                    scrubbed = self._any(item, copy, keyed, depth + 1)
                if scrubbed is not item:
                    if items is value and (copy or kind is tuple):
                        items = list(value)
                    items[index] = scrubbed
            return tuple(items) if kind is tuple and items is not value else items
        return value

    def _dict(self, mapping: Any, copy: bool, depth: int, shape: int, keyed: bool) -> Any:
        """A dict of a known ``shape``: its strings scrubbed, its keys scrubbed as text, the
        values of excluded keys masked where the shape holds user data; updated in place, or
        copied when ``copy`` and something changed. Not a dict: as any value."""
        if type(mapping) is not dict:
            return self._any(mapping, copy, keyed, depth)
        if depth > _MAX_DEPTH:
            return MASK
        text = self.text
        keys = self._key_info
        changes: dict[Any, Any] | None = None
        renames: dict[str, str] | None = None
        for key, value in mapping.items():
            if type(key) is str:  # (a key that is not a string is matched like no key)
                info = keys.get(key) or self._learn_key(key)
                if info[1] is not None:
                    if renames is None:
                        renames = {}
                    renames[key] = info[1]
                if shape == _DATA and info[0] == _AT_KEY:
                    inner = _DATA_SHAPES.get(key, _KEYED)
                    if inner == _FRAMES:
                        scrubbed = self._frames(value, copy, depth + 1)
                    else:
                        scrubbed = self._dict(value, copy, depth + 1, inner, inner in _USER_DATA)
                    if scrubbed is not value:
                        if changes is None:
                            changes = {}
                        changes[key] = scrubbed
                    continue
                if keyed and info[0] == _EXCLUDED:
                    if value != MASK:
                        if changes is None:
                            changes = {}
                        changes[key] = MASK
                    continue
            kind = type(value)
            if kind is str:
                if shape == _ENVIRONMENT and key == "command_line":
                    scrubbed = text(" ".join(mask_arguments(value.split(" "), self._excluded)))
                    if scrubbed == value:
                        scrubbed = value
                else:
                    scrubbed = text(value)
            elif kind is dict or kind is list or kind is tuple:
                inner_shape = _INNER_SHAPES.get((shape, key))
                if inner_shape is None:
                    scrubbed = self._any(value, copy, keyed, depth + 1)
                elif inner_shape == _FRAMES:
                    scrubbed = self._frames(value, copy, depth + 1)
                else:
                    scrubbed = self._dict(
                        value, copy, depth + 1, inner_shape, inner_shape in _USER_DATA
                    )
            else:
                continue
            if scrubbed is not value:
                if changes is None:
                    changes = {}
                changes[key] = scrubbed
        if changes is None and renames is None:
            return mapping
        return _updated(mapping, changes, renames, copy)

    def _frames(self, frames: Any, copy: bool, depth: int) -> Any:
        """A list of frames (``@frames``), as :meth:`_any` scrubs it (keys matched), with the
        result for each frame remembered by its content: an error that comes again, or the
        site of a log call, brings the same frames (and their source lines) in event after
        event, and comparing a frame with the one remembered costs a small part of walking
        it. A frame with locals (``vars``) is walked each time."""
        if type(frames) is not list or depth + 2 > _MAX_DEPTH:  # (a frame's lines: depth + 2)
            return self._any(frames, copy, True, depth)
        memo = self._frames_memo
        items = frames
        for index, frame in enumerate(frames):
            place = None
            if type(frame) is dict and "vars" not in frame:
                place = (frame.get("filename"), frame.get("lineno"), frame.get("function"))
                if (
                    type(place[0]) is not str
                    or type(place[1]) is not int
                    or type(place[2]) is not str
                ):
                    place = None  # not a frame as made: walked
            if place is None:
                scrubbed = self._any(frame, copy, True, depth + 1)
            else:
                known = memo.get(place)
                if known is not None and known[0] == frame:
                    scrubbed = frame if known[1] is None else copy_frame(known[1])
                else:
                    seen = copy_frame(frame) if _is_plain_frame(frame) else None
                    scrubbed = self._dict(frame, copy, depth + 1, _KEYED, True)
                    if seen is not None and type(scrubbed) is dict:
                        if len(memo) >= _MEMO_FRAMES:
                            memo.clear()
                        memo[place] = (seen, None if scrubbed == seen else copy_frame(scrubbed))
            if scrubbed is not frame:
                if items is frames and copy:
                    items = list(frames)
                items[index] = scrubbed
        return items

    def _learn_key(self, key: str) -> tuple[int, str | None]:
        """What a dict key is (excluded, a known ``@`` key, or neither) and its scrubbed text
        when that differs; remembered (keys repeat endlessly)."""
        kind = _AT_KEY if key.startswith("@") else _EXCLUDED if self._excluded(key) else _OTHER
        scrubbed = self.text(key)
        info = (kind, None if scrubbed == key else scrubbed)
        if len(self._key_info) < _CACHE_KEYS:
            self._key_info[key] = info
        return info


def _updated(
    mapping: dict[Any, Any],
    changes: dict[Any, Any] | None,
    renames: dict[str, str] | None,
    copy: bool,
) -> dict[Any, Any]:
    """``mapping`` with ``changes`` and ``renames`` applied: in place, or to a copy."""
    if changes is None and renames is None:
        return mapping
    target = dict(mapping) if copy else mapping
    if changes:
        target.update(changes)
    if renames:
        for key, new_key in renames.items():
            target[new_key] = target.pop(key)
    return target


# The shapes of what an event holds. Keys are matched against the exclusions where a shape holds
# user data (``_KEYED``, and ``data`` but its known ``@`` keys); the keys of the service's own
# objects (``@simple_error``, ``@user``, ``@request``, ``@environment``) are not.
_PLAIN, _KEYED, _DATA, _ERROR, _USER, _REQUEST = range(6)
#: A list of frames: as ``_KEYED``, each frame's result remembered (:meth:`Scrubber._frames`).
_FRAMES = 6
#: ``@environment``: as ``_PLAIN``, but its ``command_line``'s options are matched against the
#: exclusions (``--ssn 123``: :func:`~eventlog_handler.wire._spans.mask_arguments`).
_ENVIRONMENT = 7
#: What a key is: excluded (its value is masked where keys are the user's), ``@...``, neither.
_EXCLUDED, _AT_KEY, _OTHER = range(3)
#: Shapes whose keys are the user's: matched against the exclusions.
_USER_DATA = (_KEYED, _DATA)
#: Top-level fields of an event, by shape.
_TOP_SHAPES = {"data": _DATA, "@simple_error": _ERROR, "@user": _USER, "@request": _REQUEST}
#: The known keys of ``data``, by shape (other ``@`` keys hold user data).
_DATA_SHAPES = {
    "@simple_error": _ERROR,
    "@user": _USER,
    "@request": _REQUEST,
    "@environment": _ENVIRONMENT,
    "@trace": _PLAIN,
    "@stack": _PLAIN,
    "@frames": _FRAMES,
}
#: The parts of the service's objects that are shaped themselves.
_INNER_SHAPES = {
    (_ERROR, "data"): _KEYED,
    (_ERROR, "inner"): _ERROR,
    (_USER, "data"): _KEYED,
    **{(_REQUEST, part): _KEYED for part in ("headers", "cookies", "query_string", "post_data")},
    (_REQUEST, "data"): _KEYED,
    (_KEYED, "@frames"): _FRAMES,  # an error's frames, in ``@simple_error.data``
}

#: What :meth:`Scrubber.flat_event` does with a data key's value (besides :data:`_PLAIN`,
#: nothing): mask it, or leave the event to :meth:`Scrubber.event` (the key needs masking).
_MASKED, _KEY_TEXT = 1, 2

_DIGITS = b"0123456789"
_STR = frozenset({str})
#: Every byte but the digits and the newline (:meth:`Scrubber.plain_texts` keeps those).
_NOT_DIGIT_OR_NEWLINE = bytes(byte for byte in range(256) if byte not in b"0123456789\n")


def _is_plain_frame(frame: dict[Any, Any]) -> bool:
    """Whether a frame holds only text, numbers and lists of text (as made by
    :func:`~eventlog_handler.wire._frames.resolve`): one whose result may be remembered."""
    for key, value in frame.items():
        kind = type(value)
        if type(key) is not str:
            return False
        if kind is list:
            if not all(type(line) is str for line in value):
                return False
        elif kind not in _FRAME_SCALARS:
            return False
    return True


_FRAME_SCALARS = frozenset({str, int, bool, float, type(None)})


#: Header names whose bare value is a list of ``name=value`` pairs, all secret.
_COOKIE_HEADERS = frozenset({"cookie", "set-cookie"})
#: The pairs after a cookie header's first one: ``; name=value`` (``; HttpOnly`` ends them).
_COOKIE_PAIRS = re.compile(r"(?:;[ \t]*[^\s;=]+=[^\s;]*)*")


def _cookie_line(text: str, span: tuple[int, int]) -> tuple[int, int]:
    """The span of a ``Cookie:`` header's value: a bare ``name=value`` and the ``; name=value``
    pairs after it (every cookie); anything else (quoted, bracketed, prose) is as
    :func:`value_span` found it."""
    start, end = span
    if text[start - 1] in "\"'" or text[start] in "[{(" or "=" not in text[start:end]:
        return span
    found = _COOKIE_PAIRS.match(text, end)
    return (start, end if found is None else found.end())


def _few_digits(text: str) -> bool:
    """Whether ``text`` has fewer than 13 digits, so no card number (an ASCII text only: a
    card number's digits may be any Unicode digits, and counting those costs as much as the
    search)."""
    if len(text) < 13:
        return True
    if not text.isascii():
        return False
    ascii_text = text.encode()
    return len(ascii_text) - len(ascii_text.translate(None, _DIGITS)) < 13


#: Nesting past which containers are replaced by the mask rather than walked (JSON-safe events
#: are at most 10 deep; this only guards against hand-made cycles and recursion limits).
_MAX_DEPTH = 64
