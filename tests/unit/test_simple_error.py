"""@simple_error: type names, messages, stable stack traces, chains, extras, groups."""

from __future__ import annotations

import builtins
import json
import re
import sys

import pytest

from eventlog_handler import events, settings
from eventlog_handler import simple_error as se
from eventlog_handler.simple_error import simple_error, stack_trace, type_name

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


def test_stack_trace_shape():
    exc = capture(raise_value_error, "boom")
    text = simple_error(exc)["stack_trace"]
    assert text.startswith("Traceback (most recent call last):\n")
    assert f'File "{__file__}", line {RAISE_LINE}, in raise_value_error' in text
    assert "in capture" in text
    assert "raise ValueError(message)" in text
    assert text.rstrip().splitlines()[-1] == "ValueError"
    assert "boom" not in text  # the message travels in "message"


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
    assert re.search(r"\.\.\. \d+ frames omitted \.\.\.", text)
    assert text.count('File "') <= se.MAX_FRAMES
    assert len(text.splitlines()) <= 3 * se.MAX_FRAMES
    assert len(text) <= se.MAX_STACK_TRACE
    assert text.rstrip().endswith("RecursionError")


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
