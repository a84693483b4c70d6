"""to_jsonable: every kind of value becomes plain JSON, bounded, with data exclusions."""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import decimal
import enum
import json
import math
import uuid

import pytest
from hypothesis import assume, given
from hypothesis import settings as settings_
from hypothesis import strategies as st

from eventlog_handler import settings
from eventlog_handler.settings import DEFAULT_DATA_EXCLUSIONS, MASK
from eventlog_handler.wire import _events as events
from eventlog_handler.wire import _jsonsafe as jsonsafe
from eventlog_handler.wire._jsonsafe import MAX_DEPTH, MAX_ITEMS, MAX_STRING, to_jsonable

PLAIN_LEAVES = (str, int, float, bool, type(None))


def assert_plain(value, depth=0):
    """Only dict (str keys) / list / str / int / float (finite) / bool / None."""
    assert depth < 100
    if isinstance(value, dict):
        assert type(value) is dict
        for key, item in value.items():
            assert type(key) is str
            assert_plain(item, depth + 1)
    elif isinstance(value, list):
        assert type(value) is list
        for item in value:
            assert_plain(item, depth + 1)
    else:
        assert type(value) in PLAIN_LEAVES, type(value)
        if type(value) is float:
            assert math.isfinite(value)


def convert(value, exclusions=()):
    result = to_jsonable(value, exclusions)
    assert_plain(result)
    text = json.dumps(result, allow_nan=False)
    assert json.loads(text) == result
    return result


class Color(enum.Enum):
    RED = "red"
    BLUE = 2


class Level(enum.IntEnum):
    HIGH = 3


@dataclasses.dataclass
class Point:
    x: int
    y: float
    label: str = "p"


@dataclasses.dataclass
class Account:
    name: str
    password: str


class Hostile:
    def __str__(self):
        raise RuntimeError("str")

    def __repr__(self):
        raise RuntimeError("repr")


class OnlyRepr:
    def __str__(self):
        raise RuntimeError("str")

    def __repr__(self):
        return "OnlyRepr()"


class MyStr(str):
    def __str__(self):
        raise RuntimeError("subclass str")


class MyInt(int):
    def __str__(self):
        raise RuntimeError("subclass str")


class MyFloat(float):
    pass


# -- value kinds ------------------------------------------------------------------------------


def test_plain_values_pass_through():
    value = {"s": "text", "i": 3, "f": 1.5, "b": True, "n": None, "l": [1, "a"], "d": {"k": []}}
    assert convert(value) == value


def test_datetimes():
    aware = dt.datetime(2030, 1, 1, 12, 0, 0, 123456, tzinfo=dt.timezone.utc)
    result = convert(
        {"aware": aware, "naive": dt.datetime(2030, 1, 1), "date": dt.date(2030, 1, 2)}
    )
    assert result["aware"] == "2030-01-01T12:00:00.123456+00:00"
    assert result["naive"].startswith("2030-01-01T00:00:00")
    assert result["date"] == "2030-01-02"
    assert isinstance(convert(dt.time(1, 2, 3)), str)
    assert isinstance(convert(dt.timedelta(days=1)), str)


def test_decimal_uuid_bytes():
    assert convert(decimal.Decimal("1.10")) == "1.10"
    assert convert(decimal.Decimal("NaN")) == "NaN"
    assert convert(uuid.UUID(int=1)) == "00000000-0000-0000-0000-000000000001"
    assert convert(b"\x00\xffabc") == "b'\\x00\\xffabc'"
    assert convert(bytearray(b"xyz")) == "b'xyz'"
    marker = "…[truncated: 10000 bytes in all]"
    assert convert(b"x" * 10_000) == "b'" + "x" * (8_192 - 2 - len(marker)) + marker
    assert isinstance(convert(memoryview(b"xyz")), str)


def test_sets_become_sorted_lists():
    assert convert({3, 1, 2}) == [1, 2, 3]
    assert convert(frozenset({"b", "a"})) == ["a", "b"]
    mixed = convert({1, "a", None})
    assert sorted(map(str, mixed)) == ["1", "None", "a"]


def test_other_sequences():
    assert convert((1, 2)) == [1, 2]
    assert convert(collections.deque([1, 2])) == [1, 2]
    assert convert({"a": 1}.keys()) == ["a"]
    assert convert({"a": 1}.values()) == [1]
    assert convert(collections.OrderedDict(a=1)) == {"a": 1}


def test_dataclasses_become_objects():
    assert convert(Point(1, 2.5)) == {"x": 1, "y": 2.5, "label": "p"}
    assert convert(Account("ann", "pw1"), DEFAULT_DATA_EXCLUSIONS) == {
        "name": "ann",
        "password": MASK,
    }


def test_enums():
    assert convert(Color.RED) == "red"
    assert convert(Color.BLUE) == 2
    assert convert(Level.HIGH) == 3
    assert convert({"level": Level.HIGH})["level"] == 3


def test_hostile_objects():
    assert convert(Hostile()) == "<unprintable Hostile object>"
    assert convert(OnlyRepr()) == "OnlyRepr()"
    assert convert({"h": [Hostile()]}) == {"h": ["<unprintable Hostile object>"]}
    assert jsonsafe.safe_str(Hostile()) == "<unprintable Hostile object>"
    assert jsonsafe.safe_repr(Hostile()) == "<unprintable Hostile object>"
    assert jsonsafe.safe_str(OnlyRepr()) == "OnlyRepr()"


def test_arbitrary_objects_are_rendered_as_text():
    assert convert(complex(1, 2)) == "(1+2j)"
    assert convert(range(3)) == "range(0, 3)"
    assert convert(ValueError("boom")) == "ValueError: boom"
    assert convert(int) == "int"


def test_cycles_in_dicts_and_lists():
    d = {"name": "root"}
    d["self"] = d
    items = [1]
    items.append(items)
    d["items"] = items
    result = convert(d)
    assert result["name"] == "root"
    assert result["self"] == "<cycle: dict>"
    assert result["items"][0] == 1
    assert result["items"][1] == "<cycle: list>"


def test_shared_but_acyclic_references_are_kept():
    shared = {"k": 1}
    assert convert({"a": shared, "b": shared, "c": [shared, shared]}) == {
        "a": {"k": 1},
        "b": {"k": 1},
        "c": [{"k": 1}, {"k": 1}],
    }


def test_non_finite_floats():
    result = convert([float("nan"), float("inf"), float("-inf"), MyFloat("inf"), 0.5])
    assert result == ["NaN", "Infinity", "-Infinity", "Infinity", 0.5]


def test_non_string_keys():
    result = convert({1: "a", 2.5: "b", None: "c", False: "d", (1, 2): "e", Hostile(): "f"})
    assert result == {
        "1": "a",
        "2.5": "b",
        "None": "c",
        "False": "d",
        "(1, 2)": "e",
        "<unprintable Hostile object>": "f",
    }


def test_long_keys_are_cut():
    result = convert({"k" * 1000: 1})
    (key,) = result
    assert len(key) <= 200


def test_lone_surrogates_survive_encode():
    value = to_jsonable({"bad\ud800key": ["x\udfffy", "ok"]})
    body = events.encode({"data": value})
    parsed = json.loads(body.decode("utf-8"))
    assert parsed == {"data": {"bad?key": ["x?y", "ok"]}}


def test_huge_ints():
    assert convert(2**63 - 1) == 2**63 - 1
    assert convert(-(2**63)) == -(2**63)
    assert convert(2**63) == str(2**63)
    assert convert(-(2**70)) == str(-(2**70))
    big = convert(10**5000)
    assert isinstance(big, str) and "bits" in big and len(big) < 100
    assert convert(True) is True


def test_str_and_int_subclasses():
    assert convert(MyStr("hello")) == "hello"
    assert type(convert(MyStr("hello"))) is str
    assert convert(MyInt(7)) == 7
    assert type(convert(MyInt(7))) is int
    assert convert({"k": MyInt(2**80)}) == {"k": str(2**80)}


class Field(str, enum.Enum):
    NAME = "name"


def test_str_subclass_keys_keep_their_text():
    assert convert({MyStr("k"): 1}) == {"k": 1}
    assert convert({Field.NAME: Field.NAME}) == {"name": "name"}


def nested(depth):
    value = "leaf"
    for _ in range(depth):
        value = {"d": [value]}
    return value


def test_deep_nesting_beyond_max_depth():
    result = convert(nested(MAX_DEPTH * 3))
    text = json.dumps(result)
    assert "max depth" in text
    assert "leaf" not in text
    level, node = 0, result
    while isinstance(node, dict | list):
        node = node["d"] if isinstance(node, dict) else node[0]
        level += 1
    assert level <= MAX_DEPTH
    assert isinstance(node, str)


def test_nesting_within_max_depth_is_kept():
    assert "leaf" in json.dumps(convert(nested(MAX_DEPTH // 2 - 1)))


def test_extremely_deep_nesting_does_not_blow_the_stack():
    value = []
    for _ in range(100_000):
        value = [value]
    assert isinstance(convert(value), list)


def test_long_strings_truncated_and_marked():
    result = convert("x" * (MAX_STRING * 3))
    assert len(result) <= MAX_STRING
    assert result.startswith("x" * 1000)
    assert "truncated" in result
    assert convert("y" * MAX_STRING) == "y" * MAX_STRING


def test_truncate():
    assert jsonsafe.truncate("short", 10) == "short"
    cut = jsonsafe.truncate("a" * 1000, 100)
    assert len(cut) <= 100
    assert cut.startswith("a" * 50)
    assert cut.endswith("chars]")
    cut_len = int(cut.rsplit("truncated ", 1)[1].split()[0])
    assert cut_len == 1000 - cut.index("…")


def test_containers_beyond_max_items_are_marked():
    result = convert(list(range(MAX_ITEMS + 100)))
    assert len(result) == MAX_ITEMS + 1
    assert result[:MAX_ITEMS] == list(range(MAX_ITEMS))
    assert result[-1] == "<100 more items>"

    mapping = convert({f"k{i}": i for i in range(MAX_ITEMS + 7)})
    assert len(mapping) == MAX_ITEMS + 1
    assert mapping["…"] == "<7 more items>"

    big_set = convert(set(range(MAX_ITEMS * 2)))
    assert len(big_set) == MAX_ITEMS + 1
    assert big_set[-1] == f"<{MAX_ITEMS} more items>"


def test_custom_bounds():
    assert to_jsonable("abcdefghijklmnopqrstuvwxyz" * 10, max_string=40).startswith("abc")
    assert len(to_jsonable("abcdefghijklmnopqrstuvwxyz" * 10, max_string=40)) <= 40
    assert len(to_jsonable(list(range(10)), max_items=3)) == 4
    assert "max depth" in json.dumps(to_jsonable(nested(5), max_depth=2))


def test_result_is_a_snapshot():
    value = {"items": [1, 2], "inner": {"k": "v"}}
    result = to_jsonable(value)
    value["items"].append(3)
    value["inner"]["k"] = "changed"
    assert result == {"items": [1, 2], "inner": {"k": "v"}}
    assert result["items"] is not value["items"]


def test_generators_and_iterators_do_not_raise():
    gen = (i for i in range(3))
    assert isinstance(convert(gen), str)
    assert isinstance(convert(iter([1, 2])), str)


# -- exclusions -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    [
        "password",
        "Password",
        "PASSWORD",
        "db_password",
        "api-key",
        "API_KEY",
        "apiKey",
        "X-Auth-Token",
        "access_token",
        "session_id",
        "SessionId",
        "Cookie",
        "set-cookie",
        "Authorization",
        "client_secret",
        "private_key",
        "credentials",
        "passwd",
        # widened: what sentry-python, the official clients and card forms mask
        "access_key",
        "accessKey",
        "AWS_SECRET_ACCESS_KEY",
        "pwd",
        "MYSQL_PWD",
        "auth",
        "AUTH_TOKEN",
        "oauth",
        "basic_auth",
        "jwt",
        "bearer",
        "Proxy-Authorization",
        "csrftoken",
        "x_csrftoken",
        "_csrf",
        "XSRF-TOKEN",
        "PHPSESSID",
        "connect.sid",
        ".ASPXAUTH",
        "aiohttp_session",
        "cvv",
        "cvv2",
        "card_number",
        "creditCard",
        "X-Amz-Signature",
        "passphrase",
        "otp",
        # names written without separators, and compound suffixes
        "dbpassword",
        "authtoken",
        "passwordHash",
        "passwordid",
        "tokenValue",
        "APIKEYid",
        # plurals that hold secrets
        "api_keys",
        "apiKeys",
        "access_tokens",
        "refreshTokens",
        "private_keys",
        "signatures",
        "passwords",
    ],
)
def test_default_exclusions_match_insensitively(key):
    result = convert({key: "s3cr3t-value", "name": "ann"}, DEFAULT_DATA_EXCLUSIONS)
    assert result == {key: MASK, "name": "ann"}
    assert jsonsafe.is_excluded(key, DEFAULT_DATA_EXCLUSIONS)


@pytest.mark.parametrize(
    "key",
    [
        "name",
        "user",
        "id",
        "email",
        "count",
        "pass",
        "key",
        "author",
        "authority_count",
        "authenticated",
        "tokenizer_name",
        "max_tokens",
        "total_tokens",  # a count: bare ``tokens`` is not a default exclusion
        "paid_tokens",
        "secretary",
        "passport",
        "keyword",
        "spin",
        "cwd",
        "signal",
        "",
        "__",
    ],
)
def test_ordinary_keys_are_kept(key):
    assert not jsonsafe.is_excluded(key, DEFAULT_DATA_EXCLUSIONS)
    assert convert({key: "v"}, DEFAULT_DATA_EXCLUSIONS) == {key: "v"}


def test_exclusions_at_any_depth():
    value = {
        "users": [
            {"name": "ann", "Password": "p1", "profile": {"api-key": "k1", "age": 3}},
            [{"X-Auth-Token": "t1"}, ({"session_id": "s1"},)],
        ],
        "headers": {"Authorization": "Bearer abc", "Accept": "json"},
        "password": {"nested": "whole subtree"},
    }
    result = convert(value, DEFAULT_DATA_EXCLUSIONS)
    assert result["users"][0] == {
        "name": "ann",
        "Password": MASK,
        "profile": {"api-key": MASK, "age": 3},
    }
    assert result["users"][1] == [{"X-Auth-Token": MASK}, [{"session_id": MASK}]]
    assert result["headers"] == {"Authorization": MASK, "Accept": "json"}
    assert result["password"] == MASK
    text = json.dumps(result)
    for secret in ("p1", "k1", "t1", "s1", "Bearer abc", "whole subtree"):
        assert secret not in text


def test_exclusions_inside_objects_and_non_string_keys():
    class Key:
        def __str__(self):
            return "Secret_Field"

    result = convert({Key(): "v1", "acct": Account("ann", "pw")}, DEFAULT_DATA_EXCLUSIONS)
    assert result == {"Secret_Field": MASK, "acct": {"name": "ann", "password": MASK}}


def test_custom_exclusions_from_settings():
    words = settings.Settings.from_options(
        {"data_exclusions": "ssn, Card-Number"}, environ={}, require_api_key=False
    ).data_exclusions
    value = {"SSN": "123", "card_number": "4111", "password": "kept", "cvv": "999"}
    assert convert(value, words) == {
        "SSN": MASK,
        "card_number": MASK,
        "password": "kept",
        "cvv": "999",
    }


def test_empty_exclusions_disable_masking():
    words = settings.Settings.from_options(
        {"data_exclusions": []}, environ={}, require_api_key=False
    ).data_exclusions
    value = {"password": "p", "token": "t"}
    assert convert(value, words) == value
    assert convert(value) == value
    assert not jsonsafe.is_excluded("password", ())


def test_exclusion_words_are_normalized_keys():
    assert settings.normalize_key("X-Auth_Token") == "xauthtoken"
    assert jsonsafe.is_excluded("My-Api_Key", ("apikey",))


def test_a_word_matches_where_it_ends_a_word_of_the_key():
    words = ("auth", "token", "apikey")
    for key in ("auth", "AUTH", "x_auth", "oauth", "authToken", "X-Api-Key", "apiKeyHash"):
        assert jsonsafe.is_excluded(key, words), key
    for key in ("author", "authority_count", "tokenizer_name", "api_keys_url", "apikeyring"):
        assert not jsonsafe.is_excluded(key, words), key


@pytest.mark.parametrize(
    ("pattern", "excluded", "kept"),
    [
        ("*", ["anything", "x"], []),
        ("*pass*", ["password", "my_PASS", "bypass_flag"], ["pas", "name"]),
        (
            "credit_card*",
            ["creditcard", "Credit-Card-Number", "credit_card_no"],
            ["my_credit_card"],
        ),
        ("*_id", ["user_id", "UserId", "id"], ["identity", "id_user"]),
        ("Password", ["password", "db_password"], ["passwords_count", "passwordx"]),
    ],
)
def test_server_patterns_follow_the_official_clients(pattern, excluded, kept):
    """``@@DataExclusions``: ``*`` at the start and/or end, case-insensitive; an entry without
    ``*`` is a word (the local rule, which also matches where the exact key would)."""
    for key in excluded:
        assert jsonsafe.is_excluded(key, (pattern,)), key
    for key in kept:
        assert not jsonsafe.is_excluded(key, (pattern,)), key


def test_words_and_patterns_mix_in_one_collection():
    mixed = (*DEFAULT_DATA_EXCLUSIONS, "*internal*", "Ssn")
    assert convert({"x_internal_note": 1, "SSN": 2, "db_password": 3, "ok": 4}, mixed) == {
        "x_internal_note": MASK,
        "SSN": MASK,
        "db_password": MASK,
        "ok": 4,
    }
    assert jsonsafe.is_excluded("a", ["*a*"])  # any collection, not only tuples
    assert jsonsafe.is_excluded("a", frozenset(["a"]))


def test_exclusion_entries_are_normalized():
    assert settings.normalize_key("*Credit_Card.Number*") == "*creditcardnumber*"
    assert jsonsafe.is_excluded("credit-card-number", (" *Credit_Card* ",))
    assert not jsonsafe.is_excluded("x", ("", "  ", "__"))  # empty words match nothing


WORD_STRATEGY = st.sampled_from(sorted(DEFAULT_DATA_EXCLUSIONS))
NOISE_WORD = st.text(alphabet="bfghmqvwz", min_size=1, max_size=6)  # no exclusion word inside


@given(
    word=WORD_STRATEGY,
    before=st.lists(NOISE_WORD, max_size=2),
    after=st.lists(NOISE_WORD, max_size=2),
    style=st.sampled_from(["snake", "kebab", "camel", "upper", "dotted", "joined"]),
    suffix=st.sampled_from(["", "id", "Hash", "value"]),
)
@settings_(max_examples=300, deadline=None)
def test_property_a_word_at_the_end_of_a_key_word_is_excluded(word, before, after, style, suffix):
    if style == "joined":  # no boundary after the word but the key's end
        after = []
        if word in jsonsafe.WHOLE_WORDS:
            before = []  # these match only from the start of a word (span_id is not a card)
    parts = [*before, word + suffix, *after]
    key = _styled(parts, style)
    assert jsonsafe.is_excluded(key, DEFAULT_DATA_EXCLUSIONS), key


@given(
    word=WORD_STRATEGY,
    tail=st.sampled_from(["izer", "or", "ity", "ary", "ing", "ed", "ful"]),
    style=st.sampled_from(["snake", "kebab", "camel", "upper", "dotted"]),
    other=NOISE_WORD,
)
@settings_(max_examples=300, deadline=None)
def test_property_a_word_that_only_starts_a_longer_word_is_not_excluded(word, tail, style, other):
    key = _styled([word + tail, other], style)
    hidden = [w for w in DEFAULT_DATA_EXCLUSIONS if w in (word + tail)[len(word) - len(w) + 1 :]]
    assume(not hidden)  # the tail must not end with another word ("sig" + ...)
    assert not jsonsafe.is_excluded(key, DEFAULT_DATA_EXCLUSIONS), key


def _styled(parts, style):
    if style == "snake":
        return "_".join(parts)
    if style == "kebab":
        return "-".join(part.capitalize() for part in parts)
    if style == "camel":
        return parts[0] + "".join(part.capitalize() for part in parts[1:])
    if style == "upper":
        return "_".join(parts).upper()
    if style == "dotted":
        return ".".join(parts)
    return "".join(parts)
