"""Manual stacking: the ``@stack`` value from what users pass, and the ``stack()`` helper."""

from __future__ import annotations

import json
import logging

import pytest

from eventlog_handler.wire import _stacking as stacking
from eventlog_handler.wire._stacking import manual_stack, stack


@pytest.fixture(autouse=True)
def fresh_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stacking, "_warned", False)


def test_title_and_signature():
    assert stack("Payment gateway timeout", gateway="adyen", region="eu") == {
        "stack": {
            "title": "Payment gateway timeout",
            "signature_data": {"gateway": "adyen", "region": "eu"},
        }
    }


def test_title_alone_is_the_stacking_key():
    """As the official clients' manual stacking key: the title names and tells the stack."""
    assert stack("Inventory sync") == {
        "stack": {
            "title": "Inventory sync",
            "signature_data": {"ManualStackingKey": "Inventory sync"},
        }
    }


def test_signature_from_a_mapping_with_any_key_names():
    fragment = stack("Checkout", {"user-id": 42, "cart.size": 3}, step="pay")
    assert fragment["stack"]["signature_data"] == {"cart.size": "3", "step": "pay", "user-id": "42"}


def test_signature_without_title():
    assert stack(None, {"area": "billing"}) == {"stack": {"signature_data": {"area": "billing"}}}


def test_key_order_does_not_matter():
    a = stack("t", {"b": "2", "a": "1"})
    b = stack("t", {"a": "1", "b": "2"})
    assert json.dumps(a) == json.dumps(b)


def test_values_become_strings_and_blanks_are_left_out():
    value = manual_stack(
        {"title": "  Orders  ", "signature_data": {"n": 7, "ok": True, "none": None, "e": " "}}
    )
    assert value == {"title": "Orders", "signature_data": {"n": "7", "ok": "True"}}


def test_a_string_value_is_a_title():
    assert manual_stack("Nightly import") == {
        "title": "Nightly import",
        "signature_data": {"ManualStackingKey": "Nightly import"},
    }


def test_normalizing_twice_changes_nothing():
    once = manual_stack({"title": "T", "signature_data": {"b": 1, "a": 2}})
    assert manual_stack(once) == once
    assert manual_stack(stack("T", a=1)["stack"]) == stack("T", a=1)["stack"]


def test_sizes_are_bounded_by_a_stable_rule():
    value = manual_stack(
        {
            "title": "t" * 5_000,
            "signature_data": {f"k{i:03d}" + "x" * 500: "v" * 5_000 for i in range(50)},
        }
    )
    assert value is not None
    assert len(value["title"]) == stacking.MAX_TITLE
    signature = value["signature_data"]
    assert len(signature) == stacking.MAX_ENTRIES
    assert all(len(key) <= stacking.MAX_KEY for key in signature)
    assert all(len(item) <= stacking.MAX_VALUE for item in signature.values())
    assert sorted(signature) == list(signature)
    assert next(iter(signature)).startswith("k000")


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "   ",
        {},
        {"title": ""},
        {"title": None, "signature_data": {}},
        {"signature_data": {"a": None}},
        {"signature_data": "not a mapping"},
        {"name": "unknown key"},
        42,
        ["a", "b"],
        object(),
    ],
)
def test_unusable_input_gives_no_stack(bad, caplog):
    with caplog.at_level(logging.WARNING, logger="eventlog_handler"):
        assert manual_stack(bad) is None
    [record] = caplog.records
    assert record.getMessage().endswith("the event keeps its default stack")


def test_none_is_no_stack_without_a_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="eventlog_handler"):
        assert manual_stack(None) is None
    assert caplog.records == []


def test_the_helper_never_raises(caplog):
    class Hostile:
        def __str__(self):
            raise RuntimeError("no")

        __repr__ = __str__

    with caplog.at_level(logging.WARNING, logger="eventlog_handler"):
        assert stack("") == {}
        assert stack(None) == {}
        assert stack("t", "not a mapping") == {
            "stack": {"title": "t", "signature_data": {"ManualStackingKey": "t"}}
        }
        fragment = stack(Hostile(), key=Hostile())
    # the hostile values become markers, never an exception
    marker = f"<unprintable {Hostile.__qualname__} object>"
    assert fragment == {"stack": {"title": marker, "signature_data": {"key": marker}}}


def test_warns_once_per_process(caplog):
    with caplog.at_level(logging.WARNING, logger="eventlog_handler"):
        manual_stack(3)
        manual_stack(4)
    assert len(caplog.records) == 1


def test_the_value_is_plain_json():
    value = stack("Payment", gateway="adyen", attempt=3)
    assert json.loads(json.dumps(value)) == value
