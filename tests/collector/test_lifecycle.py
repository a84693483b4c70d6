"""Starting, stopping, restarting, persistence, concurrency and the Python API."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest
import requests

from eventlog_handler.collector import Collector, RequestRecord, is_loopback
from tests.support.collector import Client


def test_restart_on_the_same_database_keeps_tokens_and_events(tmp_path: Path) -> None:
    db = tmp_path / "sub" / "collector.sqlite3"
    with Collector(db) as first:
        identity = (first.user_token, first.project_token, first.project_id, first.organization_id)
        http = Client(first)
        assert http.post_events({"message": "before restart"}).status_code == 202
        http.close()
    with sqlite3.connect(db) as check:
        assert check.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    check.close()
    with Collector(db) as second:
        assert (
            second.user_token,
            second.project_token,
            second.project_id,
            second.organization_id,
        ) == identity
        assert [e["message"] for e in second.events()] == ["before restart"]
        http = Client(second)
        assert http.post_events({"message": "after restart"}).status_code == 202
        assert http.get("/api/v2/projects", second.user_token).status_code == 200
        http.close()
        assert len(second.events()) == 2


def test_identity_is_created_once() -> None:
    collector = Collector()
    try:
        assert collector.user_token != collector.project_token
        assert len(collector.user_token) == 40
        assert len(collector.project_token) == 40
        assert len(collector.project_id) == 24
        with pytest.raises(RuntimeError):
            _ = collector.url
    finally:
        collector.close()


def test_stop_is_prompt_with_open_keep_alive_connections() -> None:
    collector = Collector().start()
    http = Client(collector)
    url = collector.url
    assert http.post_events({"message": "m"}).status_code == 202  # leaves a pooled connection
    started = time.monotonic()
    collector.stop()
    assert time.monotonic() - started < 5  # not the 30 s idle timeout of the kept-alive connection
    assert not collector.running
    with pytest.raises(requests.ConnectionError):
        http.session.get(url + "/api/v2/projects", timeout=2)
    assert len(collector.events()) == 1  # the store stays readable after stop()
    collector.stop()  # idempotent
    http.close()
    collector.close()
    with pytest.raises(RuntimeError):
        collector.events()


def test_start_after_stop_serves_again_on_the_same_port() -> None:
    with Collector() as collector:
        url, token = collector.url, collector.project_token
        http = Client(collector)
        http.post_events({"message": "one"})
        collector.stop()
        assert collector.start() is collector
        assert collector.url == url
        assert collector.project_token == token
        assert http.post_events({"message": "two"}).status_code == 202
        assert len(collector.events()) == 2
        http.close()


def test_start_is_idempotent_and_returns_self() -> None:
    collector = Collector()
    try:
        assert collector.start() is collector
        url = collector.url
        assert collector.start() is collector
        assert collector.url == url
        assert url.startswith("http://127.0.0.1:")
        assert collector.port == int(url.rsplit(":", 1)[1])
    finally:
        collector.close()


@pytest.mark.parametrize("host", ["0.0.0.0", "192.0.2.10", "example.invalid", "", "::"])
def test_non_loopback_hosts_are_refused(host: str) -> None:
    assert not is_loopback(host)
    with pytest.raises(ValueError, match="allow_remote"):
        Collector(host=host)


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "127.0.0.2", "::1", "[::1]"])
def test_loopback_hosts_are_accepted(host: str) -> None:
    assert is_loopback(host)


def test_localhost_serves_on_its_resolved_address() -> None:
    with Collector(host="localhost") as collector:
        assert collector.url.startswith("http://127.0.0.1:")


def test_invalid_options_are_refused() -> None:
    for kwargs in (
        {"port": -1},
        {"port": 70000},
        {"throttle": 0},
        {"max_body_bytes": 0},
        {"max_connections": 0},
        {"header_timeout": 0},
        {"body_timeout": -1},
        {"idle_timeout": 0},
    ):
        with pytest.raises(ValueError, match=next(iter(kwargs)).replace("_", ".")):
            Collector(**kwargs)  # type: ignore[arg-type]


def test_concurrent_posts_are_all_stored(collector: Collector) -> None:
    errors: list[BaseException] = []

    def send(worker: int) -> None:
        http = Client(collector)
        try:
            for index in range(10):
                response = http.post_events(
                    [{"message": f"{worker}-{index}-{n}"} for n in range(3)],
                    compress=index % 2 == 0,
                )
                assert response.status_code == 202
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            http.close()

    threads = [threading.Thread(target=send, args=(worker,)) for worker in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert errors == []
    assert len(collector.events(limit=10_000)) == 8 * 10 * 3


def test_python_api_filters_and_requests_log(client: Client, collector: Collector) -> None:
    client.post_events(
        [
            {"message": "a", "@level": "Error"},
            {"type": "error", "@simple_error": {"message": "boom", "type": "ValueError"}},
            {"message": "c", "@level": "info"},
        ]
    )
    client.get("/api/v2/projects", collector.project_token)
    assert len(collector.events()) == 3
    assert [e["message"] for e in collector.events(level="error")] == ["a"]
    assert [e["message"] for e in collector.events(level="INFO")] == ["c"]
    assert len(collector.events(type="error")) == 1
    assert len(collector.events(project_id=collector.project_id, limit=2)) == 2
    assert [e["type"] for e in collector.events(filter="boom")] == ["error"]
    event = collector.events(type="error")[0]
    assert collector.event(event["id"]) == event
    assert collector.event("0" * 24) is None
    assert collector.requests == [
        ("POST", "/api/v2/events", 202),
        ("GET", "/api/v2/projects", 403),
    ]
    assert isinstance(collector.requests[0], RequestRecord)
    info = collector.request_log[0]
    assert info.headers["content-type"] == "application/json"
    assert info.headers["authorization"] == f"Bearer {collector.project_token}"
    assert info.events_accepted == 3
    assert info.body_bytes > 0
    collector.clear_requests()
    assert collector.requests == []
    collector.clear_events()
    assert collector.events() == []


def test_wait_for_events(client: Client, collector: Collector) -> None:
    with pytest.raises(TimeoutError, match="0 of 1"):
        collector.wait_for_events(1, timeout=0.05)
    sender = threading.Thread(
        target=lambda: client.post_events([{"message": "x"}, {"message": "y"}])
    )
    sender.start()
    events = collector.wait_for_events(2, timeout=10)
    sender.join()
    assert {e["message"] for e in events} == {"x", "y"}
    assert collector.wait_for_events(1, timeout=0, type="log")


def test_repr_does_not_show_tokens(collector: Collector) -> None:
    text = repr(collector)
    assert collector.url in text
    assert collector.project_token not in text
    assert collector.user_token not in text


def test_a_busy_port_raises_oserror(collector: Collector) -> None:
    second = Collector(port=collector.port)
    with pytest.raises(OSError):
        second.start()
    second.close()


def test_a_read_after_an_answer_finds_the_events(collector: Collector) -> None:
    """Posts are answered before they are stored; any read made after the answer, on any
    connection, waits for them."""
    writer, reader = Client(collector), Client(collector)
    try:
        for round_ in range(1, 21):
            batch = [{"message": f"r{round_} e{i}"} for i in range(50)]
            assert writer.post_events(batch, compress=True).status_code == 202
            listed = reader.get("/api/v2/events", collector.user_token, params={"limit": 1})
            assert listed.headers["X-Result-Count"] == str(50 * round_)
            assert f"r{round_} e" in reader.get("/events").text
    finally:
        writer.close()
        reader.close()


def test_a_store_that_fails_after_the_answer_is_logged_and_noted(
    collector: Collector, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    http = Client(collector)
    storage = collector._store()

    def broken(*args: object, **kwargs: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(storage, "insert_events", broken)
    try:
        assert http.post_events({"message": "lost"}).status_code == 202
        assert collector.events() == []
        assert any("could not store 1 events" in r.getMessage() for r in caplog.records)
        assert "could not be stored" in http.get("/").text
        monkeypatch.undo()
        assert http.post_events({"message": "kept"}).status_code == 202
        # Acknowledged, so kept: stored once a store works again (not only at the next start).
        assert sorted(e["message"] for e in collector.events()) == ["kept", "lost"]
    finally:
        http.close()
