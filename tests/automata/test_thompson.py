"""Thompson's construction in C (`_thompson.c`) builds the same NFA as the Python builder."""

from __future__ import annotations

import random
import re
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from structgen.automata import nfa, parse_regex
from structgen.automata.dfa import ByteDFA, NFASource
from structgen.automata.nfa import MATCH, AutomataLimits, ByteNFA

LIB = nfa._thompson()
pytestmark = pytest.mark.skipif(LIB is None, reason="the C extension is not built")

PATTERNS = [
    r"a{3,7}",
    r"(?:ab|c)*d{2,}",
    r"[\w.-]{1,50}@x",
    r"(?:é|b|)+",
    r"x{0,0}y",
    r"(a|)*",
    r'"(?:[^"\\]|\\["\\/bfnrtu]){0,300}"',
    r"(?:(?:a{2}){3}|b?){2,5}",
    r"(?:-?(?:0|[1-9][0-9]{0,5})(?:\.[0-9]{1,4})?){1,3}",
    r"[^\x00-\x7f]{2,40}|\d+",
]


def python_nfa(pattern: str) -> ByteNFA:
    node = parse_regex(pattern)
    b = nfa._Builder(10**6, pattern)
    match = b.new(MATCH)
    start = b.compile(node, match)
    ranges = frozenset(b.ranges | {(x, x) for x in b.string_bytes})
    return ByteNFA(b.kind, [tuple(t) for t in b.eps], b.node, b.next, b.pool, start, match, ranges)


def native_nfa(pattern: str) -> ByteNFA:
    node = parse_regex(pattern)
    states = nfa.nfa_size(node) + 1
    return nfa._build_native(LIB, nfa._Builder(10**6, pattern), node, states, 10**6, pattern)


def dag(pool: list[Any], root: int) -> Any:
    """A pool DAG as nested tuples (pool offsets differ between the builders)."""
    return tuple((lo, hi, None if c < 0 else dag(pool, c)) for lo, hi, c in pool[root])


@pytest.mark.parametrize("pattern", PATTERNS)
def test_same_states_in_the_same_order(pattern: str) -> None:
    py, c = python_nfa(pattern), native_nfa(pattern)
    assert (c.kind, c.next, c.live, c.start, c.match) == (py.kind, py.next, py.live, py.start, 0)
    assert [c.eps[s] for s in range(len(c))] == [tuple(py.eps[s]) for s in range(len(py))]
    consume = [s for s in range(len(py)) if py.kind[s] == nfa.CONSUME]
    assert [dag(c.pool, c.node[s]) for s in consume] == [dag(py.pool, py.node[s]) for s in consume]
    assert c.ranges == py.ranges


@pytest.mark.parametrize("pattern", PATTERNS)
def test_same_language_as_python_re(pattern: str) -> None:
    limits = AutomataLimits()
    dfa = ByteDFA(NFASource(native_nfa(pattern)), fingerprint="t", limits=limits)
    rng = random.Random(pattern)
    alphabet = 'abcdxy@.-é"\\/u0129-'
    for _ in range(2000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
        assert dfa.accepts(text.encode()) == (re.fullmatch(pattern, text) is not None), text


def test_build_nfa_uses_c_above_the_threshold_and_keeps_its_limits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    big = nfa.build_nfa(parse_regex(r"[ab]{0,100}"), max_states=10**6, pattern="p")
    assert big.arrays is not None  # built in C
    small = nfa.build_nfa(parse_regex(r"ab"), max_states=10**6, pattern="p")
    assert (small.arrays is not None) == (nfa.NATIVE_ABOVE < 3)  # (every size by default)
    monkeypatch.setattr(nfa, "NATIVE_ABOVE", 32)
    assert nfa.build_nfa(parse_regex(r"ab"), max_states=10**6, pattern="p").arrays is None
    with pytest.raises(nfa.RegexError, match="UTF-8 nodes"):
        nfa.build_nfa(parse_regex(r"[^a]{0,60}"), max_states=125, pattern="p")


def _python_program(node: Any) -> nfa.Program:
    old = nfa._PROGRAM_TABLES
    nfa._PROGRAM_TABLES = None
    try:
        return nfa.Program(node)
    finally:
        nfa._PROGRAM_TABLES = old


@pytest.mark.skipif(nfa._PROGRAM_TABLES is None, reason="the extension predates program_tables")
@pytest.mark.parametrize(
    "pattern",
    [
        *PATTERNS,
        "",
        r"(?:)",
        r"[^\x00-\U0010ffff]|a",
        r"(?i)straße|ǅx|[σς]+",
        r"(?:a{2,}|b{0,}|c{1000000}){3}",
        r"\ud800x",
    ],
)
def test_program_walk_in_c_is_the_python_one(pattern: str) -> None:
    """The C walk (`program_tables`) gives the Python walk's tables, leaves and digest (the
    digest keys compile-cache files and shared automata: it must not change)."""
    node = parse_regex(pattern)
    c, py = nfa.Program(node), _python_program(node)
    assert c.digest == py.digest
    assert c.top == py.top and c.leaves == py.leaves and c.leaf_at == py.leaf_at
    assert c.nullable == py.nullable == bool(re.fullmatch(pattern, "")), pattern
    for name in ("typ", "arg_a", "arg_b", "offsets", "children"):
        assert list(nfa.column(getattr(c, name))) == list(getattr(py, name)), name


@pytest.mark.skipif(nfa._PROGRAM_TABLES is None, reason="the extension predates program_tables")
def test_program_walk_in_c_on_schema_terminals_and_odd_nodes() -> None:
    """Shared subtrees (one entry), counts past 64 bits (the Python walk spells them out), a
    node that is not a regex AST node (TypeError, as in Python), and a schema's terminals."""
    from structgen import SchemaOptions
    from structgen.automata.regex_syntax import CharClass, Concat, Difference, Repeat, String
    from structgen.schema import compile_schema

    shared = Concat((String("ab"), CharClass(((48, 57),))))
    node = Concat((shared, Repeat(shared, 2, None), shared))
    c = nfa.Program(node)
    assert c.digest == _python_program(node).digest and len(nfa.column(c.typ)) == 5
    huge = Repeat(String("x"), 0, 2**70)
    assert nfa.Program(huge).digest == _python_program(huge).digest
    with pytest.raises(TypeError, match="not a regex AST node"):
        nfa.Program(Concat((String("a"), "b")))  # type: ignore[arg-type]
    schema = {
        "type": "object",
        "properties": {"nom": {"type": "string", "maxLength": 5}, "n": {"minimum": 3}},
        "additionalProperties": {"enum": [1, "x"]},
    }
    grammar = compile_schema(schema, options=SchemaOptions(mode="accept"))
    for terminal in grammar.terminals:
        if isinstance(terminal.pattern, Difference):  # (the other keys: no program)
            with pytest.raises(TypeError, match="not a regex AST node"):
                nfa.Program(terminal.pattern)  # type: ignore[arg-type]
            continue
        ours, theirs = nfa.Program(terminal.pattern), _python_program(terminal.pattern)
        assert ours.digest == theirs.digest


def _ast_nodes() -> st.SearchStrategy[Any]:
    """Small regex ASTs, built through the constructors (no flattening: any shape)."""
    from structgen.automata.regex_syntax import (
        Alternation,
        CharClass,
        Concat,
        Empty,
        Repeat,
        String,
    )

    leaves = st.one_of(
        st.just(Empty()),
        st.text(alphabet="ab\ud800é", min_size=1, max_size=3).map(String),
        st.sampled_from([((97, 98),), ((48, 57), (97, 97)), ((0x10000, 0x10FFFF),), ()]).map(
            CharClass
        ),
    )
    return st.recursive(
        leaves,
        lambda kids: st.one_of(
            st.lists(kids, max_size=4).map(lambda xs: Concat(tuple(xs))),
            st.lists(kids, max_size=4).map(lambda xs: Alternation(tuple(xs))),
            st.tuples(kids, st.integers(0, 3), st.one_of(st.none(), st.integers(3, 5))).map(
                lambda t: Repeat(*t)
            ),
        ),
        max_leaves=12,
    )


@pytest.mark.skipif(nfa._PROGRAM_TABLES is None, reason="the extension predates program_tables")
@settings(max_examples=300, deadline=None)
@given(_ast_nodes(), _ast_nodes())
def test_program_walk_dedupes_equal_nodes_as_python_does(a: Any, b: Any) -> None:
    """The C walk finds equal nodes by structure, not by the nodes' own hash and ==: on ASTs
    that repeat subtrees as the same object and as equal copies, it gives the Python walk's
    tables, leaves and digest."""
    import copy

    from structgen.automata.regex_syntax import Alternation, Concat

    node = Concat((a, b, copy.deepcopy(a), Alternation((b, a, copy.deepcopy(b)))))
    c, py = nfa.Program(node), _python_program(node)
    assert c.digest == py.digest
    assert c.top == py.top and c.leaves == py.leaves and c.leaf_at == py.leaf_at
    for name in ("typ", "arg_a", "arg_b", "offsets", "children"):
        assert list(nfa.column(getattr(c, name))) == list(getattr(py, name)), name
    assert (c.nullable, c.nfa_size, c.empty_alternation) == (
        py.nullable,
        py.nfa_size,
        py.empty_alternation,
    )


@pytest.mark.skipif(nfa._JOIN_PIECES is None, reason="the extension predates join_pieces")
@pytest.mark.parametrize("pattern", [*PATTERNS, "", r"\ud800|x", r"[^\x00-\U0010ffff]"])
def test_pool_joined_in_c_is_the_numpy_join(pattern: str) -> None:
    """A pool's arrays joined in C are numpy's (child ids placed by each piece's base), and the
    nodes with a transition the same; an empty pool gives one zero entry each."""
    b = nfa._Builder(10**6, pattern)
    b.compile(parse_regex(pattern), b.new(MATCH))
    pool = b.pool
    joined = pool.arrays(), pool.nonempty()
    old = nfa._JOIN_PIECES
    nfa._JOIN_PIECES = None
    try:
        pool._joined = None
        numpy_arrays, numpy_nonempty = pool.arrays(), pool.nonempty()
    finally:
        nfa._JOIN_PIECES = old
    (offsets, lo, hi, child), nonempty = joined
    total = int(offsets[-1])
    assert offsets.tolist() == numpy_arrays[0].tolist()
    for ours, theirs in zip((lo, hi, child), numpy_arrays[1:], strict=True):
        assert ours[:total].tolist() == theirs.tolist()
        assert len(ours) == max(total, 1)
    assert nonempty[: pool.size].tolist() == numpy_nonempty.tolist()
    assert len(nonempty) == max(pool.size, 1)


@pytest.mark.skipif(nfa._PROGRAM_TABLES is None, reason="the extension predates program_tables")
def test_program_facts_in_c_are_the_python_ones() -> None:
    """Whether the empty string matches, the NFA size (`nfa_size`) and whether an empty
    alternation is inside: the C walk's and the Python walk's agree, on patterns too."""
    from structgen.automata.regex_syntax import Alternation, Concat, Empty, Repeat, String

    nodes = [
        Concat(()),
        Alternation(()),
        Repeat(String("ab"), 3, None),
        Repeat(Empty(), 2, 9),
        Concat((String("x"), Repeat(Alternation(()), 0, 3))),
        *(parse_regex(p) for p in PATTERNS),
    ]
    for node in nodes:
        c, py = nfa.Program(node), _python_program(node)
        assert (c.nullable, c.nfa_size, c.empty_alternation) == (
            py.nullable,
            py.nfa_size,
            py.empty_alternation,
        )
        assert c.nfa_size == nfa.nfa_size(node)
    assert nfa.Program(Alternation(())).empty_alternation
    assert not nfa.Program(Concat(())).empty_alternation


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1, max_size=12) | st.text(min_size=250, max_size=300))
def test_string_pieces_are_the_tuple_built_ones(text: str) -> None:
    """A string's piece made from its bytes directly (`_Piece.chain`: shared slices up to 256
    bytes, its own arrays past them) has the arrays and the nodes of the one built from node
    tuples."""
    data = text.encode("utf-8", "surrogatepass")
    nodes = [((b, b, k),) for k, b in enumerate(data, 1)]
    nodes[-1] = ((data[-1], data[-1], -1),)
    old, new = nfa._Piece(tuple(nodes)), nfa._Piece.chain(data)
    assert new.nodes == old.nodes and new.size == old.size
    for name in ("counts", "table", "lo"):
        ours, theirs = getattr(new, name), getattr(old, name)
        assert ours.dtype == theirs.dtype and ours.tolist() == theirs.tolist(), name


class _ArraysOnly:
    """A piece seen only through its arrays (how the C join read every piece before)."""

    def __init__(self, piece: Any) -> None:
        self.counts, self.table, self.size = piece.counts, piece.table, piece.size


_CODE_POINT_RANGES = st.lists(
    st.tuples(st.integers(0, 0x10FFFF), st.integers(0, 300)), min_size=1, max_size=6
).map(lambda pairs: tuple(sorted({(lo, min(lo + n, 0x10FFFF)) for lo, n in pairs})))


@settings(max_examples=80, deadline=None)
@given(st.lists(st.text(min_size=1, max_size=6) | _CODE_POINT_RANGES, min_size=1, max_size=12))
def test_the_c_join_reads_pieces_as_they_were_made(leaves: list[Any]) -> None:
    """A pool joined in C from its pieces' bytes (`spelled`) and node tuples (`dag`) is the
    pool joined from their arrays, and the pool Python joins (a string with a lone surrogate:
    a piece with no moves)."""
    from structgen.automata import intervals as iv

    if nfa._JOIN_PIECES is None:
        pytest.skip("the C extension is not built")
    pieces = []
    for leaf in [*leaves, "a\ud800"]:
        if isinstance(leaf, str):
            pieces.append(nfa._spelled_piece(leaf))
        else:
            pieces.append(nfa._dag_piece(iv.normalize(list(leaf))))
    bases = []
    size = 0
    for piece in pieces:
        bases.append(size)
        size += piece.size
    ours = nfa._JOIN_PIECES(pieces, bases, size)
    theirs = nfa._JOIN_PIECES([_ArraysOnly(p) for p in pieces], bases, size)
    assert ours == theirs
    pool = nfa.Pool()
    pool.extend(pieces, [p.size for p in pieces])
    join, nfa._JOIN_PIECES = nfa._JOIN_PIECES, None  # (Python joins the arrays)
    try:
        joined = pool.arrays()
        nonempty = pool.nonempty()
    finally:
        nfa._JOIN_PIECES = join
    assert nonempty.tolist() == list(ours[4][: len(nonempty)])
    offsets, lo, hi, child = (np.frombuffer(b, dtype=np.int32) for b in ours[:4])
    assert offsets.tolist() == joined[0].tolist()
    moves = int(offsets[-1])
    for got, want in zip((lo, hi, child), joined[1:], strict=True):
        assert got[:moves].tolist() == want[:moves].tolist()


def _full_match(dfa: Any, text: str) -> bool:
    state = dfa.start
    for byte in text.encode("utf-8"):
        state = dfa.next_state(state, byte)
        if state < 0:
            return False
    return bool(dfa.is_accepting(state))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.text("abcé€😀xyz", min_size=1, max_size=5), min_size=8, max_size=60))
def test_a_large_alternation_of_words_matches_what_re_matches(words: list[str]) -> None:
    """The words of a large alternation are parsed as whole runs and their NFA pieces made in
    one batch: the automaton accepts exactly what Python's `re` accepts, on the words, their
    prefixes and their extensions."""
    from structgen.automata import compile_regex

    pattern = "|".join(re.escape(w) for w in words)
    dfa = compile_regex(pattern)
    probes = {w[:k] for w in words for k in range(len(w) + 1)} | {w + "a" for w in words}
    for text in probes:
        assert _full_match(dfa, text) == bool(re.fullmatch(pattern, text)), text


@pytest.mark.parametrize("pattern", PATTERNS)
def test_one_call_build_is_the_ctypes_build(pattern: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """`nfa_arrays` (the extension's one call) and the ctypes calls it replaced, kept for an
    extension built before it, make the same NFA arrays."""
    assert nfa._NFA_ARRAYS is not None
    one_call = native_nfa(pattern)
    monkeypatch.setattr(nfa, "_NFA_ARRAYS", None)
    ctypes_built = native_nfa(pattern)
    assert one_call.start == ctypes_built.start
    assert one_call.arrays is not None and ctypes_built.arrays is not None
    *fixed, eps = one_call.arrays
    *fixed_c, eps_c = ctypes_built.arrays
    for a, b in zip(fixed, fixed_c, strict=True):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    used = int(fixed[4][-1])  # (eps holds one entry more when it is empty: never read)
    assert eps.dtype == eps_c.dtype and np.array_equal(eps[:used], eps_c[:used])
