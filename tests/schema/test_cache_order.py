"""Schemas that differ only in their key order are different grammars: properties are generated
in the order the schema writes them, so the compile cache must not hand one schema the grammar
of the other (it did while its key was the sorted-keys JSON text)."""

from __future__ import annotations

from typing import Any

import pytest

from structgen import Compiler, Matcher, SchemaOptions
from tests.conftest import load_vocab


@pytest.fixture
def gpt2_compiler() -> Compiler:
    return Compiler(load_vocab("gpt2"))


def _person(*order: str) -> dict[str, Any]:
    props = {"name": {"type": "string"}, "age": {"type": "integer"}}
    return {
        "type": "object",
        "properties": {k: props[k] for k in order},
        "required": ["name", "age"],
        "additionalProperties": False,
    }


def test_property_order_is_not_shared_through_the_cache(gpt2_compiler: Compiler) -> None:
    first = gpt2_compiler.json_schema(_person("name", "age"))
    second = gpt2_compiler.json_schema(_person("age", "name"))
    assert first is not second
    assert Matcher(first).forced_bytes() == b'{"name": "'
    assert Matcher(second).forced_bytes() == b'{"age": '
    # the same schema again is the cached grammar
    assert gpt2_compiler.json_schema(_person("age", "name")) is second


def test_equal_text_and_data_share_the_grammar(gpt2_compiler: Compiler) -> None:
    import json

    schema = _person("age", "name")
    options = SchemaOptions(mode="accept")
    assert gpt2_compiler.json_schema(schema, options=options) is gpt2_compiler.json_schema(
        json.dumps(schema, indent=2), options=options
    )
