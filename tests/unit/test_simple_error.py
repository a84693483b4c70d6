"""@simple_error: type names, messages, stable stack traces, chains, extras, groups."""

from __future__ import annotations

import builtins
import json
import os
import re
import sys

import pytest

from eventlog_handler import settings
from eventlog_handler.wire import _events as events
from eventlog_handler.wire import _simple_error as se
from eventlog_handler.wire._simple_error import simple_error, stack_trace, type_name

ExceptionGroup = getattr(builtins, "ExceptionGroup", None)
needs_groups = pytest.mark.skipif(
    sys.version_info < (3, 11), reason="exception groups need Python 3.11"
)


def capture(fn, *args):
    try:
        fn(*args)
    except BaseException as exc:
        return exc
    raise AssertionError("did not raise")


class AppError(Exception):
    pass


class Outer:
    class NestedError(Exception):
        pass


def raise_value_error(message):
    raise ValueError(message)


RAISE_LINE = raise_value_error.__code__.co_firstlineno + 1


def raise_type_error(message):
    raise TypeError(message)


# -- type names and messages ------------------------------------------------------------------


def test_builtin_type_names_are_unqualified():
    assert type_name(ValueError) == "ValueError"
    assert type_name(ZeroDivisionError) == "ZeroDivisionError"
    assert type_name(KeyboardInterrupt) == "KeyboardInterrupt"
    assert simple_error(capture(raise_value_error, "x"))["type"] == "ValueError"


def test_other_type_names_are_module_qualified():
    assert type_name(AppError) == f"{__name__}.AppError"
    assert type_name(json.JSONDecodeError) == "json.decoder.JSONDecodeError"
    assert simple_error(AppError("x"))["type"] == f"{__name__}.AppError"


def test_nested_class_uses_qualname():
    assert type_name(Outer.NestedError) == f"{__name__}.Outer.NestedError"


def test_local_class_uses_qualname():
    class LocalError(Exception):
        pass

    assert type_name(LocalError).endswith("test_local_class_uses_qualname.<locals>.LocalError")


def test_message_is_str_of_exception():
    assert simple_error(KeyError("k"))["message"] == "'k'"
    assert simple_error(ValueError("bad", 2))["message"] == "('bad', 2)"
    assert simple_error(ValueError())["message"] == ""


def test_message_when_str_raises():
    class Unprintable(Exception):
        def __str__(self):
            raise RuntimeError("no")

    error = simple_error(capture(_raise, Unprintable("secret-ish")))
    assert error["message"].startswith("<exception str() failed")
    assert error["type"].endswith("Unprintable")
    assert error["stack_trace"].startswith("Traceback (most recent call last):")


def _raise(exc):
    raise exc


def test_long_message_is_cut():
    error = simple_error(ValueError("m" * 10_000))
    assert len(error["message"]) <= se.MAX_MESSAGE
    assert error["message"].startswith("m" * 1000)


# -- stack traces -----------------------------------------------------------------------------


#: This file as stack traces name it: relative to the import root (the repository).
THIS_FILE = __name__.replace(".", "/") + ".py"


def test_stack_trace_shape():
    exc = capture(raise_value_error, "boom")
    text = simple_error(exc)["stack_trace"]
    assert text == (
        "Traceback (most recent call last):\n"
        f'  File "{THIS_FILE}", line {capture.__code__.co_firstlineno + 2}, in capture\n'
        "    fn(*args)\n"
        f'  File "{THIS_FILE}", line {RAISE_LINE}, in raise_value_error\n'
        "    raise ValueError(message)\n"
        "ValueError"
    )
    assert "boom" not in text  # the message travels in "message"
    assert os.path.dirname(__file__) not in text


def test_stack_trace_without_traceback_is_the_type_name():
    assert stack_trace(ValueError("never raised")) == "ValueError"
    assert stack_trace(AppError()) == f"{__name__}.AppError"


def test_same_bug_gives_same_stack_trace():
    errors = [capture(raise_value_error, f"user {i} at {object()!r}") for i in range(2)]
    first, second = (simple_error(exc) for exc in errors)
    assert first["message"] != second["message"]
    assert first["stack_trace"] == second["stack_trace"]
    assert first["type"] == second["type"]


def test_different_bugs_give_different_stack_traces():
    a = simple_error(capture(raise_value_error, "x"))["stack_trace"]
    b = simple_error(capture(raise_type_error, "x"))["stack_trace"]
    assert a != b


def test_stack_trace_has_no_addresses():
    class Holder:
        pass

    def fail(obj):
        raise ValueError(f"bad object {obj!r}")

    exc = capture(fail, Holder())
    error = simple_error(exc)
    assert re.search(r"0x[0-9a-fA-F]+", error["message"])  # the message may carry it
    assert not re.search(r"0x[0-9a-fA-F]{4,}", error["stack_trace"])
    assert " at 0x" not in error["stack_trace"]


def test_recursion_error_stack_trace_is_bounded():
    def recurse(n):
        return recurse(n + 1)

    exc = capture(recurse, 0)
    assert isinstance(exc, RecursionError)
    text = stack_trace(exc)
    assert text.startswith("Traceback (most recent call last):")
    lines = text.splitlines()
    # ~1000 frames of recurse() are one frame and a marker without a count
    assert lines[-3:] == [
        "    return recurse(n + 1)",
        "  [previous frame repeated]",
        "RecursionError",
    ]
    assert text.count("in recurse") == 1
    assert not re.search(r"\d+ (more )?times", text)
    assert len(text) <= se.MAX_STACK_TRACE


def test_error_event_of_recursion_error_fits():
    def recurse(n):
        return recurse(n + 1)

    event = events.error_event(capture(recurse, 0))
    _, body = events.fit(event)
    assert len(body) <= events.MAX_EVENT_BYTES
    assert json.loads(body)["@simple_error"]["type"] == "RecursionError"


# -- chains -----------------------------------------------------------------------------------


def test_explicit_cause_is_inner():
    def fail():
        try:
            raise_value_error("low level")
        except ValueError as exc:
            raise AppError("high level") from exc

    error = simple_error(capture(fail))
    assert error["type"] == f"{__name__}.AppError"
    assert error["inner"]["type"] == "ValueError"
    assert error["inner"]["message"] == "low level"
    assert "raise_value_error" in error["inner"]["stack_trace"]
    assert "inner" not in error["inner"]


def test_implicit_context_is_inner():
    def fail():
        try:
            {}["missing"]
        except KeyError:
            raise_type_error("while handling")

    error = simple_error(capture(fail))
    assert error["type"] == "TypeError"
    assert error["inner"]["type"] == "KeyError"
    assert error["inner"]["message"] == "'missing'"


def test_from_none_has_no_inner():
    def fail():
        try:
            {}["missing"]
        except KeyError:
            raise AppError("clean") from None

    error = simple_error(capture(fail))
    assert "inner" not in error
    assert "@inner_omitted" not in error.get("data", {})


def test_context_cycle_terminates():
    a, b = ValueError("a"), TypeError("b")
    a.__context__ = b
    b.__context__ = a
    error = simple_error(a)
    assert error["inner"]["type"] == "TypeError"
    assert "inner" not in error["inner"]
    json.dumps(error)


def test_self_cause_terminates():
    a = ValueError("a")
    a.__cause__ = a
    error = simple_error(a)
    assert "inner" not in error


def test_long_chain_is_bounded():
    exc = None
    for i in range(50):
        new = ValueError(str(i))
        new.__cause__ = exc
        exc = new
    error = simple_error(exc)
    depth, node, messages = 0, error, []
    while True:
        messages.append(node["message"])
        if "inner" not in node:
            break
        node = node["inner"]
        depth += 1
    assert depth == se.MAX_INNER
    assert messages == [str(49 - i) for i in range(se.MAX_INNER + 1)]
    assert node["data"]["@inner_omitted"] is True
    assert len(json.dumps(error)) < 10_000


def test_deep_python_chain_from_handlers():
    def level(n):
        if n == 0:
            raise ValueError("bottom")
        try:
            level(n - 1)
        except ValueError as exc:
            raise ValueError(f"level {n}") from exc

    error = simple_error(capture(level, 20))
    assert error["message"] == "level 20"
    assert error["inner"]["message"] == "level 19"


# -- extras -----------------------------------------------------------------------------------


class ApiFailure(Exception):
    def __init__(self, message, code, password):
        super().__init__(message)
        self.code = code
        self.details = {"retry": True, "api_key": "sk-abc-123"}
        self.password = password
        self._private = "hidden-value"


def make_api_failure():
    exc = ApiFailure("upstream failed", 503, "hunter2-pw")
    if hasattr(exc, "add_note"):
        exc.add_note("while syncing order 7")
    else:  # Python 3.10
        exc.__notes__ = ["while syncing order 7"]
    return exc


def test_ext_holds_public_attributes_and_notes():
    error = simple_error(make_api_failure())
    ext = error["data"]["@ext"]
    assert ext["code"] == 503
    assert ext["details"]["retry"] is True
    assert ext["__notes__"] == ["while syncing order 7"]
    assert "_private" not in ext
    assert "hidden-value" not in json.dumps(error)


def test_ext_secrets_are_masked_under_exclusions():
    error = simple_error(make_api_failure(), settings.DEFAULT_DATA_EXCLUSIONS)
    ext = error["data"]["@ext"]
    assert ext["password"] == settings.MASK
    assert ext["details"]["api_key"] == settings.MASK
    assert ext["code"] == 503
    text = json.dumps(error)
    assert "hunter2-pw" not in text
    assert "sk-abc-123" not in text


def test_ext_secrets_kept_without_exclusions():
    ext = simple_error(make_api_failure(), ())["data"]["@ext"]
    assert ext["password"] == "hunter2-pw"


def test_error_event_passes_exclusions_to_the_error():
    event = events.error_event(make_api_failure(), exclusions=settings.DEFAULT_DATA_EXCLUSIONS)
    assert "hunter2-pw" not in events.encode(event).decode()


def test_oserror_fields_in_ext():
    exc = capture(open, "/no/such/dir/file.txt")
    ext = simple_error(exc)["data"]["@ext"]
    assert ext["errno"] == 2
    assert ext["filename"] == "/no/such/dir/file.txt"
    assert simple_error(exc)["type"] == "FileNotFoundError"


def test_plain_exception_has_no_data():
    assert "data" not in simple_error(capture(raise_value_error, "x"))


def test_ext_values_are_json_safe():
    exc = ValueError("x")
    exc.when = object()
    exc.nan = float("nan")
    exc.loop = []
    exc.loop.append(exc.loop)
    error = simple_error(exc)
    json.dumps(error, allow_nan=False)


# -- exception groups -------------------------------------------------------------------------


@needs_groups
def test_exception_group_members_are_listed():
    def fail():
        raise ExceptionGroup(
            "several", [ValueError("first"), TypeError("second"), AppError("third")]
        )

    error = simple_error(capture(fail))
    assert error["type"] == "ExceptionGroup"
    members = error["data"]["@ext"]["exceptions"]
    assert [m["type"] for m in members] == ["ValueError", "TypeError", f"{__name__}.AppError"]
    assert [m["message"] for m in members] == ["first", "second", "third"]
    json.dumps(error)


@needs_groups
def test_nested_exception_group_and_member_tracebacks():
    def fail():
        errors = [capture(raise_value_error, "a"), capture(raise_type_error, "b")]
        raise ExceptionGroup("outer", [ExceptionGroup("inner", errors), KeyError("k")])

    error = simple_error(capture(fail))
    members = error["data"]["@ext"]["exceptions"]
    assert members[0]["type"] == "ExceptionGroup"
    assert members[1]["type"] == "KeyError"
    nested = members[0]["data"]["@ext"]["exceptions"]
    assert [m["type"] for m in nested] == ["ValueError", "TypeError"]
    assert "raise_value_error" in nested[0]["stack_trace"]


@needs_groups
def test_big_exception_group_is_bounded():
    group = ExceptionGroup("many", [ValueError(str(i)) for i in range(25)])
    ext = simple_error(group)["data"]["@ext"]
    assert len(ext["exceptions"]) == se.MAX_GROUP_MEMBERS
    assert ext["exceptions_omitted"] == 25 - se.MAX_GROUP_MEMBERS


# -- stack traces that depend only on the code --------------------------------------------------


def load_module(directory, name, source):
    """Write ``source`` as ``directory/name.py`` and import it as a fresh module ``name``."""
    import importlib.util

    path = directory / f"{name}.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PROGRAM = """\
def outer(items):
    return [
        inner(item)
        for item in items
    ]


def inner(item):
    total = item["price"] * item["quantity"] + item["shipping"] / item["weight"]
    return total
"""


def test_same_code_in_two_directories_gives_the_same_text(tmp_path, monkeypatch):
    texts = []
    for release in ("releases/41", "releases/42-hotfix/deep/er"):
        root = tmp_path / release
        root.mkdir(parents=True)
        monkeypatch.syspath_prepend(str(root))
        module = load_module(root, "pricing", PROGRAM)
        items = [{"price": 1, "quantity": 2, "shipping": 3, "weight": 0}]
        texts.append(stack_trace(capture(module.outer, items)))
    assert texts[0] == texts[1]
    assert str(tmp_path) not in texts[0]
    assert 'File "pricing.py", line 9, in inner' in texts[0]


def test_no_marker_lines_and_one_source_line_per_frame(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    module = load_module(tmp_path, "pricing_markers", PROGRAM)
    text = stack_trace(capture(module.outer, [{"price": 1, "quantity": 2, "shipping": 3}]))
    for line in text.splitlines():
        assert line.strip(" ~^") != "" or line == "", line
        assert not set(line.strip()) <= set("~^"), line
    frames = [line for line in text.splitlines() if line.startswith('  File "')]
    sources = [line for line in text.splitlines() if line.startswith("    ")]
    assert len(sources) == len(frames)


def test_comprehension_frames_fold_into_their_function(tmp_path, monkeypatch):
    """Python 3.12 runs comprehensions in their function's frame, at the inner line: every
    version shows that."""
    monkeypatch.syspath_prepend(str(tmp_path))
    module = load_module(tmp_path, "pricing_comp", PROGRAM)
    text = stack_trace(capture(module.outer, [{"price": 1}]))
    assert "<listcomp>" not in text
    assert 'File "pricing_comp.py", line 3, in outer\n    inner(item)\n' in text


def test_recursion_depth_does_not_change_the_text():
    def walk(node):
        if node is None:
            raise LookupError("leaf without a value")
        return walk(node.get("child"))

    def nested(depth):
        node = None
        for _ in range(depth):
            node = {"child": node}
        return node

    texts = {stack_trace(capture(walk, nested(depth))) for depth in (2, 5, 40, 300)}
    assert len(texts) == 1
    [text] = texts
    assert text.count("in walk") == 2  # the repeating call, then the raise
    assert "  [previous frame repeated]\n" in text


def test_mutual_recursion_is_folded_by_block():
    def even(n):
        if n == 0:
            raise ArithmeticError("bottom")
        return odd(n - 1)

    def odd(n):
        return even(n - 1)

    texts = {stack_trace(capture(even, depth)) for depth in (4, 10, 200)}
    assert len(texts) == 1
    assert "  [previous 2 frames repeated]\n" in texts.pop()


def test_deep_distinct_frames_are_elided_without_counts():
    # a cycle of 4 functions is not folded (blocks of up to 3 are): elision applies
    source = "\n".join(
        f"def f{i}(n):\n    if n == 0:\n        raise OverflowError('deep')\n"
        f"    return f{(i + 1) % 4}(n - 1)\n"
        for i in range(4)
    )
    namespace: dict = {}
    exec(compile(source, "<cycle>", "exec"), namespace)
    texts = {stack_trace(capture(namespace["f0"], depth)) for depth in (300, 300 + 4 * 50)}
    assert len(texts) == 1
    text = texts.pop()
    assert "  [frames omitted]\n" in text
    assert text.count('  File "') == se.MAX_FRAMES
    assert not re.search(r"\d+ frames", text)
    assert text.endswith("\nOverflowError")


def test_long_source_lines_are_cut(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    padding = " + ".join(["0"] * 400)
    module = load_module(tmp_path, "long_line", f"def fail():\n    return 1 / ({padding})\n")
    text = stack_trace(capture(module.fail))
    [source] = [line for line in text.splitlines() if "1 / (" in line]
    assert len(source.strip()) == se.MAX_SOURCE_LINE
    assert source.endswith("...")


def test_source_path_is_relative_to_the_longest_root(tmp_path, monkeypatch):
    app = tmp_path / "srv" / "app"
    lib = app / "vendor" / "lib"
    lib.mkdir(parents=True)
    monkeypatch.setattr(sys, "path", [str(app), str(lib), *sys.path])
    assert se.source_path(str(app / "shop" / "cart.py")) == "shop/cart.py"
    assert se.source_path(str(lib / "pay" / "api.py")) == "pay/api.py"
    assert se.source_path(str(app / "shop" / ".." / "main.py")) == "main.py"


def test_source_path_of_the_standard_library_and_site_packages():
    import json.decoder

    import requests.api

    assert se.source_path(json.decoder.__file__) == "json/decoder.py"
    assert se.source_path(requests.api.__file__) == "requests/api.py"


def test_source_path_outside_every_root_uses_the_module(tmp_path):
    outside = str(tmp_path / "nowhere" / "shop" / "cart.py")
    assert se.source_path(outside, "shop.cart") == "shop/cart.py"
    init = str(tmp_path / "nowhere" / "shop" / "__init__.py")
    assert se.source_path(init, "shop") == "shop/__init__.py"
    assert se.source_path(outside, "__main__") == "cart.py"
    assert se.source_path(outside, None) == "cart.py"
    assert se.source_path(outside, "not a module name") == "cart.py"


def test_source_path_through_a_symlink(tmp_path, monkeypatch):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    monkeypatch.setattr(sys, "path", [str(real), *sys.path])
    assert se.source_path(str(tmp_path / "link" / "pkg" / "mod.py")) == "pkg/mod.py"


def test_source_path_never_uses_the_file_system_root(monkeypatch):
    monkeypatch.setattr(sys, "path", ["/", *sys.path])
    assert se.source_path("/opt/somewhere/tool.py", "tool") == "tool.py"


@pytest.mark.parametrize("name", ["<string>", "<frozen runpy>", "<stdin>", ""])
def test_pseudo_file_names_are_kept(name):
    assert se.source_path(name) == name


def test_roots_follow_sys_path(tmp_path, monkeypatch):
    target = str(tmp_path / "pkg" / "mod.py")
    before = se.source_path(target, None)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    assert se.source_path(target, None) == "pkg/mod.py"
    monkeypatch.undo()
    assert se.source_path(target, None) == before


# -- trim_stack_trace -------------------------------------------------------------------------


def long_trace(frames: int) -> str:
    return (
        se.HEADER
        + "".join(
            f'  File "app/module_{i}.py", line {i}, in function_{i}\n    call_{i}(arg)\n'
            for i in range(frames)
        )
        + "app.errors.PaymentError"
    )


def test_trim_keeps_a_text_that_fits():
    text = long_trace(10)
    assert se.trim_stack_trace(text, len(text)) is text


def test_trim_keeps_whole_frames_from_both_ends():
    text = long_trace(500)
    cut = se.trim_stack_trace(text, 5_000)
    assert len(cut) <= 5_000
    assert cut.startswith(se.HEADER)
    assert cut.endswith("\napp.errors.PaymentError")
    assert se.OMITTED in cut
    frames = [line for line in cut.splitlines() if line.startswith('  File "')]
    assert len(frames) in se.TRIM_LADDER
    front = len(frames) // 4
    assert frames[:front] == [
        f'  File "app/module_{i}.py", line {i}, in function_{i}' for i in range(front)
    ]
    assert frames[-1] == '  File "app/module_499.py", line 499, in function_499'
    for frame in frames:  # each frame keeps its source line
        assert cut.count(frame + "\n    call_") == 1


def test_trim_is_the_same_for_limits_on_the_same_rung():
    text = long_trace(500)
    assert se.trim_stack_trace(text, 3_000) == se.trim_stack_trace(text, 4_000)
    assert se.trim_stack_trace(text, 3_000) != se.trim_stack_trace(text, 5_000)


def test_trim_measures_with_the_given_size():
    text = long_trace(100).replace("arg", "ümlaut☃☃☃")

    def size(candidate: str) -> int:
        return len(candidate.encode("utf-8"))

    by_chars = se.trim_stack_trace(text, 3_000)
    limit = len(by_chars)
    by_bytes = se.trim_stack_trace(text, limit, size)
    assert size(by_bytes) <= limit < size(by_chars)
    assert by_bytes.count('  File "') < by_chars.count('  File "')


def test_trim_of_tiny_limits_and_foreign_text():
    text = long_trace(50)
    assert se.trim_stack_trace(text, 100) == se.HEADER + se.OMITTED + "app.errors.PaymentError"
    assert se.trim_stack_trace(text, 30) == "app.errors.PaymentError"
    assert se.trim_stack_trace(text, 10) == "app.errors"
    assert se.trim_stack_trace("x" * 1000, 10) == "x" * 10
    assert se.trim_stack_trace(text, 0) == ""
