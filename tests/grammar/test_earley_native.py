"""The C loops of the Earley parser (`grammar/_earley.c`) build the same sets as the Python
ones: the same items by next symbol (origins compared by position along the parse), the same
predictions, expected terminals and completeness, on random grammars (empty rules, left and
right recursion, ambiguity) and on the shipped Lark grammars."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from structgen.automata import String
from structgen.grammar import earley
from structgen.grammar.earley import EarleyGrammar, EarleySet
from structgen.grammar.ir import Grammar, Rule, TerminalDef
from structgen.grammar.lark_frontend import lark_to_ir, load_builtin

pytestmark = pytest.mark.skipif(earley._NATIVE is None, reason="the C Earley loops are not built")

TERMINALS = ("a", "b", "c")
NONTERMINALS = ("S", "X", "Y", "Z")


def shape(s: EarleySet, path: list[EarleySet]) -> tuple[Any, ...]:
    """The set, with each origin named by its index along `path` (sets are interned per
    grammar, so the two parsers' objects differ)."""
    where = {id(x): i for i, x in enumerate(path)}
    items = {
        sym: sorted((rid, dot, where[id(origin)]) for rid, dot, origin in found)
        for sym, found in s.by_next.items()
    }
    predicted = {sym: sorted(pairs) for sym, pairs in s.predicted.items()}
    return (s.complete, s.expected, items, predicted)


def walk_both(grammar: Grammar, seed: int, steps: int, monkeypatch: pytest.MonkeyPatch) -> int:
    """Scan the same random terminals in a C-built and a Python-built parse; compare every set.
    Returns how many sets were compared."""
    native_module = earley._NATIVE
    parsers = {"c": EarleyGrammar(grammar), "py": EarleyGrammar(grammar)}
    paths: dict[str, list[EarleySet]] = {}
    for name, parser in parsers.items():
        monkeypatch.setattr(earley, "_NATIVE", native_module if name == "c" else None)
        paths[name] = [parser.initial_set()]
    rng = random.Random(seed)
    compared = 0
    for _ in range(steps):
        c_set, py_set = paths["c"][-1], paths["py"][-1]
        assert shape(c_set, paths["c"]) == shape(py_set, paths["py"])
        compared += 1
        if not c_set.expected:
            break
        choice = sorted(c_set.expected)
        # one terminal, or several at once (a lexeme that several terminals accept)
        picked = frozenset(rng.sample(choice, rng.randint(1, len(choice))))
        for name in ("c", "py"):
            monkeypatch.setattr(earley, "_NATIVE", native_module if name == "c" else None)
            child = paths[name][-1].scan(picked)
            assert child is not None
            paths[name].append(child)
    return compared


@st.composite
def random_grammars(draw: st.DrawFn) -> Grammar:
    rules: list[Rule] = [Rule("S", (draw(st.sampled_from(NONTERMINALS[1:])),))]
    symbols = st.sampled_from(TERMINALS + NONTERMINALS)
    for lhs in NONTERMINALS:
        for _ in range(draw(st.integers(1, 3))):
            rules.append(Rule(lhs, tuple(draw(st.lists(symbols, max_size=3)))))
    for lhs in NONTERMINALS[1:]:  # every nonterminal derives some text
        rules.append(Rule(lhs, (draw(st.sampled_from(TERMINALS)),)))
    terminals = tuple(TerminalDef(t, String(t)) for t in TERMINALS)
    return Grammar("S", tuple(rules), terminals)


@settings(max_examples=60, deadline=None)
@given(grammar=random_grammars(), seed=st.integers(0, 1000))
def test_c_and_python_sets_agree_on_random_grammars(grammar: Grammar, seed: int) -> None:
    with pytest.MonkeyPatch.context() as monkeypatch:
        assert walk_both(grammar, seed, 12, monkeypatch) >= 1


@pytest.mark.parametrize("name", ["json", "sql_select", "arithmetic"])
def test_c_and_python_sets_agree_on_shipped_grammars(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    grammar = lark_to_ir(load_builtin(name))
    for seed in range(5):
        assert walk_both(grammar, seed, 40, monkeypatch) >= 2


def assert_predictions_agree(grammar: Grammar, groups: list[frozenset[int]]) -> None:
    """C's `predicts_of` and `prediction` (each over a fresh grammar's memos) give what the
    Python methods give, in the same order (the items' order of discovery follows it), and fill
    the same memos."""
    native = earley._NATIVE
    assert native is not None
    c_side, py_side = EarleyGrammar(grammar), EarleyGrammar(grammar)
    nonterminals = range(c_side.num_terminals, c_side.num_terminals + len(c_side.by_lhs) + 2)
    for nt in nonterminals:  # (two past the end: symbols without rules)
        got, want = native.predicts_of(c_side.native_tables, nt), py_side.predicts_of(nt)
        assert got == want and list(got) == list(want), nt
    for group in [frozenset(), *groups, *(py_side.predicts_of(nt) for nt in nonterminals)]:
        got, want = native.prediction(c_side.native_tables, group), py_side.prediction(group)
        assert got == want and list(got[0].items()) == list(want[0].items()), group
        assert list(got[1]) == list(want[1])
    assert c_side._own_items == py_side._own_items
    assert c_side._first_nts == py_side._first_nts
    assert c_side._predicts == py_side._predicts


@pytest.mark.skipif(not earley._NATIVE_PREDICTION, reason="built before C prediction")
@settings(max_examples=60, deadline=None)
@given(grammar=random_grammars(), picks=st.lists(st.sets(st.integers(3, 7)), max_size=4))
def test_c_predictions_agree_on_random_grammars(grammar: Grammar, picks: list[set[int]]) -> None:
    assert_predictions_agree(grammar, [frozenset(p) for p in picks])


@pytest.mark.skipif(not earley._NATIVE_PREDICTION, reason="built before C prediction")
@pytest.mark.parametrize("name", ["json", "sql_select", "arithmetic"])
def test_c_predictions_agree_on_shipped_grammars(name: str) -> None:
    assert_predictions_agree(lark_to_ir(load_builtin(name)), [])


@pytest.mark.skipif(not earley._NATIVE_PREDICTION, reason="built before C prediction")
def test_c_predictions_reject_bad_tables() -> None:
    native = earley._NATIVE
    assert native is not None
    parser = EarleyGrammar(Grammar("S", (Rule("S", ("a",)),), (TerminalDef("a", String("a")),)))
    with pytest.raises(TypeError):
        native.predicts_of(parser.native_tables[:6], 1)
    with pytest.raises(TypeError):
        native.prediction(parser.native_tables, {1})  # (not a frozenset)
    broken = (*parser.native_tables[:6], {1: [99]}, {}, {})  # a rule id out of range
    with pytest.raises(IndexError):
        native.predicts_of(broken, 1)


def test_bad_items_are_type_errors_not_crashes() -> None:
    native = earley._NATIVE
    parser = EarleyGrammar(Grammar("S", (Rule("S", ("a",)),), (TerminalDef("a", String("a")),)))
    args = (parser.predicts_of, parser.prediction)
    for kernel in ([(0,)], [(1, 1, "not a set")], [("x", 0, None)], [(99, 0, None)]):
        with pytest.raises((TypeError, IndexError, AttributeError)):
            native.closure(parser.native_tables, *args, kernel, {}, set(), False)
    with pytest.raises(TypeError):
        native.closure((), *args, [], {}, set(), False)
    with pytest.raises(TypeError):
        native.scan_kernel(frozenset({0}), {0: "not a list"}, {}, None)


# ------------------------------------------------------------------ grammar fixpoints


def _fixpoint(rules: list[tuple[str, tuple[str, ...]]], known: set[str]) -> set[str]:
    """The oracle: add left-hand sides until nothing changes (quadratic, obviously right)."""
    known = set(known)
    while True:
        more = {lhs for lhs, rhs in rules if lhs not in known and all(s in known for s in rhs)}
        if not more:
            return known
        known |= more


@st.composite
def rule_lists(draw: st.DrawFn) -> list[tuple[str, tuple[str, ...]]]:
    symbols = st.sampled_from(TERMINALS + NONTERMINALS)
    return draw(
        st.lists(
            st.tuples(st.sampled_from(NONTERMINALS), st.lists(symbols, max_size=4).map(tuple)),
            max_size=12,
        )
    )


@settings(max_examples=200, deadline=None)
@given(rules=rule_lists(), usable=st.sets(st.sampled_from(TERMINALS)))
def test_known_closure_is_the_fixpoint(
    rules: list[tuple[str, tuple[str, ...]]], usable: set[str]
) -> None:
    """`known_closure` (C) closes the set as the plain fixpoint does, and names exactly the rules
    left with an unknown symbol — for tuples and for `ir.Rule` objects; the Python worklists
    (`earley._closure` without C, `_dead_rules`' loop) agree."""
    expected = _fixpoint(rules, usable)
    dead = [i for i, (_, rhs) in enumerate(rules) if not all(s in expected for s in rhs)]
    for given_rules in (rules, [Rule(lhs, rhs) for lhs, rhs in rules]):
        known = set(usable)
        assert earley._NATIVE.known_closure(list(given_rules), known) == dead
        assert known == expected
    # nullable symbols: the closure from nothing
    assert earley._closure(list(rules), set()) == _fixpoint(rules, set())  # type: ignore[arg-type]


def test_python_closure_agrees(monkeypatch: pytest.MonkeyPatch) -> None:
    rules = [("S", ("X", "a")), ("X", ()), ("Y", ("Y", "b")), ("Z", ("X", "X"))]
    monkeypatch.setattr(earley, "_NATIVE", None)
    assert earley._closure(rules, {"a"}) == {"a", "S", "X", "Z"}  # type: ignore[arg-type]


def test_number_rules() -> None:
    ids = {"S": 3, "X": 4, "a": 0, "b": 1}
    rules = (Rule("S", ("X", "a")), Rule("X", ()), Rule("X", ("b", "X", "b")))
    assert earley._NATIVE.number_rules(rules, ids) == [(3, (4, 0)), (4, ()), (4, (1, 4, 1))]
    assert earley._NATIVE.number_rules((Rule("S", ("Q",)),), ids) is None  # undefined: None
    with pytest.raises(TypeError):
        earley._NATIVE.known_closure((("S", ()),), set())  # (a list is asked for)


def test_undefined_symbol_is_reported_with_the_c_loops() -> None:
    from structgen.errors import GrammarError

    grammar = Grammar("S", (Rule("S", ("a", "Q")),), (TerminalDef("a", String("a")),))
    with pytest.raises(GrammarError, match="'Q', which is not defined"):
        EarleyGrammar(grammar)


@given(st.lists(st.tuples(st.integers(0, 20), st.tuples(st.integers(0, 30))), max_size=60))
def test_rules_by_lhs_agrees(rules: list[tuple[int, tuple[int, ...]]]) -> None:
    """The C index of rules by left-hand side is the Python loop's: same keys, same order."""
    if earley._RULES_BY_LHS is None:
        pytest.skip("the C extension is not built")
    expected: dict[int, list[int]] = {}
    for rid, (lhs, _) in enumerate(rules):
        expected.setdefault(lhs, []).append(rid)
    found = earley._RULES_BY_LHS(rules)
    assert found == expected and list(found) == list(expected)
    with pytest.raises(TypeError):
        earley._RULES_BY_LHS([(1,)])
