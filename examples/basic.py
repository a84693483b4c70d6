"""The smallest program: one ``setup()`` call, then plain :mod:`logging`.

Run the local collector (``eventlog serve``), export the project token it prints as
``EVENTLOG_API_KEY`` (and ``EVENTLOG_SERVER_URL`` for another server), then::

    python examples/basic.py
"""

from __future__ import annotations

import logging

import eventlog_handler

# Key and URL come from EVENTLOG_API_KEY / EVENTLOG_SERVER_URL (default: http://127.0.0.1:5000).
eventlog_handler.setup(level="INFO", tags=["example", "basic"])

log = logging.getLogger("examples.basic")

log.debug("not sent: below the level given to setup()")
log.info("application started", extra={"version": "1.2.3"})
log.warning("disk space is low", extra={"free_mb": 512, "mount": "/var"})

with eventlog_handler.user_context("u-42", name="Ann"):
    log.info("user %s opened the settings page", "u-42")

profiles: dict[str, str] = {}
try:
    profiles["u-42"]
except KeyError:
    log.exception("could not load the profile")

# Nothing else to do: pending events are sent when the interpreter exits.
