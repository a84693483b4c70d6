"""What the engine says to the person running the program: one line on stderr at a time."""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Iterator

from eventlog_handler.settings import (
    DEFAULT_SERVER_URL,
    MASK,
    Settings,
    mask_secret,
    shown_url,
    url_password,
)


def say(message: str) -> None:
    """Write one line to stderr (the package's own diagnostics; never raises)."""
    try:
        stream = sys.stderr
        if stream is not None:
            stream.write(message + "\n")
            stream.flush()
    except Exception:  # pragma: no cover - stderr closed at exit
        pass


def redact(text: str, *secrets: str | None) -> str:
    """``text`` (which may quote the server) without any of ``secrets`` in it.

    ``secrets`` are :attr:`Settings.secrets <eventlog_handler.settings.Settings.secrets>`: the
    API key first, which keeps its first 4 characters (:func:`mask_secret`: enough to tell two
    keys apart), then a password in the server's URL (or a token as its user), masked whole
    (``[excluded]``, as the line's own ``https://ci:[excluded]@host`` shows it): a password's
    first characters are a good part of it. A secret that stands in a URL of ``text`` as its
    password (or as its user) is masked whole too, wherever it is, and every URL in ``text``
    is shown as :func:`shown_url` shows it.
    """
    whole = _url_credentials(text)
    for index, secret in enumerate(secrets):
        if secret:
            masked = MASK if index or secret in whole else mask_secret(secret)
            text = text.replace(secret, masked)
    return _URL.sub(_shown, text)


#: A URL in a text: a scheme, ``://``, and what follows up to a blank, a quote or a bracket.
_URL = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s\"'<>`]+")
#: What may end a sentence right after a URL and is not part of it.
_TRAILING = ".,;:!?)]}"


def _url_credentials(text: str) -> set[str]:
    """The password (or, without one, the user: a token) of every URL in ``text``."""
    found: set[str] = set()
    for match in _URL.finditer(text):
        url = match.group().rstrip(_TRAILING)
        credential = url_password(url) or url_password(url, "username")
        if credential and credential != MASK:
            found.add(credential)
    return found


def _shown(match: re.Match[str]) -> str:
    url = match.group()
    bare = url.rstrip(_TRAILING)
    if url[len(bare) : len(bare) + 1] == "]" and (bare + "]").endswith(MASK):
        bare += "]"  # the end of a mask already in place, not a sentence's bracket
    return shown_url(bare) + url[len(bare) :]


def shown_server(settings: Settings) -> str:
    """The server as a line names it; the default one said to be the default (a deploy that
    forgot ``EVENTLOG_SERVER_URL`` is noticed), only when it came from the default: not when
    ``server_url`` or ``EVENTLOG_SERVER_URL`` gave that URL."""
    if settings.server_url != DEFAULT_SERVER_URL or not settings.server_url_defaulted:
        return settings.shown_url
    return (
        f"{settings.shown_url} (the default: the local collector; set EVENTLOG_SERVER_URL or "
        f"server_url to send elsewhere)"
    )


_SAID: set[str] = set()
#: Whether this process is running its parent's ``setup()``, whose settings the parent has
#: spoken of.
_PARENT_SAID = False


@contextlib.contextmanager
def parent_said_it() -> Iterator[None]:
    """While this process runs its parent's ``setup()`` (a ``multiprocessing`` child): what is
    wrong with its settings was said by the parent, with the same arguments and environment.
    (A ``setup()`` of the child's own, later, says what is wrong with it.)"""
    global _PARENT_SAID
    _PARENT_SAID = True
    try:
        yield
    finally:
        _PARENT_SAID = False


def say_once(key: str, message: str) -> None:
    """:func:`say` ``message``, the first time ``key`` comes in this process only."""
    if key not in _SAID:
        _SAID.add(key)
        say(message)


def say_unconfigured(settings: Settings) -> None:
    """Say once per process why nothing can be sent, when a key or URL is missing or malformed
    (the program runs on: its events are counted as dropped, ``unconfigured``), and which
    malformed ``EVENTLOG_*`` variables were ignored; not while a child runs its parent's
    ``setup()`` (:func:`parent_said_it`): a pool of 8 would say it 9 times."""
    if _PARENT_SAID:
        return
    for line in settings.ignored_environment:
        say_once(line, f"eventlog_handler: {line}")
    problem = settings.problem
    if problem is not None:
        say_once(
            problem,
            f"eventlog_handler: nothing will be sent: {problem}. The program runs on; its "
            f"events are counted as dropped (unconfigured).",
        )


def say_capture_failed(counter: str | None, text: str, settings: Settings) -> None:
    """Say once per process that a log call (``counter`` ``None``: an exception to report)
    could not be made an event (``text``: the failure): the event is lost, and counted only in
    ``counter``."""
    what = "a log call" if counter is not None else "an exception to report"
    counted = f"it is counted in {counter}" if counter is not None else "it is not sent"
    say_once(
        "capture failed",
        f"eventlog_handler: {what} could not be made an event "
        f"({redact(text, *settings.secrets)}); {counted}, and further ones are not said.",
    )
