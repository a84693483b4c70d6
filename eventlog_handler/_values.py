"""Option values as they arrive from code, the environment or ``dictConfig`` strings: numbers,
booleans, lists of words, paths, import paths. Each checks one value and returns it in its
proper type, or raises :class:`ValueError` naming the option and what is wrong."""

from __future__ import annotations

import ipaddress
import math
import os
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

#: The longest duration a setting may give (11.6 days): past about 9.2e9 s, waits and socket
#: timeouts fail (``OverflowError``), and no wait of the package is meant to be longer.
MAX_SECONDS = 1_000_000.0


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
        return value
    return boolean(name, value)


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
        if len(tag) > 100:
            raise ValueError(f"eventlog_handler: setting {name!r}: tag longer than 100 characters")
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
    if not text or len(text) > 100 or not text.isprintable() or any(c.isspace() for c in text):
        raise ValueError(
            f"eventlog_handler: setting {name!r} must be 1 to 100 printable characters "
            f"without blanks (like 'production'), got {value!r}"
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
