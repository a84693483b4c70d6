"""Event queries: the ``filter`` and ``sort`` parameters of ``GET /api/v2/events``.

The filter language is a small subset of the service's: whitespace-separated terms, each either
``field:value`` or free text; double quotes group words (``source:"my app"``, ``"disk full"``).

=================  ==========================================================
``type:error``     the event type (exact)
``level:error``    ``data["@level"]`` (case-insensitive)
``project:ID``     the project id
``source:NAME``    the source / logger name (exact; ``source:shop.*`` for a prefix)
``reference:ID``   the ``reference_id`` (also ``reference_id:ID``)
``tag:NAME``       events carrying that tag
``stack:ID``       the events of one stack
``user:ID``        events of one user (``data["@user"]["identity"]``)
anything else      free text: a case-insensitive substring of the message, the source or an
                   error's type or message
=================  ==========================================================

Terms on different fields must all match; several values for the same field match any of them
(``type:error type:log`` lists both). ``AND`` and ``OR`` words are ignored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from eventlog_handler.collector._problems import HttpError

__all__ = ["FILTER_HELP", "EventQuery", "parse_filter", "parse_sort"]

_TERM_RE = re.compile(r'(?:(?P<field>[A-Za-z_]+):)?(?:"(?P<quoted>[^"]*)"?|(?P<bare>\S+))')
_FIELDS = {
    "type": "types",
    "level": "levels",
    "project": "project_ids",
    "source": "sources",
    "reference": "reference_ids",
    "reference_id": "reference_ids",
    "tag": "tags",
    "stack": "stack_ids",
    "user": "identities",
}

#: The filter terms, for help texts: ``(term, what it selects)``.
FILTER_HELP = (
    ("type:error", "events of a type (error, log, usage, ...)"),
    ("level:warn", "log events of a level (trace, debug, info, warn, error, fatal)"),
    ("source:app.db", "events from one source (the logger name); source:app.* by prefix"),
    ("tag:checkout", "events carrying a tag"),
    ("user:u-42", "events of one user (the @user identity)"),
    ("reference:ID", "the event with that reference id"),
    ("project:ID", "the events of one project"),
    ("stack:ID", "the events of one stack"),
    (
        '"disk full"',
        "free text (quoted: as one phrase), in the message, source, error types"
        " and error messages, ignoring case",
    ),
)


@dataclass
class EventQuery:
    """What to select from the stored events. Empty lists mean "no condition"."""

    organization_id: str | None = None
    scope_project_id: str | None = None
    types: list[str] = field(default_factory=list)
    levels: list[str] = field(default_factory=list)
    project_ids: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    reference_ids: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    stack_ids: list[str] = field(default_factory=list)
    identities: list[str] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    ascending: bool = False
    offset: int = 0
    limit: int = 10


def parse_filter(text: str, query: EventQuery | None = None) -> EventQuery:
    """Add the terms of a ``filter`` string to ``query`` (a new one by default)."""
    query = query if query is not None else EventQuery()
    for match in _TERM_RE.finditer(text or ""):
        name = (match.group("field") or "").lower()
        value = match.group("quoted")
        if value is None:
            value = match.group("bare") or ""
        if not name and value in ("AND", "OR"):
            continue
        attribute = _FIELDS.get(name)
        if attribute is None:
            term = match.group(0).strip().strip('"') if name else value
            if term:
                query.text.append(term.lower())
            continue
        if attribute == "levels":
            value = value.lower()
        getattr(query, attribute).append(value)
    return query


def parse_sort(text: str | None) -> bool:
    """``date`` → ascending (True), ``-date`` or nothing → newest first (False); else 400."""
    value = (text or "-date").strip()
    if value in ("-date", "date"):
        return value == "date"
    raise HttpError(
        400,
        "Only 'date' and '-date' sorts are supported.",
        errors={"sort": [f"Unsupported sort {value[:40]!r}."]},
    )
