"""Typed results of the service's API: :class:`Project`, :class:`Token` and
:class:`ProjectConfig`."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
from collections.abc import Mapping
from typing import Any

from eventlog_handler.settings import mask_secret
from eventlog_handler.wire._dates import parse_date


def _optional_date(value: Any) -> _dt.datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return parse_date(value)
    except ValueError:
        return None


@dataclasses.dataclass(frozen=True)
class Project:
    """A project of the caller, as ``GET /api/v2/projects`` lists it.

    Fields the service sends beyond those below are kept in :attr:`extra`.
    """

    id: str
    name: str = ""
    organization_id: str = ""
    organization_name: str = ""
    created_utc: _dt.datetime | None = None
    delete_bot_data_enabled: bool = False
    is_configured: bool = False
    stack_count: int = 0
    event_count: int = 0
    has_premium_features: bool = False
    has_slack_integration: bool = False
    extra: dict[str, Any] = dataclasses.field(default_factory=dict, compare=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Project:
        """A project from its JSON object; raises :class:`ValueError` without an ``id``."""
        if not isinstance(data, Mapping) or not isinstance(data.get("id"), str):
            raise ValueError(f"not a project object: {data!r:.200}")
        known = {field.name for field in dataclasses.fields(cls)} - {"extra"}
        values: dict[str, Any] = {}
        for name in known:
            if name in data and data[name] is not None:
                values[name] = data[name]
        values["created_utc"] = _optional_date(data.get("created_utc"))
        extra = {key: value for key, value in data.items() if key not in known}
        return cls(**values, extra=extra)


@dataclasses.dataclass(frozen=True)
class Token:
    """A token the service generated. :attr:`id` is the key; ``repr`` masks it."""

    id: str = dataclasses.field(repr=False)
    organization_id: str = ""
    project_id: str = ""
    scopes: tuple[str, ...] = ()
    is_disabled: bool = False
    created_utc: _dt.datetime | None = None
    updated_utc: _dt.datetime | None = None
    notes: str | None = None
    extra: dict[str, Any] = dataclasses.field(default_factory=dict, compare=False, repr=False)

    def __repr__(self) -> str:
        return (
            f"Token(id={mask_secret(self.id)!r}, project_id={self.project_id!r}, "
            f"scopes={self.scopes!r}, is_disabled={self.is_disabled!r})"
        )

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Token:
        """A token from its JSON object; raises :class:`ValueError` without an ``id``."""
        if not isinstance(data, Mapping) or not isinstance(data.get("id"), str):
            raise ValueError("not a token object (no id)")
        known = {"id", "organization_id", "project_id", "is_disabled", "notes"}
        values: dict[str, Any] = {key: data[key] for key in known if data.get(key) is not None}
        scopes = data.get("scopes") or ()
        values["scopes"] = tuple(str(scope) for scope in scopes)
        values["created_utc"] = _optional_date(data.get("created_utc"))
        values["updated_utc"] = _optional_date(data.get("updated_utc"))
        extra = {
            key: value
            for key, value in data.items()
            if key not in known | {"scopes", "created_utc", "updated_utc"}
        }
        return cls(**values, extra=extra)


@dataclasses.dataclass(frozen=True)
class ProjectConfig:
    """A project's client configuration: its settings (``@@log:*``, ``@@error:*``,
    ``@@DataExclusions``, any others) and their version, which goes up on every change."""

    version: int
    settings: dict[str, str] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Any) -> ProjectConfig:
        """From ``{"version": int, "settings": {str: str}}``; raises :class:`ValueError`
        for anything else. Setting values that are not strings are kept as their text."""
        if not isinstance(data, Mapping):
            raise ValueError("not a project configuration object")
        version = data.get("version", 0)
        if isinstance(version, bool) or not isinstance(version, int):
            raise ValueError(f"not a configuration version: {version!r:.100}")
        raw = data.get("settings")
        raw = {} if raw is None else raw
        if not isinstance(raw, Mapping):
            raise ValueError("the configuration's settings are not an object")
        settings = {
            str(key): value if isinstance(value, str) else json.dumps(value)
            for key, value in raw.items()
        }
        return cls(version=version, settings=settings)
