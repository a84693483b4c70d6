"""Configure the handler with :func:`logging.config.dictConfig` (JSON-able values only).

The same dictionary can live in a JSON or YAML file. ``api_key`` and ``server_url`` are left
out here, so they come from ``EVENTLOG_API_KEY`` and ``EVENTLOG_SERVER_URL``.
"""

from __future__ import annotations

import json
import logging
import logging.config

CONFIG = json.loads(
    """
    {
      "version": 1,
      "disable_existing_loggers": false,
      "formatters": {
        "console": {"format": "%(asctime)s %(levelname)-8s %(name)s: %(message)s"}
      },
      "handlers": {
        "console": {
          "class": "logging.StreamHandler",
          "formatter": "console",
          "stream": "ext://sys.stdout"
        },
        "eventlog": {
          "class": "eventlog_handler.EventLogHandler",
          "level": "INFO",
          "tags": ["example", "dictconfig"],
          "data_exclusions": ["password", "card_number"],
          "flush_interval": 2
        }
      },
      "root": {"level": "INFO", "handlers": ["console", "eventlog"]}
    }
    """
)

logging.config.dictConfig(CONFIG)
log = logging.getLogger("examples.dictconfig")

log.info("order placed", extra={"order_id": 1001, "card_number": "4111 1111 1111 1111"})
log.warning("payment retried", extra={"order_id": 1001, "attempt": 2})
try:
    raise TimeoutError("payment gateway did not answer")
except TimeoutError:
    log.exception("payment failed", extra={"order_id": 1001})
