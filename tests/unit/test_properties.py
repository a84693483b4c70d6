"""Property tests: any data, message or exception gives a valid, bounded event; secrets never leak."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventlog_handler.settings import DEFAULT_DATA_EXCLUSIONS, MASK
from eventlog_handler.wire import _events as events
from eventlog_handler.wire._dates import is_valid_reference_id
from eventlog_handler.wire._events import MAX_EVENT_BYTES, MAX_MESSAGE, encode, fit
from eventlog_handler.wire._logs import log_event

PROFILE = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

SURROGATES = st.sampled_from(["\ud800", "\udbff", "\udc00", "\udfff"])
#: Any code point, lone surrogates included.
ANY_CHAR = st.one_of(st.characters(), SURROGATES, st.sampled_from(["\x00", "\n", '"', "\\"]))
TEXT = st.text(alphabet=ANY_CHAR, max_size=40)
#: Occasionally a long run, to exercise the string bounds and fit().
LONG_TEXT = st.builds(lambda ch, n: ch * n, ANY_CHAR, st.integers(0, 12_000))

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**9000), max_value=2**9000),
    st.floats(allow_nan=True, allow_infinity=True),
    TEXT,
    LONG_TEXT,
    st.binary(max_size=64),
)
KEYS = st.one_of(
    TEXT,
    st.integers(),
    st.floats(allow_nan=True),
    st.none(),
    st.booleans(),
    st.tuples(st.integers(), TEXT),
)
VALUES = st.recursive(
    SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=6),
        st.dictionaries(TEXT, children, max_size=6),
        st.dictionaries(KEYS, children, max_size=6),
        st.tuples(children, children),
        st.frozensets(st.integers(), max_size=5),
    ),
    max_leaves=40,
)
DATA = st.dictionaries(TEXT, VALUES, max_size=8)
#: Event data that is always over MAX_EVENT_BYTES: fit() must trim it.
BULKY_DATA = st.dictionaries(
    st.text(alphabet=ANY_CHAR, min_size=1, max_size=10),
    st.builds(lambda ch, n: ch * n, ANY_CHAR, st.integers(8_192, 9_000)),
    min_size=23,
    max_size=30,
)


def raise_chain(messages: list[str], explicit: list[bool], attrs: list) -> BaseException:
    """Raise one exception per message, each chained to the previous one."""
    caught: BaseException | None = None
    for index, message in enumerate(messages):
        kind = (ValueError, KeyError, RuntimeError, OSError)[index % 4]
        try:
            if caught is None:
                raise kind(message)
            if explicit[index % len(explicit)]:
                raise kind(message) from caught
            try:
                raise caught
            except BaseException:
                raise kind(message)  # noqa: B904 - implicit context on purpose
        except BaseException as exc:
            if attrs:
                exc.detail = attrs[index % len(attrs)]
            caught = exc
    assert caught is not None
    return caught


EXCEPTIONS = st.builds(
    raise_chain,
    st.lists(st.one_of(TEXT, LONG_TEXT), min_size=1, max_size=8),
    st.lists(st.booleans(), min_size=1, max_size=8),
    st.lists(VALUES, max_size=3),
)


def check_wire(event: dict) -> dict:
    raw = encode(event)
    fitted, body = fit(event)
    if len(raw) > MAX_EVENT_BYTES:
        assert fitted["data"]["@trimmed"]
    assert body == encode(fitted)
    assert len(body) <= MAX_EVENT_BYTES
    parsed = json.loads(body.decode("utf-8"))  # strict UTF-8, then strict JSON
    assert isinstance(parsed, dict)
    if "message" in parsed:
        assert len(parsed["message"]) <= MAX_MESSAGE
    assert is_valid_reference_id(parsed["reference_id"])
    assert len(parsed.get("tags", [])) <= events.MAX_TAGS
    return parsed


@PROFILE
@given(message=st.one_of(TEXT, LONG_TEXT), data=DATA, tags=st.lists(TEXT, max_size=60))
def test_log_event_always_encodes(message, data, tags):
    parsed = check_wire(
        log_event(
            message,
            data=data,
            tags=tags,
            source=message,
            user={"identity": message, "name": "Ann"},
            exclusions=DEFAULT_DATA_EXCLUSIONS,
        )
    )
    assert parsed["type"] == "log"


@PROFILE
@given(exc=EXCEPTIONS, message=st.one_of(st.none(), TEXT, LONG_TEXT), data=DATA)
def test_error_event_always_encodes(exc, message, data):
    parsed = check_wire(
        events.error_event(exc, message=message, data=data, exclusions=DEFAULT_DATA_EXCLUSIONS)
    )
    assert parsed["type"] == "error"
    error = parsed["@simple_error"]
    while True:
        assert len(error["message"]) <= MAX_MESSAGE
        assert error["stack_trace"].startswith("Traceback (most recent call last):")
        if "inner" not in error:
            break
        error = error["inner"]


@PROFILE
@given(message=st.one_of(TEXT, LONG_TEXT, VALUES))
def test_message_event_always_encodes(message):
    parsed = check_wire(events.message_event(message))
    assert set(parsed) == {"message", "reference_id"}


@PROFILE
@given(value=VALUES)
def test_submit_body_is_valid_json(value):
    """What api.Client.submit encodes for arbitrary event values."""
    from eventlog_handler.wire._jsonsafe import to_jsonable

    body = encode(to_jsonable({"message": "m", "data": {"v": value}}))
    json.loads(body.decode("utf-8"))


@settings(PROFILE, max_examples=40)
@given(message=TEXT, data=BULKY_DATA, exc=EXCEPTIONS)
def test_bulky_events_are_trimmed_to_fit(message, data, exc):
    for event in (
        log_event(message, data=data),
        events.error_event(exc, message=message, data=data),
    ):
        assert len(encode(event)) > MAX_EVENT_BYTES
        parsed = check_wire(event)
        assert "data values" in parsed["data"]["@trimmed"]


# -- secrets ----------------------------------------------------------------------------------

SECRET = st.builds(
    lambda tail: "ZQX-SECRET-" + tail,
    st.text(alphabet="ABCDEFGHJKLMNPQRSTUVWXYZ23456789", min_size=8, max_size=24),
)
EXCLUDED_KEY = st.builds(
    lambda prefix, word, suffix, case, sep: (
        prefix + sep + (word.upper() if case else word) + sep + suffix
    ),
    st.sampled_from(["", "x", "db", "X-Auth", "client"]),
    st.sampled_from(
        ["password", "Password", "api_key", "API-KEY", "ApiKey", "token", "secret", "session_id"]
    ),
    st.sampled_from(["", "id", "value", "Hash"]),
    st.booleans(),
    st.sampled_from(["", "_", "-"]),
)
PLAIN_KEY = st.text(alphabet="abcdefghijklmnoqruvwxyz", min_size=1, max_size=8)
NOISE = st.recursive(
    st.one_of(st.integers(), TEXT, st.none()),
    lambda children: st.one_of(
        st.lists(children, max_size=3), st.dictionaries(PLAIN_KEY, children, max_size=3)
    ),
    max_leaves=10,
)


@st.composite
def data_with_secret(draw):
    secret = draw(SECRET)
    secret_value = draw(
        st.sampled_from(["plain", "list", "dict"]).map(
            lambda shape: {"plain": secret, "list": [secret], "dict": {"inner": secret}}[shape]
        )
    )
    value = {draw(EXCLUDED_KEY): secret_value}
    for _ in range(draw(st.integers(0, 14))):
        wrapper = draw(st.sampled_from(["dict", "list", "tuple"]))
        if wrapper == "dict":
            extra = draw(st.dictionaries(PLAIN_KEY, NOISE, max_size=2))
            extra[draw(PLAIN_KEY) + "_"] = value
            value = extra
        elif wrapper == "list":
            value = [draw(NOISE), value]
        else:
            value = (value,)
    return secret, {"payload": value, "noise": draw(NOISE)}


@PROFILE
@given(case=data_with_secret())
def test_secrets_never_appear_in_log_events(case):
    secret, data = case
    event = log_event("message", data=data, exclusions=DEFAULT_DATA_EXCLUSIONS)
    _, body = fit(event)
    assert secret not in body.decode("utf-8")
    assert secret not in encode(event).decode("utf-8")


@PROFILE
@given(case=data_with_secret(), key=EXCLUDED_KEY)
def test_secrets_never_appear_in_error_events(case, key):
    secret, data = case
    exc = ValueError("failure")
    exc.context = data
    setattr(exc, key.replace("-", "_").strip("_"), secret)  # a public attribute
    event = events.error_event(exc, data=data, exclusions=DEFAULT_DATA_EXCLUSIONS)
    text = encode(event).decode("utf-8")
    assert secret not in text
    assert MASK in text
