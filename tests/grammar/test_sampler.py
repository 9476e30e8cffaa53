"""`sample_sentences` / `random_string`: random sentences of an IR grammar.

Sentences of every shipped grammar are accepted by Lark's own Earley parser (the reference),
terminal strings full-match their regexes, derivations stay bounded, and runs are reproducible.
"""

from __future__ import annotations

import functools
import json
import random
import re

import lark
import pytest

from structgen.automata import parse_regex
from structgen.errors import GrammarError
from structgen.grammar import sampler
from structgen.grammar.ir import Grammar, Rule, TerminalDef
from structgen.grammar.lark_frontend import builtin_names, lark_to_ir, load_builtin
from structgen.grammar.sampler import random_string, sample_sentences

# SQL sentences are long and Lark's Earley is slow on them: fewer terminals keep this quick.
MAX_TERMINALS = {"sql_select": 60}


@functools.cache
def shipped(name: str) -> Grammar:
    return lark_to_ir(load_builtin(name))


def samples(name: str, count: int = 25, seed: int = 0) -> list[str]:
    return sample_sentences(
        shipped(name), count=count, seed=seed, max_terminals=MAX_TERMINALS.get(name, 200)
    )


@pytest.mark.parametrize("name", builtin_names())
def test_samples_of_shipped_grammars_are_accepted_by_lark(name: str) -> None:
    parser = lark.Lark(load_builtin(name), parser="earley")
    sentences = samples(name)
    assert len(set(sentences)) > len(sentences) // 2  # not one sentence over and over
    for text in sentences:
        parser.parse(text)  # raises on rejection


def test_json_samples_are_json() -> None:
    for text in samples("json", count=40, seed=1):
        json.loads(text)
    assert any(text.lstrip().startswith("{") for text in samples("json", count=40, seed=1))


def test_tool_call_samples_are_tool_calls() -> None:
    for text in samples("tool_call", count=20):
        call = json.loads(text)
        assert list(call) == ["name", "arguments"] and isinstance(call["arguments"], dict)


def test_reproducible() -> None:
    assert samples("arithmetic", seed=5) == samples("arithmetic", seed=5)
    assert samples("arithmetic", seed=5) != samples("arithmetic", seed=6)


def test_ignore_rate() -> None:
    grammar = lark_to_ir('start: "a" ("," "a")*\n%ignore " "\n')
    never = sample_sentences(grammar, count=30, seed=0, ignore_rate=0.0)
    always = sample_sentences(grammar, count=30, seed=0, ignore_rate=1.0)
    assert all(" " not in text for text in never)
    assert all(text.startswith(" ") and text.endswith(" ") for text in always)
    assert all(" ," in text and ", " in text for text in always if "," in text)


def test_depth_is_bounded_on_recursive_grammars() -> None:
    grammar = lark_to_ir('start: "(" start ")" | "(" start ")" start | "x"\n')
    for max_depth in (1, 4, 12):
        for text in sample_sentences(grammar, count=20, seed=max_depth, max_depth=max_depth):
            depth = max(text[:i].count("(") - text[:i].count(")") for i in range(len(text) + 1))
            assert depth <= max_depth
    deep = sample_sentences(grammar, count=20, seed=0, max_depth=30, max_terminals=10_000)
    assert max(len(text) for text in deep) > 20


def test_budget_caps_sentence_size() -> None:
    grammar = lark_to_ir('start: item+\nitem: "a" | "[" item+ "]"\n')
    texts = sample_sentences(grammar, count=20, seed=0, max_depth=50, max_terminals=30)
    assert all(len(text) < 30 * 50 for text in texts)


def test_grammar_without_finite_sentences_is_rejected() -> None:
    with pytest.raises(GrammarError, match="no finite sentence"):
        sample_sentences(lark_to_ir('start: "(" start ")"\n'), count=1, seed=0)


def test_undefined_symbols_are_rejected() -> None:
    grammar = Grammar(
        "start", (Rule("start", ("A", "missing")),), (TerminalDef("A", parse_regex("a")),)
    )
    with pytest.raises(GrammarError, match="missing"):
        sample_sentences(grammar, count=1, seed=0)


def test_empty_rules_and_nullable_start() -> None:
    grammar = lark_to_ir('start: "a"*\n')
    texts = sample_sentences(grammar, count=30, seed=0)
    assert "" in texts and all(set(text) <= {"a"} for text in texts)


PATTERNS = [
    (r"[a-z]{2,5}@[a-z]+\.(com|org)", ""),
    (r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?", ""),
    (r"\w+\s\d{3}", ""),
    (r"[^\x00-\x7f]{1,3}", ""),
    (r"(?:ab|c)*d?", ""),
    (r"select\s+[^,]+", "i"),
    (r"a.b", "s"),
    (r"[\U0001F600-\U0001F64F]x", ""),
]


@pytest.mark.parametrize(("pattern", "flags"), PATTERNS)
def test_random_strings_full_match(pattern: str, flags: str) -> None:
    node = parse_regex(pattern, flags=flags)
    compiled = re.compile(pattern, (re.I if "i" in flags else 0) | (re.S if "s" in flags else 0))
    rng = random.Random(0)
    outputs = {random_string(node, rng) for _ in range(200)}
    assert len(outputs) > 5
    for text in outputs:
        assert compiled.fullmatch(text), (pattern, text)
        text.encode("utf-8")  # never a surrogate


def test_random_strings_prefer_printable_ascii() -> None:
    rng = random.Random(1)
    text = "".join(random_string(parse_regex(r"[^\n]"), rng) for _ in range(500))
    printable = sum(" " <= c <= "~" for c in text)
    assert 0.7 * len(text) < printable < len(text)  # mostly, but not only


@pytest.mark.parametrize(("pattern", "flags"), PATTERNS)
def test_plain_random_strings_full_match(pattern: str, flags: str) -> None:
    node = parse_regex(pattern, flags=flags)
    compiled = re.compile(pattern, (re.I if "i" in flags else 0) | (re.S if "s" in flags else 0))
    rng = random.Random(0)
    for _ in range(100):
        text = random_string(node, rng, plain=True)
        assert compiled.fullmatch(text), (pattern, text)


def test_plain_strings_are_a_writers() -> None:
    """`plain`: a JSON string's characters mostly raw, not escaped, and a few words long."""
    string = parse_regex(r'"([^"\\\x00-\x1f]|\\(["\\/bfnrt]|u[0-9a-fA-F]{4}))*"')
    rng = random.Random(2)
    texts = [random_string(string, rng, plain=True) for _ in range(200)]
    fuzz = [random_string(string, rng) for _ in range(200)]
    plain_rate = sum(t.count("\\") for t in texts) / sum(map(len, texts))
    fuzz_rate = sum(t.count("\\") for t in fuzz) / sum(map(len, fuzz))
    assert plain_rate * 3 < fuzz_rate  # (escapes per character: ~0.02 against ~0.1)
    assert sum(map(len, texts)) > 2 * sum(map(len, fuzz))
    for text in texts:
        json.loads(text)


def _fixpoint_depths(grammar: Grammar) -> dict[str, int]:
    """Minimal derivation depths by going over every rule until nothing changes (the
    sampler's way before `_min_depths`)."""
    by_lhs: dict[str, list[tuple[str, ...]]] = {}
    for rule in grammar.rules:
        by_lhs.setdefault(rule.lhs, []).append(rule.rhs)
    depth = dict.fromkeys(by_lhs, sampler._INFINITE)
    changed = True
    while changed:
        changed = False
        for lhs, options in by_lhs.items():
            best = min(sampler._alt_depth(rhs, depth) for rhs in options)
            if best < depth[lhs]:
                depth[lhs] = best
                changed = True
    return depth


def _random_grammar(rng: random.Random) -> Grammar:
    names = [f"n{i}" for i in range(rng.randint(1, 12))]
    rules = []
    for lhs in names:
        for _ in range(rng.randint(1, 3)):
            rhs = tuple(rng.choice([*names, "A", "B"]) for _ in range(rng.randint(0, 3)))
            rules.append(Rule(lhs, rhs))
    terminals = [TerminalDef("A", parse_regex("a")), TerminalDef("B", parse_regex("b"))]
    return Grammar(rules=tuple(rules), terminals=tuple(terminals), start="n0")


def test_minimal_depths_are_the_fixpoints() -> None:
    """`_min_depths` (smallest first, each rule waiting on its nonterminals) finds the depths
    the plain fixpoint does: on random grammars with recursion, empty rules and symbols with
    no finite derivation, and on the shipped ones."""
    rng = random.Random(0)
    grammars = [_random_grammar(rng) for _ in range(300)]
    grammars += [shipped(name) for name in builtin_names()]
    for grammar in grammars:
        by_lhs: dict[str, list[tuple[str, ...]]] = {}
        for rule in grammar.rules:
            by_lhs.setdefault(rule.lhs, []).append(rule.rhs)
        assert sampler._min_depths(by_lhs, grammar.rules) == _fixpoint_depths(grammar)
