"""The API key and the secrets in events: where they may go, and where they must never appear.

- The key travels in the ``Authorization`` header only: never in a body, a log record, an
  exception's text, a ``repr``, or a line on stderr.
- Values under excluded keys (``password``, ``token``, ``api_key``, ...) are masked at any depth
  by default: extras, nested lists and dicts, structlog keys, ``@user`` data, exception
  attributes.
- A key that would travel over plain ``http://`` to a host that is not loopback is warned about
  (only constructed here: no request leaves loopback).
- The default exclusions cover what the best tools mask (``access_key``, ``pwd``, ``auth``,
  ``jwt``, ``bearer``, card data, ...) without masking ``author`` or ``tokenizer_name``.
- Secrets inside text (URL credentials, ``?api_key=``, ``Authorization: Bearer``, the API key
  itself) are masked before an event is stored in the spool or sent.
"""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from typing import Any

import pytest

import eventlog_handler
from eventlog_handler import Client, EventLogHandler, set_user
from eventlog_handler.api import InsecureTransportWarning
from eventlog_handler.api import _errors as errors
from eventlog_handler.settings import MASK, Settings
from eventlog_handler.structlog import EventLogProcessor
from eventlog_handler.wire import _events as events
from tests.reliability.conftest import EXCEPTION_GROUP, FAST, HandlerRun, collect, settle
from tests.support.constants import API_KEY, REPO
from tests.support.faultserver import FaultServer, Reply
from tests.support.processes import child_env, run_program
from tests.support.waits import dead_port, wait_until

SECRETS = ["hunter2-secret-value", "tok-3f9a7c-value", "sess-abc123-value", "pk-0091-value"]


def assert_no_key(*texts: Any) -> None:
    for text in texts:
        assert API_KEY not in str(text), text


def assert_no_secrets(event: dict[str, Any]) -> None:
    body = events.encode(event).decode("utf-8")
    for secret in SECRETS:
        assert secret not in body, (secret, body)
    assert MASK in body


# -- the API key --------------------------------------------------------------------------


def test_reprs_never_show_the_key(server: FaultServer) -> None:
    handler = EventLogHandler(API_KEY, server.url, **FAST)
    handle = eventlog_handler.setup(API_KEY, server.url, capture_exceptions=True, **FAST)
    processor = EventLogProcessor(API_KEY, server.url)
    client = Client(server.url, API_KEY)
    settings = Settings.from_options({"api_key": API_KEY, "server_url": server.url}, environ={})
    objects = [
        handler,
        handler.engine,
        handler.settings,
        settings,
        handle,
        handle.engine,
        processor,
        client,
    ]
    objects += [handle.hooks, handle.handler]
    for obj in objects:
        assert_no_key(repr(obj), str(obj))
    assert_no_key(handle.stats(), handler.stats())


@pytest.mark.parametrize(
    "options",
    [
        {"api_key": API_KEY, "server_url": "ftp://example.invalid"},
        {"api_key": API_KEY, "server_url": "http://127.0.0.1:99999"},
        {"api_key": API_KEY + " with a space"},
        {"api_key": "\t" + API_KEY + "\n\x00"},
        {"api_key": API_KEY, "queue_size": "lots"},
        {"api_key": API_KEY, "verify": "/no/such/bundle.pem"},
        {"api_key": API_KEY, "no_such_option": 1},
    ],
)
def test_configuration_errors_never_show_the_key(
    options: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        # A bad key or URL is said on stderr (the program runs on); a bad option is raised.
        handler = EventLogHandler(**options)
    except (ValueError, TypeError) as raised:
        assert_no_key(str(raised), repr(raised))
    else:
        assert handler.settings.problem is not None
        assert_no_key(handler.settings.problem, repr(handler), repr(handler.settings))
    assert_no_key(capsys.readouterr().err)


def test_client_errors_never_show_the_key(server: FaultServer) -> None:
    client = Client(server.url, API_KEY, timeout=2)
    server.script.extend([401, 403, 500, "reset"])
    for _ in range(4):
        with pytest.raises(errors.EventLogError) as raised:
            client.submit({"message": "x"})
        assert_no_key(str(raised.value), repr(raised.value), vars(raised.value))
    with pytest.raises(errors.TransportError) as refused:
        Client(f"http://127.0.0.1:{dead_port()}", API_KEY, timeout=2).submit({"message": "x"})
    assert_no_key(str(refused.value), repr(refused.value))


def test_key_travels_only_in_the_authorization_header(
    server: FaultServer, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.DEBUG)  # urllib3's and the package's own debug logs included
    server.script.extend([401, "reset", 503])
    run = HandlerRun(server.url, "security")
    run.log(30)
    with set_user("u-1", "Ann", data={"note": "hello"}):
        try:
            raise RuntimeError("with an environment")
        except RuntimeError:
            run.logger.exception("error event")
    settle(run.engine, [server], run.captured.ids)
    assert server.requests
    for seen in server.requests:
        assert seen.headers["authorization"] == f"Bearer {API_KEY}"
        others = {name: value for name, value in seen.headers.items() if name != "authorization"}
        assert_no_key(others, json.dumps(seen.events))
    for record in caplog.records:
        assert_no_key(record.getMessage(), record.exc_text or "", record.__dict__)
    captured = capsys.readouterr()
    assert "refused the API key" in captured.err  # the 401 was reported...
    assert_no_key(captured.out, captured.err)  # ...without the key
    assert_no_key(run.engine.stats())


def test_a_server_echoing_the_key_does_not_put_it_on_stderr(
    server: FaultServer, capsys: pytest.CaptureFixture[str]
) -> None:
    problem = {"type": "about:blank", "title": f"Unknown token {API_KEY}", "status": 401}
    server.script.append(
        Reply(401, json.dumps(problem).encode(), {"Content-Type": "application/problem+json"})
    )
    run = HandlerRun(server.url, "echo")
    run.log(3)
    settle(run.engine, [server], run.captured.ids)
    captured = capsys.readouterr()
    assert "refused the API key" in captured.err
    assert_no_key(captured.err, run.engine.stats())


def delivered(run: HandlerRun, server: FaultServer, count: int) -> list[dict[str, Any]]:
    """The events the service accepted from ``run``, once all ``count`` were delivered."""
    assert run.engine.flush(10.0), run.engine.stats()
    stats = run.engine.stats()
    assert stats["captured"] == stats["delivered"] == count == len(server.accepted), stats
    return list(server.accepted)


def test_key_on_the_command_line_is_not_shipped(
    monkeypatch: pytest.MonkeyPatch, server: FaultServer
) -> None:
    monkeypatch.setattr(sys, "argv", ["app.py", "--eventlog-key", API_KEY])
    monkeypatch.setattr(events, "_ENVIRONMENT", None)
    run = HandlerRun(server.url, "argv")
    try:
        raise ValueError("boom")
    except ValueError:
        run.logger.exception("failed")
    (event,) = delivered(run, server, 1)
    assert "@environment" in event["data"]
    assert_no_key(json.dumps(event))


EXIT_CHILD = textwrap.dedent(
    """
    import logging
    import eventlog_handler

    eventlog_handler.setup(shutdown_timeout=0.5, retry_initial=0.01, max_backoff=0.05,
                           flush_interval=0.05)
    for index in range(10):
        logging.getLogger("app").warning("refused %d", index)
    """
)


def test_stderr_at_exit_never_shows_the_key(tmp_path: Path) -> None:
    script = tmp_path / "app.py"
    script.write_text(EXIT_CHILD)
    with FaultServer() as server:
        server.default = 401
        completed = subprocess.run(
            [sys.executable, str(script)],
            env=child_env(server.url),
            cwd=str(REPO),
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert completed.returncode == 0, completed.stderr
    assert "refused the API key" in completed.stderr
    # Each of the 10 events is reported at exit: not sent, or on the wire at the deadline.
    unsent = re.search(r"(\d+) event\(s\) could not be sent", completed.stderr)
    on_wire = re.search(r"(\d+) event\(s\) were on their way", completed.stderr)
    reported = sum(int(found.group(1)) for found in (unsent, on_wire) if found is not None)
    assert reported == 10, completed.stderr
    assert_no_key(completed.stdout, completed.stderr)


# -- the insecure-transport warning ----------------------------------------------------------


@pytest.mark.parametrize(
    "url", ["http://example.invalid", "http://10.1.2.3:5000", "http://[2001:db8::1]"]
)
def test_plain_http_to_a_remote_host_warns(url: str) -> None:
    with pytest.warns(InsecureTransportWarning) as warned:
        client = Client(url, API_KEY)  # constructed only: nothing is sent
    assert_no_key(*(str(item.message) for item in warned))
    assert_no_key(repr(client))


@pytest.mark.parametrize(
    "url",
    [
        "https://example.invalid",
        "http://127.0.0.1:5000",
        "http://127.9.9.9",
        "http://localhost:5000",
        "http://[::1]:5000",
    ],
)
def test_https_and_loopback_do_not_warn(url: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", InsecureTransportWarning)
        Client(url, API_KEY)


def test_a_filter_that_makes_the_notice_an_error_does_not_stop_delivery(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Under ``python -W error`` the plain-http notice raised where the worker makes its
    sender, which stopped the worker for good: the notice is said on stderr instead, and the
    sender is made all the same (constructed only: nothing is sent)."""
    from eventlog_handler.delivery import _engine
    from eventlog_handler.delivery._sender import Sender
    from eventlog_handler.settings import Settings

    settings = Settings.from_options({"api_key": API_KEY, "server_url": "http://10.1.2.3:5000"})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sender = _engine._default_client(settings, None)
    assert isinstance(sender, Sender)
    said = capsys.readouterr().err
    assert "sent over plain http:// to 10.1.2.3" in said
    assert_no_key(said)


# -- data exclusions -------------------------------------------------------------------------


@pytest.fixture
def run(server: FaultServer) -> HandlerRun:
    """A handler that delivers to the fault server on loopback."""
    return HandlerRun(server.url, "exclusions")


def test_secrets_in_extras_are_masked_at_any_depth(run: HandlerRun, server: FaultServer) -> None:
    logger = run.logger
    nested = {
        "password": SECRETS[0],
        "request": {"headers": {"Authorization": SECRETS[1], "Cookie": SECRETS[2]}},
        "batches": [[{"api_key": SECRETS[3]}], ({"SESSION_ID": SECRETS[2]},)],
        "deep": {"a": {"b": {"c": {"client_secret": SECRETS[0]}}}},
        "private-key": SECRETS[3],
    }
    logger.info("flat", extra={"password": SECRETS[0], "X-Api-Key": SECRETS[3], "ok": 1})
    logger.info("nested", extra=nested)
    logger.info("args %s", "one", "two", {"access_token": SECRETS[1]})  # mismatched: args kept
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        logger.exception("error with extras", extra=nested)
    captured = delivered(run, server, 4)
    for event in captured:
        assert_no_secrets(event)
    assert [event["data"]["ok"] for event in captured if event.get("message") == "flat"] == [1]


def test_secrets_in_exception_attributes_are_masked(run: HandlerRun, server: FaultServer) -> None:

    class ConfigError(Exception):
        pass

    try:
        try:
            inner = KeyError("inner")
            inner.token = SECRETS[1]  # type: ignore[attr-defined]
            raise inner
        except KeyError as cause:
            outer = ConfigError("bad config")
            outer.password = SECRETS[0]  # type: ignore[attr-defined]
            outer.config = {"db": {"password": SECRETS[0]}, "api_key": SECRETS[3]}  # type: ignore[attr-defined]
            raise outer from cause
    except ConfigError:
        run.logger.exception("failed")
    if EXCEPTION_GROUP is not None:
        member = ValueError("member")
        member.session = SECRETS[2]  # type: ignore[attr-defined]
        try:
            raise EXCEPTION_GROUP("several", [member])
        except EXCEPTION_GROUP:
            run.logger.exception("group")
    captured = delivered(run, server, 2 if EXCEPTION_GROUP is not None else 1)
    for event in captured:
        assert_no_secrets(event)


def test_secrets_in_structlog_keys_are_masked() -> None:
    processor = EventLogProcessor(API_KEY, f"http://127.0.0.1:{dead_port()}")
    captured = collect(processor.engine)
    processor(
        None,
        "info",
        {
            "event": "login",
            "password": SECRETS[0],
            "headers": {"authorization": SECRETS[1]},
            "items": [{"cookie": SECRETS[2]}, {"private_key": SECRETS[3]}],
        },
    )
    structlog = pytest.importorskip("structlog")
    log = structlog.wrap_logger(
        structlog.ReturnLogger(), processors=[processor, lambda _l, _m, _e: "rendered"]
    )
    log.warning("through structlog", api_key=SECRETS[3], nested={"SessionToken": SECRETS[2]})
    assert len(captured) == 2
    for event in captured:
        assert_no_secrets(event)


def test_secrets_in_user_data_of_error_events_are_masked(
    run: HandlerRun, server: FaultServer
) -> None:
    logger = run.logger
    with set_user("u-1", "Ann", data={"password": SECRETS[0], "prefs": [{"token": SECRETS[1]}]}):
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            logger.exception("failed")
    logger.info(
        "override",
        extra={"@user": {"identity": "u-2", "data": {"api_key": SECRETS[3]}}, "nested": [1]},
    )
    for event in delivered(run, server, 2):
        assert_no_secrets(event)


def test_secrets_in_user_data_of_log_events_are_masked(
    run: HandlerRun, server: FaultServer
) -> None:
    logger = run.logger
    with set_user("u-1", "Ann", data={"password": SECRETS[0], "prefs": [{"token": SECRETS[1]}]}):
        logger.info("plain log event")
    logger.info("override", extra={"@user": {"identity": "u-2", "data": {"api_key": SECRETS[3]}}})
    for event in delivered(run, server, 2):
        assert_no_secrets(event)


def test_masking_applies_to_what_is_sent(server: FaultServer) -> None:
    run = HandlerRun(server.url, "exclusions-sent")
    run.logger.info("sent", extra={"password": SECRETS[0], "inner": [{"token": SECRETS[1]}]})
    (event,) = delivered(run, server, 1)
    assert event["data"] == {"password": MASK, "inner": [{"token": MASK}]}


def test_widened_default_exclusions_are_masked_in_what_is_sent(server: FaultServer) -> None:
    run = HandlerRun(server.url, "wide-exclusions")
    secrets = {
        "access_key": SECRETS[0],
        "pwd": SECRETS[1],
        "auth": SECRETS[2],
        "jwt": SECRETS[3],
        "bearer": SECRETS[0],
        "X-Api-Key": SECRETS[1],
        "cvv": "123",
        "card_number": "4111111111111111",
        "csrftoken": SECRETS[2],
        "Proxy-Authorization": SECRETS[3],
    }
    kept = {"author": "ann", "tokenizer_name": "bpe", "authority_count": 3, "passport": "no"}
    run.logger.info("login", extra={**secrets, **kept})
    (event,) = delivered(run, server, 1)
    assert event["data"] == {**dict.fromkeys(secrets, MASK), **kept}


# -- secrets inside text -----------------------------------------------------------------------

TEXT_SECRETS = [
    "pw-url-7f3a9c",
    "qs-key-9c1d2e",
    "pw-exc-55aa01",
    "tok-hdr-88bb77cc",
    "pw-data-31d4e2",
    "tok-data-4b4b4b",
]


def log_text_secrets(logger: logging.Logger) -> None:
    """Four events with secrets in their message, exception text and data values."""
    logger.warning("cannot reach postgres://admin:%s@db/app", TEXT_SECRETS[0])
    logger.info("GET /items?api_key=%s&page=2", TEXT_SECRETS[1])
    logger.info("retrying with the key %s", API_KEY)
    try:
        raise ConnectionError(
            f"refused: redis://:{TEXT_SECRETS[2]}@cache:6379 "
            f"(Authorization: Bearer {TEXT_SECRETS[3]})"
        )
    except ConnectionError:
        logger.exception(
            "failed",
            extra={
                "dsn": f"mysql://u:{TEXT_SECRETS[4]}@h/db",
                "note": f"token={TEXT_SECRETS[5]}",
                "key": API_KEY,
            },
        )


def assert_text_secrets_masked(text: str) -> None:
    for secret in [*TEXT_SECRETS, API_KEY]:
        assert secret not in text, secret
    assert f"postgres://admin:{MASK}@db/app" in text
    assert f"api_key={MASK}&page=2" in text


def test_secrets_inside_text_never_reach_the_server(server: FaultServer) -> None:
    run = HandlerRun(server.url, "text-secrets")
    log_text_secrets(run.logger)
    assert_text_secrets_masked(json.dumps(delivered(run, server, 4)))


def test_secrets_inside_text_never_reach_the_spool(tmp_path: Path) -> None:
    run = HandlerRun(
        f"http://127.0.0.1:{dead_port()}",
        "text-secrets-spool",
        spool_path=str(tmp_path / "spool"),
        spool_all=True,
    )
    try:
        log_text_secrets(run.logger)
        wait_until(lambda: run.engine.stats()["spooled"] >= 4, 10, step=0.01)
        assert run.engine.stats()["spooled"] == 4, run.engine.stats()
        stored = b"".join(path.read_bytes() for path in tmp_path.rglob("*") if path.is_file())
        assert_text_secrets_masked(stored.decode("utf-8", "replace"))
    finally:
        run.engine.shutdown(0.5)


BATCH_CHILD = textwrap.dedent(
    """
    import logging
    import eventlog_handler

    class Shown(str):  # a str whose str() is not its characters
        def __str__(self):
            return "db password=pw-sly-0042"

    class Message:
        def __str__(self):
            return Shown("hello")

    eventlog_handler.setup()
    log = logging.getLogger("shop")
    for index in range(1500):
        log.warning("order %d shipped to ann", index)
        if index == 300:  # a batch is at most 500 events: these two never share one
            log.warning("paid with 4111 1111 1111 1111")
            log.warning("retry with token=tok-batch-77aa")
        if index == 1200:
            log.warning(Message())
    """
)


def test_secrets_among_a_flood_of_plain_messages_never_reach_the_server(tmp_path: Path) -> None:
    """The worker looks at a batch's messages for secrets all at once: a user's program logs
    1,500 plain warnings with three secrets among them and exits; every plain message arrives
    as logged, and no secret arrives."""
    with FaultServer() as server:
        code, stderr, _ = run_program(BATCH_CHILD, server.url, tmp_path)
        assert code == 0, stderr
        messages = [event["message"] for event in server.accepted]
    assert len(messages) == 1503, stderr
    assert [m for m in messages if m.startswith("order ")] == [
        f"order {index} shipped to ann" for index in range(1500)
    ]
    text = json.dumps(server.accepted)
    for secret in ("4111 1111 1111 1111", "tok-batch-77aa", "pw-sly-0042"):
        assert secret not in text, secret
    assert f"paid with {MASK}" in messages
    assert f"retry with token={MASK}" in messages
    assert f"db password={MASK}" in messages


STORM_CHILD = textwrap.dedent(
    """
    import logging
    import eventlog_handler

    eventlog_handler.setup()
    log = logging.getLogger("billing")


    def charge(order):
        password = "pw-storm-5521"  # a secret in the source lines around the call
        log.error("charge %d failed", order)


    def refund(order):
        log.error("refund %d failed", order)


    for order in range(400):
        charge(order)
        if order % 4 == 0:
            refund(order)
    """
)


def test_an_error_storm_carries_each_site_s_own_source_lines_masked_in_every_event(
    tmp_path: Path,
) -> None:
    """A program logs 500 errors from two places and exits. Frames are made once per place and
    their scrubbed form remembered: every event still carries its own call site's lines, and
    the secret written in the source never arrives."""
    with FaultServer() as server:
        code, stderr, _ = run_program(STORM_CHILD, server.url, tmp_path)
        assert code == 0, stderr
        received = list(server.accepted)
    assert len(received) == 500, stderr
    assert "pw-storm-5521" not in json.dumps(received)
    for event in received:
        innermost = event["data"]["@frames"][-1]
        kind = event["message"].split()[0]
        if kind == "charge":
            assert innermost["function"] == "charge"
            assert innermost["context_line"].strip() == 'log.error("charge %d failed", order)'
            assert innermost["pre_context"][-1].strip().startswith(f'password = "{MASK}"')
        else:
            assert innermost["function"] == "refund"
            assert innermost["context_line"].strip() == 'log.error("refund %d failed", order)'
            assert innermost["pre_context"][-1] == "def refund(order):"
