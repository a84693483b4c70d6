"""python-json-logger's ``JsonFormatter`` on the console, beside the handler, same extras.

Each record prints as one JSON line and arrives in the service with the same ``extra=``
fields under ``data``.
"""

from __future__ import annotations

import logging
import sys

from pythonjsonlogger.json import JsonFormatter

import eventlog_handler

console = logging.StreamHandler(sys.stdout)
console.setFormatter(JsonFormatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
root = logging.getLogger()
root.addHandler(console)
root.setLevel(logging.INFO)  # the console shows INFO lines too (Python's default is WARNING)
eventlog_handler.setup(level="INFO", tags=["example", "json"])

log = logging.getLogger("examples.json")
log.info("cache warmed", extra={"entries": 1200, "seconds": 0.42})
log.warning("slow query", extra={"query_ms": 870, "table": "orders"})
try:
    int("forty-two")
except ValueError:
    log.exception("bad input", extra={"field": "age"})
