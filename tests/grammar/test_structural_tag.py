"""`Compiler.structural_tag`: xgrammar's structural-tag format, as vLLM and SGLang forward it.

The examples are the ones in vLLM's structured-output docs and xgrammar's format descriptions;
each text is accepted or refused as documented. Random walks under the masks of the documented
tool-call example always parse back (a reference parser written from the format's description)
into calls of known functions with valid arguments, and their free text never holds a trigger.
"""

from __future__ import annotations

import json
import random
import re
from typing import Any

import jsonschema
import numpy as np
import pytest

from structgen import Compiler, Matcher, Vocabulary
from structgen.grammar.structural_tag import StructuralTagError
from structgen.masks import unpack_bitmask
from tests.conftest import load_vocab

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
    "additionalProperties": False,
}
# vLLM's structured-outputs docs: the legacy form with `structures` and `triggers`
VLLM_EXAMPLE = {
    "type": "structural_tag",
    "structures": [{"begin": "<function=get_weather>", "schema": WEATHER, "end": "</function>"}],
    "triggers": ["<function="],
}


@pytest.fixture(scope="module")
def llama() -> Vocabulary:
    return load_vocab("llama3_1")


@pytest.fixture(scope="module")
def qwen() -> Vocabulary:
    return load_vocab("qwen2_5")


def accepts(vocab: Vocabulary, spec: Any, text: str) -> bool:
    m = Matcher(Compiler(vocab).structural_tag(spec))
    return m.accept_bytes(text.encode()) and m.can_terminate()


def fmt(format_: dict[str, Any]) -> dict[str, Any]:
    return {"type": "structural_tag", "format": format_}


CALL = '<function=get_weather>{"city": "Lyon"}</function>'


class TestVllmExample:
    @pytest.mark.parametrize(
        "text",
        [
            "",
            "The weather?",
            CALL,
            f"Let me check. {CALL}",
            f"{CALL} and {CALL}, done",
            "a <functio",
            "<function",
        ],
    )
    def test_accepted(self, llama: Vocabulary, text: str) -> None:
        assert accepts(llama, VLLM_EXAMPLE, text)

    @pytest.mark.parametrize(
        "text",
        [
            '<function=get_time>{"city": "Lyon"}</function>',  # no such tag
            '<function=get_weather>{"city": 3}</function>',  # arguments off the schema
            '<function=get_weather>{"city": "Lyon"}',  # never closed
            "text <function=",  # a half-open call
            '<function=get_weather>{"town": "Lyon"}</function>',
        ],
    )
    def test_refused(self, llama: Vocabulary, text: str) -> None:
        assert not accepts(llama, VLLM_EXAMPLE, text)

    def test_no_structures_is_free_text_without_triggers(self, llama: Vocabulary) -> None:
        spec = {"type": "structural_tag", "structures": [], "triggers": ["<f="]}
        assert accepts(llama, spec, "anything") and not accepts(llama, spec, "a <f= b")

    def test_the_new_form_is_the_same_language(self, llama: Vocabulary) -> None:
        new = fmt(
            {
                "type": "triggered_tags",
                "triggers": ["<function="],
                "tags": [
                    {
                        "type": "tag",
                        "begin": "<function=get_weather>",
                        "content": {"type": "json_schema", "json_schema": WEATHER},
                        "end": "</function>",
                    }
                ],
            }
        )
        for text in ["", CALL, f"x {CALL} y", "x <function=", '<function=f>{"city": ""}']:
            assert accepts(llama, new, text) == accepts(llama, VLLM_EXAMPLE, text), text

    def test_random_walks_parse_into_valid_calls(self, llama: Vocabulary) -> None:
        grammar = Compiler(llama).structural_tag(VLLM_EXAMPLE)
        rng = random.Random(1)
        for _ in range(12):
            m = Matcher(grammar)
            out = b""
            steps = 0
            while steps < 80:
                ids = np.flatnonzero(unpack_bitmask(m.allowed_mask(), llama.size))
                eos = set(llama.eos_token_ids)
                text_ids = [int(t) for t in ids if int(t) not in eos]
                if m.can_terminate() and (steps > 30 or rng.random() < 0.05):
                    break
                # lean towards the trigger so that walks do enter calls
                if rng.random() < 0.3 and m.accept_bytes(b"<function="):
                    out += b"<function="
                elif steps > 50:
                    plan = m.completion_tokens() or []
                    if not plan:
                        break
                    assert m.accept_token(plan[0])
                    out += llama.token_bytes(plan[0])
                else:
                    token = rng.choice(text_ids)
                    assert m.accept_token(token)
                    out += llama.token_bytes(token)
                steps += 1
            while not m.can_terminate():
                plan = m.completion_tokens()
                assert plan, out
                assert m.accept_token(plan[0])
                out += llama.token_bytes(plan[0])
            for call in parse_calls(out.decode("utf-8")):
                jsonschema.validate(call, WEATHER)


def parse_calls(text: str) -> list[Any]:
    """The reference reading: free text holds no trigger; each trigger opens a known tag whose
    JSON arguments end at its end string."""
    calls = []
    pos = 0
    while True:
        at = text.find("<function=", pos)
        if at < 0:
            return calls
        begin = "<function=get_weather>"
        assert text.startswith(begin, at), text[at:]
        end = text.index("</function>", at)
        calls.append(json.loads(text[at + len(begin) : end]))
        pos = end + len("</function>")


class TestFormats:
    def test_const_string_and_sequence(self, llama: Vocabulary) -> None:
        spec = fmt(
            {
                "type": "sequence",
                "elements": [
                    {"type": "const_string", "value": "Answer: "},
                    {"type": "regex", "pattern": r"\d{2}"},
                    {"type": "const_string", "value": "."},
                ],
            }
        )
        assert accepts(llama, spec, "Answer: 42.")
        assert not accepts(llama, spec, "Answer: 4.")
        assert not accepts(llama, spec, "Answer: ٤٢.")  # \d is ASCII when generating

    def test_or_optional_star_plus_repeat(self, llama: Vocabulary) -> None:
        a = {"type": "const_string", "value": "a"}
        b = {"type": "const_string", "value": "b"}
        either = fmt({"type": "or", "elements": [a, b]})
        assert accepts(llama, either, "a") and accepts(llama, either, "b")
        assert not accepts(llama, either, "ab")
        star = fmt({"type": "star", "content": a})
        assert accepts(llama, star, "") and accepts(llama, star, "aaa")
        plus = fmt({"type": "plus", "content": a})
        assert not accepts(llama, plus, "") and accepts(llama, plus, "aa")
        opt = fmt({"type": "sequence", "elements": [{"type": "optional", "content": a}, b]})
        assert accepts(llama, opt, "b") and accepts(llama, opt, "ab")
        rep = fmt({"type": "repeat", "min": 2, "max": 3, "content": a})
        assert [accepts(llama, rep, "a" * n) for n in range(5)] == [False, False, True, True, False]
        unbounded = fmt({"type": "repeat", "min": 1, "max": -1, "content": a})
        assert accepts(llama, unbounded, "a" * 7) and not accepts(llama, unbounded, "")

    def test_any_text_inside_a_tag_ends_at_the_first_end(self, llama: Vocabulary) -> None:
        spec = fmt(
            {"type": "tag", "begin": "<think>", "content": {"type": "any_text"}, "end": "</think>"}
        )
        assert accepts(llama, spec, "<think>hmm, 2 < 3</think>")
        assert accepts(llama, spec, "<think></think>")
        assert not accepts(llama, spec, "<think>a</think>b</think>")
        assert not accepts(llama, spec, "<think>a")

    def test_any_text_excludes_and_max_chars(self, llama: Vocabulary) -> None:
        spec = fmt({"type": "any_text", "excludes": ["bad"], "max_chars": 5})
        assert accepts(llama, spec, "good") and accepts(llama, spec, "")
        assert not accepts(llama, spec, "a bad") and not accepts(llama, spec, "toolong")
        tag = fmt(
            {
                "type": "tag",
                "begin": "[",
                "content": {"type": "any_text", "excludes": ["x"], "max_chars": 3},
                "end": "]",
            }
        )
        assert accepts(llama, tag, "[abc]") and not accepts(llama, tag, "[abcd]")
        assert not accepts(llama, tag, "[axc]")

    def test_tag_with_several_ends(self, llama: Vocabulary) -> None:
        spec = fmt(
            {
                "type": "tag",
                "begin": "<r>",
                "content": {"type": "regex", "pattern": "[a-z]+"},
                "end": ["</r>", "</answer>"],
            }
        )
        assert accepts(llama, spec, "<r>ok</r>") and accepts(llama, spec, "<r>ok</answer>")
        assert not accepts(llama, spec, "<r>ok</x>")

    def test_grammar_contents(self, llama: Vocabulary) -> None:
        ebnf = fmt({"type": "grammar", "grammar": 'root ::= "yes" | "no"'})
        assert accepts(llama, ebnf, "yes") and not accepts(llama, ebnf, "maybe")
        lark = fmt(
            {
                "type": "grammar",
                "syntax": "lark",
                "grammar": 'start: NAME ("," NAME)*\nNAME: /[a-z]+/\n%ignore " "',
            }
        )
        assert accepts(llama, lark, "ab, cd ,e") and not accepts(llama, lark, "ab,,")

    def test_triggered_tags_at_least_one_and_stop_after_first(self, llama: Vocabulary) -> None:
        tag = {
            "type": "tag",
            "begin": "<f=a>",
            "content": {"type": "json_schema", "json_schema": {"type": "integer"}},
            "end": "</f>",
        }
        base = {"type": "triggered_tags", "triggers": ["<f="], "tags": [tag]}
        some = fmt({**base, "at_least_one": True})
        assert not accepts(llama, some, "just text")
        assert accepts(llama, some, "x <f=a>1</f> y <f=a>2</f>")
        first = fmt({**base, "stop_after_first": True})
        assert accepts(llama, first, "x <f=a>1</f>") and accepts(llama, first, "only text")
        assert not accepts(llama, first, "x <f=a>1</f> more")
        excluded = fmt({**base, "excludes": ["secret"]})
        assert not accepts(llama, excluded, "a secret <f=a>1</f>")
        assert not accepts(llama, excluded, "<f=a>1</f> secret")

    def test_tags_with_separator(self, llama: Vocabulary) -> None:
        tag = {
            "type": "tag",
            "begin": "<f>",
            "content": {"type": "json_schema", "json_schema": {"type": "integer"}},
            "end": "</f>",
        }
        spec = fmt({"type": "tags_with_separator", "tags": [tag], "separator": ","})
        assert accepts(llama, spec, "") and accepts(llama, spec, "<f>1</f>,<f>2</f>")
        assert not accepts(llama, spec, "<f>1</f> <f>2</f>") and not accepts(llama, spec, "x")

    def test_token_formats_match_the_token(self, qwen: Vocabulary) -> None:
        call_id = qwen.token_id("<tool_call>")
        end_id = qwen.token_id("</tool_call>")
        spec = fmt(
            {
                "type": "token_triggered_tags",
                "trigger_tokens": ["<tool_call>"],
                "tags": [
                    {
                        "type": "tag",
                        "begin": {"type": "token", "token": "<tool_call>"},
                        "content": {"type": "json_schema", "json_schema": WEATHER},
                        "end": {"type": "token", "token": "</tool_call>"},
                    }
                ],
            }
        )
        grammar = Compiler(qwen).structural_tag(spec)
        assert grammar.token_ids == {call_id, end_id}
        m = Matcher(grammar)
        assert m.accept_bytes(b"Checking. ") and not m.copy().accept_bytes(b"<tool_call>")
        assert m.accept_token(call_id)
        assert m.accept_bytes(b'{"city": "Lyon"}') and m.accept_token(end_id)
        assert m.can_terminate()


class TestErrors:
    @pytest.mark.parametrize(
        ("spec", "message"),
        [
            ("{not json", "not valid JSON"),
            ([], "JSON object"),
            ({"type": "structural_tag"}, "needs a 'format'"),
            (fmt({"type": "dispatch", "rules": []}), "/format: the 'dispatch' format"),
            (fmt({"type": "nope"}), "/format/type: unknown format type"),
            (fmt({"type": "sequence", "elements": [{"type": "regex"}]}), "/format/elements/0"),
            (
                fmt({"type": "triggered_tags", "triggers": ["<a"], "tags": [{"begin": "<b>"}]}),
                "must start with exactly one trigger",
            ),
            (fmt({"type": "token", "token": "<nope>"}), "no special or added token"),
            (
                fmt({"type": "json_schema", "json_schema": {"type": "array", "uniqueItems": True}}),
                "/format/json_schema",
            ),
        ],
    )
    def test_clear_errors(self, llama: Vocabulary, spec: Any, message: str) -> None:
        with pytest.raises(StructuralTagError, match=re.escape(message)):
            Compiler(llama).structural_tag(spec)
