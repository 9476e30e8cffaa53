"""`LM`: one call per mode on the default model, each answer checked against its oracle (JSON
answers under jsonschema and ajv)."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest

from structgen import GenerationError
from tests.api.conftest import default_lm
from tests.oracles.checks import assert_ajv_accepts

pytestmark = pytest.mark.slow

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 30},
        "age": {"type": "integer", "minimum": 0, "maximum": 130},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}


def test_regex_answer_fully_matches() -> None:
    pattern = r"(19|20)\d\d-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])"
    answer = default_lm().regex("Date of the first Moon landing (YYYY-MM-DD)?", pattern)
    assert re.fullmatch(pattern, answer)


def test_choice_answer_is_one_of_the_options() -> None:
    options = ["positive", "negative", "neutral"]
    answer = default_lm().choice("Sentiment of: 'The battery died after two days.'", options)
    assert answer in options


def test_json_schema_answer_is_parsed_and_valid() -> None:
    value = default_lm().json("Describe Ada Lovelace as JSON: name and age.", PERSON)
    jsonschema.validate(value, PERSON)
    assert_ajv_accepts(PERSON, [json.dumps(value)])


def test_json_mode_gives_a_parsed_value() -> None:
    prompt = 'Give a JSON object with the keys "city" and "country" for Paris.'
    value = default_lm().json(prompt, max_new_tokens=100)
    assert isinstance(value, dict)


def test_builtin_grammar_by_name() -> None:
    lark = pytest.importorskip("lark")
    text = default_lm().grammar(
        "Write a SQL query selecting the names of all users.", "sql_select", max_new_tokens=64
    )
    from structgen.grammar.lark_frontend import load_builtin

    lark.Lark(load_builtin("sql_select"), start="start", parser="earley").parse(text)


def test_a_constraint_cut_short_raises_instead_of_returning_partial_output() -> None:
    with pytest.raises(GenerationError, match="max_new_tokens"):
        default_lm().json("Describe Ada Lovelace as JSON.", PERSON, max_new_tokens=3)


def test_unknown_sampling_option_is_named() -> None:
    with pytest.raises(GenerationError, match="temprature"):
        default_lm().text("Hi", temprature=0.5)


def test_system_prompt_comes_first() -> None:
    messages = default_lm().messages("Hi", system="Be brief.")
    assert messages == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
    ]


def test_json_with_unique_items_on_the_default_model() -> None:
    # The prompt asks for repeats; the guard beside the grammar refuses them.
    import jsonschema

    schema = {
        "type": "object",
        "properties": {
            "colours": {
                "type": "array",
                "items": {"enum": ["red", "green", "blue"]},
                "uniqueItems": True,
                "minItems": 3,
            },
            "tags": {
                "type": "array",
                "items": {"type": "string"},
                "uniqueItems": True,
                "minItems": 2,
            },
        },
        "required": ["colours", "tags"],
        "additionalProperties": False,
    }
    prompt = "List the colours red, red, green and blue, and the tags 'a' and 'a'."
    out = default_lm().json(prompt, schema=schema, max_new_tokens=200)
    jsonschema.validate(out, schema)
    assert_ajv_accepts(schema, [json.dumps(out)])
