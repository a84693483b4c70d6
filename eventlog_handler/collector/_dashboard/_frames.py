"""What an error's frames and its stack's signature say, in words and HTML.

- :func:`frames_html`: the frames an event carries (``data["@frames"]`` of each error, or of a
  log at ``ERROR`` without an exception): the application's own expanded, library frames
  collapsed (each a ``<details>`` a click opens), with the source lines around the failing
  line (that line marked) and the locals when they were sent;
- :func:`culprit`: where a stack's errors come from (module and function), for the stack list;
- :func:`why_grouped`: why a stack's events are one stack, from its signature's parts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from eventlog_handler.collector._dashboard._layout import clip, e

__all__ = ["FRAMES_KEY", "culprit", "frames_html", "why_grouped"]

FRAMES_KEY = "@frames"
_FRAMES = 50
_LINE = 300
_VARS = 50


def _source(frame: Mapping[str, Any]) -> str:
    before = frame.get("pre_context")
    line = frame.get("context_line")
    after = frame.get("post_context")
    if not isinstance(line, str):
        return ""
    lineno = frame.get("lineno")
    number = lineno if isinstance(lineno, int) else 0
    before = [str(item) for item in before] if isinstance(before, list) else []
    after = [str(item) for item in after] if isinstance(after, list) else []
    rows = []
    start = number - len(before)
    for offset, text in enumerate([*before, line, *after]):
        current = start + offset
        mark = ' class="here"' if offset == len(before) else ""
        rows.append(
            f'<tr{mark}><td class="lineno">{current if number else ""}</td>'
            f"<td><code>{e(clip(text, _LINE))}</code></td></tr>"
        )
    return f'<table class="source">{"".join(rows)}</table>'


def _locals(frame: Mapping[str, Any]) -> str:
    values = frame.get("vars")
    if not isinstance(values, dict) or not values:
        return ""
    rows = []
    for index, (name, value) in enumerate(values.items()):
        if index == _VARS:
            rows.append(f'<tr><td colspan="2">… {len(values) - _VARS} more</td></tr>')
            break
        rows.append(
            f"<tr><th>{e(clip(name, 100))}</th><td><code>{e(clip(value, 1000))}</code></td></tr>"
        )
    return f'<h4>Locals</h4><table class="kv locals">{"".join(rows)}</table>'


def frames_html(frames: Any, heading: str = "Frames") -> str:
    """The frames, innermost last (as sent: outermost first), as collapsible blocks."""
    if not isinstance(frames, list) or not frames:
        return ""
    shown = [frame for frame in frames if isinstance(frame, dict)][-_FRAMES:]
    app = sum(1 for frame in shown if frame.get("in_app") is True)
    blocks = []
    for frame in shown:
        in_app = frame.get("in_app") is True
        where = ".".join(str(part) for part in (frame.get("module"), frame.get("function")) if part)
        place = str(frame.get("filename") or "")
        if isinstance(frame.get("lineno"), int) and frame["lineno"]:
            place += f", line {frame['lineno']}"
        kind, opened, badge = (
            ("app", " open", ' <span class="badge">app</span>')
            if in_app
            else (
                "library",
                "",
                "",
            )
        )
        blocks.append(
            f'<details class="frame {kind}"{opened}>'
            f"<summary><code>{e(clip(where or '?', 300))}</code> "
            f"<small>{e(clip(place, 300))}</small>{badge}</summary>"
            f"{_source(frame)}{_locals(frame)}</details>"
        )
    library = len(shown) - app
    summary = f"{app} of the application, {library} of libraries (collapsed: click to open)"
    return (
        f'<div class="frames"><h3>{e(heading)} <small>{e(summary)}</small></h3>'
        + "".join(blocks)
        + "</div>\n"
    )


def _innermost(frames_text: str) -> str:
    last = frames_text.rsplit(" > ", 1)[-1].strip()  # the separator: "<module>" has a ">"
    return last.removeprefix("in ").removeprefix("at ").strip()


def culprit(signature: Mapping[str, Any]) -> str:
    """Where a stack's events come from, in a few words (``in shop.checkout.total``)."""
    frames = signature.get("frames")
    if isinstance(frames, str) and frames:
        return f"in {_innermost(frames)}"
    site = signature.get("site")
    if isinstance(site, str) and site:
        return site
    for key in ("Method", "Source", "source", "ExceptionType", "type"):
        value = signature.get(key)
        if isinstance(value, str) and value:
            return value
    return ""


#: Signature parts and how they read: ``(key, words)``.
_PARTS = (
    ("type", "the exception type {}"),
    ("ExceptionType", "the exception type {}"),
    ("frames", "the application's frames ({})"),
    ("Method", "the innermost method {}"),
    ("Frames", "the same frames (methods, not line numbers)"),
    ("StackTrace", "the same stack trace text, line numbers included"),
    ("source", "the logger {}"),
    ("Source", "the source {}"),
    ("site", "the call site ({})"),
    ("message", "the message template “{}”"),
    ("Type", "the event type {}"),
)


def why_grouped(signature: Mapping[str, Any]) -> str:
    """Why the events of a stack with this signature are one stack, in a sentence."""
    known = dict(_PARTS)
    parts = []
    for key, value in signature.items():
        words = known.get(str(key))
        text = clip(value, 200)
        parts.append(words.format(text) if words else f"{key} = {text}")
    if not parts:
        return ""
    sentence = "Grouped because its events share " + "; ".join(parts) + "."
    if "StackTrace" in signature:
        sentence += " A line added above the failing code starts a new stack."
    elif "frames" in signature or "site" in signature:
        sentence += " Line numbers and library frames do not count: a deploy keeps the stack."
    return sentence
