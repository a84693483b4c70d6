"""The accounting identity of an engine's ``stats()``: every captured event has one outcome
or is still pending, so what these add up must equal ``stats["captured"]``."""

from __future__ import annotations

from typing import Any


def accounted(stats: dict[str, Any]) -> int:
    """``delivered + dropped + queued + in_flight + spooled``."""
    return (
        stats["delivered"]
        + sum(stats["dropped"].values())
        + stats["queued"]
        + stats["in_flight"]
        + stats["spooled"]
    )


def accounted_in_memory(stats: dict[str, Any]) -> int:
    """``delivered + dropped + queued + in_flight``: for engines without a spool."""
    return stats["delivered"] + stats["dropped_total"] + stats["queued"] + stats["in_flight"]
