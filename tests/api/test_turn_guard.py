"""The turn guard of `tool_call_grammar`, on a synthetic byte-level vocabulary (fast, no model):
a call equal to an earlier one closes the turn, calls per turn are bounded, and an answer is
closed in time to end within the token budget."""

from __future__ import annotations

import json
import pickle
import random
from typing import Any

import numpy as np
import pytest

from structgen import Compiler, Matcher, StructgenError, Vocabulary
from structgen.api.tools import _ANSWER_RESERVE as RESERVE
from structgen.api.tools import (
    DEFAULT_MAX_CALLS_PER_TURN,
    Tool,
    ToolCall,
    parse_tool_turn,
    tool_call_grammar,
    turn_schema,
)
from structgen.api.tools import _call_key as call_key
from tests.conftest import load_vocab

MULTI = [b'"}', b"}}", b"}},", b'"}},{"', b"]}", b"}]}", b'"}}]}', b'{"', b'":"', b"Lyon", b"ab"]
TOKENS: list[bytes | None] = [bytes((b,)) for b in range(256)] + MULTI + [None]
EOS = len(TOKENS) - 1
VOCAB = Vocabulary.from_tokens(TOKENS, eos_token_ids=[EOS])
TOKEN_ID = {t: i for i, t in enumerate(TOKENS) if t is not None}

WEATHER = Tool(
    "weather",
    "Current weather in a city.",
    {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
)
CLOCK = Tool(
    "clock", "The time.", {"type": "object", "properties": {}, "additionalProperties": False}
)
TOOLS = [WEATHER, CLOCK]


def grammar(choice: str = "auto", **kw: Any) -> Any:
    return tool_call_grammar(Compiler(VOCAB), TOOLS, choice, **kw)


def call(name: str, **arguments: Any) -> str:
    return json.dumps({"name": name, "arguments": arguments}, separators=(",", ":"))


def matcher_after(g: Any, text: str) -> Matcher:
    m = Matcher(g)
    assert m.accept_bytes(text.encode()), text
    return m


def accepts(g: Any, text: str) -> bool:
    m = Matcher(g)
    return m.accept_bytes(text.encode()) and m.can_terminate()


LYON = call("weather", city="Lyon")
PARIS = call("weather", city="Paris")


class TestRepeatedCalls:
    def test_a_repeat_can_only_close_the_turn(self) -> None:
        m = matcher_after(grammar(), f'{{"tool_calls":[{LYON},{LYON}')
        assert not m.is_allowed(TOKEN_ID[b","])  # no third call after the repeat
        assert m.is_allowed(TOKEN_ID[b"]"]) and m.is_allowed(TOKEN_ID[b"]}"])
        assert m.forced_bytes() == b"]}"  # jump forward closes the turn
        assert m.accept_bytes(b"]}") and m.can_terminate()

    def test_distinct_calls_go_on(self) -> None:
        g = grammar()
        assert accepts(g, f'{{"tool_calls":[{LYON},{PARIS},{call("clock")}]}}')
        m = matcher_after(g, f'{{"tool_calls":[{LYON},{PARIS}')
        assert m.is_allowed(TOKEN_ID[b","])

    def test_a_token_that_ends_the_repeat_and_goes_on_is_refused(self) -> None:
        m = matcher_after(g := grammar(), f'{{"tool_calls":[{LYON},{LYON[:-2]}')
        assert m.is_allowed(TOKEN_ID[b"}}"])  # ends the repeated call
        assert not m.is_allowed(TOKEN_ID[b"}},"])  # ... and starts another call: refused
        assert not m.accept_bytes(b"}},{")
        last = matcher_after(g, f'{{"tool_calls":[{LYON},{LYON[:-1]}')
        assert last.is_allowed(TOKEN_ID[b"}]}"])  # ends the repeated call and the turn
        # the masks say what the matchers say, token by token
        for matcher in (m, last):
            mask = matcher.allowed_mask()
            for token in range(VOCAB.size):
                word, bit = divmod(token, 32)
                assert bool((int(mask[word]) >> bit) & 1) == matcher.is_allowed(token), token
        # the same text with another city is a new call: `}},` is fine there
        other = matcher_after(g, f'{{"tool_calls":[{LYON},{PARIS[:-2]}')
        assert other.is_allowed(TOKEN_ID[b"}},"])

    def test_a_call_without_arguments_repeats_too(self) -> None:
        m = matcher_after(grammar(), f'{{"tool_calls":[{call("clock")},{call("clock")}')
        assert not m.is_allowed(TOKEN_ID[b","])

    def test_calls_made_in_earlier_turns(self) -> None:
        earlier = [ToolCall("call_1_0", "weather", {"city": "Lyon"})]
        g = grammar(earlier_calls=earlier)
        m = matcher_after(g, f'{{"tool_calls":[{LYON}')
        assert not m.is_allowed(TOKEN_ID[b","])  # the first call already repeats
        assert accepts(g, f'{{"tool_calls":[{PARIS},{call("clock")}]}}')
        # (name, arguments) pairs work too
        pairs = grammar(earlier_calls=[("clock", {})])
        assert not matcher_after(pairs, f'{{"tool_calls":[{call("clock")}').is_allowed(
            TOKEN_ID[b","]
        )

    def test_allow_repeated_calls(self) -> None:
        g = grammar(allow_repeated_calls=True)
        assert accepts(g, f'{{"tool_calls":[{LYON},{LYON},{LYON}]}}')
        assert g == tool_call_grammar(Compiler(VOCAB), TOOLS)._inner  # type: ignore[attr-defined]

    def test_guarded_grammars_pickle_and_are_cached(self) -> None:
        g = grammar(earlier_calls=[("clock", {})], max_new_tokens=50)
        assert grammar(earlier_calls=[("clock", {})], max_new_tokens=50) is g
        back = pickle.loads(pickle.dumps(g))
        assert back.fingerprint == g.fingerprint
        assert not matcher_after(back, f'{{"tool_calls":[{call("clock")}').is_allowed(
            TOKEN_ID[b","]
        )

    def test_answer_only_turns_have_no_guard_without_a_budget(self) -> None:
        g = grammar("none")
        assert g == Compiler(VOCAB).json_schema(turn_schema(TOOLS, "none"), options=g_options())

    def test_equal_arguments_are_json_equal(self) -> None:
        assert call_key("f", {"a": 1, "b": [1, {"c": None}]}) == call_key(
            "f", {"b": [1.0, {"c": None}], "a": 1.0}
        )
        assert call_key("f", {"a": True}) != call_key("f", {"a": 1})
        assert call_key("f", {"a": "1"}) != call_key("f", {"a": 1})
        assert call_key("f", {}) != call_key("g", {})
        assert call_key("f", {"a": [1, 2]}) != call_key("f", {"a": [2, 1]})


def g_options() -> Any:
    from structgen.api.tools import TURN_SCHEMA_OPTIONS

    return TURN_SCHEMA_OPTIONS


class TestCallsPerTurn:
    def test_default_bound(self) -> None:
        calls = turn_schema(TOOLS)["anyOf"][0]["properties"]["tool_calls"]
        assert calls["maxItems"] == DEFAULT_MAX_CALLS_PER_TURN
        assert (
            "maxItems"
            not in (
                turn_schema(TOOLS, max_calls_per_turn=None)["anyOf"][0]["properties"]["tool_calls"]
            )
        )

    def test_the_smaller_bound_wins(self) -> None:
        def limit(**kw: Any) -> Any:
            return turn_schema(TOOLS, **kw)["anyOf"][0]["properties"]["tool_calls"]["maxItems"]

        assert limit(max_calls_per_turn=3) == 3
        assert limit(max_calls_per_turn=3, parallel_tool_calls=2) == 2
        assert limit(max_calls_per_turn=2, parallel_tool_calls=5) == 2
        assert limit(max_calls_per_turn=3, parallel_tool_calls=False) == 1

    def test_enforced_by_the_grammar(self) -> None:
        g = grammar(max_calls_per_turn=2)
        assert accepts(g, f'{{"tool_calls":[{LYON},{PARIS}]}}')
        m = matcher_after(g, f'{{"tool_calls":[{LYON},{PARIS}')
        assert not m.is_allowed(TOKEN_ID[b","])

    @pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
    def test_bad_values(self, bad: Any) -> None:
        with pytest.raises(StructgenError, match="max_calls_per_turn"):
            turn_schema(TOOLS, max_calls_per_turn=bad)


class TestParse:
    def test_repeats_are_dropped_and_reported(self) -> None:
        text = f'{{"tool_calls":[{LYON},{PARIS},{LYON}]}}'
        turn = parse_tool_turn(text, id_prefix="c_")
        assert [(c.id, c.arguments["city"]) for c in turn.calls] == [
            ("c_0", "Lyon"),
            ("c_1", "Paris"),
        ]
        assert [(c.id, c.arguments["city"]) for c in turn.repeated] == [("c_repeat_0", "Lyon")]
        kept = parse_tool_turn(text, drop_repeats=False)
        assert len(kept.calls) == 3 and kept.repeated == ()


# ---------------------------------------------------------------------------------- budgets


def walk(g: Any, seed: int, budget: int, prefix: bytes = b"") -> tuple[bytes, int | None]:
    """A random walk over the grammar's masks, as a sampler would: the text, and the tokens
    it took with EOS (None: not finished within `budget`). Never a dead end; every token
    the mask allows, the matcher accepts. `prefix` is fed first, one byte a token."""
    rng = random.Random(seed)
    m = Matcher(g)
    data = bytearray(prefix)
    for byte in prefix:
        assert m.accept_token(byte)
    for count in range(len(prefix) + 1, budget + 1):
        mask = m.allowed_mask()
        allowed = [t for t in range(VOCAB.size) if (int(mask[t >> 5]) >> (t & 31)) & 1]
        assert allowed, f"dead end after {bytes(data)!r}"
        # favour text over the end: a rambling answer is what the budget is for
        text = [t for t in allowed if t != EOS and TOKENS[t] not in (b'"', b'"}')]
        token = rng.choice(text) if text and rng.random() < 0.97 else rng.choice(allowed)
        assert m.accept_token(token), (bytes(data), TOKENS[token])
        if token == EOS:
            return bytes(data), count
        data += TOKENS[token] or b""
    return bytes(data), None


class TestAnswerBudget:
    @pytest.mark.parametrize("budget", [21, 24, 33, 64])
    def test_random_answers_end_within_the_budget(self, budget: int) -> None:
        # the key as the generation layout spells it (one spelling), then random text: it
        # ends in budget once the budget leaves the reserve for the answer (11 + 9 + 1 here)
        g = grammar("none", max_new_tokens=budget)
        for seed in range(12):
            text, tokens = walk(g, seed, budget, b'{"answer":"')
            assert tokens is not None and tokens <= budget, text
            assert set(json.loads(text)) == {"answer"}  # complete, valid JSON

    def test_random_turns_never_dead_end(self) -> None:
        # calls cannot be closed early (their arguments are required): only no dead ends here,
        # and each finished turn parses with its repeats dropped
        g = grammar(max_new_tokens=400, max_calls_per_turn=3, earlier_calls=[("clock", {})])
        for seed in range(8):
            text, tokens = walk(g, seed, 400)
            if tokens is not None:
                turn = parse_tool_turn(text.decode())
                keys = [call_key(c.name, c.arguments) for c in turn.calls]
                assert len(set(keys)) == len(keys) and len(turn.repeated) <= 1

    def test_the_answer_closes_at_the_reserve(self) -> None:
        budget = 30
        m = Matcher(grammar("none", max_new_tokens=budget))
        for token in [TOKEN_ID[b'{"'], *[TOKEN_ID[bytes((c,))] for c in b'answer":"']]:
            assert m.accept_token(token)
        used = 10
        while used < budget - RESERVE:
            assert m.is_allowed(TOKEN_ID[b"a"]) and m.accept_token(TOKEN_ID[b"a"])
            used += 1
        assert not m.is_allowed(TOKEN_ID[b"a"])  # the reserve is left: time to close
        assert not m.is_allowed(TOKEN_ID[b"\\"])
        assert m.is_allowed(TOKEN_ID[b'"']) and m.is_allowed(TOKEN_ID[b'"}'])
        assert m.accept_token(TOKEN_ID[b'"}']) and m.can_terminate()

    def test_inside_an_escape_or_a_character_it_finishes_that_first(self) -> None:
        budget = 30
        m = Matcher(grammar("none", max_new_tokens=budget))
        assert m.accept_bytes(b'{"answer":"')  # one advance: counted as one token
        for _ in range(budget - RESERVE - 2):
            assert m.accept_token(TOKEN_ID[b"a"])
        assert m.accept_token(TOKEN_ID[b"\\"])  # the reserve is left, inside an escape
        assert m.is_allowed(TOKEN_ID[b'"'])  # (an escaped quote)
        assert not m.is_allowed(TOKEN_ID[b'"}'])  # ... but no text after the escape
        for digit in b"u000":  # (generate mode escapes only control characters: \u0001)
            assert m.accept_token(TOKEN_ID[bytes((digit,))])
        assert not m.is_allowed(TOKEN_ID[b"ab"])  # nothing new inside the answer
        assert m.accept_token(TOKEN_ID[b"1"])  # finishes the escape
        assert not m.is_allowed(TOKEN_ID[b"a"]) and m.is_allowed(TOKEN_ID[b'"}'])
        assert m.accept_token(TOKEN_ID[b'"}']) and m.can_terminate()
        # a UTF-8 character: its continuation bytes, then the quote
        m = Matcher(grammar("none", max_new_tokens=budget))
        assert m.accept_bytes(b'{"answer":"')
        for _ in range(budget - RESERVE - 2):
            assert m.accept_token(TOKEN_ID[b"a"])
        assert m.accept_token(0xF0)  # the first byte of a 4-byte character
        assert not m.is_allowed(TOKEN_ID[b'"'])
        for byte in (0x9F, 0x98):
            assert m.accept_token(byte)
        assert not m.is_allowed(TOKEN_ID[b'"'])
        assert m.accept_token(0x80) and m.is_allowed(TOKEN_ID[b'"'])

    def test_without_a_budget_nothing_is_closed(self) -> None:
        m = matcher_after(grammar("none"), '{"answer":"' + "a" * 200)
        assert m.is_allowed(TOKEN_ID[b"a"])


@pytest.mark.parametrize("name", ["gpt2", "mistral", "llama3_1"])
def test_token_groups_match_their_definitions_token_by_token(name: str) -> None:
    """The guard's per-vocabulary token groups (computed over the concatenated bytes) equal
    their definitions applied to each token's bytes."""
    from structgen.api.tools.guard import _CLOSING, _TokenGroups
    from structgen.masks._bitmask import pack_bool_mask

    vocab = load_vocab(name)
    groups = _TokenGroups(vocab)
    texts = [vocab.token_bytes(t) for t in range(vocab.size)]
    braces = np.array([0x7D in d for d in texts], dtype=bool)
    closing = np.array([bool(d) and all(b in _CLOSING for b in d) for d in texts], dtype=bool)
    quote = np.array(
        [bool(d) and d[0] == 0x22 and all(b in _CLOSING for b in d[1:]) for d in texts],
        dtype=bool,
    )
    assert np.array_equal(groups.braces, pack_bool_mask(braces))
    assert np.array_equal(groups.closing, pack_bool_mask(closing))
    assert np.array_equal(groups.quote, pack_bool_mask(quote))
