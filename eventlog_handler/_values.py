"""Option values as they arrive from code, the environment or ``dictConfig`` strings: numbers,
booleans, lists of words, paths, import paths, the server URL and the API key. Each checks one
value and returns it in its proper type, or raises :class:`ValueError` naming the option and
what is wrong; a secret in it (a URL's password, a key) is masked in the message."""

from __future__ import annotations

import ipaddress
import math
import os
import re
import ssl
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

#: The longest duration a setting may give (11.6 days): past about 9.2e9 s, waits and socket
#: timeouts fail (``OverflowError``), and no wait of the package is meant to be longer.
MAX_SECONDS = 1_000_000.0


def utf16_len(text: str) -> int:
    """The length of ``text`` as the service (C#) counts it: in UTF-16 code units, where a
    character past U+FFFF (most emoji) counts 2. ASCII text costs one look (``isascii`` reads
    a flag); other text one encoding in C (a pass in Python over its characters, to find
    one past U+FFFF, cost fifty times more)."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-16-le", "surrogatepass")) >> 1


def fits(text: str, limit: int) -> bool:
    """Whether ``text`` is at most ``limit`` UTF-16 code units (:func:`utf16_len`); free for a
    text of at most half of it, or of ASCII."""
    size = len(text)
    return size <= limit and (size <= limit >> 1 or text.isascii() or utf16_len(text) <= limit)


def checked(check: Callable[[str, Any], Any], name: str, value: Any) -> Any:
    """``check(name, value)``. A value that fails in a way of its own (its ``__float__``,
    ``__iter__`` or ``__repr__`` raises) is a :class:`ValueError` naming the setting too."""
    try:
        return check(name, value)
    except ValueError:
        raise
    except Exception as exc:
        raise ValueError(
            f"eventlog_handler: setting {name!r} could not be read: its value raised "
            f"{type(exc).__name__}"
        ) from None


def number(name: str, value: Any, *, minimum: float, integer: bool) -> Any:
    if isinstance(value, bool):
        raise ValueError(f"eventlog_handler: setting {name!r} must be a number, got {value!r}")
    try:
        number = float(value.strip()) if isinstance(value, str) else float(value)
    except OverflowError:  # an int past a float's range (10**400)
        number = math.inf
    except (TypeError, ValueError):
        raise ValueError(
            f"eventlog_handler: setting {name!r} must be a number, got {value!r}"
        ) from None
    if math.isnan(number) or number < minimum or math.isinf(number):
        shown = repr(value) if len(repr(value)) <= 40 else f"{repr(value)[:20]}… (a long value)"
        raise ValueError(
            f"eventlog_handler: setting {name!r} must be a finite number >= {minimum}, got {shown}"
        )
    if integer:
        if number != int(number):
            raise ValueError(f"eventlog_handler: setting {name!r} must be a whole number")
        return int(number)
    return number


def seconds(name: str, value: Any, *, minimum: float) -> float:
    """A duration: a finite number from ``minimum`` up to :data:`MAX_SECONDS`."""
    duration = float(number(name, value, minimum=minimum, integer=False))
    if duration > MAX_SECONDS:
        raise ValueError(
            f"eventlog_handler: setting {name!r} must be at most {MAX_SECONDS:.0f} seconds, "
            f"got {value!r}"
        )
    return duration


def boolean(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        lowered = value.strip().lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise ValueError(f"eventlog_handler: setting {name!r} must be true or false, got {value!r}")


def ca_bundle(name: str, value: Any) -> bool | str:
    if isinstance(value, str) and value.strip().lower() not in (
        "1",
        "true",
        "yes",
        "on",
        "0",
        "false",
        "no",
        "off",
    ):
        if not os.path.exists(value):
            raise ValueError(f"eventlog_handler: setting {name!r}: no CA bundle at {value!r}")
        problem = _ca_bundle_problem(value)
        if problem is not None:
            raise ValueError(
                f"eventlog_handler: setting {name!r}: {value!r} is not a usable CA bundle "
                f"({problem}); give a PEM file of CA certificates, a directory of them, or "
                "True/False"
            )
        return value
    return boolean(name, value)


#: The answer of :func:`_ca_bundle_problem` per file as last seen (path, size, mtime).
_BUNDLES: dict[tuple[str, int, int], str | None] = {}


def _ca_bundle_problem(path: str) -> str | None:
    """Why the file at ``path`` can't verify a server (loaded once, as the sender will load it:
    a file that is not PEM fails every send with ``[X509: NO_CERTIFICATE_OR_CRL_FOUND]``), or
    ``None``. A directory is read certificate by certificate when a server is verified: it is
    taken as it is."""
    if os.path.isdir(path):
        return None
    try:
        status = os.stat(path)
    except OSError as exc:
        return f"it can't be read: {exc.strerror or exc}"
    key = (os.path.abspath(path), status.st_size, status.st_mtime_ns)
    if key in _BUNDLES:
        return _BUNDLES[key]
    problem: str | None = None
    try:
        ssl.create_default_context(cafile=path)
    except ssl.SSLError as exc:
        problem = f"no CA certificate could be read from it: {exc.reason or exc}"
    except OSError as exc:
        problem = f"it can't be read: {exc.strerror or exc}"
    except (ValueError, UnicodeError) as exc:
        problem = f"no CA certificate could be read from it: {exc}"
    if len(_BUNDLES) > 64:
        _BUNDLES.clear()
    _BUNDLES[key] = problem
    return problem


def words(name: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        items: Iterable[Any] = [part for part in value.replace(";", ",").split(",")]
    elif isinstance(value, Iterable):
        items = value
    else:
        raise ValueError(f"eventlog_handler: setting {name!r} must be a list of strings")
    found = []
    for item in items:
        if not isinstance(item, str):
            raise ValueError(f"eventlog_handler: setting {name!r} must hold strings, got {item!r}")
        if item.strip():
            found.append(item.strip())
    return tuple(found)


def tags(name: str, value: Any) -> tuple[str, ...]:
    found = words(name, value)
    for tag in found:
        if not fits(tag, 100):  # as the service counts: an emoji is 2
            raise ValueError(
                f"eventlog_handler: setting {name!r}: tag longer than 100 characters "
                "(UTF-16 code units, as the service counts them: an emoji counts 2)"
            )
    return found


def directory(name: str, value: Any) -> str:
    text = os.fspath(value) if isinstance(value, str | os.PathLike) else None
    if not text or not str(text).strip():
        raise ValueError(f"eventlog_handler: setting {name!r} must be a directory path")
    if "\0" in str(text):
        raise ValueError(
            f"eventlog_handler: setting {name!r} must be a directory path, got {value!r} "
            "(a NUL character in it)"
        )
    # Whether the directory can be used (a file in its place, no permission, a read-only
    # disk) is checked when the engine starts: said once on stderr, and the engine runs
    # memory-only (the path often comes from the environment of a machine).
    return os.path.abspath(os.path.expanduser(str(text)))


def version(name: str, value: Any) -> str:
    if not isinstance(value, str | int | float) or isinstance(value, bool):
        raise ValueError(f"eventlog_handler: setting {name!r} must be a string, got {value!r}")
    text = str(value).strip()
    if not text or len(text) > 100 or not text.isprintable():
        raise ValueError(
            f"eventlog_handler: setting {name!r} must be 1 to 100 printable characters, "
            f"got {value!r}"
        )
    return text


def modules(name: str, value: Any) -> tuple[str, ...]:
    """Module prefixes (``shop``, ``shop.vendor``): dotted names of identifiers."""
    modules = words(name, value)
    for module in modules:
        if not all(part.isidentifier() for part in module.split(".")):
            raise ValueError(
                f"eventlog_handler: setting {name!r} must hold module names like "
                f"'shop' or 'shop.vendor', got {module!r}"
            )
    return modules


def environment(name: str, value: Any) -> str:
    """A deployment environment's name: 1 to 100 printable characters, no blanks."""
    if not isinstance(value, str):
        raise ValueError(f"eventlog_handler: setting {name!r} must be a string, got {value!r}")
    text = value.strip()
    if (
        not text
        or not fits(text, 100)  # it is a tag too: as the service counts, an emoji is 2
        or not text.isprintable()
        or any(c.isspace() for c in text)
    ):
        raise ValueError(
            f"eventlog_handler: setting {name!r} must be 1 to 100 printable characters "
            f"(an emoji counts 2) without blanks (like 'production'), got {value!r}"
        )
    return text


def import_callable(name: str, value: Any) -> Any:
    """A callable, or the import path of one (``"myapp.hooks.before_send"``)."""
    if isinstance(value, str):
        module_name, _, attribute = value.strip().rpartition(".")
        if not module_name or not attribute:
            raise ValueError(
                f"eventlog_handler: setting {name!r} must be a callable or an import path "
                f"like 'package.module.function', got {value!r}"
            )
        try:
            import importlib

            value = getattr(importlib.import_module(module_name), attribute)
        except Exception as exc:  # the module may raise anything as it is imported
            raise ValueError(
                f"eventlog_handler: setting {name!r}: cannot import {value!r}: "
                f"{type(exc).__name__}: {exc}"
            ) from None
    if not callable(value):
        raise ValueError(f"eventlog_handler: setting {name!r} must be callable, got {value!r}")
    return value


def exception_types(name: str, value: Any) -> tuple[Any, ...]:
    items: Iterable[Any]
    if isinstance(value, str | type):
        items = [value]
    elif isinstance(value, Iterable):
        items = value
    else:
        raise ValueError(f"eventlog_handler: setting {name!r} must list exception classes or names")
    result: list[Any] = []
    for item in items:
        if isinstance(item, type) and issubclass(item, BaseException):
            result.append(item)
        elif isinstance(item, str) and item.strip():
            result.append(item.strip())
        else:
            raise ValueError(
                f"eventlog_handler: setting {name!r} must hold exception classes or names, "
                f"got {item!r}"
            )
    return tuple(result)


def is_loopback_url(url: str) -> bool:
    """Whether ``url``'s host is a loopback address (or ``localhost``)."""
    host = urlsplit(url).hostname or ""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# -- the server URL and the API key, and how they may be printed -------------------------------

#: What a secret is shown as.
MASK = "[excluded]"


def mask_secret(secret: str | None) -> str:
    """A form of ``secret`` safe to print: its first 4 characters, then ``…``."""
    if not secret:
        return "<none>"
    if len(secret) <= 8:
        return "****"
    return secret[:4] + "…"


def url_password(url: str, part: str = "password") -> str | None:
    """The password (or, with ``part="username"``, the user) in ``url``'s ``user:password@``."""
    try:
        return getattr(urlsplit(url), part) or None
    except ValueError:
        return None


def shown_url(url: str) -> str:
    """``url`` as it may be printed: a password in it masked (``https://ci:[excluded]@host``),
    and the values of a query and a fragment (``?api_key=[excluded]``), which a URL copied from
    a browser or another tool may carry."""
    url = _unencoded_password(url)
    head, mark, query = url.partition("?")
    if not mark:
        head, mark, query = url.partition("#")
    if mark:
        url = head + mark + _masked_query(query)
    password = url_password(url)
    if not password and url_password(url, "username") is None:
        # Not a URL to urlsplit (no scheme, or a mistyped one: "user:pw@host",
        # "https//user:pw@host"): a "name:secret@" in it is masked all the same.
        return url if _has_netloc(url) else _LOOSE_USERINFO.sub(rf"\1\2:{MASK}@", url)
    head, sep, tail = url.partition("://")
    authority, slash, path = tail.partition("/")  # an "@" in the path is not the user's
    userinfo, at, host = authority.rpartition("@")
    if not at:
        return url.replace(password, MASK) if password else url
    if not password:
        return f"{head}{sep}{MASK}{at}{host}{slash}{path}"  # a token as the user
    user = userinfo.partition(":")[0]
    return f"{head}{sep}{user}:{MASK}{at}{host}{slash}{path}"


def _unencoded_password(url: str) -> str:
    """``url`` with a password that holds a ``/``, ``?`` or ``#`` not %-encoded (pasted as it
    is: ``https://ci:kX9/q2@host``) masked up to the last ``@``. A URL parser ends the host at
    that mark: it reads ``ci:kX9`` as a host and a bad port, or, with an ``@`` before the mark
    (``https://ci:k@X9/q2@host``), a host ``X9``, where the key would go."""
    scheme, sep, tail = url.partition("://")
    authority = re.split(r"[/?#]", tail, maxsplit=1)[0]
    user, colon, port = authority.partition(":")
    at = tail.rfind("@")
    # No user here: a host and port (an "@" further on is in the path), an IPv6 host.
    plain = not sep or not colon or port.isdigit() or not port or authority.startswith("[")
    found = "@" in authority and not _HOST.fullmatch(tail[at + 1 :])  # no host after a later @
    if found or plain or at < len(authority) or any(c.isspace() for c in user):
        return url
    return f"{scheme}{sep}{user}:{MASK}{tail[at:]}"


#: A host (a name with a dot, ``localhost``, IPv6; or a name and a port), maybe with a path.
_HOST = re.compile(r"(localhost|[\w-]+(\.[\w-]+)+|\[[\w:.]+\])(:\d+)?(/[\w./-]*)?|[\w-]+:\d+")
#: A ``name:secret@`` at the start of a text or after a ``/`` or ``:``.
_LOOSE_USERINFO = re.compile(r"(^|[/:])([^/:@\s]*):([^/@\s]+)@")


def _has_netloc(url: str) -> bool:
    try:
        return bool(urlsplit(url).netloc)
    except ValueError:
        return False


#: Query names of the service's own paging, whose values are no one's secret (an error
#: message showing ``?page=[excluded]&limit=[excluded]`` only puzzles).
_PLAIN_QUERY_NAMES = frozenset(
    ("page", "limit", "sort", "mode", "v", "before", "after", "offset", "close")
)  # close: a heartbeat's or a session's end (``id``, maybe a user's identity, stays masked)


def _masked_query(text: str) -> str:
    """A query (and fragment) with every value masked, the names kept (and the values of the
    service's paging: :data:`_PLAIN_QUERY_NAMES`)."""
    query, hash_mark, fragment = text.partition("#")
    pairs = []
    for pair in query.split("&") if query else []:
        key, equals, value = pair.partition("=")
        if key.lower() in _PLAIN_QUERY_NAMES and value.isprintable() and len(value) <= 100:
            pairs.append(pair)
        else:
            pairs.append(f"{key}={MASK}" if equals else MASK)
    return "&".join(pairs) + (f"{hash_mark}{MASK}" if hash_mark and fragment else hash_mark)


def validate_server_url(name: str, value: Any) -> str:
    """A ``http(s)://host[:port][/path]`` URL, without a trailing slash."""
    if not isinstance(value, str):  # its repr could show a password: the type says enough
        raise ValueError(
            f"eventlog_handler: setting {name!r} must be a URL (a str), got a "
            f"{type(value).__name__}"
        )
    if not value.strip():
        raise ValueError(f"eventlog_handler: setting {name!r} must be a URL, got {value!r}")
    value = value.strip()
    if _looks_like_token(value):  # the API key in its place: the two swapped
        raise ValueError(
            f"eventlog_handler: setting {name!r} must be an http:// or https:// URL, got what "
            f"looks like a token ({mask_secret(value)}, {len(value)} characters): are the API "
            "key and the server URL swapped?"
        )
    shown = shown_url(value)
    url: str = value.rstrip("/")
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise ValueError(f"eventlog_handler: setting {name!r} is not a valid URL: {exc}") from None
    if "://" not in url:  # what a blank or a password would say is not the first problem
        raise ValueError(
            f"eventlog_handler: setting {name!r} must be an http:// or https:// URL "
            f"with a host, got {shown!r} (no scheme: write http:// or https:// before the host)"
        )
    if any(character.isspace() for character in url):
        raise ValueError(
            f"eventlog_handler: setting {name!r} must not contain blanks (%20 in a path), "
            f"got {shown!r}"
        )
    if _unencoded_password(url) != url:
        raise ValueError(
            f"eventlog_handler: setting {name!r} has a password with a '/', '?', '#' or '@' in "
            f"it: write them %-encoded (%2F, %3F, %23, %40; an '@' in a path too), got {shown!r}"
        )
    if parts.scheme not in ("http", "https") or not parts.hostname:
        quoted = " (a quote copied with it?)" if url[0] in "\"'`" or url[-1] in "\"'`" else ""
        raise ValueError(
            f"eventlog_handler: setting {name!r} must be an http:// or https:// URL "
            f"with a host, got {shown!r}{quoted}"
        )
    try:
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError:
        raise ValueError(f"eventlog_handler: setting {name!r} has a bad port: {shown!r}") from None
    if not url.startswith(parts.scheme):  # "HTTP://": written as every check reads it
        url = parts.scheme + url[len(parts.scheme) :]
    if parts.query or parts.fragment:
        raise ValueError(
            f"eventlog_handler: setting {name!r} must not carry a query or fragment: {shown!r}"
        )
    api = _API_PATH.search(parts.path)
    if api is not None:  # a URL pasted from the API's documentation: every post would be a 404
        base = shown_url(url[: len(url) - len(parts.path) + api.start()])
        raise ValueError(
            f"eventlog_handler: setting {name!r} must be the server's base URL, without "
            f"'/api/v2' (the package adds /api/v2/... itself), got {shown!r}: "
            f"use {base!r}"
        )
    return url


#: The service's API path at the end of a server URL: ``/api/v2``, or ``/api/v2/`` and one of
#: its endpoints (``/api/v2/events``); a gateway's ``/api/v2/exceptionless`` is a base path.
_API_PATH = re.compile(
    r"/api/v2(?:/(?:events|projects|stacks|auth|organizations|tokens|users)(?:/.*)?)?/?$",
    re.IGNORECASE,
)


def _looks_like_token(text: str) -> bool:
    """ASCII letters and digits only, a digit among them, 20 characters or more: a key (the
    service's have 40), not a host name (``eventlog-collector-service``)."""
    return len(text) >= 20 and text.isascii() and text.isalnum() and any(c.isdigit() for c in text)


def validate_token(name: str, value: Any) -> str:
    """A token: no whitespace, at least 10 characters (real keys have 40)."""
    if not isinstance(value, str):
        raise ValueError(f"eventlog_handler: setting {name!r} must be a string")
    token = value.strip()
    if "://" in token:  # setup("http://...") or the two swapped: the URL is not secret
        raise ValueError(
            f"eventlog_handler: setting {name!r} must be a token, got a URL "
            f"({shown_url(token)!r}): are the API key and the server URL swapped? (setup() "
            "takes the API key first)"
        )
    if any(ch.isspace() for ch in token) or len(token) < 10 or not token.isprintable():
        raise ValueError(
            f"eventlog_handler: setting {name!r} does not look like a token "
            f"({mask_secret(token)!s}, {len(token)} characters): a token has no spaces "
            "and at least 10 characters"
        )
    odd = sorted({repr(ch) for ch in token if not ch.isascii() or ch in "\"'`"})
    if odd:  # not in a header, or quotes an env file kept: a quote pasted with it?
        raise ValueError(
            f"eventlog_handler: setting {name!r} does not look like a token "
            f"({mask_secret(token)!s}): it holds {', '.join(odd)}; a token is letters and "
            "digits (a quote copied with it?)"
        )
    return token
