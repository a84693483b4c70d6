"""``@@log:*`` values read exactly as the official clients read them (Exceptionless.Net's
``LogLevel``, the JavaScript client's ``EventExclusionPlugin``): ``true``/``1``/``yes`` send
everything (Trace), ``false``/``0``/``no``/``off`` send nothing, a level name is that level, and
``none`` or a word no client knows filters nothing of that source."""

from __future__ import annotations

import logging
import time

import pytest

from eventlog_handler.delivery._server_settings import NO_FILTER, OFF, ServerSettings
from tests.delivery.test_server_settings import handler_on, messages
from tests.support.faultserver import FaultServer
from tests.support.waits import wait_until


@pytest.mark.parametrize(
    ("value", "level"),
    [
        ("true", 5), ("TRUE", 5), ("1", 5), ("yes", 5), (" Yes ", 5),
        ("false", OFF), ("0", OFF), ("no", OFF), ("off", OFF), ("Off", OFF),
        ("Trace", 5), ("debug", logging.DEBUG), ("Info", logging.INFO),
        ("information", logging.INFO), ("Warn", logging.WARNING), ("warning", logging.WARNING),
        ("Error", logging.ERROR), ("Fatal", logging.CRITICAL),
        ("none", NO_FILTER), ("None", NO_FILTER), ("verbose", NO_FILTER), ("", NO_FILTER),
    ],
)  # fmt: skip
def test_each_value_as_the_official_clients_read_it(value: str, level: int) -> None:
    settings = ServerSettings(1, {"@@log:shop.cart": value, "@@log:*": "Fatal"})
    assert settings.log_level("shop.cart") == level
    assert settings.log_level("elsewhere") == logging.CRITICAL


def test_none_and_true_send_what_a_wildcard_would_drop(server: FaultServer) -> None:
    server.config = {
        "version": 1,
        "settings": {
            "@@log:*": "Error",
            "@@log:vals.all": "true",
            "@@log:vals.none": "none",
            "@@log:vals.odd": "whenever",
            "@@log:vals.off": "0",
        },
    }
    handler = handler_on(server, "vals")
    logging.getLogger("vals").error("start the worker")  # it fetches the settings first
    assert wait_until(lambda: handler.engine.server.version == 1, 10)
    for name in ("vals.all", "vals.none", "vals.odd", "vals.off", "vals.other"):
        logger = logging.getLogger(name)
        logger.handlers[:] = [handler]
        logger.propagate = False
        logger.setLevel(1)
        logger.debug("%s debug", name)
    expected = {"vals.all debug", "vals.none debug", "vals.odd debug"}
    assert wait_until(lambda: expected <= set(messages(server)), 10), messages(server)
    time.sleep(0.3)
    assert set(messages(server)) == expected | {"start the worker"}
