"""Literal automata (`LiteralSource`, `literal_dfa`): a `String` node's DFA is built whole at
once, with no regex program or NFA, and is the automaton the NFA path builds — same language,
consistent byte classes, every row built — inside regexes, schemas and grammars alike."""

from __future__ import annotations

import pickle
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import structgen
import structgen.automata as automata
from structgen import Compiler, Matcher, SchemaOptions, allocate_bitmask
from structgen.automata import AutomataLimits, String, compile_ast, compile_regex
from structgen.automata.dfa import ByteDFA, LiteralSource, NFASource
from structgen.automata.nfa import build_nfa
from structgen.automata.snapshot import restore_dfa, snapshot_dfa
from structgen.grammar.lark_frontend import load_builtin
from tests.conftest import load_vocab

LIMITS = AutomataLimits()
TEXTS = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=24
)  # (no lone surrogates: those have no UTF-8 spelling, the NFA path takes them)


def _nfa_dfa(text: str) -> ByteDFA:
    nfa = build_nfa(String(text), max_states=LIMITS.max_nfa_states, pattern=text)
    return ByteDFA(NFASource(nfa), fingerprint="nfa", limits=LIMITS)


def _classes_are_consistent(dfa: ByteDFA) -> bool:
    table = dfa.table
    for cls in range(dfa.num_byte_classes):
        members = np.flatnonzero(dfa.byte_classes == cls)
        if not (table[:, members] == table[:, members[:1]]).all():
            return False
    return True


@settings(max_examples=300, deadline=None)
@given(TEXTS, st.binary(max_size=6), st.integers(0, 30))
def test_a_literal_accepts_exactly_its_bytes(text: str, noise: bytes, cut: int) -> None:
    data = text.encode("utf-8")
    dfa = compile_ast(String(text), limits=LIMITS)
    assert isinstance(dfa._source, LiteralSource)
    reference = _nfa_dfa(text)
    assert dfa.num_states == len(data) + 1  # (every row built: a chain)
    assert bytes(dfa._built) == b"\x01" * dfa.num_states
    assert _classes_are_consistent(dfa)
    candidates = [data, data[:cut], data + noise, noise + data, data[:cut] + noise + data[cut:]]
    for candidate in candidates:
        assert dfa.accepts(candidate) == reference.accepts(candidate) == (candidate == data)
    for state in range(dfa.num_states):
        assert dfa.is_live(state)


def test_what_the_nfa_path_keeps() -> None:
    """The empty string and lone surrogates (no UTF-8 spelling) are not literals here."""
    empty = compile_ast(String(""), limits=LIMITS)
    assert not isinstance(empty._source, LiteralSource)
    assert empty.accepts(b"") and not empty.accepts(b"a")
    lone = compile_ast(String("a\ud800"), limits=LIMITS)
    assert not isinstance(lone._source, LiteralSource) and lone.is_empty
    assert isinstance(compile_regex("abc")._source, LiteralSource)  # (a regex of one literal)


def test_a_literal_pickles_and_snapshots() -> None:
    dfa = compile_ast(String("größe"), limits=LIMITS)
    again = pickle.loads(pickle.dumps(dfa))
    assert again.accepts("größe".encode()) and not again.accepts(b"gro")
    restored = restore_dfa(snapshot_dfa(dfa), lambda: dfa, LIMITS)
    assert restored.accepts("größe".encode()) and not restored.accepts("größ".encode())


def _walk_masks(compiled: structgen.CompiledGrammar, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    matcher = Matcher(compiled)
    bitmask = allocate_bitmask(1, compiled.vocab.size, backend="numpy")
    out = []
    for _ in range(30):
        matcher.fill_bitmask(bitmask)
        out.append(bitmask.tobytes())
        bits = np.unpackbits(bitmask[0].view(np.uint8), bitorder="little")
        allowed = np.flatnonzero(bits[: compiled.vocab.size])
        if not len(allowed) or matcher.is_terminated():
            break
        matcher.accept_token(int(rng.choice(allowed)))
    return out


@pytest.mark.parametrize("source", ["schema", "lark"])
def test_grammars_give_the_same_masks_with_literal_automata(
    source: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    vocab = load_vocab("gpt2")
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "größe": {"enum": ["klein", "groß", None]}},
        "required": ["name"],
    }

    def compile_it() -> structgen.CompiledGrammar:
        compiler = Compiler(vocab)
        if source == "schema":
            return compiler.json_schema(schema, options=SchemaOptions(whitespace="compact"))
        return compiler.grammar(load_builtin("sql_select"))

    expected = []
    monkeypatch.setattr(automata, "LITERAL_DFAS", False)
    structgen.clear_caches()
    compiled = compile_it()
    expected = [_walk_masks(compiled, seed) for seed in range(3)]
    monkeypatch.setattr(automata, "LITERAL_DFAS", True)
    structgen.clear_caches()
    compiled = compile_it()
    engine = compiled._engine
    kinds = {type(d._source).__name__ for d in engine.terminal_dfas}  # type: ignore[attr-defined]
    assert "LiteralSource" in kinds
    assert [_walk_masks(compiled, seed) for seed in range(3)] == expected


_ASCII_CLASSES = st.lists(
    st.tuples(st.integers(0, 0x7F), st.integers(0, 5)), min_size=1, max_size=3
).map(lambda pairs: [(lo, min(lo + n, 0x7F)) for lo, n in pairs])


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.one_of(TEXTS, _ASCII_CLASSES), min_size=1, max_size=5),
    st.lists(st.binary(max_size=8), max_size=6),
)
def test_a_chain_of_byte_sets_is_the_nfa_automaton(items: list[object], extra: list[bytes]) -> None:
    """Literals and ASCII classes in a row (a case-insensitive keyword is one) are built as a
    chain; it accepts what the NFA path's automaton accepts."""
    from structgen.automata import CharClass, concat
    from structgen.automata.intervals import normalize

    nodes = [String(i) if isinstance(i, str) else CharClass(normalize(i)) for i in items]
    node = concat(nodes)
    dfa = compile_ast(node, limits=LIMITS)
    assert isinstance(dfa._source, LiteralSource)
    reference = ByteDFA(
        NFASource(build_nfa(node, max_states=LIMITS.max_nfa_states, pattern="chain")),
        fingerprint="nfa",
        limits=LIMITS,
    )
    assert _classes_are_consistent(dfa)
    rng = random.Random(len(extra))
    samples = list(extra)
    for _ in range(12):  # members: one byte of each step
        sample = bytes(rng.choice(step) for step in dfa._source.steps)  # type: ignore[attr-defined]
        samples += [sample, sample[:-1], sample + b"x"]
    for sample in samples:
        assert dfa.accepts(sample) == reference.accepts(sample), sample


def test_case_insensitive_keywords_are_chains() -> None:
    from structgen.automata import literal_node

    # (Lark's "select"i folds ASCII only; a Unicode fold would take ſ for s: not a chain)
    dfa = compile_ast(literal_node("select", ignore_case=True, ascii_case=True), limits=LIMITS)
    assert isinstance(dfa._source, LiteralSource)
    assert not isinstance(compile_regex("(?i:select)")._source, LiteralSource)
    assert dfa.accepts(b"SeLeCt") and not dfa.accepts(b"selec") and not dfa.accepts(b"selectx")
    assert not isinstance(compile_regex("[a-z]+")._source, LiteralSource)
    assert not isinstance(compile_regex("[é]x")._source, LiteralSource)  # (not one byte)


def test_ascii_folding_takes_no_tables() -> None:
    """`literal_node(ascii_case=True)` folds A-Z/a-z directly, as the fold tables do."""
    from structgen.automata import regex_syntax as rs

    for cp in [*range(0x80), 0xE9, 0x17F, 0x212A, 0x1F600]:
        c = chr(cp)
        assert rs._ascii_fold(c) == rs._fold_char(cp, True), hex(cp)
    text = "Select ſ K x_1"
    assert rs.literal_node(text, ignore_case=True, ascii_case=True) == rs.concat(
        rs._fold_char(ord(c), True) for c in text
    )
