"""The worker's event posts over TLS and through proxies taken from the environment, as
``requests`` would make them: the ``verify`` option (a CA bundle, or off), ``REQUESTS_CA_BUNDLE``,
``HTTPS_PROXY``/``HTTP_PROXY`` (with credentials) and ``NO_PROXY``. All on 127.0.0.1."""

from __future__ import annotations

import base64
import shutil
import subprocess
import time
from collections.abc import Iterator

import pytest

from eventlog_handler.wire._logs import log_event
from tests.support.faultserver import FaultServer
from tests.support.proxy import Proxy

ENVIRONMENT = (
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "HTTPS_PROXY",
    "https_proxy",
    "HTTP_PROXY",
    "http_proxy",
    "ALL_PROXY",
    "all_proxy",
    "NO_PROXY",
    "no_proxy",
)


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """A self-signed certificate for 127.0.0.1, made with the system's openssl."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed: no certificate for the TLS tests")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2"),
            *("-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"),
            *("-keyout", str(key), "-out", str(cert)),
        ],
        check=True,
        capture_output=True,
    )
    return str(cert), str(key)


@pytest.fixture
def tls_server(certificate: tuple[str, str]) -> Iterator[FaultServer]:
    with FaultServer(tls=certificate) as running:
        yield running


def _send_one(make_engine, url: str, wait: float = 5.0, **options) -> dict:  # type: ignore[no-untyped-def]
    engine = make_engine(url, **options)
    engine.enqueue(log_event("over the wire", level="Warn"))
    engine.flush(wait)
    return engine.stats()


def test_a_ca_bundle_given_as_verify_is_trusted(make_engine, tls_server, certificate):
    stats = _send_one(make_engine, tls_server.url, verify=certificate[0])
    assert stats["delivered"] == 1, stats
    assert tls_server.accepted_count() == 1


def test_requests_ca_bundle_from_the_environment_is_trusted(
    make_engine, tls_server, certificate, monkeypatch
):
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", certificate[0])
    stats = _send_one(make_engine, tls_server.url)
    assert stats["delivered"] == 1, stats


def test_an_untrusted_certificate_is_a_tls_failure_and_nothing_is_sent(make_engine, tls_server):
    stats = _send_one(make_engine, tls_server.url, wait=1.0, retry_initial=5.0)
    assert stats["delivered"] == 0, stats
    assert tls_server.accepted_count() == 0
    assert "TLS" in (stats["last_error"] or ""), stats
    assert "give verify= the CA bundle that signed it" in stats["last_error"], stats


def test_an_https_url_to_a_plain_http_server_says_so(make_engine, server):
    """The server speaks plain HTTP: the failure said only ``[SSL: WRONG_VERSION_NUMBER]``."""
    url = server.url.replace("http://", "https://")
    stats = _send_one(make_engine, url, wait=1.0, retry_initial=5.0)
    assert stats["delivered"] == 0, stats
    assert "the server does not speak TLS: an https:// URL to an http:// server?" in str(
        stats["last_error"]
    ), stats


def test_verify_off_sends_to_any_certificate(make_engine, tls_server):
    stats = _send_one(make_engine, tls_server.url, verify=False)
    assert stats["delivered"] == 1, stats


def test_https_proxy_from_the_environment_tunnels_the_post(
    make_engine, tls_server, certificate, monkeypatch
):
    with Proxy() as proxy:
        monkeypatch.setenv("HTTPS_PROXY", proxy.url)
        stats = _send_one(make_engine, tls_server.url, verify=certificate[0])
    assert stats["delivered"] == 1, stats
    assert ("CONNECT", f"127.0.0.1:{tls_server.port}", None) in proxy.seen


def test_http_proxy_with_credentials_sends_them_to_the_proxy_only(make_engine, server, monkeypatch):
    with Proxy() as proxy:
        host = proxy.url.removeprefix("http://")
        monkeypatch.setenv("HTTP_PROXY", f"http://someone:p%40ss@{host}")
        stats = _send_one(make_engine, server.url)
    assert stats["delivered"] == 1, stats
    expected = "Basic " + base64.b64encode(b"someone:p@ss").decode()
    assert ("POST", f"{server.url}/api/v2/events", expected) in proxy.seen
    assert {auth for _, _, auth in proxy.seen} == {expected}
    assert all("proxy-authorization" not in seen.headers for seen in server.requests)


def test_no_proxy_sends_directly(make_engine, server, monkeypatch):
    with Proxy() as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        stats = _send_one(make_engine, server.url)
    assert stats["delivered"] == 1, stats
    assert proxy.seen == []


def test_the_key_in_a_proxy_url_is_never_in_stats(make_engine, monkeypatch):
    # A proxy that refuses connections: the error names the server, never the proxy's password.
    monkeypatch.setenv("HTTP_PROXY", "http://someone:hunter2@127.0.0.1:9")
    stats = _send_one(make_engine, "http://127.0.0.1:9", wait=1.0, retry_initial=5.0)
    assert stats["delivered"] == 0
    assert "hunter2" not in repr(stats)


def test_a_tunnel_opened_again_after_a_while_is_not_given_the_last_answers_deadline(
    make_engine, tls_server, certificate, monkeypatch
):
    """The whole-answer deadline stayed on the connection: when the server closed it and the
    next batch opened the tunnel again, the proxy's answer to ``CONNECT`` was read against the
    last answer's deadline, long past, and every such batch failed once ("no answer in
    time") before it went through."""
    from tests.support.faultserver import Reply

    tls_server.default = Reply(202, b"", {"Connection": "close"})
    with Proxy() as proxy:
        monkeypatch.setenv("HTTPS_PROXY", proxy.url)
        engine = make_engine(tls_server.url, verify=certificate[0], timeout=1.0)
        for index in range(3):
            engine.enqueue(log_event(f"batch {index}", level="Warn"))
            assert engine.flush(10)
            time.sleep(1.2)  # past the last answer's deadline
        stats = engine.stats()
    assert stats["delivered"] == 3, stats
    assert stats["retries"] == 0, stats["last_error"]
    assert sum(1 for method, _, _ in proxy.seen if method == "CONNECT") >= 3  # one per batch
