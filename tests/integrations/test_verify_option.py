"""``verify``, the CA bundle (or ``True``/``False``) a server's certificate is checked with: the
names other libraries give it (``ca_bundle``, ``cafile``, ``ca_certs``) point to it, and a path
that is not a CA bundle is said at setup, naming the setting and the file, instead of every
send failing later with ``[X509: NO_CERTIFICATE_OR_CRL_FOUND]``."""

from __future__ import annotations

from pathlib import Path

import certifi
import pytest

from eventlog_handler.settings import Settings
from tests.support.constants import API_KEY
from tests.support.faultserver import FaultServer
from tests.support.processes import run_program


@pytest.mark.parametrize("name", ["ca_bundle", "cafile", "ca_certs", "CA_BUNDLE"])
def test_another_librarys_name_for_the_ca_bundle_points_to_verify(name: str) -> None:
    with pytest.raises(TypeError, match=rf"{name} \(did you mean verify\?\)"):
        Settings.from_options({"api_key": API_KEY, name: certifi.where()})


def test_a_file_that_is_not_a_ca_bundle_is_named_with_the_setting(tmp_path: Path) -> None:
    not_pem = tmp_path / "passwd"
    not_pem.write_text("root:x:0:0:root:/root:/bin/bash\n")
    with pytest.raises(ValueError) as info:
        Settings.from_options({"api_key": API_KEY, "verify": str(not_pem)})
    said = str(info.value)
    assert "'verify'" in said and str(not_pem) in said and "not a usable CA bundle" in said
    # A real bundle, a directory of certificates and the booleans are taken as they are.
    assert Settings.from_options({"api_key": API_KEY, "verify": certifi.where()}).verify == (
        certifi.where()
    )
    assert Settings.from_options({"api_key": API_KEY, "verify": str(tmp_path)}).verify == str(
        tmp_path
    )
    assert Settings.from_options({"api_key": API_KEY, "verify": "false"}).verify is False


def test_setup_says_it_and_sends_with_the_default(tmp_path: Path) -> None:
    not_pem = tmp_path / "bundle.pem"
    not_pem.write_text("not a certificate\n")
    program = f"""
import logging
import eventlog_handler
eventlog_handler.setup(verify={str(not_pem)!r}, ca_bundle={certifi.where()!r})
logging.getLogger("app").warning("sent all the same")
"""
    with FaultServer() as server:
        status, stderr, _ = run_program(program, server.url, tmp_path)
        assert status == 0, stderr
        assert server.wait_for(1), stderr
    assert server.accepted[0]["message"] == "sent all the same"
    [line] = [line for line in stderr.splitlines() if "not a usable CA bundle" in line]
    assert "'verify'" in line and str(not_pem) in line and "the default (True) is used" in line
    assert "ca_bundle (did you mean verify?)" in stderr, stderr
