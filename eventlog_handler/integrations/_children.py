"""How ``setup()``'s arguments reach the processes that ``multiprocessing`` starts with spawn or
forkserver.

A spawned child imports the program's main module anew without running its ``if __name__ ==
"__main__":`` block, and a fork server's child gets the fork server's memory, which has no
setup, so a ``setup()`` under that block would run in none of them. :func:`hand_down` leaves
its arguments in two places:

- this process's ``multiprocessing`` configuration (``BaseProcess._config``, where it keeps the
  authentication key), through a stand-in (:class:`_HandedDown`): every process object made
  here gets a copy of that configuration, which ``multiprocessing`` pickles into the child's
  start-up pipe when the object is started; the stand-in is pickled as what the setup leaves
  *then*, so a child started after ``close()`` gets nothing, as a forked one does;
- the environment, for a spawned child while it imports the main module, before its process
  object has arrived (what it logs then is the program's too). Every subprocess inherits the
  environment, and an API key given in code must not be readable there: it is sealed with the
  authentication key, which ``multiprocessing`` hands its children through the pipe.

Arguments that are objects travel as their import paths (a module-level function, an exception
class); one that has none can't travel, and a child not set up because of it says so.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import importlib
import json
import multiprocessing
import os
import sys
from types import FrameType
from typing import Any, NamedTuple

from eventlog_handler.delivery._stderr import say_once
from eventlog_handler.wire._simple_error import main_named, type_name

#: The environment variable a spawned child reads while it imports the main module.
CHILD_SETUP_ENV = "EVENTLOG_HANDLER_CHILD_SETUP"
#: What stands in the arguments of a setup whose arguments can't travel: why.
UNPASSABLE = "@unpassable"


class Left(NamedTuple):
    """What a setup left for the children (:func:`hand_down`)."""

    #: In the environment, sealed ("" when nothing is).
    sealed: str
    #: The arguments as JSON (or why they can't travel: :data:`UNPASSABLE`).
    plain: str


#: What this process's setup leaves for its children now.
_LEFT: Left | None = None


class _HandedDown:
    """Stands in this process's ``multiprocessing`` configuration for what its setup leaves for
    its children; pickled (when a process object made here is started by spawn or
    forkserver) as what it leaves at that moment."""

    def __reduce__(self) -> tuple[type[str], tuple[str]]:
        left = _LEFT
        return (str, ("" if left is None else left.plain,))


_HANDED_DOWN = _HandedDown()


def hand_down(arguments: dict[str, Any]) -> Left:
    """Leave ``setup()``'s ``arguments`` for the children this process starts from now on.
    Never raises (what can't be handed down is said by the children it doesn't reach)."""
    global _LEFT
    try:
        travelling, unpassable = _travelling(arguments)
    except Exception as exc:  # a user's object that fails when it is looked at
        travelling, unpassable = {}, f"its arguments could not be read ({type(exc).__name__})"
    if unpassable:
        os.environ.pop(CHILD_SETUP_ENV, None)
        left = Left("", json.dumps({UNPASSABLE: unpassable}))
    else:
        plain = json.dumps(travelling)
        left = Left(_seal(plain.encode()), plain)
        os.environ[CHILD_SETUP_ENV] = left.sealed
    _LEFT = left
    pass_on_from_here()
    return left


def take_back(left: Left) -> None:
    """Children started from now on are not set up by what ``left`` was (a setup's close())."""
    global _LEFT
    if _LEFT is left:
        _LEFT = None
    if left.sealed and os.environ.get(CHILD_SETUP_ENV) == left.sealed:
        del os.environ[CHILD_SETUP_ENV]


def pass_on_from_here() -> None:
    """Put the stand-in in this process's configuration, where process objects made from now
    on copy it (at import; in a child, once it has read what its parent handed it)."""
    config = _process_config()
    if config.get(CHILD_SETUP_ENV) is not _HANDED_DOWN:
        config[CHILD_SETUP_ENV] = _HANDED_DOWN


def handed_to_this_process() -> dict[str, Any] | None:
    """The arguments of the setup this process's parent handed it, if any, and if they can be
    used now; a child not set up because its parent's arguments could not travel says why."""
    if multiprocessing.parent_process() is not None:  # the child runs: its process object's
        plain = _process_config().get(CHILD_SETUP_ENV)
        if not isinstance(plain, str) or not plain:
            # Not handed a setup: one the environment holds is stale (a fork server's, from
            # before the parent's close()); this process's own children must not read it.
            os.environ.pop(CHILD_SETUP_ENV, None)
            return None
        raw: bytes | None = plain.encode()
    else:
        # A spawned child imports the parent's main module as "__mp_main__" (in the parent,
        # "__mp_main__" is an alias of "__main__") before its process object arrives.
        main = sys.modules.get("__mp_main__")
        sealed = os.environ.get(CHILD_SETUP_ENV)
        if getattr(main, "__name__", None) != "__mp_main__" or sealed is None:
            return None
        # None when sealed by another program's (through a subprocess), or by the parent before
        # it changed its authentication key: the child looks again once its object is here.
        raw = _unseal(sealed)
    arguments = json.loads(raw) if raw is not None else None
    if not isinstance(arguments, dict):
        return None
    if UNPASSABLE in arguments:
        say_once(
            UNPASSABLE,
            f"eventlog_handler: this process ({multiprocessing.current_process().name}) does "
            f"not run its parent's setup(): {arguments[UNPASSABLE]}",
        )
        return None
    problem = _unusable_hook(arguments.get("before_send"))
    if problem is None:
        return arguments
    if multiprocessing.parent_process() is None:
        return None  # the main module is still being imported: the child looks again after
    # Never without it: the hook may be what keeps secrets off the server.
    say_once(
        UNPASSABLE,
        f"eventlog_handler: this process ({multiprocessing.current_process().name}) does not "
        f"run its parent's setup(): {problem}",
    )
    return None


def _travelling(arguments: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """``arguments`` as JSON can carry them (a function or class as its import path), and why
    they can't ("" when they can). ``ignore_exceptions`` is expected as the settings hold it
    (a tuple of classes and names: a generator given to ``setup()`` was used up there)."""
    travelling = dict(arguments)
    hook = travelling.get("before_send")
    if hook is not None and not isinstance(hook, str):
        path = _import_path(hook)
        if path is None:
            kind = getattr(hook, "__qualname__", None) or type(hook).__qualname__
            return travelling, (
                f"before_send ({str(kind)[:100]}) has no import path to travel by; give a "
                f"function defined at a module's top level, or its import path "
                f"('package.module.function')"
            )
        travelling["before_send"] = path
    for name, value in travelling.items():
        if isinstance(value, set | frozenset):  # tags={"a", "b"}: as a list
            travelling[name] = sorted(value, key=str)
    ignored = travelling.get("ignore_exceptions")
    if isinstance(ignored, tuple | list):
        travelling["ignore_exceptions"] = [
            type_name(item) if isinstance(item, type) else item for item in ignored
        ]
    try:
        json.dumps(travelling)
    except (TypeError, ValueError):
        names = sorted(name for name, value in travelling.items() if not _plain(value))
        verb = "is" if len(names) < 2 else "are"
        return (
            travelling,
            f"{', '.join(names) or 'an argument'} of its setup() {verb} not plain data",
        )
    return travelling, ""


def _plain(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def _unusable_hook(path: Any) -> str | None:
    """Why the ``before_send`` a child was handed can't be used here, or ``None``: its module
    is not imported yet, or not whole (a spawned child still importing its main module), or
    the path leads nowhere in this process (a main module without a file, ``python -c``)."""
    if not isinstance(path, str):
        return None
    module_name, _, name = path.strip().rpartition(".")
    if multiprocessing.parent_process() is None:  # importing the main module: import nothing
        module = sys.modules.get("__mp_main__" if module_name == "__main__" else module_name)
        return None if callable(getattr(module, name, None)) else "not yet"
    try:
        found = getattr(importlib.import_module(module_name), name)
    except Exception as exc:
        return f"its before_send {path!r} can't be imported here ({type(exc).__name__})"
    return None if callable(found) else f"its before_send {path!r} is not callable here"


def _import_path(value: Any) -> str | None:
    """The import path that gives ``value`` back, or ``None``."""
    module = getattr(value, "__module__", None)
    name = getattr(value, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(name, str) or "." in name or "<" in name:
        return None
    try:
        found = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None
    return f"{main_named(module)}.{name}" if found is value else None


def _process_config() -> dict[str, Any]:
    """This process's ``multiprocessing`` configuration (``BaseProcess._config``): every process
    object made here gets a copy, which reaches the child with it. A dict of no consequence if
    a Python lacks it."""
    config = getattr(multiprocessing.current_process(), "_config", None)
    return config if isinstance(config, dict) else {}


def in_forkserver() -> bool:
    """Whether this is multiprocessing's fork server importing what it preloads, not one of its
    children (they run on the fork server's stack, as processes of their parent)."""
    if multiprocessing.parent_process() is not None:
        return False
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename.endswith(os.path.join("multiprocessing", "forkserver.py")):
            return True
        frame = frame.f_back
    return False


# -- the seal ----------------------------------------------------------------------------------


def _keys() -> tuple[bytes, bytes]:
    """The keys of the seal, made from ``multiprocessing``'s authentication key: random per
    program, and handed by ``multiprocessing`` to the children it starts through their
    start-up pipe, never the environment."""
    secret = bytes(multiprocessing.current_process().authkey)
    return (
        hashlib.sha256(b"eventlog_handler seal\0" + secret).digest(),
        hashlib.sha256(b"eventlog_handler mac\0" + secret).digest(),
    )


def _seal(plain: bytes) -> str:
    """``plain`` encrypted (a SHAKE-256 keystream) and authenticated (HMAC-SHA256)."""
    seal_key, mac_key = _keys()
    nonce = os.urandom(16)
    sealed = nonce + _keystream_xor(seal_key, nonce, plain)
    tag = hmac.new(mac_key, sealed, hashlib.sha256).digest()[:16]
    return base64.urlsafe_b64encode(tag + sealed).decode("ascii")


def _keystream_xor(key: bytes, nonce: bytes, data: bytes) -> bytes:
    """``data`` XOR the SHAKE-256 keystream of ``key`` and ``nonce``: seals and unseals."""
    stream = hashlib.shake_256(key + nonce).digest(len(data))
    return bytes(a ^ b for a, b in zip(data, stream, strict=True))


def _unseal(text: str) -> bytes | None:
    """What :func:`_seal` sealed, or ``None`` when it was sealed by a process that is not a
    ``multiprocessing`` parent of this one (another program's, inherited through a subprocess)."""
    seal_key, mac_key = _keys()
    try:
        raw = base64.urlsafe_b64decode(text.encode("ascii"))
    except (ValueError, UnicodeError):
        return None
    tag, sealed = raw[:16], raw[16:]
    if len(sealed) < 16 or not hmac.compare_digest(
        tag, hmac.new(mac_key, sealed, hashlib.sha256).digest()[:16]
    ):
        return None
    return _keystream_xor(seal_key, sealed[:16], sealed[16:])
