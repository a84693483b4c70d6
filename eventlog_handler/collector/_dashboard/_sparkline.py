"""Sparklines: a stack's occurrences over time as a small inline SVG bar chart.

Inline SVG needs no image request and no script, so it works under the pages' content security
policy. Each bar has a ``<title>`` (its time range and count) for a tooltip.
"""

from __future__ import annotations

from datetime import datetime, timezone

from eventlog_handler.collector._dashboard._layout import e

__all__ = ["WINDOWS", "sparkline"]

#: Named windows: (label, seconds per bar, bars).
WINDOWS = {
    "1h": ("last hour", 300.0, 12),
    "24h": ("last 24 hours", 3600.0, 24),
    "7d": ("last 7 days", 6 * 3600.0, 28),
}


def _label(start: float, seconds: float) -> str:
    moment = datetime.fromtimestamp(start, timezone.utc)
    shape = "%H:%M" if seconds < 86400 else "%Y-%m-%d"
    if seconds >= 6 * 3600:
        shape = "%m-%d %H:%M"
    return moment.strftime(shape)


def sparkline(
    counts: list[int],
    start: float,
    seconds: float,
    *,
    width: int = 120,
    height: int = 24,
    label: str = "",
) -> str:
    """An ``<svg>`` bar chart of ``counts`` (bucket ``i`` starts at ``start + i * seconds``)."""
    if not counts:
        return ""
    peak = max(counts) or 1
    slot = width / len(counts)
    bar = max(1.0, slot - 1.0)
    total = sum(counts)
    parts = [
        f'<svg class="spark" viewBox="0 0 {width} {height}" width="{width}" height="{height}"'
        f' role="img" aria-label="{e(f"{total} occurrences, {label}")}">'
    ]
    for index, count in enumerate(counts):
        scaled = 0.0 if count == 0 else max(2.0, (height - 1) * count / peak)
        if count == 0:
            scaled = 1.0
        y = height - scaled
        begin = start + index * seconds
        title = f"{_label(begin, seconds)} UTC: {count}"
        css = ' class="zero"' if count == 0 else ""
        parts.append(
            f'<rect{css} x="{index * slot:.1f}" y="{y:.1f}" width="{bar:.1f}"'
            f' height="{scaled:.1f}"><title>{e(title)}</title></rect>'
        )
    parts.append("</svg>")
    return "".join(parts)
