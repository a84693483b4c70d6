"""Frames of an error or of a log call: which are the application's, and what they looked like.

An error event's ``@simple_error`` (and each ``inner`` error) carries ``data["@frames"]``, the
innermost :data:`MAX_FRAMES` frames of its traceback, outermost first::

    {"module": "shop.checkout", "function": "total", "filename": "shop/checkout.py",
     "lineno": 42, "in_app": true,
     "pre_context": ["...5 lines..."], "context_line": "    return price / count",
     "post_context": ["...5 lines..."], "vars": {"count": "0"}}

Why ``@simple_error.data``: the service shows an error's ``data`` as the error's extended
data, next to its stack trace, and stores it with the event; ``@simple_error`` itself has no
frame objects (only ``@error`` has, and that form is the .NET client's, with .NET names). The
frames are data, never part of the stack trace text, so they change nothing in how the service
hashes ``stack_trace``. A record at ``ERROR`` or above without an exception carries the frames
of its call site (the application's only) in its own ``data["@frames"]``.

The work is split by thread:

- on the caller's thread only references are taken: ``(filename, lineno, function, module)``
  per frame (:data:`FrameRef`; and, with ``include_locals``, bounded reprs of the locals of the
  application's frames, since those values change once the call returns);
- on the delivery worker, :func:`resolve` turns them into the objects above: the path made
  relative to its import root (as in the stack trace), ``in_app``, and the source lines around
  the failing line read from :mod:`linecache` (which already holds the file: the stack trace's
  text was read from it on the caller's thread).

Which frames are the application's (:func:`is_in_app`): not those of the standard library, of
installed distributions (files under an interpreter's ``site-packages``/``dist-packages`` or
under any such directory), or of this package; every other file is, and so are the modules
of the program itself where it is installed (:mod:`._program`: ``python -m shop``, a console
script's package, ``gunicorn shop.wsgi:app``). ``in_app_include`` (module prefixes) marks
modules as the application's wherever they are installed, and wins; ``in_app_exclude`` marks
modules as not the application's.
"""

from __future__ import annotations

import linecache
import os
import re
import reprlib
import sys
from collections.abc import Collection, Iterable
from types import FrameType
from typing import Any

from eventlog_handler.settings import MASK
from eventlog_handler.wire._cards import mask_card_numbers
from eventlog_handler.wire._program import program_packages
from eventlog_handler.wire._simple_error import MAIN_NAMES, program_of

#: Where frames travel: ``@simple_error.data[FRAMES_KEY]``, and a serious log's ``data``.
FRAMES_KEY = "@frames"
#: Frames kept per error (the innermost ones), each with its source context.
MAX_FRAMES = 20
#: Lines of source before and after the failing line.
CONTEXT_LINES = 5
#: Characters kept per source line.
MAX_LINE = 200
#: Frames looked at above a log call (after the logging machinery's own).
MAX_CALL_SITE_WALK = 50
#: Locals per frame, characters per repr, nesting shown in a repr.
MAX_VARS = 20
MAX_VAR_REPR = 200
MAX_VAR_DEPTH = 2

#: ``(filename, lineno, function, module)``, and with locals a fifth item, ``{name: repr}``.
FrameRef = tuple[Any, ...]

#: Modules whose frames are the logging machinery above a log call (skipped on the way up).
_MACHINERY = ("logging", "eventlog_handler", "structlog")
_PACKAGE = "eventlog_handler"
_PACKAGE_DIR = os.path.normcase(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_LIBRARY_DIRS = frozenset({"site-packages", "dist-packages"})

#: ``(filename, module)`` → whether the path alone makes the frame the application's.
_BY_PATH: dict[tuple[str, str | None], bool] = {}
_MAX_REMEMBERED = 4096


# -- which frames are the application's -------------------------------------------------------


def _matches(module: str | None, prefixes: Collection[str]) -> bool:
    if not module or not prefixes:
        return False
    if module == "__mp_main__":  # the main module in a spawned child (see main_named)
        module = "__main__"
    return any(module == prefix or module.startswith(prefix + ".") for prefix in prefixes)


def is_in_app(
    filename: str,
    module: str | None,
    include: Collection[str] = (),
    exclude: Collection[str] = (),
) -> bool:
    """Whether a frame of ``filename`` (module ``module``) is the application's (see the module
    docstring). Cached per file; never raises."""
    if include and _matches(module, include):
        return True
    if exclude and _matches(module, exclude):
        return False
    key = (filename, module)
    known = _BY_PATH.get(key)
    if known is None:
        try:
            known = _by_path(filename, module)
        except Exception:  # pragma: no cover - a name os.path refuses
            known = True
        if len(_BY_PATH) >= _MAX_REMEMBERED:
            _BY_PATH.clear()
        _BY_PATH[key] = known
    return known


def _by_path(filename: str, module: str | None) -> bool:
    if module == _PACKAGE or (module or "").startswith(_PACKAGE + "."):
        return False
    if not filename:
        return True
    if filename.startswith("<"):
        return not filename.startswith("<frozen")  # <string>, <stdin>: code the app ran
    from eventlog_handler.wire._simple_error import _interpreter_roots

    absolute = os.path.normcase(os.path.abspath(filename))
    forms = {absolute, os.path.normcase(os.path.realpath(absolute))}
    if module in MAIN_NAMES:  # ``python -m shopapp``: the module ``shopapp.__main__``
        module = getattr(getattr(sys.modules.get(module), "__spec__", None), "name", module)
    if module and module.partition(".")[0] in program_packages():
        return True  # the program itself, installed (see :mod:`._program`)
    for form in forms:
        parts = form.split(os.sep)
        if _LIBRARY_DIRS.intersection(parts):
            return False
        inside = form == _PACKAGE_DIR or form.startswith(_PACKAGE_DIR + os.sep)
        if inside and form[len(_PACKAGE_DIR) + 1 :].split(os.sep)[0] != "tests":
            return False
        for root in _library_roots(_interpreter_roots()):
            if form.startswith(root + os.sep):
                return False
    return True


_ROOTS_CACHE: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())


def _library_roots(roots: tuple[str, ...]) -> tuple[str, ...]:
    global _ROOTS_CACHE
    if _ROOTS_CACHE[0] is roots:
        return _ROOTS_CACHE[1]
    forms: set[str] = set()
    for root in roots:
        for form in (os.path.abspath(root), os.path.realpath(root)):
            if os.path.dirname(form) != form:
                forms.add(os.path.normcase(form))
    result = tuple(sorted(forms))
    _ROOTS_CACHE = (roots, result)
    return result


# -- on the caller's thread: references -----------------------------------------------------


class FrameRefs(list):  # type: ignore[type-arg]
    """Unresolved :data:`FrameRef` items (a list: valid JSON if it ever went out as it is;
    a type of its own: the queue's size estimate counts it as one small value). ``program``:
    what ``__main__`` was where one of the frames ran in it
    (:func:`~eventlog_handler.wire._simple_error.program_of`, read on the caller's thread:
    ``runpy`` may put another ``__main__`` back before the worker sees it)."""

    __slots__ = ("program",)

    def __init__(self, items: Any = ()) -> None:
        super().__init__(items)
        self.program: str | None = None


class CallSite(FrameRefs):
    """The call site of a serious log record: the application's frames (outermost first),
    the innermost frame above the logging machinery, the logger and the message template,
    from which the worker makes the record's stack."""

    __slots__ = ("innermost", "source", "template")

    def __init__(
        self, app: list[FrameRef], innermost: FrameRef | None, source: Any, template: Any
    ) -> None:
        super().__init__(app)
        self.innermost = innermost
        self.source = source
        self.template = template


def error_refs(
    exc: BaseException,
    *,
    locals_for: tuple[Collection[str], Collection[str], Collection[str]] | None = None,
) -> FrameRefs:
    """References to the innermost :data:`MAX_FRAMES` frames of ``exc``'s traceback
    (outermost first), folded as the stack trace folds them (comprehensions into their
    function, ``runpy`` left out, a repeating run once): the walk :func:`simple_error` made,
    when there is one. ``locals_for``, ``(include, exclude, exclusions)``: also the bounded
    reprs of the locals of the application's frames (walked again, for the frame objects)."""
    from eventlog_handler.wire._simple_error import _elide, _fold, _walk, take_walk

    refs = FrameRefs()
    tb = exc.__traceback__
    if tb is None:
        return refs
    by_entry: dict[int, FrameType] = {}
    entries = take_walk(exc) if locals_for is None else None
    if entries is None:
        objects: list[FrameType] | None = [] if locals_for is not None else None
        frames = _walk(tb, objects)
        if objects is not None:
            by_entry = {id(entry): frame for entry, frame in zip(frames, objects, strict=False)}
        entries = _elide(_fold(frames))
    kept = [entry for entry in entries[-MAX_FRAMES - 2 :] if not isinstance(entry, str)]
    for entry in kept[-MAX_FRAMES:]:
        filename, lineno, function, frame_globals = entry
        module = frame_globals.get("__name__") if frame_globals is not None else None
        if type(module) is not str:
            module = None
        elif module in MAIN_NAMES and refs.program is None:
            refs.program = program_of(frame_globals)
        if locals_for is not None:
            include, exclude, exclusions = locals_for
            frame = by_entry.get(id(entry))
            if frame is not None and is_in_app(filename, module, include, exclude):
                refs.append((filename, lineno, function, module, local_reprs(frame, exclusions)))
                continue
        refs.append((filename, lineno, function, module))
    return refs


#: Per ``(include, exclude)``: file name → whether its frames are the application's (None: the
#: logging machinery). Module names decide only with include/exclude, or for this package.
_SITE_KINDS: dict[tuple[Any, Any], dict[str, bool | None]] = {}


def call_site(
    frame: FrameType | None,
    source: Any,
    template: Any,
    include: Collection[str] = (),
    exclude: Collection[str] = (),
) -> CallSite:
    """Above a log call: the application's frames (innermost :data:`MAX_FRAMES`, outermost
    first) and the innermost frame that is not the logging machinery (``logging``, this
    package, ``structlog``). Looks at :data:`MAX_CALL_SITE_WALK` frames at most; what each
    file is, is remembered."""
    kinds = _SITE_KINDS.get((include, exclude))
    if kinds is None:
        kinds = _SITE_KINDS.setdefault((tuple(include), tuple(exclude)), {})
    innermost: FrameRef | None = None
    app: list[FrameRef] = []
    program: str | None = None
    walked = 0
    while frame is not None and walked < MAX_CALL_SITE_WALK:
        code = frame.f_code
        filename = code.co_filename
        kind = kinds.get(filename, False) if not include and not exclude else False
        module = frame.f_globals.get("__name__")
        if kind is False and (include or exclude or filename not in kinds):
            kind = _site_kind(filename, module, include, exclude)
            if not include and not exclude:
                if len(kinds) >= _MAX_REMEMBERED:
                    kinds.clear()
                kinds[filename] = kind
        if kind is not None:
            walked += 1
            ref = (filename, frame.f_lineno, code.co_name, module)
            if innermost is None:
                innermost = ref
            if kind:
                app.append(ref)
                if module in MAIN_NAMES and program is None:
                    program = program_of(frame.f_globals)
                if len(app) >= MAX_FRAMES:
                    break
        elif innermost is not None:
            walked += 1  # machinery again, further up (a handler that logs): a plain frame
        frame = frame.f_back
    app.reverse()
    site = CallSite(app, innermost, source, template)
    site.program = program
    return site


def _site_kind(
    filename: str, module: Any, include: Collection[str], exclude: Collection[str]
) -> bool | None:
    name = module if isinstance(module, str) else None
    if name is not None and name.partition(".")[0] in _MACHINERY:
        return None
    return is_in_app(filename, name, include, exclude)


_REPR = reprlib.Repr()
_REPR.maxlevel = MAX_VAR_DEPTH
_REPR.maxstring = MAX_VAR_REPR
_REPR.maxother = MAX_VAR_REPR
_REPR.maxlong = 60
for _name in ("maxdict", "maxlist", "maxtuple", "maxset", "maxfrozenset", "maxdeque", "maxarray"):
    setattr(_REPR, _name, 10)
_SKIPPED_TYPES = (type(sys), type, type(len), type(lambda: None))


def local_reprs(frame: FrameType, exclusions: Collection[str]) -> dict[str, str]:
    """Bounded reprs of ``frame``'s locals (:data:`MAX_VARS`, :data:`MAX_VAR_REPR`,
    :data:`MAX_VAR_DEPTH`), a local whose name is a data exclusion masked without being
    repr-ed; modules, classes and functions left out. Never raises."""
    from eventlog_handler.wire._jsonsafe import is_excluded

    result: dict[str, str] = {}
    try:
        items = list(frame.f_locals.items())
    except Exception:
        return result
    for name, value in items:
        if len(result) >= MAX_VARS:
            break
        if not isinstance(name, str) or name.startswith("__"):
            continue
        if isinstance(value, _SKIPPED_TYPES):
            continue
        if is_excluded(name, exclusions):
            result[name] = MASK
            continue
        try:
            text = _REPR.repr(value)
        except Exception:
            text = f"<{type(value).__name__} (repr failed)>"
        result[name] = text if len(text) <= MAX_VAR_REPR else text[: MAX_VAR_REPR - 3] + "..."
    return result


# -- on the worker: the frames as sent --------------------------------------------------------


def is_ref(value: Any) -> bool:
    """Whether ``value`` holds unresolved references (not yet :func:`resolve`-d)."""
    return type(value) is FrameRefs or type(value) is CallSite


def resolve(
    refs: Iterable[FrameRef],
    include: Collection[str] = (),
    exclude: Collection[str] = (),
    secrets: Collection[str] = (),
) -> list[dict[str, Any]]:
    """The frames as sent (see the module docstring), their source read from
    :mod:`linecache`. Locals whose value is itself a credential are masked.

    A frame is made once per place (file, line, function, module) and copied after that: an
    error that comes again, or a log call's site, repeats the same frames in event after
    event. It is made again when :mod:`linecache` read its file anew (another size or
    modification time: the file changed) or ``sys.path`` changed (the path shown)."""
    from eventlog_handler.wire._simple_error import import_roots

    roots = import_roots()
    frames: list[dict[str, Any]] = []
    for ref in refs:
        place = ref[:4]
        filename = place[0]
        lines = _lines(filename)
        entry = linecache.cache.get(filename) if type(filename) is str else None
        stamp = (
            entry[:2] if type(entry) is tuple and len(entry) == 4 and entry[2] is lines else None
        )
        key = (place, include, exclude)
        known = _MADE.get(key) if stamp is not None else None
        if known is not None and known[0] == stamp and known[1] is roots:
            frame = copy_frame(known[2])
        else:
            frame = _frame(place, lines, include, exclude)
            if stamp is not None:
                if len(_MADE) >= _MAX_MADE:
                    _MADE.clear()
                _MADE[key] = (stamp, roots, frame)
                frame = copy_frame(frame)
        if len(ref) > 4 and isinstance(ref[4], dict):
            frame["vars"] = {
                name: MASK if looks_like_credential(text, secrets) else text
                for name, text in ref[4].items()
            }
        frames.append(frame)
    return frames


#: Frames made by :func:`resolve`, by place and in-app options, with the size and modification
#: time of the file :mod:`linecache` read and the import roots they were made with.
_MADE: dict[Any, tuple[Any, Any, dict[str, Any]]] = {}
#: Frames remembered (each holds up to 11 source lines of up to 200 characters: about 1.5 MB
#: at most in all).
_MAX_MADE = 512


def _frame(
    place: FrameRef, lines: list[str] | None, include: Collection[str], exclude: Collection[str]
) -> dict[str, Any]:
    from eventlog_handler.wire._simple_error import main_named, source_path

    filename, lineno, function, module = place
    module = main_named(module)
    frame: dict[str, Any] = {
        "module": module or "",
        "function": str(function),
        "filename": source_path(filename, module),
        "lineno": lineno if isinstance(lineno, int) else 0,
        "in_app": is_in_app(filename, module, include, exclude),
    }
    if isinstance(lineno, int) and 0 < lineno <= len(lines or ()):
        assert lines is not None
        index = lineno - 1
        before = lines[max(0, index - CONTEXT_LINES) : index]
        after = lines[index + 1 : index + 1 + CONTEXT_LINES]
        frame["pre_context"] = [_line(line) for line in before]
        frame["context_line"] = _line(lines[index])
        frame["post_context"] = [_line(line) for line in after]
    return frame


def copy_frame(frame: dict[str, Any]) -> dict[str, Any]:
    """A copy of a frame that shares only its text (its lists of lines are copied): one the
    event may change (the scrubber, a ``before_send``) without changing the one remembered."""
    copied = frame.copy()
    for key, value in frame.items():
        if type(value) is list:
            copied[key] = value.copy()
    return copied


def _lines(filename: str) -> list[str] | None:
    """The file's lines as :mod:`linecache` holds them (read now if it doesn't)."""
    try:
        return linecache.getlines(filename)
    except Exception:
        return None


def _line(line: str) -> str:
    line = line.rstrip("\r\n")
    return line if len(line) <= MAX_LINE else line[: MAX_LINE - 3] + "..."


# -- values that are credentials --------------------------------------------------------------

_BEARER_VALUE = re.compile(r"(?i)\bbearer\s+[\w\-.~+/]{8,}=*")
_URL_PASSWORD = re.compile(r"[a-z][a-z0-9+.\-]*://[^\s:/?#@]*:[^\s/?#@]+@", re.IGNORECASE)


def looks_like_credential(text: str, secrets: Collection[str] = ()) -> bool:
    """Whether ``text`` (a value, or its repr) holds a credential: a ``Bearer`` token, a URL
    with a password, a payment card number (Luhn-valid), or one of ``secrets``."""
    for secret in secrets:
        if secret and len(secret) >= 6 and secret in text:
            return True
    if ("earer" in text or "EARER" in text) and _BEARER_VALUE.search(text):
        return True
    if "://" in text and "@" in text and _URL_PASSWORD.search(text):
        return True
    return mask_card_numbers(text) != text
