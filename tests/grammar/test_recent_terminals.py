"""The recent terminal automata (`grammar/terminals.py`): held after their grammars are gone only
once a later compile uses them again. A terminal one compile builds, or finds twice, lives as
long as its grammar; the next compile that builds or finds it admits it; `clear_caches` forgets
what was seen. Sharing is unchanged: a terminal alive in a grammar is found, admitted or not."""

from __future__ import annotations

import gc

import structgen
from structgen import Compiler
from structgen._budget import compile_budget, compile_number
from structgen.automata import AutomataLimits, parse_regex
from structgen.grammar import terminals
from structgen.grammar.ir import TerminalDef
from tests.conftest import load_vocab

LIMITS = AutomataLimits()


def _terminal(pattern: str) -> tuple[TerminalDef, tuple[object, ...]]:
    term = TerminalDef("T", parse_regex(pattern))
    return term, (term.pattern, term.intersect, LIMITS)


def test_a_terminal_is_held_once_a_later_compile_uses_it_again() -> None:
    structgen.clear_caches()
    term, key = _terminal("[a-z]+q[0-9]{2}x")
    with compile_budget(None):
        first = terminals.terminal_dfa(term, LIMITS)
        assert terminals.terminal_dfa(term, LIMITS) is first  # (found: shared as before)
    assert terminals._RECENT.get(key) is None  # (used by one compile only, twice)
    del first
    gc.collect()
    assert terminals._TERMINAL_DFAS.get(key) is None  # freed with its last user
    with compile_budget(None):
        again = terminals.terminal_dfa(term, LIMITS)  # built again by a later compile
    assert terminals._RECENT.get(key) is again
    del again
    gc.collect()
    assert terminals._TERMINAL_DFAS.get(key) is not None  # held by the recent ones now


def test_a_terminal_alive_in_a_grammar_is_admitted_when_another_compile_finds_it() -> None:
    structgen.clear_caches()
    term, key = _terminal("[A-Z]{3}-[0-9]+z")
    with compile_budget(None):
        held = terminals.terminal_dfa(term, LIMITS)
    with compile_budget(None):
        assert terminals.terminal_dfa(term, LIMITS) is held
    assert terminals._RECENT.get(key) is held


def test_clear_caches_forgets_the_terminals_seen() -> None:
    structgen.clear_caches()
    term, key = _terminal("[0-9]+w[a-f]+")
    with compile_budget(None):
        terminals.terminal_dfa(term, LIMITS)
    gc.collect()
    structgen.clear_caches()
    with compile_budget(None):
        terminals.terminal_dfa(term, LIMITS)  # (a first use again: nothing was seen)
    assert terminals._RECENT.get(key) is None
    assert len(terminals._SEEN) == 1


def test_compile_numbers_are_distinct_and_zero_outside() -> None:
    assert compile_number() == 0
    with compile_budget(None):
        one = compile_number()
        with compile_budget(None):  # (nested: the outer compile)
            assert compile_number() == one
    with compile_budget(None):
        assert compile_number() not in (0, one)


def test_schemas_that_share_keys_compile_to_the_same_masks_either_way() -> None:
    """Two schemas sharing keys, each compiled twice (the second time with its terminals
    admitted, the first time some found alive from the other schema): the same first masks."""
    vocab = load_vocab("llama3_1")
    schemas = [
        {"type": "object", "properties": {"name": {"type": "string"}, "id": {"type": "integer"}}},
        {"type": "object", "properties": {"id": {"type": "integer"}, "tag": {"enum": ["a", "b"]}}},
    ]
    structgen.clear_caches()
    masks = []
    for _ in range(2):
        for schema in schemas:
            structgen.compiler._CACHE.clear()
            compiled = Compiler(vocab).json_schema(schema)
            masks.append(compiled.token_mask(compiled.initial_state).copy())
            del compiled
            gc.collect()
    assert (masks[0] == masks[2]).all() and (masks[1] == masks[3]).all()


def test_a_restored_terminal_is_counted_once() -> None:
    """A compile-cache file's automaton, restored on a loaded grammar's first step, is a first
    use: admitted when a later grammar uses it again, not at once."""
    from structgen.automata import compile_regex

    structgen.clear_caches()
    made = compile_regex("[a-z]+k[0-9]{3}", limits=LIMITS)
    key = (made.fingerprint, LIMITS)
    restored = terminals.live_or_restored_dfa(made.fingerprint, LIMITS, lambda: made)
    assert restored is made and terminals._RECENT.get(key) is None
    assert terminals._BY_FINGERPRINT.get(key) is made  # (shared by fingerprint)
    again = terminals.live_or_restored_dfa(made.fingerprint, LIMITS, lambda: 1 / 0)  # type: ignore[arg-type,return-value]
    assert again is made and terminals._RECENT.get(key) is made  # (found: it came back)
