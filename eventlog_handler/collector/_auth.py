"""Who sent a request: the credentials forms the service accepts, and the ``Host`` check.

Credentials, as the service reads them (the Exceptionless server's rules for what real clients send):

- ``Authorization: Bearer <key>`` or ``Authorization: Token <key>`` (the scheme in any case);
- ``Authorization: Basic`` with ``client:<key>`` or ``<key>:x-oauth-basic`` (a token), or
  ``<e-mail>:<password>`` (a user); an empty password is refused (401), as the service does;
- only when there is no ``Authorization`` header: the query parameters ``access_token``,
  ``api_key`` or ``apikey`` (names in any case).

The ``Host`` check refuses requests addressed to a name this collector does not answer to, the
defence against DNS rebinding: a web page on ``http://evil.example:5000`` whose name is
re-pointed at 127.0.0.1 would otherwise read the dashboard and the API from the user's browser
(same origin as far as the browser knows). ``localhost`` and IP addresses (which no DNS answer
can re-point) are accepted, with any port (a forwarded port changes it); other names only when
configured.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass
from email.message import Message

__all__ = ["QUERY_TOKEN_NAMES", "Credentials", "HostPolicy", "read_credentials"]

QUERY_TOKEN_NAMES = ("access_token", "api_key", "apikey")
_HOST_RE = re.compile(r"^(?P<name>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(?::(?P<port>[0-9]{1,5}))?$")


@dataclass(frozen=True)
class Credentials:
    """What a request presented: a token, an e-mail and password, or nothing usable."""

    token: str | None = None
    email: str | None = None
    password: str | None = None
    scheme: str = ""

    @property
    def present(self) -> bool:
        """Whether anything usable was presented."""
        return bool(self.token or (self.email and self.password is not None))


def _basic(value: str) -> Credentials:
    try:
        decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        return Credentials(scheme="basic")
    user, separator, password = decoded.partition(":")
    if not separator:
        return Credentials(scheme="basic")
    if user.lower() == "client":
        return Credentials(token=password.strip() or None, scheme="basic")
    if password == "":
        return Credentials(scheme="basic")  # the service refuses an empty password part
    if password.lower() == "x-oauth-basic":
        return Credentials(token=user.strip() or None, scheme="basic")
    return Credentials(email=user, password=password, scheme="basic")


def read_credentials(headers: Message, query: Mapping[str, list[str]]) -> Credentials:
    """The credentials of a request (see the module's docstring)."""
    header = headers.get("Authorization")
    if header is not None:
        scheme, _, value = header.strip().partition(" ")
        scheme = scheme.lower()
        if scheme in ("bearer", "token"):
            return Credentials(token=value.strip() or None, scheme=scheme)
        if scheme == "basic":
            return _basic(value)
        return Credentials(scheme=scheme)
    by_name = {name.lower(): values for name, values in query.items()}
    for name in QUERY_TOKEN_NAMES:
        values = by_name.get(name)
        if values and values[0].strip():
            return Credentials(token=values[0].strip(), scheme="query")
    return Credentials()


class HostPolicy:
    """Which ``Host`` headers a collector answers (see the module's docstring).

    :param names: more host names to accept (for example the machine's name when serving
        beyond loopback).
    """

    def __init__(self, names: tuple[str, ...] = ()) -> None:
        self.names = frozenset(name.strip().lower().strip("[]") for name in names if name)

    def allows(self, host: str | None) -> bool:
        """Whether a request with this ``Host`` header (None: none sent) may be answered.

        A request without ``Host`` (HTTP/1.0) is answered: browsers always send one.
        """
        if host is None:
            return True
        match = _HOST_RE.match(host.strip())
        if match is None:
            return False
        name = match.group("name").lower().strip("[]").rstrip(".")
        if name == "localhost" or name in self.names:
            return True
        try:
            ipaddress.ip_address(name)
        except ValueError:
            return False
        return True
