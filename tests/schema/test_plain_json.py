"""The schema data check in C (`structgen/_json_native.c`) against the Python walk it speeds up
(`schema._check_nesting`): the same copies of plain JSON data, and every case it does not take
(errors, non-JSON values, subclasses, nesting past the limit) left to the walk, which raises
the same errors as before."""

from __future__ import annotations

import json
import math
from collections import OrderedDict
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from structgen import schema as schema_module
from structgen.errors import LimitExceededError, SchemaError

pytestmark = pytest.mark.skipif(
    schema_module._PLAIN_JSON is None, reason="the C schema data check is not built"
)

finite = st.floats(allow_nan=False, allow_infinity=False)
json_data = st.recursive(
    st.none() | st.booleans() | st.integers() | finite | st.text(),
    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
    max_leaves=30,
)


def python_walk(data: Any, limit: int, copy_out: bool, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(schema_module, "_PLAIN_JSON", None)
    try:
        return schema_module._check_nesting(data, limit, copy_out=copy_out)
    finally:
        monkeypatch.undo()


def same_shape(a: Any, b: Any) -> bool:
    """Equal, with the same container types and key order all the way down."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same_shape(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same_shape(x, y) for x, y in zip(a, b))
    return a == b or (a != a and b != b)


@settings(max_examples=200, deadline=None)
@given(data=json_data, limit=st.integers(1, 6))
def test_same_copy_as_the_python_walk(data: Any, limit: int) -> None:
    with pytest.MonkeyPatch.context() as mp:
        try:
            expected = python_walk(data, limit, True, mp)
        except LimitExceededError:
            expected = None
    native = schema_module._PLAIN_JSON(data, limit, True)
    if expected is None:
        assert native is None  # (too deep: left to the walk, which raises)
        return
    assert native is not None and same_shape(native, expected)
    # a private copy: no container is shared with the input
    if isinstance(data, (dict, list)) and data:
        assert native is not data
        assert schema_module._PLAIN_JSON(data, limit, False) is data  # (checked only)


@pytest.mark.parametrize(
    "data",
    [
        {"a": math.nan},
        {"a": [1, math.inf]},
        {1: "x"},
        {"a": (1, 2)},
        OrderedDict(a=1),
        {"a": {"b": {"c": {}}}},
        [[[[[]]]]],
    ],
)
def test_odd_data_is_left_to_the_python_walk(data: Any) -> None:
    assert schema_module._PLAIN_JSON(data, 3, True) is None


def test_errors_are_unchanged() -> None:
    from structgen.schema import schema_data

    with pytest.raises(SchemaError, match="is not a JSON number") as err:
        schema_data({"properties": {"x": {"maximum": math.nan}}})
    assert err.value.pointer == "/properties/x/maximum"
    with pytest.raises(SchemaError, match="object keys must be strings"):
        schema_data({"properties": {1: {}}})
    with pytest.raises(LimitExceededError, match="nests deeper than 3"):
        schema_data({"a": {"b": {"c": {}}}}, max_nesting=3)
    # a tuple is deep-copied by the walk, as before
    data = {"enum": [(1, 2)]}
    assert schema_data(data)["enum"] == [(1, 2)]


def test_deep_plain_data_past_the_c_depth() -> None:
    """Deeper than the C recursion goes (512): the iterative walk copies it."""
    deep: Any = []
    for _ in range(600):
        deep = [deep]
    from structgen.schema import schema_data

    copied = schema_data({"const": deep}, max_nesting=1000)
    assert json.dumps(copied["const"]) == json.dumps(deep)
