"""The ``eventlog`` command: ``demo``, ``serve``, ``login``, ``projects``, ``token``,
``settings``, ``send``."""

from eventlog_handler.cli._main import main

__all__ = ["main"]
