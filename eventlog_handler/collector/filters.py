"""Event queries: the ``filter`` and ``sort`` parameters of ``GET /api/v2/events``.

The filter language is a small subset of the service's: whitespace-separated terms, each either
``field:value`` or free text; double quotes group words (``source:"my app"``, ``"disk full"``).

=================  ==========================================================
``type:error``     the event type (exact)
``level:error``    ``data["@level"]`` (case-insensitive)
``project:ID``     the project id
``source:NAME``    the source / logger name (exact)
``reference:ID``   the ``reference_id`` (also ``reference_id:ID``)
``tag:NAME``       events carrying that tag
anything else      free text: a case-insensitive substring of the message, the source or an
                   error's type or message
=================  ==========================================================

Terms on different fields must all match; several values for the same field match any of them
(``type:error type:log`` lists both). ``AND`` and ``OR`` words are ignored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from eventlog_handler.collector.problems import HttpError

__all__ = ["EventQuery", "parse_filter", "parse_sort"]

_TERM_RE = re.compile(r'(?:(?P<field>[A-Za-z_]+):)?(?:"(?P<quoted>[^"]*)"?|(?P<bare>\S+))')
_FIELDS = {
    "type": "types",
    "level": "levels",
    "project": "project_ids",
    "source": "sources",
    "reference": "reference_ids",
    "reference_id": "reference_ids",
    "tag": "tags",
}


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
