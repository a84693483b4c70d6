"""The service's ``@level`` names for :mod:`logging` level numbers, and back."""

from __future__ import annotations

import logging

_LEVELS = (
    (logging.CRITICAL, "Fatal"),
    (logging.ERROR, "Error"),
    (logging.WARNING, "Warn"),
    (logging.INFO, "Info"),
    (logging.DEBUG, "Debug"),
)
_LEVEL_CACHE: dict[int, str] = {}

#: ``@level`` names (as the service and its settings spell them) and their logging levels.
NUMBERS: dict[str, int] = {
    "trace": 5,
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "information": logging.INFO,
    "warn": logging.WARNING,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "fatal": logging.CRITICAL,
    "critical": logging.CRITICAL,
}


def level_name(levelno: int) -> str:
    """The service's ``@level`` for a :mod:`logging` level number: ``Trace`` below ``DEBUG``,
    ``Debug``, ``Info``, ``Warn``, ``Error``, ``Fatal`` (a custom level takes the nearest
    standard level at or below it)."""
    name = _LEVEL_CACHE.get(levelno)
    if name is None:
        name = "Trace"
        for threshold, candidate in _LEVELS:
            if levelno >= threshold:
                name = candidate
                break
        if len(_LEVEL_CACHE) < 256:
            _LEVEL_CACHE[levelno] = name
    return name
