"""Budget-aware closing: completion plans, `Matcher.fits`, and walks that must end complete.

Oracles: brute force over a small vocabulary (the fewest tokens that complete, by breadth-first
search over token sequences), Python's `re`, `jsonschema` and `lark` for the finished texts, and
real tokenizers for the plans.
"""

from __future__ import annotations

import itertools
import json
import random
import re
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from structgen import Compiler, Matcher, SchemaOptions, Vocabulary
from structgen.closing import fewest_tokens
from tests.conftest import load_vocab

PIECES = [
    *(bytes([b]) for b in b'abcefuxyz0123456789-.,:"{}[] \\\n'),
    *(b"".join(p) for p in itertools.product([b"a", b"b", b"0", b"1"], repeat=2)),
    b'{"',
    b'":',
    b'"}',
    b'",',
    b'"]',
    b"]}",
    b"[]",
    b"{}",
    b'""',
    b"true",
    b"null",
    b"false",
    b"abc",
    b"2024",
    b"-0",
    b'": "',
    b'", "',
]
SMALL = Vocabulary.from_tokens([None, *PIECES], eos_token_ids=[0])

REGEXES = [
    r"\d{4}-\d{2}-\d{2}",
    r"[a-c]{3,6}",
    r"(ab|c)+x",
    r"-?(0|[1-9][0-9]*)(\.[0-9]+)?",
    r"(a|b|c){2}z{1,3}",
    r"x*y",
]

SCHEMAS: list[dict[str, Any]] = [
    {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
    {
        "type": "object",
        "properties": {
            "a": {"type": "integer"},
            "b": {"type": "array", "items": {"type": "integer"}},
        },
        "required": ["a", "b"],
        "additionalProperties": False,
    },
    {"type": "array", "items": {"type": "string", "minLength": 2}, "minItems": 2},
    {"type": "array", "items": {"enum": ["a", "b", "c"]}, "minItems": 2, "uniqueItems": True},
    {"type": "array", "items": {"type": "integer"}, "minItems": 3, "uniqueItems": True},
    {
        "type": "object",
        "properties": {
            "x": {"type": "object", "properties": {"y": {"type": "boolean"}}, "required": ["y"]}
        },
        "required": ["x"],
    },
]

GRAMMARS = {
    "sum": '?start: sum\n?sum: sum "+" atom | atom\n?atom: NUM | "(" sum ")"\nNUM: /[0-9]+/\n',
    "words": 'start: WORD (" " WORD)*\nWORD: /[a-c]+/\n',
}


def _compile(kind: str, source: Any, mode: str = "accept") -> Any:
    compiler = Compiler(SMALL)
    if kind == "regex":
        return compiler.regex(source)
    if kind == "schema":
        return compiler.json_schema(source, options=SchemaOptions(mode=mode))
    return compiler.grammar(source)


def _fewest_by_search(matcher: Matcher, depth: int) -> int | None:
    """The fewest tokens that complete from the matcher's state (breadth first, up to depth)."""
    frontier = [matcher]
    seen: set[Any] = set()
    for level in range(depth + 1):
        nxt: list[Matcher] = []
        for m in frontier:
            if m.can_terminate():
                return level
        for m in frontier:
            for token in range(1, SMALL.size):
                if not m.is_allowed(token):
                    continue
                child = m.copy()
                child.accept_token(token)
                key = child._state
                try:
                    if key in seen:
                        continue
                    seen.add(key)
                except TypeError:
                    pass
                nxt.append(child)
        frontier = nxt
        if len(frontier) > 1500:  # states that do not compare equal (uniqueItems): give up
            return -1
    return None


def _check_text(kind: str, source: Any, text: str) -> None:
    if kind == "regex":
        assert re.fullmatch(source, text), (source, text)
    elif kind == "schema":
        jsonschema.validate(json.loads(text), source)
    else:
        lark = pytest.importorskip("lark")
        lark.Lark(source, start="start", parser="earley").parse(text)


def test_fewest_tokens_spells_with_the_fewest_tokens() -> None:
    for text in [b"2024-01-01", b'{"ab": "abc"}', b"aabb01", b'"]}']:
        plan = fewest_tokens(SMALL, text)
        assert plan is not None
        assert SMALL.decode(plan) == text
        best = _fewest_spelling_by_search(text)
        assert len(plan) == best
    assert fewest_tokens(SMALL, "é".encode()) is None  # no token spells it


def _fewest_spelling_by_search(text: bytes) -> int:
    best = {0: 0}
    for i in range(len(text)):
        if i not in best:
            continue
        for token in range(1, SMALL.size):
            piece = SMALL.token_bytes(token)
            if piece and text.startswith(piece, i):
                j = i + len(piece)
                best[j] = min(best.get(j, 1 << 30), best[i] + 1)
    return best[len(text)]


CASES = (
    [("regex", r) for r in REGEXES]
    + [("schema", s) for s in SCHEMAS]
    + [("grammar", g) for g in GRAMMARS.values()]
)


@pytest.mark.parametrize(("kind", "source"), CASES, ids=lambda v: str(v)[:30])
def test_the_plan_completes_and_is_close_to_the_fewest(kind: str, source: Any) -> None:
    if kind == "grammar":
        pytest.importorskip("lark")
    grammar = _compile(kind, source)
    matcher = Matcher(grammar)
    rng = random.Random(7)
    for _ in range(12):  # the start and states along a random walk
        plan = matcher.completion_tokens()
        assert plan is not None
        probe = matcher.copy()
        assert probe.accept_tokens(plan) == len(plan)
        assert probe.can_terminate()
        fewest = _fewest_by_search(matcher, len(plan))
        # A shortest text spelled in the fewest tokens: rarely more than the fewest tokens
        assert fewest is not None
        assert fewest == -1 or fewest <= len(plan) <= fewest + 2
        allowed = [t for t in range(1, SMALL.size) if matcher.is_allowed(t)]
        if not allowed:
            break
        matcher.accept_token(rng.choice(allowed))


@settings(max_examples=30, deadline=None)
@given(case=st.sampled_from(CASES), seed=st.integers(0, 10_000), slack=st.integers(0, 6))
def test_walks_under_a_budget_end_complete(case: tuple[str, Any], seed: int, slack: int) -> None:
    """From the shortest completion up: every walk that takes only tokens that fit ends
    complete within its budget, and some token always fits (never a dead end)."""
    kind, source = case
    if kind == "grammar":
        pytest.importorskip("lark")
    grammar = _compile(kind, source)
    matcher = Matcher(grammar)
    need = matcher.tokens_to_finish()
    assert need is not None
    budget = need + slack
    rng = random.Random(seed)
    taken: list[int] = []
    for used in range(budget):
        left = budget - used
        choices = [t for t in range(SMALL.size) if matcher.fits(t, left)]
        if not choices:
            assert matcher.can_terminate()
            break
        token = rng.choice(choices)
        assert matcher.accept_token(token)
        if matcher.is_terminated():
            break
        taken.append(token)
    assert matcher.can_terminate()
    _check_text(kind, source, SMALL.decode(taken).decode())


@pytest.mark.parametrize("name", ["llama3_1", "qwen2_5", "mistral"])
def test_plans_on_real_tokenizers_spell_a_valid_completion(name: str) -> None:
    vocab = load_vocab(name)
    compiler = Compiler(vocab)
    schema = SCHEMAS[1]
    for mode in ("accept", "generate"):
        grammar = compiler.json_schema(schema, options=SchemaOptions(mode=mode))
        matcher = Matcher(grammar)
        assert matcher.accept_bytes(b'{"a": 12, "b": [3')
        plan = matcher.completion_tokens()
        assert plan is not None
        text = b'{"a": 12, "b": [3' + vocab.decode(plan)
        jsonschema.validate(json.loads(text), schema)
        assert len(plan) <= 3  # "]}" and at most a layout token
