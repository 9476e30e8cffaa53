"""Chain automata (`structgen/automata/chains.py`): a literal, a keyword or a JSON key in all
its spellings is built directly as a chain of blocks, with no regex program or NFA, and is the
automaton the NFA path builds — same language, consistent byte classes, every state live —
inside regexes, schemas and grammars alike."""

from __future__ import annotations

import pickle
import random
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import structgen
import structgen.automata as automata
import structgen.automata.dfa as dfa_module
from structgen import Compiler, Matcher, SchemaOptions, allocate_bitmask
from structgen.automata import (
    AutomataLimits,
    String,
    _blocks,
    _native_subset,
    chains,
    compile_ast,
    compile_regex,
)
from structgen.automata.chains import LiteralSource
from structgen.automata.dfa import ByteDFA, NFASource
from structgen.automata.nfa import build_nfa
from structgen.automata.snapshot import restore_dfa, snapshot_dfa
from structgen.grammar.lark_frontend import load_builtin
from tests.automata.test_native_subset import _assert_isomorphic
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
    masks = [_walk_masks(compiled, seed) for seed in range(3)]
    # (a grammar's keywords are chains, laid out when a lexer first reads them: by the lexer's
    # C context, their own automata staying deferred, or by their own automata)
    kinds = {type(d._source).__name__ for d in engine.terminal_dfas}  # type: ignore[attr-defined]
    assert kinds & {"LiteralSource", "DeferredChainSource"}
    assert masks == expected


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
    assert _agree(dfa, reference, extra, seed=len(extra))


def _sample(dfa: ByteDFA, rng: random.Random) -> bytes:
    """A random member of the language (every state of these automata is live)."""
    state, out = dfa.start, bytearray()
    while True:
        row = dfa.row(state)
        moves = np.flatnonzero(row >= 0)
        if dfa.is_accepting(state) and (not len(moves) or rng.random() < 0.2):
            return bytes(out)
        byte = int(rng.choice(moves))
        out.append(byte)
        state = int(row[byte])


def _agree(dfa: ByteDFA, reference: ByteDFA, extra: list[bytes], seed: int) -> bool:
    """Same verdicts on members of either language, on their cuts and extensions, and on
    `extra`; consistent byte classes; every state reached live."""
    assert _classes_are_consistent(dfa)
    rng = random.Random(seed)
    samples = list(extra)
    for source in (dfa, reference) * 6:
        sample = _sample(source, rng)
        cut = rng.randrange(len(sample) + 1)
        samples += [sample, sample[:cut], sample + b"x", sample[:cut] + b"\\" + sample[cut:]]
    for sample in samples:
        assert dfa.accepts(sample) == reference.accepts(sample), sample
    assert all(dfa.is_live(s) for s in range(dfa.num_states))
    return True


def test_case_insensitive_keywords_are_chains() -> None:
    from structgen.automata import literal_node

    # (Lark's "select"i folds ASCII only; a Unicode fold also takes ſ for s: a block of two)
    dfa = compile_ast(literal_node("select", ignore_case=True, ascii_case=True), limits=LIMITS)
    assert isinstance(dfa._source, LiteralSource)
    assert not dfa.accepts("ſelect".encode())
    unicode_fold = compile_regex("(?i:select)")
    assert isinstance(unicode_fold._source, LiteralSource)
    assert unicode_fold.accepts("ſElect".encode()) and not unicode_fold.accepts(b"selec")
    assert dfa.accepts(b"SeLeCt") and not dfa.accepts(b"selec") and not dfa.accepts(b"selectx")
    assert not isinstance(compile_regex("[a-z]+")._source, LiteralSource)
    accented = compile_regex("[éè]x")  # (a few code points: a block of their UTF-8 spellings)
    assert isinstance(accented._source, LiteralSource)
    assert accented.accepts("éx".encode()) and accented.accepts("èx".encode())
    assert not accented.accepts(b"ex") and not accented.accepts("é".encode())


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


def _reference(node: object) -> ByteDFA:
    nfa = build_nfa(node, max_states=LIMITS.max_nfa_states, pattern="ref")  # type: ignore[arg-type]
    return ByteDFA(NFASource(nfa), fingerprint="nfa", limits=LIMITS)


def _spell(text: str, rng: random.Random) -> bytes:
    """One of the spellings JSON allows for `text` (raw, short escapes, `\\uXXXX` in either
    case, surrogate pairs)."""
    out = []
    for ch in text:
        cp = ord(ch)
        short = {'"': '\\"', "\\": "\\\\", "/": "\\/", "\b": "\\b", "\f": "\\f", "\n": "\\n",
                 "\r": "\\r", "\t": "\\t"}.get(ch)  # fmt: skip
        raw_ok = cp >= 0x20 and ch not in '"\\'
        choice = rng.randrange(3)
        if choice == 0 and raw_ok:
            out.append(ch)
        elif choice == 1 and short:
            out.append(short)
        else:
            units = [cp] if cp < 0x10000 else [0xD800 + ((cp - 0x10000) >> 10),
                                               0xDC00 + ((cp - 0x10000) & 0x3FF)]  # fmt: skip
            for unit in units:
                digits = f"{unit:04x}"
                out.append("\\u" + "".join(d.upper() if rng.random() < 0.5 else d for d in digits))
    return "".join(out).encode()


KEYS = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12)


@settings(max_examples=150, deadline=None)
@given(KEYS, st.integers(0, 10**6))
def test_a_json_key_in_every_spelling_is_a_chain(text: str, seed: int) -> None:
    """A key's accept-mode language (each character raw, short-escaped or `\\uXXXX` in either
    case) is built as a chain; it accepts exactly the NFA path's spellings, and every spelling
    JSON allows decodes back to the key."""
    import json

    from structgen.automata import concat
    from structgen.schema._strings import literal_body

    node = concat([String('"'), literal_body(text), String('"')])
    dfa = compile_ast(node, limits=LIMITS)
    assert isinstance(dfa._source, LiteralSource)
    # the spine's rows are built at once, the escapes' when first read
    source = dfa._source
    assert dfa.num_states == source.num_laid_out == sum(b.width for b in source.blocks) + 1
    assert sum(dfa._built) == len(source.blocks) + 1
    rng = random.Random(seed)
    spelled = [b'"' + _spell(text, rng) + b'"' for _ in range(6)]
    for data in spelled:
        assert json.loads(data) == text
        assert dfa.accepts(data), data
    assert _agree(dfa, _reference(node), spelled, seed)


_PIECES = st.one_of(
    TEXTS.map(String),
    _ASCII_CLASSES.map(lambda r: __import__("structgen.automata").automata.CharClass(
        __import__("structgen.automata.intervals").automata.intervals.normalize(r))),
    st.lists(TEXTS, min_size=1, max_size=4).map(
        lambda words: __import__("structgen.automata").automata.alternation(
            [String(w) for w in words])),
)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(st.lists(_PIECES, min_size=1, max_size=5), st.lists(st.binary(max_size=8), max_size=4))
def test_any_chain_of_choices_is_the_nfa_automaton(items: list[object], extra: list[bytes]) -> None:
    """Literals, classes and choices of words in a row: a chain where each choice is
    prefix-free (no word a prefix of another), else the NFA path; the same language either
    way."""
    from structgen.automata import concat

    node = concat(items)  # type: ignore[arg-type]
    dfa = compile_ast(node, limits=LIMITS)
    assert _agree(dfa, _reference(node), extra, seed=len(items))


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(_PIECES, st.integers(1, 12)), min_size=1, max_size=4),
    st.lists(st.binary(max_size=8), max_size=4),
)
def test_fixed_repeats_of_choices_are_chains(
    items: list[tuple[object, int]], extra: list[bytes]
) -> None:
    """A class or choice repeated a fixed number of times (`[0-9a-f]{8}`) is that many blocks;
    the same language as the NFA path's."""
    from structgen.automata import Concat, Repeat

    parts = [
        Repeat(piece, n, n) if type(piece).__name__ != "String" else piece  # type: ignore[arg-type]
        for piece, n in items
    ]
    node = Concat(tuple(parts)) if len(parts) > 1 else parts[0]
    dfa = compile_ast(node, limits=LIMITS)  # type: ignore[arg-type]
    assert _agree(dfa, _reference(node), extra, seed=len(items))


def test_a_uuid_is_a_chain() -> None:
    hexes = "[0-9a-fA-F]"
    dfa = compile_regex(f"{hexes}{{8}}-{hexes}{{4}}-{hexes}{{4}}-{hexes}{{4}}-{hexes}{{12}}")
    assert isinstance(dfa._source, LiteralSource) and dfa.num_states == 37
    assert dfa.accepts(b"123e4567-e89b-12d3-a456-426614174000")
    assert not dfa.accepts(b"123e4567-e89b-12d3-a456-42661417400")
    assert not dfa.accepts(b"123e4567-e89b-12d3-a456-4266141740000")
    assert not isinstance(compile_regex("[0-9]{2,3}")._source, LiteralSource)  # (not fixed)
    assert not isinstance(compile_regex("(ab){3}")._source, LiteralSource)  # (a literal inside)


def test_what_is_not_a_chain() -> None:
    from structgen.automata import alternation, concat

    prefix = concat([String("x"), alternation([String("a"), String("ab")])])
    dfa = compile_ast(prefix, limits=LIMITS)  # (`a` is a prefix of `ab`: not prefix-free)
    assert not isinstance(dfa._source, LiteralSource)
    assert dfa.accepts(b"xa") and dfa.accepts(b"xab") and not dfa.accepts(b"xb")
    assert not isinstance(compile_regex("a(b|)")._source, LiteralSource)  # (a choice of "")
    assert not isinstance(compile_regex("[^a]x")._source, LiteralSource)  # (a wide class)


def test_chain_fingerprints_are_stable_and_tell_languages_apart() -> None:
    from structgen.automata import chain_dfa, concat
    from structgen.schema._strings import literal_body

    def key(text: str) -> ByteDFA:
        found = chain_dfa(concat([String('"'), literal_body(text), String('"')]))
        assert found is not None
        return found

    assert key("name").fingerprint == key("name").fingerprint
    assert len({key(t).fingerprint for t in ["name", "nam", "namе", "Name", "a/b"]}) == 5
    # (a chain's fingerprint does not depend on how its AST was spelled)
    assert (
        chain_dfa(String("ab")).fingerprint
        == chain_dfa(concat([String("a"), String("b")])).fingerprint
    )  # type: ignore[union-attr]


@settings(max_examples=60, deadline=None)
@given(KEYS)
def test_the_c_layout_is_what_numpy_writes(text: str) -> None:
    """`chain_arrays` (C) against the numpy fallback: the same table, accepting flags, built
    flags, spine, bytes read and classes."""
    from structgen.automata import chains, concat
    from structgen.schema._strings import literal_body

    if chains._CHAIN_ARRAYS is None:
        pytest.skip("the extension is not built")
    blocks = chains.chain_blocks(concat([String('"'), literal_body(text), String('"')]))
    assert blocks is not None
    native = chains.literal_dfa(blocks, fingerprint="x", limits=LIMITS)
    saved = chains._CHAIN_ARRAYS
    chains._CHAIN_ARRAYS = None
    try:
        fallback = chains.literal_dfa(blocks, fingerprint="x", limits=LIMITS)
    finally:
        chains._CHAIN_ARRAYS = saved
    assert np.array_equal(native._table, fallback._table)
    assert np.array_equal(native._accepting, fallback._accepting)
    assert np.array_equal(native.byte_classes, fallback.byte_classes)
    assert native.num_byte_classes == fallback.num_byte_classes
    assert native._built == fallback._built
    a, b = native._source, fallback._source
    assert (a.spine, a.final, a._used, a.num_classes) == (b.spine, b.final, b._used, b.num_classes)
    assert not native.byte_classes.flags.writeable and native._table.flags.writeable


def altered(block: Any, **changes: Any) -> Any:
    """A copy of a chain block with some fields changed (a malformed one, for the C checks)."""
    fields = ("moves", "first", "rank", "row", "used", "size", "width", "digest", "c_data")
    cls, values = block.__reduce__()
    return cls(*(changes.get(name, value) for name, value in zip(fields, values, strict=True)))


def test_chain_arrays_refuses_what_is_not_a_chain() -> None:
    from structgen.automata import chains

    if chains._CHAIN_ARRAYS is None:
        pytest.skip("the extension is not built")
    block = chains.chain_blocks(String("a"))[0]  # type: ignore[index]
    assert len(chains._CHAIN_ARRAYS([block])[0]) == 2 * 1024  # (one row per state, no spare)
    for bad in [[], [object()], [altered(block, row=b"short")], [altered(block, width=0)], 3]:
        with pytest.raises((ValueError, TypeError, AttributeError)):
            chains._CHAIN_ARRAYS(bad)


def test_a_key_chain_snapshots_and_rebuilds_past_its_snapshot() -> None:
    """A restored key automaton answers from its snapshot (the spine, one escape read), and
    past it (another escape) from a rebuilt chain, mapped state by state."""
    from structgen.automata import concat
    from structgen.schema._strings import literal_body

    node = concat([String('"'), literal_body("név"), String('"')])
    dfa = compile_ast(node, limits=LIMITS)
    assert dfa.accepts('"\\u006eév"'.encode())  # (builds the rows of the first escape only)
    restored = restore_dfa(snapshot_dfa(dfa), lambda: compile_ast(node, limits=LIMITS), LIMITS)
    assert restored.accepts(b'"\\u006e\\u00E9v"') and restored.accepts('"név"'.encode())
    assert restored.accepts(b'"n\\u00e9\\u0076"') and not restored.accepts(b'"n\\u00e9\\u0077"')
    assert not restored.accepts(b'"nev"') and not restored.accepts(b'"\\u006E\\u00e9v')


def _python_chain(node: object) -> ByteDFA:
    old = chains.NATIVE_CHAINS
    chains.NATIVE_CHAINS = False
    try:
        return compile_ast(node, limits=LIMITS)  # type: ignore[arg-type]
    finally:
        chains.NATIVE_CHAINS = old


def _build_all(dfa: ByteDFA, native: bool) -> None:
    old = chains.NATIVE_CHAINS
    chains.NATIVE_CHAINS = native
    try:
        dfa.build_all()
    finally:
        chains.NATIVE_CHAINS = old


@pytest.mark.skipif(_native_subset._CHAIN_CONTEXT is None, reason="the C chain rows are not built")
@settings(max_examples=120, deadline=None)
@given(
    st.one_of(
        KEYS.map(lambda text: ("key", text)),
        st.lists(_PIECES, min_size=1, max_size=4).map(lambda items: ("chain", items)),
    ),
    st.integers(0, 3),
)
def test_c_rows_are_the_python_rows(case: tuple[str, object], python_first: int) -> None:
    """Every row past the spine built in C (`NativeChain`) is the row `LiteralSource.expand`
    builds, state by state with equal keys — also when Python built some rows first and the
    chain then went to C (the deeper states it met handed over in its order), and after a
    pickle round trip."""
    from structgen.automata import concat
    from structgen.schema._strings import literal_body

    kind, value = case
    if kind == "key":
        node = concat([String('"'), literal_body(value), String('"')])  # type: ignore[arg-type]
    else:
        node = concat(value)  # type: ignore[arg-type]
    native = compile_ast(node, limits=LIMITS)
    if not isinstance(native._source, LiteralSource):
        return  # (not a chain: test_any_chain_of_choices_is_the_nfa_automaton)
    python = _python_chain(node)
    # some rows in Python first (deeper states interned there), then the rest in C
    rng = random.Random(python_first)
    old = chains.NATIVE_CHAINS
    chains.NATIVE_CHAINS = False
    try:
        for _ in range(python_first):
            native.accepts(_sample(native, rng))
            native.row(rng.randrange(native.num_states))
    finally:
        chains.NATIVE_CHAINS = old
    _build_all(native, True)
    _build_all(python, False)
    assert python._native is None
    went_native = native._native is not None
    assert went_native or (native.table != -2).all()
    n = _assert_isomorphic(native, python)
    assert n == native.num_states == python.num_states
    clone = pickle.loads(pickle.dumps(native))
    assert [clone.key_of(i) for i in range(n)] == [native.key_of(i) for i in range(n)]
    assert np.array_equal(clone.table, native.table)


@pytest.mark.skipif(_native_subset._CHAIN_CONTEXT is None, reason="the C chain rows are not built")
@pytest.mark.parametrize("one_call", [True, False])
def test_a_full_chain_table_grows_as_it_goes_to_c(
    one_call: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chain's table holds its laid-out states only: handed to C when a deeper state's row
    is first asked, it is grown in the same step (no GROW stop after it), the laid-out rows
    and flags kept, the spare rows filled by C as their states come — the rows are still the
    Python ones. The same whether the context takes the table and lays out its states in one
    call (`adopt_table`) or in three."""
    from structgen.automata import concat
    from structgen.schema._strings import literal_body

    if not one_call:
        monkeypatch.setattr(_native_subset, "_ADOPT_TABLE", None)

    node = concat([String('"'), literal_body("name"), String('"')])
    native, python = compile_ast(node, limits=LIMITS), _python_chain(node)
    assert isinstance(native._source, LiteralSource) and native._native is None
    rows = native._table.shape[0]
    assert native.num_states == rows  # (full)
    laid_out = native.table[:rows].copy()
    grows: list[int] = []
    grow = ByteDFA._grow

    def counting(self: ByteDFA) -> None:
        grows.append(1)
        grow(self)

    ByteDFA._grow = counting  # type: ignore[method-assign]
    try:
        state = native.start
        for byte in b'"\\u006e':  # (an escape: states past the laid-out ones)
            state = native.next_state(state, byte)
            assert state >= 0
    finally:
        ByteDFA._grow = grow  # type: ignore[method-assign]
    assert native._native is not None and not grows
    assert native._table.shape[0] == 2 * rows > native.num_states > rows
    assert np.array_equal(native.table[:rows][laid_out != -2], laid_out[laid_out != -2])
    _build_all(native, True)
    _build_all(python, False)
    assert _assert_isomorphic(native, python) == native.num_states


@pytest.mark.skipif(_native_subset._CHAIN_CONTEXT is None, reason="the C chain rows are not built")
def test_a_union_of_keys_builds_their_escapes_without_python() -> None:
    """A grammar lexer over key chains: once a key's chain is in C, the union's C rows read
    its escape rows there (no row requested from Python for it)."""
    from structgen.automata import concat
    from structgen.automata.dfa import UnionSource
    from structgen.schema._strings import literal_body

    keys = [
        compile_ast(concat([String('"'), literal_body(k), String('"')]), limits=LIMITS)
        for k in ("name", "nickname", "größe", "id")
    ]
    union = ByteDFA(UnionSource(keys), fingerprint="keys", limits=LIMITS)
    asked: list[int] = []
    for data in (b'"\\u006eame"', b'"n\\u0069ckname"', b'"gr\\u00f6\\u00DFe"'):
        state = union.start
        for byte in data:
            state = union.next_state(state, byte)
            assert state >= 0, data
        assert union.is_accepting(state)
    assert all(k._native is not None for k in keys[:3])
    native = union._native
    assert native is not None
    provide = type(native).provide_row

    def counting(self: object) -> None:
        asked.append(1)
        provide(self)  # type: ignore[arg-type]

    type(native).provide_row = counting  # type: ignore[method-assign]
    try:
        for data in (b'"\\u006E\\u0061me"', b'"ni\\u0063kname"'):
            state = union.start
            for byte in data:
                state = union.next_state(state, byte)
            assert union.is_accepting(state), data
    finally:
        type(native).provide_row = provide  # type: ignore[method-assign]
    assert not asked


@pytest.mark.skipif(_native_subset._CHAIN_CONTEXT is None, reason="the C chain rows are not built")
def test_chain_context_refuses_malformed_blocks() -> None:
    block = _blocks._set_block(1 << 65)
    for bad in [[], [object()], [altered(block, c_data=np.zeros(2, dtype=np.int32))], 3]:
        with pytest.raises((ValueError, TypeError, AttributeError)):
            _native_subset._CHAIN_CONTEXT(bad, 100)


def test_adopt_table_checks_its_arguments() -> None:
    adopt = _native_subset._ADOPT_TABLE
    if adopt is None:
        pytest.skip("the extension has no adopt_table")
    from structgen.automata import concat
    from structgen.schema._strings import literal_body

    node = concat([String('"'), literal_body("id"), String('"')])
    chain = compile_ast(node, limits=LIMITS)
    native = chain._source.make_native(LIMITS.max_dfa_states)
    assert isinstance(native, _native_subset.NativeChain)
    table = np.empty((16, 256), dtype=np.int32)
    accepting = np.zeros(16, dtype=np.uint8)
    with pytest.raises(TypeError, match="adopt_table"):
        adopt(native.ctx, table, accepting)
    with pytest.raises(ValueError, match="address 0"):
        adopt(0, table, accepting, 16, -1)
    with pytest.raises(ValueError, match="inconsistent"):
        adopt(native.ctx, table, accepting[:8], 16, -1)
    with pytest.raises(ValueError, match="inconsistent"):
        adopt(native.ctx, table, accepting, 17, -1)
    with pytest.raises(BufferError):
        adopt(native.ctx, table.tobytes(), accepting, 16, -1)  # (read-only)
    # a chain lays out what it is asked for, in the table it took
    laid_out = min(chain.num_states, 16)
    assert adopt(native.ctx, table, accepting, 16, laid_out) == laid_out
    assert native.num_states == laid_out
    assert list(accepting[:laid_out].astype(bool)) == [
        chain.is_accepting(q) for q in range(laid_out)
    ]


_REGEXES = st.text(alphabet="ab(|)[]{}2é\u4e00-", max_size=14)


@settings(max_examples=400, deadline=None)
@given(_REGEXES, st.sampled_from([1, 2, 4, 8, 64]))
def test_the_spelling_count_never_turns_away_a_block(pattern: str, limit: int) -> None:
    """`_node_block` counts a choice's spellings before listing them (an enum's words, each
    character spelled two ways, would list up to the limit first): wherever the listing
    succeeds, the count is its length, so the filter never refuses a chain."""
    from structgen.automata._blocks import _count_spellings, _spellings
    from structgen.automata.regex_syntax import parse_regex

    try:
        node = parse_regex(pattern)
    except Exception:  # (most random texts are no regex)
        return
    listed = _spellings(node, limit)
    if listed is not None:
        assert _count_spellings(node, limit) == len(listed)


@settings(max_examples=200, deadline=None)
@given(st.sets(st.integers(0, 255), min_size=1))
def test_a_one_byte_block_is_the_subset_construction(byte_set: set[int]) -> None:
    """The block of one byte from a set, written out directly, is the one the subset
    construction makes: every field, the digest and the C layout included."""
    from structgen.automata._blocks import _one_byte_block, _subset_block

    mask = sum(1 << b for b in byte_set)
    fast, slow = _one_byte_block(mask), _subset_block([(mask,)])
    assert slow is not None
    for name in ("moves", "first", "rank", "row", "used", "size", "width", "digest"):
        assert getattr(fast, name) == getattr(slow, name), name
    assert np.array_equal(fast.c_data, slow.c_data)
    assert fast.c_data.dtype == slow.c_data.dtype and not fast.c_data.flags.writeable


@settings(max_examples=100, deadline=None)
@given(
    st.lists(TEXTS, min_size=1, max_size=6),
    st.lists(st.sampled_from([r"[0-9]+", r"[a-z]*x", r"\s+", r"é|ü", r'"[^"\\]*"']), max_size=3),
)
def test_union_classes_join_literal_masks_first(texts: list[str], patterns: list[str]) -> None:
    """A literal chain's classes are its mask's (each byte read alone, the rest one class), so
    a union joins the chains as one mask: the same classes, numbered alike, as joining every
    part's array."""
    from structgen.automata.dfa import classes_of_mask, joint_classes, union_classes
    from structgen.schema._emitter import quoted
    from structgen.schema._strings import literal_body

    # JSON keys in every spelling: chains (`LiteralSource`), through C's layout
    parts = [automata.compile_ast(quoted(literal_body(t, canonical=False))) for t in texts]
    assert all(isinstance(p._source, LiteralSource) for p in parts)
    parts += [automata.compile_regex(p) for p in patterns]
    for part in parts:
        mask = part._source.classes_mask
        if mask is not None:
            assert part.byte_classes.tolist() == classes_of_mask(mask).tolist()
    want = joint_classes([p.byte_classes for p in parts]).tolist()
    assert union_classes(parts).tolist() == want  # (the mask's classes made in C)
    with pytest.MonkeyPatch.context() as patch:  # (... and in Python)
        patch.setattr(dfa_module, "_JOINT_CLASSES_MASKED", None)
        assert union_classes(parts).tolist() == want


def test_joint_classes_masked_refuses_bad_masks() -> None:
    from structgen.automata.dfa import _JOINT_CLASSES_MASKED

    if _JOINT_CLASSES_MASKED is None:
        pytest.skip("the C extension is not built")
    assert bytes(_JOINT_CLASSES_MASKED([], 0)) == bytes(256)  # (no byte read: one class)
    assert list(_JOINT_CLASSES_MASKED([], (1 << 256) - 1)) == list(range(256))
    for bad in (-1, 1 << 256):
        with pytest.raises(OverflowError):
            _JOINT_CLASSES_MASKED([], bad)
