"""Hostile input through a real ``EventLogHandler`` and the structlog processor.

What the engine is handed is captured (its ``enqueue`` is replaced on the test's engine, so
nothing is sent) and checked: every event is plain JSON (``events.encode`` and ``json.loads``
accept it), fits in ``events.MAX_EVENT_BYTES`` after ``events.fit``, and has the wire form's
types. Every log call must return normally, and produce its event.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
import enum
import json
import logging
import sys
import traceback
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventlog_handler import EventLogHandler
from eventlog_handler.capture._admit import is_ignored_logger
from eventlog_handler.structlog import EventLogProcessor, level_number
from eventlog_handler.wire import _events as events
from eventlog_handler.wire._dates import is_valid_reference_id
from eventlog_handler.wire._jsonsafe import MAX_ITEMS
from tests.reliability.conftest import EXCEPTION_GROUP, collect
from tests.support.constants import API_KEY
from tests.support.waits import dead_port

TEN_MB = 10 * 1024 * 1024
PACKAGE_DIR = str(Path(events.__file__).parent)

#: Attributes ``logging`` refuses in ``extra=`` (it raises KeyError for them itself).
RECORD_ATTRS = frozenset(
    {*vars(logging.LogRecord("", logging.INFO, "", 0, "", None, None)), "message", "asctime"}
)


# -- hostile objects ----------------------------------------------------------------------


class BrokenStr:
    def __str__(self) -> str:
        raise RuntimeError("no str")


class BrokenBoth:
    def __str__(self) -> str:
        raise RuntimeError("no str")

    def __repr__(self) -> str:
        raise ValueError("no repr")

    def __hash__(self) -> int:
        return 7

    def __eq__(self, other: object) -> bool:
        return self is other


class EndlessRepr:
    """``repr`` recurses until Python raises a real RecursionError."""

    def __repr__(self) -> str:
        return repr(self)


class Color(enum.Enum):
    RED = "red"


class BrokenException(Exception):
    def __str__(self) -> str:
        raise RuntimeError("exception without a str")


HOSTILE = [
    BrokenStr(),
    BrokenBoth(),
    EndlessRepr(),
    Color.RED,
    object(),
    logging,
    len,
    type,
    Ellipsis,
    NotImplemented,
    2**70,
    2**20_000,  # str() of it raises on 3.11+ (the digit limit)
    float("nan"),
    float("-inf"),
    decimal.Decimal("NaN"),
    1 + 2j,
    b"\xff\xfe\x00 raw bytes",
    bytearray(b"\x00\x01"),
    memoryview(b"view"),
    Path("/tmp/x"),
    uuid.UUID(int=5),
    dt.datetime(2030, 1, 1, tzinfo=dt.timezone.utc),
    dt.date(2030, 1, 1),
    dt.timedelta(seconds=3),
    range(3),
    iter([1, 2]),
    "\ud800 lone surrogate \udfff",
]


def cyclic(children: Any) -> dict[str, Any]:
    data: dict[str, Any] = {"children": children}
    data["self"] = data
    data["list"] = [data, [data]]
    return data


def hostile(index: int) -> Any:
    return HOSTILE[index]


# Strategies never hold a hostile object itself (Hypothesis prints strategies with repr()).
hostiles = st.integers(0, len(HOSTILE) - 1).map(hostile)
surrogates = st.integers(0xD800, 0xDFFF).map(chr)
nasty_text = st.text(alphabet=st.one_of(st.characters(), surrogates), max_size=40)
leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=2**63, max_value=2**80),
    st.floats(allow_nan=True, allow_infinity=True),
    st.decimals(allow_nan=True, allow_infinity=True),
    st.complex_numbers(allow_nan=True),
    nasty_text,
    st.binary(max_size=40),
    st.datetimes(),
    st.uuids(),
    hostiles,
)
keys = st.one_of(
    nasty_text,
    st.integers(),
    st.none(),
    st.floats(allow_nan=False),
    st.tuples(st.integers(), nasty_text),
    st.builds(BrokenBoth),
    st.sampled_from(["password", "api_key", "Authorization", "session-id", "tags", "@user"]),
)
values = st.recursive(
    leaves,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.tuples(children, children),
        st.dictionaries(keys, children, max_size=4),
        st.frozensets(st.one_of(st.integers(), nasty_text), max_size=3),
        st.builds(cyclic, children),
    ),
    max_leaves=12,
)
extra_keys = st.one_of(nasty_text, st.integers(), st.builds(BrokenBoth)).filter(
    lambda key: key not in RECORD_ATTRS
)
templates = st.one_of(
    nasty_text,
    st.sampled_from(["%d %s", "%s", "%s %s %s", "%(name)s %(x)d", "%", "%z", "{} {0}", "%r"]),
    hostiles,
)
levels = st.sampled_from([1, 5, logging.DEBUG, logging.INFO, 25, logging.WARNING, 45, 50, 99])


def make_exception(message: Any, attributes: Mapping[Any, Any], kind: int) -> BaseException:
    """A raised exception (with a traceback): plain, unprintable, chained, cyclic or a group."""
    exc: BaseException
    try:
        if kind == 0:
            raise ValueError(message)
        if kind == 1:
            raise BrokenException(message)
        if kind == 2:
            try:
                raise KeyError(message)
            except KeyError as inner:
                raise RuntimeError("while handling") from inner
        if kind == 3:
            first, second = ValueError("a"), TypeError("b")
            first.__context__, second.__context__ = second, first  # a cycle in the chain
            raise first
        if EXCEPTION_GROUP is None:
            raise OSError(5, message)
        raise EXCEPTION_GROUP("group", [ValueError(message), TypeError("t")])
    except BaseException as raised:
        exc = raised
    for key, value in attributes.items():
        if isinstance(key, str) and key.isidentifier():
            with contextlib.suppress(Exception):
                setattr(exc, key, value)
    return exc


# -- checks -------------------------------------------------------------------------------


def check_wire(event: Any) -> None:
    """``event`` is JSON-ready, fits the size limit once fitted, and has the wire types."""
    assert isinstance(event, dict)
    body = events.encode(event)
    assert isinstance(json.loads(body.decode("utf-8")), dict)
    fitted, fitted_body = events.fit(event)
    assert len(fitted_body) <= events.MAX_EVENT_BYTES, len(fitted_body)
    decoded = json.loads(fitted_body.decode("utf-8"))
    assert decoded == json.loads(events.encode(fitted))
    assert event.get("type") in ("log", "error")
    assert isinstance(event.get("date"), str)
    assert is_valid_reference_id(event.get("reference_id"))
    if "message" in event:
        assert isinstance(event["message"], str) and len(event["message"]) <= events.MAX_MESSAGE
    if "source" in event:
        assert isinstance(event["source"], str) and len(event["source"]) <= events.MAX_SOURCE
    if "data" in event:
        assert isinstance(event["data"], dict), event["data"]
    if "tags" in event:
        assert isinstance(event["tags"], list)
        assert all(isinstance(tag, str) for tag in event["tags"])
    if "@user" in event:
        assert isinstance(event["@user"], dict)
    if event["type"] == "error":
        error = event["@simple_error"]
        assert isinstance(error["type"], str) and isinstance(error["stack_trace"], str)


class Capture:
    """A handler on its own logger whose engine only collects what it is handed."""

    def __init__(self, **options: Any) -> None:
        self.handler = EventLogHandler(API_KEY, f"http://127.0.0.1:{dead_port()}", **options)
        self.events = collect(self.handler.engine)
        # A logger outside the hierarchy: no other handler (pytest's capture handlers format
        # records with broken arguments and raise) ever sees these records.
        self.logger = logging.Logger("reliability.bad_input", level=1)
        self.logger.propagate = False
        self.logger.addHandler(self.handler)

    def one(self, call: Any) -> dict[str, Any]:
        """Run ``call`` (a log call); it must add exactly one valid event."""
        before = len(self.events)
        call()
        assert len(self.events) == before + 1, (
            self.handler.emit_errors,
            self.handler.last_emit_error,
        )
        event = self.events[-1]
        check_wire(event)
        return event


@pytest.fixture
def capture() -> Iterator[Capture]:
    yield Capture()


# -- property tests -------------------------------------------------------------------------

FUZZ = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def test_any_record_becomes_one_valid_event(capture: Capture) -> None:
    @FUZZ
    @given(
        template=templates,
        args=st.one_of(
            st.lists(values, max_size=3).map(tuple),
            st.dictionaries(nasty_text, values, max_size=2).map(lambda d: (d,)),
        ),
        extra=st.dictionaries(extra_keys, values, max_size=6),
        level=levels,
        exc=st.one_of(
            st.none(),
            st.builds(
                make_exception,
                message=values,
                attributes=st.dictionaries(nasty_text, values, max_size=3),
                kind=st.integers(0, 4),
            ),
        ),
        stack_info=st.booleans(),
    )
    def run(
        template: Any,
        args: tuple[Any, ...],
        extra: dict[Any, Any],
        level: int,
        exc: BaseException | None,
        stack_info: bool,
    ) -> None:
        capture.one(
            lambda: capture.logger.log(
                level, template, *args, extra=extra, exc_info=exc, stack_info=stack_info
            )
        )

    run()
    assert capture.handler.emit_errors == 0, capture.handler.last_emit_error


def test_any_structlog_event_dict_is_passed_through_and_sent_once() -> None:
    processor = EventLogProcessor(API_KEY, f"http://127.0.0.1:{dead_port()}", level=1)
    sent = collect(processor.engine)
    named = logging.getLogger("reliability.structlog")
    special = st.fixed_dictionaries(
        {},
        optional={
            "event": values,
            "level": st.one_of(values, st.sampled_from(["info", "ERROR", "warn", "nope"])),
            "logger": st.one_of(values, nasty_text),
            "exc_info": st.one_of(
                st.booleans(),
                values,
                st.builds(make_exception, values, st.just({}), st.integers(0, 4)),
            ),
            "tags": values,
            "@user": values,
            "timestamp": values,
            "positional_args": values,
        },
    )

    @FUZZ
    @given(
        fixed=special,
        more=st.dictionaries(keys, values, max_size=6),
        method=st.sampled_from(["info", "error", "exception", "debug", "msg", "whatever"]),
        logger=st.sampled_from([None, named, object()]),
    )
    def run(fixed: dict[str, Any], more: dict[Any, Any], method: str, logger: Any) -> None:
        event_dict: dict[Any, Any] = {**more, **fixed}
        keys_before = list(event_dict)
        values_before = [id(value) for value in event_dict.values()]
        before = len(sent)
        returned = processor(logger, method, event_dict)
        assert returned is event_dict
        assert list(event_dict) == keys_before
        assert [id(value) for value in event_dict.values()] == values_before
        new = sent[before:]
        source = event_dict.get("logger", event_dict.get("logger_name"))
        if source is None:
            source = getattr(logger, "name", None)
        wanted = level_number(event_dict.get("level"), method) >= processor.level
        ignored = isinstance(source, str) and is_ignored_logger(source)
        assert len(new) == (1 if wanted and not ignored else 0)
        for event in new:
            check_wire(event)

    run()
    assert processor.errors == 0


def test_real_structlog_pipeline_with_hostile_values() -> None:
    structlog = pytest.importorskip("structlog")
    processor = EventLogProcessor(API_KEY, f"http://127.0.0.1:{dead_port()}")
    sent = collect(processor.engine)
    log = structlog.wrap_logger(
        structlog.ReturnLogger(),
        processors=[
            structlog.processors.add_log_level,
            processor,
            lambda _logger, _method, _event: "rendered",
        ],
    )
    for index, value in enumerate(HOSTILE):
        log.info(f"hostile {index}", value=value, nested={"deep": [value, {"token": value}]})
    log.error("cyclic", data=cyclic([1, 2]))
    try:
        raise BrokenException("x")
    except BrokenException:
        log.exception("unprintable exception")
    log.info("x" * TEN_MB, big="y" * TEN_MB)
    assert processor.errors == 0
    assert len(sent) == len(HOSTILE) + 3
    for event in sent:
        check_wire(event)
    assert sent[-2]["@simple_error"]["type"].endswith("BrokenException")
    assert len(sent[-1]["message"]) <= events.MAX_MESSAGE


# -- explicit cases -------------------------------------------------------------------------


def test_ten_megabyte_messages_arguments_extras_and_exceptions(capture: Capture) -> None:
    big = "m" * TEN_MB
    log = capture.logger
    capture.one(lambda: log.info(big))
    capture.one(lambda: log.info("%s", big))
    capture.one(lambda: log.info("extra", extra={"big": big, "bytes": b"b" * TEN_MB}))
    capture.one(lambda: log.info(big.encode()))
    try:
        raise ValueError(big)
    except ValueError:
        event = capture.one(lambda: log.exception(big))
    assert len(event["@simple_error"]["message"]) <= 2_000
    for event in capture.events:
        # Already bounded when queued, not only when sent: the queue holds small events.
        assert len(events.encode(event)) <= events.MAX_EVENT_BYTES


def test_real_recursion_error_traceback(capture: Capture) -> None:
    def recurse(depth: int) -> int:
        return recurse(depth + 1)

    try:
        recurse(0)
    except RecursionError:
        event = capture.one(lambda: capture.logger.exception("too deep"))
    error = event["@simple_error"]
    assert error["type"] == "RecursionError"
    assert "recurse" in error["stack_trace"]
    assert len(events.encode(event)) <= events.MAX_EVENT_BYTES
    # Objects whose repr recurses without end, as message, argument and extra.
    capture.one(lambda: capture.logger.info(EndlessRepr()))
    capture.one(lambda: capture.logger.info("%r", EndlessRepr()))
    capture.one(lambda: capture.logger.info("x", extra={"endless": EndlessRepr()}))


def _at_depth(depth: int, call: Any) -> Any:
    if depth <= 0:
        return call()
    return _at_depth(depth - 1, call)


def test_emit_with_almost_no_stack_left_never_raises(capture: Capture) -> None:
    record = logging.LogRecord(
        "reliability.deep", logging.ERROR, __file__, 1, "deep %s", ("x",), None
    )
    deepest = 0
    for depth in range(sys.getrecursionlimit(), 0, -1):
        try:
            _at_depth(depth, lambda: None)
        except RecursionError:
            continue
        deepest = depth
        break
    escaped = []
    for depth in range(deepest, max(0, deepest - 200), -1):
        try:
            _at_depth(depth, lambda: capture.handler.emit(record))
        except RecursionError as exc:
            frames = traceback.extract_tb(exc.__traceback__)
            # Raised by the call itself (no frame of the package) is Python's business; raised
            # from inside the package's code is a log call raising into the application.
            if any(frame.filename.startswith(PACKAGE_DIR) for frame in frames):
                escaped.append((depth, "".join(traceback.format_list(frames[-3:]))))
    assert escaped == []


def test_bytes_and_lone_surrogates(capture: Capture) -> None:
    log = capture.logger
    capture.one(lambda: log.info(b"\xff\xfe raw"))
    capture.one(lambda: log.info("%s %r", b"\x00\xff", b"\x80"))
    capture.one(lambda: log.info("\ud800 lone \udfff", extra={"\udc00key": "\ud83d value"}))
    surrogate_logger = logging.Logger("reliability.bad_input.\ud800")
    surrogate_logger.addHandler(capture.handler)
    capture.one(lambda: surrogate_logger.warning("source with a surrogate"))
    for event in capture.events:
        events.encode(event).decode("utf-8")  # strict: what is sent is valid UTF-8


def test_cyclic_data_everywhere(capture: Capture) -> None:
    data = cyclic([1, 2])
    loop: list[Any] = []
    loop.append(loop)
    capture.one(
        lambda: capture.logger.info("cyclic %s %r", data, loop, extra={"d": data, "l": loop})
    )
    exc = make_exception("cycle", {"payload": data}, kind=3)
    capture.one(lambda: capture.logger.error("chained in a cycle", exc_info=exc))
    capture.one(
        lambda: capture.logger.info("user", extra={"@user": {"identity": "u", "data": data}})
    )


def test_thousands_of_extras(capture: Capture) -> None:
    extra = {f"field_{index}": f"value {index}" for index in range(5_000)}
    capture.one(lambda: capture.logger.info("wide", extra=extra))
    nested = {f"field_{index}": [index] for index in range(5_000)}
    event = capture.one(lambda: capture.logger.info("wide and nested", extra=nested))
    assert len(event["data"]) <= MAX_ITEMS + 1


def test_thousands_of_flat_extras_are_bounded_like_log_event(capture: Capture) -> None:
    extra = {f"field_{index}": f"value {index}" for index in range(5_000)}
    event = capture.one(lambda: capture.logger.info("wide", extra=extra))
    assert len(event["data"]) <= MAX_ITEMS + 1


def test_non_string_keys(capture: Capture) -> None:
    extra = {1: "int", None: "none", (1, "t"): "tuple", 2.5: "float", BrokenBoth(): "broken"}
    event = capture.one(lambda: capture.logger.info("keys", extra=extra))  # type: ignore[arg-type]
    assert {"1", "None", "2.5"} <= set(event["data"])
    assert len(event["data"]) == 5
    event = capture.one(lambda: capture.logger.info("nested", extra={"d": {3: {None: [1]}}}))
    assert event["data"]["d"] == {"3": {"None": [1]}}


@pytest.mark.parametrize(
    ("template", "args"),
    [
        ("%d %s", ("x",)),
        ("%s %s", (1,)),
        ("no placeholders", (1, 2)),
        ("%(name)s", ("not a mapping",)),
        ("%d", (BrokenStr(),)),
        ("%s", (BrokenBoth(),)),
        ("%z", (1,)),
    ],
)
def test_mismatched_format_arguments(
    capture: Capture, template: str, args: tuple[Any, ...]
) -> None:
    event = capture.one(lambda: capture.logger.info(template, *args))
    assert event["message"] == template
    assert "@message_args" in event["data"] or "%s" in template
    assert "@format_error" in event["data"]


def test_broken_message_objects_and_exceptions(capture: Capture) -> None:
    log = capture.logger
    for hostile in (BrokenStr(), BrokenBoth(), EndlessRepr()):
        event = capture.one(lambda hostile=hostile: log.info(hostile))
        assert isinstance(event["message"], str)
    try:
        raise BrokenException("hidden")
    except BrokenException:
        event = capture.one(lambda: log.exception(BrokenBoth()))
    assert "BrokenException" in event["@simple_error"]["type"]
    capture.one(lambda: log.info("odd tags and users", extra={"tags": BrokenBoth(), "@user": 5}))
    capture.one(
        lambda: log.info("odd user", extra={"@user": {"identity": BrokenBoth(), "data": "x"}})
    )
    capture.one(lambda: log.info("odd tags", extra={"tags": [BrokenBoth(), None, "x" * 500, 3]}))


class RaisingItems(dict):  # type: ignore[type-arg]
    """A mapping whose iteration fails (a lazy row proxy, a broken ORM object...)."""

    def items(self) -> Any:
        raise RuntimeError("cannot iterate")


def test_one_unconvertible_value_keeps_data_an_object(capture: Capture) -> None:
    event = capture.one(
        lambda: capture.logger.info("row", extra={"row": RaisingItems(a=1), "kept": [1]})
    )
    assert event["data"]["kept"] == [1]
