"""`compiler.text_head`: the head of a schema's text, as `str(schema)[:limit]` writes it."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from structgen.compiler import text_head

json_data = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=40,
)


@settings(max_examples=300, deadline=None)
@given(data=json_data, limit=st.integers(1, 300))
def test_text_head_is_the_head_of_str(data: Any, limit: int) -> None:
    assert text_head(data, limit) == str(data)[:limit]


def test_large_and_deep_values() -> None:
    big = {"properties": {f"p{i}": {"type": "string"} for i in range(10_000)}}
    assert text_head(big, 200) == str(big)[:200]
    deep: Any = {}
    for _ in range(5_000):  # (deeper than the recursion limit: only the head is written)
        deep = {"a": deep}
    assert text_head(deep, 200) == "{'a': " * 33 + "{'"
    assert text_head("a schema as text", 8) == "a schema"
