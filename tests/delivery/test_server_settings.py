"""The project's settings from the service: fetched by the worker at start and when an answer
names a newer version, and applied before events are queued (``@@log:*`` levels per source,
``@@error:*`` exception types, ``@@DataExclusions``)."""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import Any

import pytest

from eventlog_handler import EventLogHandler
from eventlog_handler.api._client import Client
from eventlog_handler.delivery._server_settings import NO_FILTER, OFF, ServerSettings
from eventlog_handler.wire import _events as events
from tests.support.accounting import accounted
from tests.support.constants import API_KEY
from tests.support.faultserver import FaultServer
from tests.support.fixtures import fresh_engines as fresh_engines  # autouse
from tests.support.waits import wait_until

FAST = {"flush_interval": 0.05, "error_delay": 0.0, "retry_initial": 0.01, "max_backoff": 0.05}


@pytest.fixture
def fetches(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The name of the thread of every settings request."""
    threads: list[str] = []
    original = Client.get_config

    def recording(self: Client, version: int | None = None) -> Any:
        threads.append(threading.current_thread().name)
        return original(self, version)

    monkeypatch.setattr(Client, "get_config", recording)
    return threads


def handler_on(server: FaultServer, name: str = "dlv", **options: Any) -> EventLogHandler:
    handler = EventLogHandler(API_KEY, server.url, **{**FAST, **options})
    logger = logging.getLogger(name)
    logger.handlers[:] = [handler]
    logger.setLevel(1)
    logger.propagate = False
    return handler


def messages(server: FaultServer) -> list[str]:
    return [str(event.get("message")) for event in server.accepted]


def test_fetched_once_at_start_and_again_on_a_newer_version(
    server: FaultServer, fetches: list[str]
) -> None:
    server.config = {"version": 3, "settings": {}}
    server.config_version = 3
    handler = handler_on(server)
    log = logging.getLogger("dlv.orders")
    noisy = logging.getLogger("dlv.noisy")
    for index in range(5):
        log.info("order %d", index)
        noisy.info("noise %d", index)
    assert wait_until(lambda: len(server.accepted) == 10, 10), messages(server)
    assert server.config_requests == [None]  # once, at start
    # The project's settings change: the next answer names version 4.
    server.config = {"version": 4, "settings": {"@@log:dlv.noisy": "Off"}}
    server.config_version = 4
    log.info("names the new version")
    assert wait_until(lambda: server.config_requests == [None, "3"], 10), server.config_requests
    assert wait_until(lambda: handler.engine.server.version == 4, 5)
    noisy.info("dropped by the service's setting")
    log.info("still sent")
    assert wait_until(lambda: "still sent" in messages(server), 10)
    assert "dropped by the service's setting" not in messages(server)
    assert set(fetches) == {"eventlog-handler-settings"}  # never on the logging thread
    stats = handler.stats()
    assert stats["server_settings_version"] == 4
    assert stats["captured"] == accounted(stats) == 12


def test_levels_per_source_exact_first_then_the_most_specific_pattern(
    server: FaultServer,
) -> None:
    server.config = {
        "version": 1,
        "settings": {
            "@@log:*": "Info",
            "@@log:dlv.*": "Warn",
            "@@log:dlv.db": "Debug",
            "@@log:dlv.db.*": "Error",
            "@@log:dlv.quiet": "false",
            "@@log:*.audit": "Trace",
        },
    }
    handler = handler_on(server)
    logging.getLogger("dlv").warning("start the worker")  # it fetches the settings first
    assert wait_until(lambda: handler.engine.server.version == 1, 10)
    cases = [
        ("dlv.db", logging.DEBUG, True),  # exact: Debug
        ("dlv.db.pool", logging.WARNING, False),  # dlv.db.* (longer than dlv.*): Error
        ("dlv.db.pool", logging.ERROR, True),
        ("dlv.web", logging.INFO, False),  # dlv.*: Warn
        ("dlv.web", logging.WARNING, True),
        ("dlv.quiet", logging.CRITICAL, False),  # false: nothing
        ("other", logging.DEBUG, False),  # *: Info
        ("other", logging.INFO, True),
        ("dlv.audit", logging.DEBUG, True),  # *.audit is as long as dlv.* and sorts first
    ]
    for name, level, _ in cases:
        logging.getLogger(name).handlers[:] = [handler]
        logging.getLogger(name).propagate = False
        logging.getLogger(name).setLevel(1)
        logging.getLogger(name).log(level, "%s at %d", name, level)
    expected = {f"{name} at {level}" for name, level, sent in cases if sent}
    assert wait_until(lambda: expected <= set(messages(server)), 10), messages(server)
    time.sleep(0.3)
    assert set(messages(server)) - {"start the worker"} == expected


def test_where_the_service_says_nothing_the_local_level_stands(server: FaultServer) -> None:
    server.config = {"version": 1, "settings": {"@@log:elsewhere": "Off"}}
    handler = handler_on(server, level="INFO")
    log = logging.getLogger("dlv")
    log.debug("below the handler's level")
    log.info("at the handler's level")
    assert wait_until(lambda: "at the handler's level" in messages(server), 10)
    assert handler.engine.server.version == 1
    assert "below the handler's level" not in messages(server)


def test_error_types_turned_off_are_dropped_and_counted(server: FaultServer) -> None:
    server.config = {"version": 2, "settings": {"@@error:*Timeout*": "false"}}
    handler = handler_on(server)
    log = logging.getLogger("dlv")
    log.info("start")
    assert wait_until(lambda: handler.engine.server.version == 2, 10)
    for exc in (TimeoutError("slow"), KeyError("gone")):
        try:
            raise exc
        except Exception:
            log.exception("failed")
    assert wait_until(lambda: len(server.accepted) == 2, 10)
    types = [
        event["@simple_error"]["type"] for event in server.accepted if "@simple_error" in event
    ]
    assert types == ["KeyError"]
    stats = handler.stats()
    assert stats["dropped"]["filtered"] == 1
    assert stats["captured"] == accounted(stats) == 3


def test_data_exclusions_of_the_service_are_added(server: FaultServer) -> None:
    server.config = {"version": 5, "settings": {"@@DataExclusions": "*card*, ssn"}}
    handler = handler_on(server)
    log = logging.getLogger("dlv")
    log.info("start")
    assert wait_until(lambda: handler.engine.server.version == 5, 10)
    log.info("payment", extra={"card_number": "4111", "ssn": "123", "amount": 5, "user": "ann"})
    assert wait_until(lambda: "payment" in messages(server), 10)
    [event] = [event for event in server.accepted if event["message"] == "payment"]
    assert event["data"]["card_number"] == "[excluded]"
    assert event["data"]["ssn"] == "[excluded]"
    assert event["data"]["amount"] == 5 and event["data"]["user"] == "ann"


def test_the_command_line_of_an_error_is_masked_by_every_exclusion(
    server: FaultServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--name value`` options on the command line are masked by the engine's exclusions and
    the service's, not only by the defaults (the command line is made once per process)."""
    argv = ["app.py", "--ssn", "123-45-6789", "--user-pin", "4321", "--api-key", "k-1234567"]
    monkeypatch.setattr(sys, "argv", [*argv, "--region", "eu", "--account=acme"])
    monkeypatch.setattr(events, "_ENVIRONMENT", None)
    server.config = {"version": 5, "settings": {"@@DataExclusions": "ssn"}}
    handler = handler_on(server, data_exclusions=["password", "apikey", "*pin*", "account"])
    log = logging.getLogger("dlv")
    log.info("start")
    assert wait_until(lambda: handler.engine.server.version == 5, 10)
    try:
        raise ValueError("import failed")
    except ValueError:
        log.exception("import failed")
    assert wait_until(lambda: "import failed" in messages(server), 10)
    [event] = [event for event in server.accepted if event["message"] == "import failed"]
    assert event["data"]["@environment"]["command_line"] == (
        "app.py --ssn [excluded] --user-pin [excluded] --api-key [excluded] --region eu "
        "--account=[excluded]"
    )


@pytest.mark.parametrize("failure", [500, 404, "hang"])
def test_a_failing_settings_endpoint_changes_nothing_else(
    server: FaultServer, failure: Any
) -> None:
    server.config = failure
    handler = handler_on(server)
    log = logging.getLogger("dlv")
    started = time.monotonic()
    for index in range(100):
        log.info("event %d", index)
    took = time.monotonic() - started
    assert took < 2.0  # the logging thread never waits for the settings
    # A hanging endpoint holds the first batch for 1 s at most (FIRST_SETTINGS_WAIT).
    assert wait_until(lambda: len(server.accepted) == 100, 15), len(server.accepted)
    # The server has the events before the answer reaches the engine: wait for the count.
    assert wait_until(lambda: handler.stats()["delivered"] == 100, 5), handler.stats()
    # The fetch fails on its own thread: after its timeout (3 s) for a hanging endpoint.
    assert wait_until(lambda: handler.stats()["server_settings_error"], 10)
    stats = handler.stats()
    assert stats["delivered"] == stats["captured"] == 100
    assert stats["server_settings_version"] is None
    assert stats["server_settings_error"]
    assert stats["last_error"] is None  # delivery itself never failed


def test_turned_off_with_server_settings_false(server: FaultServer) -> None:
    handler = handler_on(server, server_settings=False)
    logging.getLogger("dlv").info("hello")
    assert wait_until(lambda: len(server.accepted) == 1, 10)
    assert server.config_requests == []
    assert handler.stats()["server_settings_version"] is None


def test_matching_rules() -> None:
    settings = ServerSettings(
        7,
        {
            "@@log:*": "Warn",
            "@@log:App.Web*": "Debug",
            "@@log:app.web.health": "Off",
            "@@log:*Job": "Error",
            "@@log:bad": "loud",  # not a level: no filtering, as the official clients read it
            "@@error:myapp.PaymentError": "false",
            "@@error:*Timeout*": "off",
            "@@error:KeyError": "true",
            "@@DataExclusions": "a, b*, ,*c",
        },
    )
    assert settings.log_level("app.web.health") == OFF
    assert settings.log_level("app.web.api") == logging.DEBUG  # case-insensitive
    assert settings.log_level("nightly.Job") == logging.ERROR
    assert settings.log_level("bad") == NO_FILTER
    assert settings.log_level(None) == logging.WARNING
    assert settings.drops_error(("myapp.PaymentError",))
    assert settings.drops_error(("ValueError", "requests.exceptions.ReadTimeout"))
    assert settings.drops_error(("PaymentError",)) is False  # a pattern names the full type
    assert not settings.drops_error(("KeyError",))
    assert settings.data_exclusions == ("a", "b*", "*c")
    assert ServerSettings(1, {}).log_level("x") is None


def test_an_idle_process_checks_the_settings_again(
    server: FaultServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As the official clients do every 2 minutes while idle; here every 0.3 s.
    from eventlog_handler.delivery import _server_settings

    monkeypatch.setattr(_server_settings, "IDLE_CHECK", 0.3)
    server.config = {"version": 3, "settings": {"@@log:dlv": "Info"}}
    handler = handler_on(server)
    logging.getLogger("dlv").warning("start the worker")
    assert wait_until(lambda: handler.engine.server.version == 3, 10)
    # Idle now: nothing is sent, and the worker still asks, with the version it has (304).
    assert wait_until(lambda: server.config_requests.count("3") >= 2, 10), server.config_requests
    server.config = {"version": 4, "settings": {"@@log:dlv": "Error"}}
    assert wait_until(lambda: handler.engine.server.version == 4, 10)
    assert len(server.accepted) == 1  # only the first warning: the checks sent no events


SLOW_SETTINGS_PROGRAM = """
import logging, time
import eventlog_handler
from eventlog_handler.delivery import _server_settings

_server_settings.IDLE_CHECK = 0.3  # the next check falls due while the first fetch runs
eventlog_handler.setup(flush_interval=0.05)
logging.getLogger("app").warning("hello")
time.sleep(3)
print(time.process_time(), flush=True)
"""


def test_a_settings_fetch_that_outlasts_the_idle_check_costs_no_cpu(tmp_path: Any) -> None:
    """The worker woke for the idle check of the settings while the fetch was still under way
    on its own thread, found nothing to do, and woke again at once: a core at 100% for as long
    as a slow settings answer took (past 120 s in a program)."""
    from tests.support.faultserver import Delay
    from tests.support.processes import run_program

    with FaultServer() as server:
        server.config = Delay(8.0, then={"version": 1, "settings": {}})
        status, stderr, stdout = run_program(SLOW_SETTINGS_PROGRAM, server.url, tmp_path)
        assert status == 0, stderr
        assert "hello" in server.arrivals()
    assert float(stdout[-1]) < 1.5  # about 0.1 s; busy, the 3 s of sleep cost 3 s of CPU


FIRST_MOMENTS_PROGRAM = """
import json, logging
import eventlog_handler

class GatewayTimeout(Exception):
    pass

handle = eventlog_handler.setup(flush_interval=0.05, sessions=True)
logging.getLogger("shop.cart").info("added to the cart")  # the settings are fetched now
logging.getLogger("shop.cart").warning("cart is large")
eventlog_handler.submit_feature_usage("export")  # no log level: the @@log rules are not its
eventlog_handler.submit_not_found("/nowhere")
try:
    raise GatewayTimeout("payment gateway")
except GatewayTimeout:
    logging.getLogger("shop.pay").exception("payment failed")
handle.flush(10)
print(json.dumps(handle.stats()), flush=True)
"""


def test_the_services_rules_apply_to_what_a_program_logs_in_its_first_moments(
    tmp_path: Any,
) -> None:
    """The level and error rules were applied on the logging thread only, where they are
    known once the settings arrive: what a script logged before (right after ``setup()``)
    was sent whatever they said."""
    import json

    from tests.support.faultserver import Delay
    from tests.support.processes import run_program

    rules = {"@@log:*": "Warn", "@@error:*Timeout*": "false"}
    with FaultServer() as server:
        server.config = Delay(0.3, then={"version": 3, "settings": rules})
        status, stderr, stdout = run_program(FIRST_MOMENTS_PROGRAM, server.url, tmp_path)
        assert status == 0, stderr
        sent = sorted(
            f"{event.get('type')}: {event.get('message') or event.get('source')}"
            for event in server.accepted
        )
    assert sent == ["404: /nowhere", "log: cart is large", "session: None", "usage: export"]
    stats = json.loads(stdout[-1])
    assert stats["server_settings_version"] == 3
    assert stats["dropped"]["filtered"] == 2
