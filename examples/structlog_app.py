"""structlog through the standard library: the processor sends, the console still renders.

``EventLogProcessor`` goes before ``format_exc_info`` (it needs the exception object) and before
``wrap_for_formatter``. ``setup()`` also attaches the handler to the root logger for plain
:mod:`logging` records; the handler skips the records the processor already sent.
"""

from __future__ import annotations

import logging
import sys

import structlog

import eventlog_handler
from eventlog_handler.structlog import EventLogProcessor

eventlog_handler.setup(level="INFO", tags=["example", "structlog"])

console = logging.StreamHandler(sys.stdout)
console.setFormatter(
    structlog.stdlib.ProcessorFormatter(
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.dev.ConsoleRenderer(colors=False),
        ],
        foreign_pre_chain=[structlog.stdlib.add_log_level, structlog.stdlib.add_logger_name],
    )
)
logging.getLogger().addHandler(console)

structlog.configure(
    processors=[
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.filter_by_level,
        structlog.stdlib.add_logger_name,
        structlog.stdlib.add_log_level,
        structlog.processors.TimeStamper(fmt="iso"),
        EventLogProcessor(level="info", tags=["example", "structlog"]),
        structlog.processors.format_exc_info,
        structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
    ],
    logger_factory=structlog.stdlib.LoggerFactory(),
    wrapper_class=structlog.stdlib.BoundLogger,
    cache_logger_on_first_use=True,
)

log = structlog.get_logger("examples.structlog")
log.info("job started", job_id="j-17", items=3)
structlog.contextvars.bind_contextvars(request_id="r-99")
log.warning("item skipped", item=2, reason="out of stock")
try:
    workers = 3 // 0
except ZeroDivisionError:
    log.exception("job failed", job_id="j-17", workers=0)
logging.getLogger("examples.plain").info("a plain logging record goes through the handler")
