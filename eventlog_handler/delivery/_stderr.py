"""What the engine says to the person running the program: one line on stderr at a time."""

from __future__ import annotations

import sys

from eventlog_handler.settings import DEFAULT_SERVER_URL, Settings, mask_secret


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
    """``text`` (which may quote the server) without any of ``secrets`` (the API key, a
    password in the server's URL) in it."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, mask_secret(secret))
    return text


def shown_server(settings: Settings) -> str:
    """The server as a line names it; the default one said to be the default (a deploy that
    forgot ``EVENTLOG_SERVER_URL`` is noticed)."""
    if settings.server_url != DEFAULT_SERVER_URL:
        return settings.shown_url
    return (
        f"{settings.shown_url} (the default: the local collector; set EVENTLOG_SERVER_URL or "
        f"server_url to send elsewhere)"
    )


_SAID: set[str] = set()


def say_unconfigured(settings: Settings) -> None:
    """Say once per process why nothing can be sent, when a key or URL is missing or malformed
    (the program runs on: its events are counted as dropped, ``unconfigured``)."""
    problem = settings.problem
    if problem is None or problem in _SAID:
        return
    _SAID.add(problem)
    say(
        f"eventlog_handler: nothing will be sent: {problem}. The program runs on; its events "
        f"are counted as dropped (unconfigured)."
    )
