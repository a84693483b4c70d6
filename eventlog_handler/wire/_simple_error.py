"""``@simple_error`` from an exception: type, message, stack trace, inner chain, extras.

The service groups errors by ``type`` plus a SHA1 of ``stack_trace``, so the stack trace is
written to depend only on the code that failed, never on the host it ran on:

- ``Traceback (most recent call last):``, one entry per frame (``  File "<path>", line N, in
  <function>`` and the stripped source line) and a last line naming the type. The exception's
  message, which often carries ids and values, travels in ``message`` instead.
- ``<path>`` is relative to the import root that holds the file (the longest matching
  ``sys.path`` entry, among them the application's directory, site-packages, the standard
  library), so two checkouts, virtualenvs or release directories give the same text; a file
  outside every root is named by its module.
- The same text on Python 3.10 to 3.13: no ``~~~^^^`` marker lines, one source line per frame
  (3.13 prints every line of a multi-line statement), list/dict/set comprehension frames folded
  into the function that runs them (3.12 inlines them), and the interpreter's own ``runpy``
  frames of ``python -m`` left out.
- Frames are dropped by rules that don't depend on depth: a run of one repeating frame (or a
  repeating block of 2 or 3) is shown once with a ``[previous frame repeated]`` line, past
  :data:`MAX_FRAMES` entries the middle is replaced by ``[frames omitted]``, and a text over
  :data:`MAX_STACK_TRACE` is cut by :func:`trim_stack_trace`, which keeps whole frames from both
  ends by a fixed ladder. No counts appear, so recursion depth doesn't change the text.

Chained exceptions (``raise B from A``, or an exception raised while handling another) become
``inner``; exception groups list their members under ``data["@ext"]["exceptions"]``.
"""

from __future__ import annotations

import builtins
import linecache
import os
import site
import sys
import sysconfig
import threading
from collections.abc import Callable, Collection, Iterator
from types import FrameType, TracebackType
from typing import Any

from eventlog_handler._values import fits
from eventlog_handler.wire._jsonsafe import safe_repr, to_jsonable, truncate

#: Chained exceptions followed at most (``inner`` depth).
MAX_INNER = 5
#: Entries (frames and repeat markers) kept per traceback; the middle of a longer one is elided.
MAX_FRAMES = 100
#: Of those, how many come from the outer end (the rest from the end where it failed).
HEAD_FRAMES = 20
#: Characters kept per stack trace.
MAX_STACK_TRACE = 64_000
#: Characters kept per source line.
MAX_SOURCE_LINE = 300
#: Characters kept per error message.
MAX_MESSAGE = 2_000
#: Members of an exception group listed.
MAX_GROUP_MEMBERS = 10

#: The first line of every stack trace of an exception that was raised.
HEADER = "Traceback (most recent call last):\n"
#: The line that stands for frames left out.
OMITTED = "  [frames omitted]\n"
#: Whole frames :func:`trim_stack_trace` tries to keep, in order: the first that fits wins.
TRIM_LADDER = (64, 32, 16, 8, 4, 2, 1, 0)

_GROUP_TYPES: tuple[type[BaseException], ...] = (
    (builtins.BaseExceptionGroup,) if sys.version_info >= (3, 11) else ()  # type: ignore[attr-defined,unused-ignore]
)
#: Frames that Python 3.12+ inlines into the function that runs them.
_COMPREHENSIONS = frozenset({"<listcomp>", "<dictcomp>", "<setcomp>"})
#: ``runpy``'s functions that start a module run with ``python -m``.
_RUNPY_FUNCTIONS = frozenset(
    {"_run_module_as_main", "_run_code", "_run_module_code", "run_module", "run_path"}
)
#: Paths remembered by :func:`source_path` before the memory is cleared.
_MAX_REMEMBERED_PATHS = 4096

#: (filename, line number, function name, the frame's globals)
_Frame = tuple[str, "int | None", str, "dict[str, Any] | None"]


#: The name under which a process that ``multiprocessing`` spawned (or forked from its fork
#: server) imports the program's main module.
MP_MAIN = "__mp_main__"


#: The names a program's main module runs under (``__mp_main__``: in a spawned child).
MAIN_NAMES = frozenset(("__main__", MP_MAIN))


def program_of(module_globals: Any) -> str | None:
    """The program whose main module has these globals: its module for ``python -m``
    (``shop.cli``), else its script's file name (``nightly_import.py``); ``None`` without
    either (``python -c``, a REPL). The same in a ``multiprocessing`` child, which imports the
    same main module. Where Python has taken ``__file__`` off ``__main__`` (at exit), what was
    known of it when the package was imported."""
    name = getattr(module_globals.get("__spec__"), "name", None)
    if isinstance(name, str) and name and name not in MAIN_NAMES:
        return name.removesuffix(".__main__")
    path = module_globals.get("__file__")
    if isinstance(path, str) and path:
        return os.path.basename(path)
    from eventlog_handler.wire._appversion import main_module

    main = main_module()
    if main is None or getattr(main, "__dict__", None) is module_globals:
        return None  # nothing more is known of it
    return program_of(vars(main))


def main_named(name: Any) -> Any:
    """``name``, where it names the program's main module, as ``__main__`` in every process: the
    same bug, type or logger in a spawned child must stack with the parent's."""
    return "__main__" if name == MP_MAIN else name


def type_name(exc_type: type[BaseException]) -> str:
    """The type's qualified name, prefixed by its module unless it is a builtin."""
    try:
        module = main_named(getattr(exc_type, "__module__", None))
        qualname = getattr(exc_type, "__qualname__", None) or exc_type.__name__
    except Exception:  # pragma: no cover - a type without names
        return "Exception"
    if not module or module == "builtins":
        return str(qualname)
    return f"{module}.{qualname}"


def exception_message(exc: BaseException) -> str:
    """``str(exc)``; when that raises, a marker like the one ``traceback`` prints."""
    try:
        return str(exc)
    except Exception:
        return f"<exception str() failed: {safe_repr(exc)}>"


# -- stack traces -----------------------------------------------------------------------------


def stack_trace(exc: BaseException) -> str:
    """The stable traceback text of ``exc`` alone (its chain is reported as ``inner``).

    An exception that was never raised (no traceback) is its type name alone.
    """
    name = type_name(type(exc))
    tb = exc.__traceback__
    if tb is None:
        return name
    try:
        entries = _elide(_fold(_walk(tb)))
        walks = getattr(_walks, "by_id", None)
        if walks is not None and len(walks) < _MAX_KEPT_WALKS:
            walks[id(exc)] = entries
        roots = import_roots()
        parts = [HEADER]
        for entry in entries:
            parts.append(entry if isinstance(entry, str) else _render(entry, roots))
        parts.append(name)
        text = "".join(parts)
    except Exception:  # pragma: no cover - a broken traceback or frame object
        return name
    return trim_stack_trace(text, MAX_STACK_TRACE)


#: The walks of the exceptions of the :func:`simple_error` call in progress on this thread, by
#: ``id``: :func:`eventlog_handler.wire._frames.error_refs` takes them instead of walking again.
#: They hold file names, line numbers, names and module globals, never frames or exceptions.
_walks = threading.local()
_MAX_KEPT_WALKS = 32


def take_walk(exc: BaseException) -> list[_Frame | str] | None:
    """The entries :func:`stack_trace` computed for ``exc`` in the last :func:`simple_error`
    call of this thread, once (``None`` when there are none)."""
    walks = getattr(_walks, "by_id", None)
    return walks.pop(id(exc), None) if walks else None


def _walk(tb: TracebackType | None, objects: list[FrameType] | None = None) -> list[_Frame]:
    """The frames of ``tb``, outermost first, comprehension and ``runpy`` frames folded away.

    ``objects``, when given, gets the frame object of each entry (in step with the result).
    """
    frames: list[_Frame] = []
    held: list[FrameType] = []
    while tb is not None:
        frame = tb.tb_frame
        code = frame.f_code
        lineno: int | None = tb.tb_lineno
        if code.co_name in _COMPREHENSIONS and frames and frames[-1][0] == code.co_filename:
            # Python 3.12+ runs the comprehension in its function's frame, at this line.
            outer = frames[-1]
            frames[-1] = (outer[0], lineno, outer[2], outer[3])
        else:
            frames.append((code.co_filename, lineno, code.co_name, frame.f_globals))
            if objects is not None:
                held.append(frame)
        tb = tb.tb_next
    start = 0
    while start < len(frames) - 1 and _is_runpy(frames[start]):
        start += 1
    if objects is not None:
        objects.extend(held[start:])
    return frames[start:]


def _is_runpy(frame: _Frame) -> bool:
    filename, _, name, _ = frame
    return name in _RUNPY_FUNCTIONS and (
        filename == "<frozen runpy>" or os.path.basename(filename) == "runpy.py"
    )


def _repeated(period: int) -> str:
    if period == 1:
        return "  [previous frame repeated]\n"
    return f"  [previous {period} frames repeated]\n"


def _fold(frames: list[_Frame]) -> list[_Frame | str]:
    """Runs of a repeating frame, or of a repeating block of 2 or 3 frames, shown once and
    followed by a marker, however many times they repeat."""
    keys = [frame[:3] for frame in frames]
    entries: list[_Frame | str] = []
    index, count = 0, len(frames)
    while index < count:
        for period in (1, 2, 3):
            end = index + period
            block = keys[index:end]
            if end + period <= count and keys[end : end + period] == block:
                after = end + period
                while after + period <= count and keys[after : after + period] == block:
                    after += period
                entries.extend(frames[index:end])
                entries.append(_repeated(period))
                index = after
                break
        else:
            entries.append(frames[index])
            index += 1
    return entries


def _elide(entries: list[_Frame | str]) -> list[_Frame | str]:
    if len(entries) <= MAX_FRAMES:
        return entries
    tail = MAX_FRAMES - HEAD_FRAMES
    return [*entries[:HEAD_FRAMES], OMITTED, *entries[-tail:]]


def _render(frame: _Frame, roots: tuple[str, ...]) -> str:
    filename, lineno, name, frame_globals = frame
    module = frame_globals.get("__name__") if frame_globals is not None else None
    path = _source_path(filename, module if isinstance(module, str) else None, roots)
    where = lineno if lineno is not None and lineno > 0 else "?"
    head = f'  File "{path}", line {where}, in {name}\n'
    line = _source_line(filename, lineno, frame_globals)
    return f"{head}    {line}\n" if line else head


def _source_line(filename: str, lineno: int | None, frame_globals: Any) -> str:
    if lineno is None or lineno < 1:
        return ""
    try:
        line = linecache.getline(filename, lineno, frame_globals).strip()
    except Exception:
        return ""
    if len(line) > MAX_SOURCE_LINE:
        return line[: MAX_SOURCE_LINE - 3] + "..."
    return line


def trim_stack_trace(text: str, limit: int, size: Callable[[str], int] = len) -> str:
    """``text`` when ``size(text) <= limit``; else the same trace with fewer whole frames.

    Keeps the header, the frames nearest each end (a quarter from the outer end, the rest from
    the end where it failed) with an ``[frames omitted]`` line between them, and the last line
    (the type name). The number of frames kept is the first of :data:`TRIM_LADDER` that fits,
    so the result depends only on ``text`` and the rung reached, never on anything else in the
    event: the same error trimmed again gives the same text. ``size`` measures a candidate
    (``len`` by default; the size of its JSON encoding for a byte limit).
    """
    if size(text) <= limit:
        return text
    lines = text.splitlines(keepends=True)
    last = lines.pop() if lines else ""
    head: list[str] = []
    blocks: list[list[str]] = []
    for line in lines:
        if line.startswith('  File "'):
            blocks.append([line])
        elif blocks:
            blocks[-1].append(line)
        else:
            head.append(line)
    prefix = "".join(head)
    for keep in TRIM_LADDER:
        if keep >= len(blocks):
            continue
        front = keep // 4
        back = blocks[len(blocks) - (keep - front) :] if keep > front else []
        kept = [*blocks[:front], [OMITTED], *back]
        candidate = prefix + "".join(line for block in kept for line in block) + last
        if size(candidate) <= limit:
            return candidate
    candidate = (head[0] if head else "") + OMITTED + last
    if size(candidate) <= limit:
        return candidate
    return _cut(last or text, limit, size)


def _cut(text: str, limit: int, size: Callable[[str], int]) -> str:
    cut = text[: max(0, limit)]
    while cut and size(cut) > limit:
        cut = cut[: len(cut) - max(1, (size(cut) - limit) // 2)]
    return cut


# -- paths ------------------------------------------------------------------------------------

_roots_state: tuple[Any, tuple[str, ...]] = (None, ())
_interpreter_roots_cache: tuple[str, ...] | None = None
_paths: dict[tuple[str, str | None], str] = {}


def source_path(filename: str, module: str | None = None) -> str:
    """``filename`` as a stack trace shows it: relative to the import root that holds it.

    The roots are the entries of ``sys.path`` (among them the application's directory: the
    script's, or the working directory of ``python -m``) and the interpreter's site-packages
    and standard library directories; the longest one that holds the file wins (``/srv/app/releases/42/shop/cart.py`` → ``shop/cart.py``,
    ``/venv/lib/python3.11/site-packages/requests/api.py`` → ``requests/api.py``). A file
    outside every root is named by ``module`` (its ``__name__``) when known, else by its base
    name. Names like ``<string>`` or ``<frozen runpy>`` are kept. Never raises.
    """
    try:
        return _source_path(filename, module, import_roots())
    except Exception:  # pragma: no cover - a file name that os.path refuses
        return str(filename)


def import_roots() -> tuple[str, ...]:
    """The directories that paths are made relative to, longest first (cached until
    ``sys.path`` changes)."""
    global _roots_state
    key = tuple(sys.path)
    state = _roots_state
    if state[0] == key:
        return state[1]
    roots = _build_roots(key)
    _paths.clear()
    _roots_state = (key, roots)
    return roots


def _build_roots(path: tuple[Any, ...]) -> tuple[str, ...]:
    candidates = [entry or os.curdir for entry in path if isinstance(entry, str)]
    candidates.extend(_interpreter_roots())
    roots: set[str] = set()
    for candidate in candidates:
        try:
            forms = {os.path.abspath(candidate), os.path.realpath(candidate)}
        except (OSError, ValueError):
            continue
        for form in forms:
            if os.path.dirname(form) != form:  # never a file system's root
                roots.add(os.path.normcase(form))
    return tuple(sorted(roots, key=lambda root: (-len(root), root)))


def _interpreter_roots() -> tuple[str, ...]:
    global _interpreter_roots_cache
    if _interpreter_roots_cache is None:
        found: list[str] = []
        try:
            paths = sysconfig.get_paths()
            found.extend(paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib"))
        except Exception:  # pragma: no cover - a broken installation scheme
            pass
        for getter in ("getsitepackages", "getusersitepackages"):
            try:
                value = getattr(site, getter)()
            except Exception:
                continue
            found.extend([value] if isinstance(value, str) else list(value))
        _interpreter_roots_cache = tuple(item for item in found if isinstance(item, str))
    return _interpreter_roots_cache


def _source_path(filename: str, module: str | None, roots: tuple[str, ...]) -> str:
    if not filename or (filename.startswith("<") and filename.endswith(">")):
        return filename
    key = (filename, module)
    known = _paths.get(key)
    if known is not None:
        return known
    result = _relative(filename, roots) or _by_module(filename, module)
    if len(_paths) >= _MAX_REMEMBERED_PATHS:
        _paths.clear()
    _paths[key] = result
    return result


def _relative(filename: str, roots: tuple[str, ...]) -> str | None:
    absolute = os.path.abspath(filename)
    found = _under(absolute, roots)
    if found is None:
        real = os.path.realpath(absolute)
        if real != absolute:
            found = _under(real, roots)
    return found


def _under(absolute: str, roots: tuple[str, ...]) -> str | None:
    folded = os.path.normcase(absolute)
    for root in roots:
        if folded.startswith(root) and folded[len(root) : len(root) + 1] == os.sep:
            return absolute[len(root) + 1 :].replace(os.sep, "/")
    return None


def _by_module(filename: str, module: str | None) -> str:
    base = os.path.basename(filename)
    parts = module.split(".") if module else []
    if not parts or module == "__main__" or not all(part.isidentifier() for part in parts):
        return base
    if os.path.splitext(base)[0] == "__init__":
        return "/".join([*parts, base])
    return "/".join([*parts[:-1], base])


# -- the error object -------------------------------------------------------------------------


def extra_attributes(exc: BaseException, exclusions: Collection[str]) -> dict[str, Any]:
    """Public attributes of ``exc`` and its ``__notes__``, JSON-safe."""
    extras: dict[str, Any] = {}
    try:
        attributes = dict(vars(exc))
    except TypeError:
        attributes = {}
    for key, value in attributes.items():
        if isinstance(key, str) and not key.startswith("_"):
            extras[key] = value
    if isinstance(exc, OSError):
        for key in ("errno", "strerror", "filename", "filename2"):
            value = getattr(exc, key, None)
            if value is not None:
                extras.setdefault(key, value)
    notes = attributes.get("__notes__")  # read as add_note keeps them: a class's own
    # __getattr__ is not asked (one that raises KeyError for a name it lacks loses nothing)
    if isinstance(notes, list) and notes:
        extras["__notes__"] = notes
    converted = to_jsonable(extras, exclusions)
    return converted if isinstance(converted, dict) else {}


def simple_error(
    exc: BaseException,
    exclusions: Collection[str] = (),
    *,
    max_inner: int = MAX_INNER,
) -> dict[str, Any]:
    """The ``@simple_error`` object of ``exc``; never raises."""
    _walks.by_id = {}
    return _build(exc, exclusions, max_inner, set())


def _build(
    exc: BaseException, exclusions: Collection[str], depth_left: int, seen: set[int]
) -> dict[str, Any]:
    seen.add(id(exc))
    error: dict[str, Any] = {
        "message": _message(exc),
        "type": type_name(type(exc)),
        "stack_trace": stack_trace(exc),
    }
    ext = extra_attributes(exc, exclusions)
    if _GROUP_TYPES and isinstance(exc, _GROUP_TYPES):
        members = _all_members(exc)
        # One entry per member listed, in order (frames are added by position): a member seen
        # already on the way here is named, not walked again.
        ext["exceptions"] = [
            _build(member, exclusions, min(depth_left, 1), seen)
            if id(member) not in seen
            else _named(member)
            for member in group_members(exc)
        ]
        if len(members) > MAX_GROUP_MEMBERS:
            ext["exceptions_omitted"] = len(members) - MAX_GROUP_MEMBERS
    if ext:
        error["data"] = {"@ext": ext}
    cause = chained(exc)
    if cause is not None and id(cause) not in seen:
        if depth_left > 0:
            error["inner"] = _build(cause, exclusions, depth_left - 1, seen)
        else:
            error.setdefault("data", {})["@inner_omitted"] = True
    return error


def _named(exc: BaseException) -> dict[str, Any]:
    """An error seen already on the way: its message and type, not walked again."""
    return {"message": _message(exc), "type": type_name(type(exc))}


def _message(exc: BaseException) -> str:
    """The error's message, cut to :data:`MAX_MESSAGE`; a process pool worker's traceback
    (``RemoteTraceback``, text only) keeps its end: its innermost frames and the error, by
    which it is stacked (:func:`~eventlog_handler.wire._grouping.remote_frames`)."""
    text = exception_message(exc)
    if not type(exc).__name__.endswith("RemoteTraceback") or fits(text, MAX_MESSAGE):
        return truncate(text, MAX_MESSAGE)
    keep = MAX_MESSAGE - 40
    tail = text[-keep:]
    while not fits(tail, keep):
        tail = tail[len(tail) // 16 + 1 :]
    return f"[truncated {len(text) - len(tail)} chars]…{tail}"


def group_members(exc: BaseException) -> list[BaseException]:
    """The members of the exception group ``exc`` that its ``@simple_error`` lists (in
    ``data["@ext"]["exceptions"]``, in this order); none when ``exc`` is not a group."""
    members = [member for member in _all_members(exc) if isinstance(member, BaseException)]
    if len(members) <= MAX_GROUP_MEMBERS:
        return members
    # One of each kind first, then the rest, in their order: a group's stack is told by its
    # members' kinds, which the first ten of many alike hid (the order its tasks failed in).
    kinds: set[tuple[type, Any]] = set()
    listed: list[int] = []
    for index, member in enumerate(members):
        kind = (type(member), _innermost_code(member))
        if kind not in kinds:
            kinds.add(kind)
            listed.append(index)
    chosen = set(listed[:MAX_GROUP_MEMBERS])
    for index in range(len(members)):
        if len(chosen) >= MAX_GROUP_MEMBERS:
            break
        chosen.add(index)
    return [members[index] for index in sorted(chosen)]


def _innermost_code(exc: BaseException) -> Any:
    """The code object of the innermost frame ``exc`` was raised through, or ``None``."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return None if tb is None else tb.tb_frame.f_code


def _all_members(exc: BaseException) -> list[Any]:
    """Every member of the exception group ``exc`` (none when it is not one, or when its
    ``exceptions`` can't be read: a subclass of its own may make it anything)."""
    if not _GROUP_TYPES or not isinstance(exc, _GROUP_TYPES):
        return []
    try:
        return list(getattr(exc, "exceptions", ()))
    except Exception:
        return []


def group_member_errors(error: Any) -> list[Any]:
    """The member ``@simple_error`` objects an error of an exception group lists."""
    data = error.get("data") if type(error) is dict else None
    ext = data.get("@ext") if type(data) is dict else None
    members = ext.get("exceptions") if type(ext) is dict else None
    return members if type(members) is list else []


def error_levels(error: Any, groups: int = 2) -> Iterator[dict[str, Any]]:
    """Each level of an ``@simple_error``: the error, its ``inner`` errors, and the members
    of the exception groups among them."""
    node: Any = error
    depth = 0
    while type(node) is dict and depth <= 10:
        yield node
        if groups:
            for member in group_member_errors(node):
                yield from error_levels(member, groups - 1)
        node = node.get("inner")
        depth += 1


def chained(exc: BaseException) -> BaseException | None:
    """The exception ``exc`` was chained to: ``__cause__``, else an unsuppressed ``__context__``."""
    if exc.__cause__ is not None:
        return exc.__cause__
    if exc.__context__ is not None and not exc.__suppress_context__:
        return exc.__context__
    return None
