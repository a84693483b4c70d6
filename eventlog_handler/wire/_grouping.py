"""Grouping: one bug, one stack, across deploys and upgrades, on the real service.

The service stacks a ``@simple_error`` by its type and the SHA1 of its ``stack_trace`` text,
which holds line numbers and every frame (the framework's, the standard library's, this
package's): one bug would become a new stack on every deploy. So every error event carries a
manual stack (``data["@stack"]``, see :mod:`eventlog_handler.wire._stacking`), whose
signature the service hashes instead (SHA1 of the UTF-16LE concatenation of the non-empty
``signature_data`` values, in order; keys and title are not hashed)::

    {"title": "ZeroDivisionError in shop.checkout.total",
     "signature_data": {"type": "ZeroDivisionError",
                        "frames": "in shop.checkout.main > shop.checkout.total"}}

- ``type``: the exception's qualified type name.
- ``frames``: ``in`` and the application's frames (:func:`~eventlog_handler.wire._frames.is_in_app`),
  outermost first, as ``module.function`` (no line numbers, no paths, no source text; a
  repeating run once, as in the stack trace, and a repeating cycle of calls once, its
  line numbers aside). With no application frame: the innermost frame
  (``in json.decoder.raw_decode``).
- Chained exceptions (``raise B from A``, or raised while handling another): the outermost
  exception's type and its application frames. When the outermost exception has no
  application frame (a library wrapped the application's error), the first error of the chain
  that has some lends its frames, and its type is added as ``cause`` (``from KeyError``).
- A process pool's failure raised again in the caller: after the caller's application frames,
  the worker's, read from its traceback, which the pool passes on as text only (the
  ``RemoteTraceback`` cause), by module name (a path varies between machines).
- An exception group (``asyncio.TaskGroup``, ``except*``) also has ``members``: each member's
  type and innermost application frame, sorted and each once
  (``with KeyError in shop.ship, ValueError in shop.charge``), so two groups that fail for
  different reasons are two stacks, whatever order their tasks failed in.

The values are shaped so that their concatenation can't be read two ways: type names hold no
blanks, and the other values start with a word and a blank (``in``, ``from``, ``at``).

A record at ``ERROR`` or above without an exception is stacked by its logger, its call site
(the innermost application frame's ``module.function``, no line number) and its message
*template* (``record.msg``, not the formatted text), its numbers, UUIDs and ids of letters and digits each
written ``#``: a message formatted before the call (``log.error(f"order {id} failed")``) is
one stack for every id::

    {"title": "order %s failed (in shop.orders.place)",
     "signature_data": {"source": "shop.orders", "site": "at shop.orders.place",
                        "message": "order %s failed"}}

Frames of the program's main module are ``__main__`` in every script, so a stack with one adds
``program``: the script's file name, or the module run with ``python -m`` (``of
nightly_import.py``); two scripts whose ``main()`` fail alike are two bugs.

A stack the user gave (``extra=stack(...)``) always wins.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any

#: Characters kept of a signature value and of a title.
MAX_VALUE = 2_000
MAX_TITLE = 1_000
#: What varies from one call to the next in a message formatted before the call: an address
#: or other ``0x`` number (an object's default repr), a UUID, an id of letters and digits (5 or
#: more characters, a digit and a letter among them, between characters that are neither:
#: ``req_9f3a...``, a ULID, a pod's ``7d9f8-x2kq4``), a number.
_VARYING = re.compile(
    r"(?<![0-9a-z])0x[0-9a-f]+(?![0-9a-z])"
    r"|(?<![0-9a-z])[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}(?![0-9a-z])"
    r"|(?<![0-9a-z])(?=[0-9a-z]*[0-9])(?=[0-9a-z]*[a-z])[0-9a-z]{5,}(?![0-9a-z])|[0-9]+",
    re.IGNORECASE,
)


def _name(frame: Mapping[str, Any]) -> str:
    module = frame.get("module") or ""
    function = frame.get("function") or "?"
    return f"{module}.{function}" if module else str(function)


def _app_names(frames: Any, endless: bool = False) -> list[str]:
    """The names of the application's frames, outermost first, repetitions folded; ``endless``:
    of a ``RecursionError`` (see :func:`_endless`)."""
    if not isinstance(frames, list):
        return []
    names = [_name(frame) for frame in frames if isinstance(frame, dict) and frame.get("in_app")]
    if len(names) < 2:
        return names
    return _endless(names) if endless else _once(names)


#: The longest cycle of calls :func:`_once` looks for (a recursive descent parser's rules).
MAX_CYCLE = 12


def _once(names: list[str]) -> list[str]:
    """``names`` with each run of a repeating block of up to :data:`MAX_CYCLE` names kept once
    (``a > b > a > b > c``: ``a > b > c``): a recursion as deep as its input is one stack,
    however many times its cycle ran. The stack trace's own folding compares line numbers too,
    and the frame where the cycle calls itself again is not the frame where it fails."""
    kept: list[str] = []
    for name in names:
        kept.append(name)
        for period in range(1, min(MAX_CYCLE, len(kept) // 2) + 1):
            if kept[-period:] == kept[-2 * period : -period]:
                del kept[-period:]
                break
    return kept


def _endless(names: list[str]) -> list[str]:
    """The names of a ``RecursionError``'s frames: those before its recursion, then the
    functions of the recursion once each, in name order. Where the limit struck, and so where
    the frames looked at begin and end in the cycle (and what the stack trace's own folding of
    repeated frames leaves of it), depends on how deep the program was when the recursion
    began: the order of the frames was one stack per depth. The recursion begins at the first
    name that comes again."""
    for index, name in enumerate(names):
        if name in names[index + 1 :]:
            return _once(names[:index]) + sorted(set(names[index:]))
    return _once(names)


def _frames_of(error: Mapping[str, Any]) -> Any:
    data = error.get("data")
    return data.get("@frames") if isinstance(data, dict) else None


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def error_stack(
    error: Any,
    program: str | None = None,
    include: Collection[str] = (),
    exclude: Collection[str] = (),
) -> dict[str, Any] | None:
    """The ``@stack`` of an ``@simple_error`` whose frames are resolved, or ``None`` (no
    frames: the call site of the capture stands, see
    :func:`eventlog_handler.delivery._finish.complete`). A group without frames of its own
    (``except*`` re-raising it, caught in the same function) is told by its members'."""
    if not isinstance(error, dict) or not isinstance(error.get("type"), str):
        return None
    outer_type: str = error["type"]
    chosen: Mapping[str, Any] | None = None
    names: list[str] = []
    remote: list[str] = []
    node: Any = error
    depth = 0
    while isinstance(node, dict) and depth < 10:
        if not remote and str(node.get("type")).endswith(_REMOTE):
            remote = _app_names(remote_frames(node.get("message"), include, exclude))
        if not names:
            names = _app_names(_frames_of(node), node.get("type") == "RecursionError")
            if names:
                chosen = node
        if names and remote:
            break
        node = node.get("inner")
        depth += 1
    if remote:  # where the pool's worker failed, after where its result was asked for
        names = _once(names + remote)
        chosen = chosen if chosen is not None else error
    signature: dict[str, str] = {"type": outer_type}
    members = _members(error) or (_members(chosen) if chosen is not None else "")
    short = outer_type.rpartition(".")[2] or outer_type
    if chosen is None:
        frames = _frames_of(error)
        if not isinstance(frames, list) or not frames or not isinstance(frames[-1], dict):
            if not members:
                return None
            signature["members"] = _cut(f"with {members}", MAX_VALUE)
            return {"title": _cut(f"{short} ({members})", MAX_TITLE), "signature_data": signature}
        innermost = _name(frames[-1])
        signature["frames"] = _cut(f"in {innermost}", MAX_VALUE)
        where = innermost
    else:
        if chosen is not error and isinstance(chosen.get("type"), str):
            signature["cause"] = _cut(f"from {chosen['type']}", MAX_VALUE)
        signature["frames"] = _cut("in " + " > ".join(names), MAX_VALUE)
        where = names[-1]
    if members:
        signature["members"] = _cut(f"with {members}", MAX_VALUE)
    if signature["frames"].startswith("in __main__.") or " > __main__." in signature["frames"]:
        _add_program(signature, program)
    title = f"{short} in {where}" + (f" ({members})" if members else "")
    return {"title": _cut(title, MAX_TITLE), "signature_data": signature}


#: The type that carries a process pool worker's traceback, as text, as the cause of the
#: exception raised again in the caller (``multiprocessing.pool.RemoteTraceback``,
#: ``concurrent.futures.process._RemoteTraceback``).
_REMOTE = "RemoteTraceback"
_FILE_LINE = re.compile(r'^\s*File "(?P<file>[^"\n]+)", line \d+, in (?P<function>[^\n]+)$', re.M)


def remote_frames(
    text: Any, include: Collection[str] = (), exclude: Collection[str] = ()
) -> list[dict[str, Any]]:
    """The frames of a traceback written as text (a pool worker's, in another process), as
    the grouping reads frames: ``module`` (the module of that file in this process, else the
    file's name), ``function`` and ``in_app``. Paths vary between machines: they are left out."""
    from eventlog_handler.wire._frames import is_in_app

    if not isinstance(text, str):
        return []
    frames = []
    for match in _FILE_LINE.finditer(text[-20_000:]):
        filename, function = match.group("file"), match.group("function").strip()
        module = _module_of(filename)
        frames.append(
            {
                "module": module,
                "function": function,
                "in_app": is_in_app(filename, module, include, exclude),
            }
        )
    return frames


def _module_of(filename: str) -> str:
    """The name of the module loaded from ``filename`` (``__main__`` for the program, whose
    spawned workers load it as ``__mp_main__``), else the file's name without ``.py``. A
    relative name (as the message's paths are sent) is the end of a module's path."""
    import os
    import sys

    from eventlog_handler.wire._appversion import main_module

    found = _MODULES.get(filename)
    if found is not None:
        return found
    tail = None if os.path.isabs(filename) else os.sep + filename
    # The program first: at exit, when the last events are made, Python has emptied __main__.
    modules = [("__main__", main_module()), *list(sys.modules.items())]
    for name, module in modules:
        path = getattr(module, "__file__", None)
        if isinstance(path, str) and (path == filename or (tail and path.endswith(tail))):
            found = "__main__" if name == "__mp_main__" else name
            if len(_MODULES) < 256:  # only what was found: a module imported later is named
                _MODULES[filename] = found
            return found
    return os.path.splitext(os.path.basename(filename))[0]


_MODULES: dict[str, str] = {}


def _members(error: Any, groups: int = 2) -> str:
    """What an exception group's members are (``ValueError in shop.pay.charge``, sorted, each
    once: the order tasks fail in varies), or ``""`` for an error that is not a group."""
    from eventlog_handler.wire._simple_error import group_member_errors

    described: set[str] = set()
    for member in group_member_errors(error):
        if type(member) is not dict or not isinstance(member.get("type"), str):
            continue
        frames = _frames_of(member)
        names = _app_names(frames)
        if names:
            text = f"{member['type']} in {names[-1]}"
        elif isinstance(frames, list) and frames and isinstance(frames[-1], dict):
            text = f"{member['type']} in {_name(frames[-1])}"
        else:
            text = member["type"]
        inner = _members(member, groups - 1) if groups > 1 else _types_below(member)
        described.add(f"{text} ({inner})" if inner else text)
    return ", ".join(sorted(described))


def _types_below(error: Any) -> str:
    """The types of the errors at the bottom of an exception group nested deeper than its
    frames go (sorted, each once): a group of groups of ``KeyError`` and one of groups of
    ``ValueError`` are still told apart."""
    from eventlog_handler.wire._simple_error import group_member_errors

    found: set[str] = set()
    waiting = list(group_member_errors(error))
    seen = 0
    while waiting and seen < 1_000:
        member = waiting.pop()
        seen += 1
        if type(member) is not dict:
            continue
        below = group_member_errors(member)
        if below:
            waiting.extend(below)
        elif isinstance(member.get("type"), str):
            found.add(member["type"])
    return ", ".join(sorted(found))


def log_stack(
    source: str | None, template: Any, app: Sequence[Any], innermost: Any, program: Any = None
) -> dict[str, Any] | None:
    """The ``@stack`` of a serious log record from its call site references (the
    application's frames, outermost first, and the innermost frame above the logging
    machinery), or ``None`` when no call site is known."""
    from eventlog_handler.wire._simple_error import main_named

    site_ref = app[-1] if app else innermost
    if site_ref is None:
        return None
    module, function, source = main_named(site_ref[3]), site_ref[2], main_named(source)
    site = f"{module}.{function}" if module else str(function)
    text = template if isinstance(template, str) else "" if template is None else _safe(template)
    signature: dict[str, str] = {}
    if source:
        signature["source"] = _cut(str(source), MAX_VALUE)
    signature["site"] = _cut(f"at {site}", MAX_VALUE)
    if text.strip():
        signature["message"] = _VARYING.sub("#", _cut(text, MAX_VALUE))
    if module == "__main__":
        _add_program(signature, program)
    title = _cut(f"{text.strip() or source or 'log'} (in {site})", MAX_TITLE)
    return {"title": title, "signature_data": signature}


def _add_program(signature: dict[str, str], program: Any) -> None:
    """The program, for a stack with frames of its main module (``__main__`` in every script:
    two scripts' ``main()`` failing alike are two bugs): ``of nightly_import.py``; read where
    the frames were (:func:`~eventlog_handler.wire._simple_error.program_of`)."""
    if isinstance(program, str) and program:
        signature["program"] = _cut(f"of {program}", MAX_VALUE)


def _safe(value: Any) -> str:
    from eventlog_handler.wire._jsonsafe import safe_str

    return safe_str(value)
