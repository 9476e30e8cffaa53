"""Deferred chains (`DeferredChainSource`): a grammar terminal that is a chain of one-byte
blocks — a keyword of ASCII classes, a literal — answers what a lexer needs up front from the
blocks' byte sets, lays its chain out with its first row, and is then the automaton
`chain_dfa` builds at once: the same fingerprint, byte classes, rows, language and masks."""

from __future__ import annotations

import itertools
import pickle
import random
from collections.abc import Callable

import numpy as np
import pytest

import structgen
from structgen import (
    CompiledGrammar,
    Compiler,
    Matcher,
    SchemaOptions,
    Vocabulary,
    allocate_bitmask,
)
from structgen import automata as automata_module
from structgen.automata import Difference, _native_subset, compile_ast, parse_regex
from structgen.automata._blocks import (
    byte_chain,
    byte_chain_blocks,
    byte_chain_fingerprint,
    chain_blocks,
    chain_fingerprint,
)
from structgen.automata.chains import DeferredChainSource, LiteralSource
from structgen.grammar.lark_frontend import lark_to_ir, load_builtin
from structgen.schema import compile_schema
from tests.automata.test_deferred import start_rows_read_by_threads
from tests.conftest import load_tokenizer

SQL = lark_to_ir(load_builtin("sql_select"))
KEYWORDS = [t.pattern for t in SQL.terminals if byte_chain(t.pattern) is not None]
BYTE_CHAINS = [
    *KEYWORDS,
    parse_regex("true"),
    parse_regex("[Ss][Ee][Ll]"),
    parse_regex("a[b-d]é[xX]"),  # (é: a literal of two bytes, two blocks)
    parse_regex(r"\{"),
    parse_regex("[\x00-\x7f]z"),
]


def _key_chains() -> list[object]:
    """An accept-mode schema's chains that are not of one-byte blocks: its keys in every
    spelling (a character raw or as a `\\uXXXX` escape)."""
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "größe": {"enum": ["klein", "groß", None]}},
    }
    grammar = compile_schema(schema, options=SchemaOptions(mode="accept"))
    plain = [t.pattern for t in grammar.terminals if not t.intersect]
    nodes = [p for p in plain if not isinstance(p, Difference)]
    return [p for p in nodes if chain_blocks(p) is not None and byte_chain(p) is None]


KEY_CHAINS = _key_chains()
NOT_BYTE_CHAINS = [
    parse_regex("[a-zé]x"),  # a class with a code point of two bytes: `chain_blocks` decides
    parse_regex("[a-z]+"),
    parse_regex("ab|cd"),
    parse_regex("[0-9a-f]{8}"),
    parse_regex(""),
]


def test_the_sql_grammar_has_keywords_and_the_schema_keys() -> None:
    assert len(KEYWORDS) >= 30  # (SELECT, FROM, ... and the punctuation)
    assert len(KEY_CHAINS) >= 2  # ("name", "größe")


@pytest.mark.parametrize("node", BYTE_CHAINS)
def test_byte_chains_are_the_blocks_chain_blocks_makes(node: object) -> None:
    masks = byte_chain(node)  # type: ignore[arg-type]
    blocks = chain_blocks(node)  # type: ignore[arg-type]
    assert masks is not None and blocks is not None
    made = byte_chain_blocks(masks)
    assert [b.digest for b in made] == [b.digest for b in blocks]
    assert [b.used for b in made] == [b.used for b in blocks] == masks
    assert byte_chain_fingerprint(masks) == chain_fingerprint(blocks)


@pytest.mark.parametrize("node", NOT_BYTE_CHAINS)
def test_other_nodes_are_not_byte_chains(node: object) -> None:
    assert byte_chain(node) is None  # type: ignore[arg-type]
    dfa = compile_ast(node, defer=True)  # type: ignore[arg-type]
    if chain_blocks(node) is None:  # type: ignore[arg-type]
        assert not isinstance(dfa._source, DeferredChainSource)
    else:  # (a chain all the same, deferred with the blocks made)
        assert isinstance(dfa._source, DeferredChainSource) and dfa._source.blocks


def _samples(node: object) -> list[bytes]:
    eager = compile_ast(node)  # type: ignore[arg-type]
    alphabet = bytes(b for b in range(256) if eager.alphabet >> b & 1)[:5] + b"_"
    rng = random.Random(0)
    out = [b""]
    for n in (1, 2, 3):
        out += [bytes(p) for p in itertools.product(alphabet, repeat=n)]
    for _ in range(200):  # prefixes of accepted texts, with a byte changed now and then
        text = bytearray()
        state = eager.start
        while not eager.is_accepting(state) or rng.random() < 0.2:
            row = eager.row(state)
            live = [b for b in range(256) if row[b] >= 0]
            if not live:
                break
            byte = rng.choice(live)
            text.append(byte)
            state = int(row[byte])
        if text and rng.random() < 0.3:
            text[rng.randrange(len(text))] = rng.randrange(256)
        out.append(
            bytes(text[: rng.randrange(len(text) + 1)]) if rng.random() < 0.3 else bytes(text)
        )
    return out


@pytest.mark.parametrize("node", BYTE_CHAINS + KEY_CHAINS)
def test_a_deferred_chain_is_the_eager_one(node: object) -> None:
    structgen.clear_caches()
    deferred = compile_ast(node, defer=True)  # type: ignore[arg-type]
    eager = compile_ast(node)  # type: ignore[arg-type]
    assert deferred.is_deferred and isinstance(deferred._source, DeferredChainSource)
    assert isinstance(eager._source, LiteralSource)
    # what a lexer reads before the first row: the same
    assert deferred.fingerprint == eager.fingerprint
    assert np.array_equal(deferred.byte_classes, eager.byte_classes)
    assert deferred.num_byte_classes == eager.num_byte_classes
    assert deferred.alphabet == eager.alphabet
    assert deferred._source.classes_mask == eager._source.classes_mask
    assert deferred._source.finite and not deferred.is_accepting(deferred.start)
    assert not deferred.is_empty and deferred.is_live(deferred.start)
    clone = pickle.loads(pickle.dumps(deferred))  # (before its first row)
    samples = _samples(node)
    assert any(eager.accepts(s) for s in samples)
    for data in samples:
        assert deferred.accepts(data) == eager.accepts(data), data
    assert not deferred.is_deferred and isinstance(deferred._source, LiteralSource)
    eager.build_all()
    deferred.build_all()  # (a key's states inside its escapes too)
    n = eager.num_states
    assert deferred.num_states == n
    assert np.array_equal(deferred.table[:n], eager.table[:n])
    assert np.array_equal(deferred.accepting[:n], eager.accepting[:n])
    for data in samples:
        assert clone.accepts(data) == eager.accepts(data), data


@pytest.mark.parametrize("node", BYTE_CHAINS)
def test_a_byte_chain_is_laid_out_from_its_byte_sets_as_from_its_blocks(node: object) -> None:
    """`byte_chain_arrays` (C, no blocks made) against `lay_out_chain` of the blocks: the same
    arrays and source; the blocks are made when asked for. (Byte sets past bit 63 too: a class
    of ASCII, a byte of é.)"""
    from structgen.automata import chains

    masks = byte_chain(node)  # type: ignore[arg-type]
    assert masks is not None
    deferred = DeferredChainSource(masks)
    source, table, accepting, built = deferred.lay_out()
    blocks = byte_chain_blocks(masks)
    want_source, want_table, want_accepting, want_built = chains.lay_out_chain(blocks)
    assert np.array_equal(table, want_table)
    assert np.array_equal(accepting, want_accepting)
    assert bytes(built) == bytes(want_built)
    assert source.spine == want_source.spine and source.final == want_source.final
    assert np.array_equal(source.byte_classes, want_source.byte_classes)
    assert source.num_classes == want_source.num_classes
    assert source.classes_mask == want_source.classes_mask
    if chains._BYTE_CHAIN_ARRAYS is not None:
        assert source._blocks is None  # (not made: every state is laid out)
    assert [b.digest for b in source.blocks] == [b.digest for b in blocks]


def test_byte_chain_arrays_refuses_what_is_not_a_chain_of_byte_sets() -> None:
    from structgen.automata import chains

    lay_out = chains._BYTE_CHAIN_ARRAYS
    if lay_out is None:
        pytest.skip("the C extension is not built")
    for bad, error in (([], ValueError), ([0], ValueError), ([1 << 256], OverflowError)):
        with pytest.raises(error):
            lay_out(bad)
    with pytest.raises(TypeError):
        lay_out(["a"])
    with pytest.raises((OverflowError, ValueError)):
        lay_out([-1])


def test_threads_lay_out_a_deferred_chain_once() -> None:
    structgen.clear_caches()
    dfa = compile_ast(KEYWORDS[2], defer=True)
    assert dfa.is_deferred
    read = start_rows_read_by_threads(dfa)
    rows = [row for row, _ in read]
    sources = [source for _, source in read]
    assert all(np.array_equal(r, rows[0]) for r in rows)
    assert all(s is sources[0] for s in sources)
    assert np.array_equal(rows[0], compile_ast(KEYWORDS[2]).row(0))


def test_sql_masks_are_the_same_with_and_without_deferred_chains(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The SQL grammar's masks along random token paths (a keyword read first at a later step
    lays its chain out inside that step's walk), with the chains deferred and built at once
    (fresh automata each way)."""
    tokenizer = load_tokenizer("gpt2")
    vocab = Vocabulary.from_hf(tokenizer)
    grammar = load_builtin("sql_select")
    starts = ["SELECT a, b FROM t WHERE x = 1", "select distinct * from t order by a desc"]

    def masks(defer: bool, paths: list[list[int]] | None) -> tuple[list[list[int]], list[bytes]]:
        monkeypatch.setattr(automata_module, "DEFER_CHAINS", defer)
        structgen.clear_caches()
        compiled = Compiler(vocab).grammar(grammar)
        rng = random.Random(7)
        bitmask = allocate_bitmask(1, vocab.size, backend="numpy")
        out: list[bytes] = []
        made: list[list[int]] = []
        for p, text in enumerate(starts * 2):
            matcher = Matcher(compiled)
            tokens = tokenizer.encode(text)[: 3 + p] if paths is None else paths[p]
            path: list[int] = []
            for step in range(len(tokens) + 8 if paths is None else len(paths[p])):
                matcher.fill_bitmask(bitmask, 0)
                out.append(bytes(bitmask.tobytes()))
                if paths is not None:
                    token = paths[p][step]
                elif step < len(tokens):
                    token = tokens[step]
                else:
                    bits = np.unpackbits(bitmask[0].view(np.uint8), bitorder="little")
                    allowed = [t for t in np.flatnonzero(bits[: vocab.size]).tolist()
                               if t not in vocab.eos_token_ids]  # fmt: skip
                    if not allowed:
                        break
                    token = rng.choice(allowed)
                assert matcher.accept_token(token)
                path.append(token)
            matcher.fill_bitmask(bitmask, 0)
            out.append(bytes(bitmask.tobytes()))
            made.append(path)
        return made, out

    paths, deferred = masks(True, None)
    assert sum(len(p) for p in paths) > 40
    _, eager = masks(False, paths)
    structgen.clear_caches()
    assert deferred == eager


def test_a_lexer_lays_its_byte_chains_out_in_c_as_they_are() -> None:
    """A union's C context lays out the byte chains among its components itself when a row
    first needs them (`lay_out_chain` in `_subset.c`; their own automata stay deferred): the
    union is the one over chains laid out in Python, state by state. Then one chain is laid out
    in Python after all, and the context takes its arrays over: the rows still agree."""
    from structgen.automata import AutomataLimits, _native_subset, compile_regex
    from structgen.automata import dfa as dfa_module
    from structgen.automata.dfa import ByteDFA, UnionSource
    from tests.automata.test_native_subset import _assert_isomorphic

    if not _native_subset.native_subset_available() or _native_subset._UNION_CONTEXT is None:
        pytest.skip("the C union is not built")
    structgen.clear_caches()
    regexes = [r"[a-z_][a-z0-9_]*", r"[ \t\n]+", r"-?[0-9]+"]

    def union(defer: bool, native: bool) -> ByteDFA:
        parts = [compile_ast(node, defer=defer) for node in BYTE_CHAINS]  # type: ignore[arg-type]
        parts += [compile_regex(p) for p in regexes]
        old = dfa_module.NATIVE_UNION
        dfa_module.NATIVE_UNION = native
        try:
            d = ByteDFA(UnionSource(parts), fingerprint="chains", limits=AutomataLimits())
            d.row(d.start)
        finally:
            dfa_module.NATIVE_UNION = old
        return d

    in_c = union(True, True)
    chains = in_c._source.parts[: len(BYTE_CHAINS)]  # type: ignore[attr-defined]
    assert in_c._native is not None
    assert all(part.chain_bytes is not None for part in chains)
    in_python = union(False, False)
    old = dfa_module.NATIVE_UNION
    try:
        dfa_module.NATIVE_UNION = False  # (the Python union keeps building in Python)
        n = _assert_isomorphic(in_c, in_python)
    finally:
        dfa_module.NATIVE_UNION = old
    assert n == in_c.num_states > 30
    # C laid every chain the union read out itself: their own automata never built a row
    assert all(part.is_deferred for part in chains)
    for data in (b"select", b"SELECT x", b"true", b"{", b"a\xc3\xa9X", b"Sel", b"zz"):
        assert in_c.accepts(data) == in_python.accepts(data), data
    # one chain laid out in Python now: the context reads its arrays from here on
    fresh = union(True, True)
    keyword = fresh._source.parts[0]  # type: ignore[attr-defined]
    keyword.row(keyword.start)
    assert not keyword.is_deferred and keyword.chain_bytes is None
    fresh._native.refresh_part(0)  # type: ignore[union-attr]
    try:
        dfa_module.NATIVE_UNION = False
        assert _assert_isomorphic(fresh, in_python) == n
    finally:
        dfa_module.NATIVE_UNION = old


def test_union_context_checks_the_chains_it_is_given() -> None:
    from structgen.automata import _native_subset, compile_regex

    make = _native_subset._UNION_CONTEXT
    if make is None:
        pytest.skip("the extension has no union_context")
    parts = [compile_regex("ab"), compile_regex("[0-9]+")]
    fields = [p.part_fields for p in parts]
    classes = bytes(256)
    union = _native_subset.UNION
    for chains, error in (
        ([None], ValueError),  # (one per component)
        ([(), None], ValueError),
        ([[1, 2], None], ValueError),  # (a tuple)
        ([("a",), None], TypeError),
        ([(-1,), None], OverflowError),
        ([(1 << 256,), None], OverflowError),
        (5, TypeError),
    ):
        with pytest.raises(error):
            make(fields, classes, 100, union, None, 0, -1, chains)
    owner, address = make(fields, classes, 100, union, None, 0, -1, [(1 << 97, 1 << 200), None])
    assert address
    owner, address = make(fields, classes, 100, union, None, 0, -1, None)
    assert address
    del owner


NEWSLETTER = {
    "type": "object",
    "properties": {
        "email": {"type": "string"},
        "newsletter": {
            "type": "object",
            "properties": {
                "newsletter_id": {"type": "string"},
                "newsletter_send_id": {"type": "string"},
                "newsletter_user_list_id": {"type": "string"},
            },
        },
    },
    "additionalProperties": True,
}
NEWSLETTER_TEXT = (
    '{"email": "P{2", "newsletter": {"newsletter_id": "8`Y", "newsletter_send_id": "K~4", '
    '"newsletter_user_list_id": "a1m"}, "x": 1}'
)


def _masks_along(compile_fresh: Callable[[], CompiledGrammar], ids: list[int]) -> list[np.ndarray]:
    """The masks along `ids` (a complete text) of a grammar compiled with every cache cleared."""
    structgen.clear_caches()
    matcher = Matcher(compile_fresh())
    out = []
    for token in ids:
        out.append(matcher.allowed_mask().copy())
        assert matcher.accept_token(token)
    assert matcher.can_terminate()
    return out


def test_a_lexer_whose_key_python_reads_knows_the_chains_c_laid_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where C cannot say which terminals accept in a lexer state (`NativeUnion.accepted`
    None), Python reads the state's key: a key chain the union's C context laid out itself is
    still deferred in Python, and its flags were the shared unbuilt arrays (16 states, none
    accepting) — a key of 16 bytes or more raised IndexError, a shorter one was never seen to
    end. Python now lays such a chain out before reading it: the masks along a text are those
    C's answers give."""
    tokenizer = load_tokenizer("llama3_1")
    vocab = Vocabulary.from_hf(tokenizer)
    ids = tokenizer.encode(NEWSLETTER_TEXT, add_special_tokens=False)

    def masks() -> list[np.ndarray]:
        return _masks_along(lambda: Compiler(vocab).json_schema(NEWSLETTER), ids)

    answered = _native_subset.NativeUnion.accepted
    unknown = []

    def counted(self: _native_subset.NativeUnion, state: int) -> object:
        found = answered(self, state)
        if found is None:
            unknown.append(state)
        return found

    monkeypatch.setattr(_native_subset.NativeUnion, "accepted", counted)
    with_c = masks()
    # (C answers for components with a C builder past the count Python last gave it: the
    # "any other key" difference grows its own table)
    assert not unknown or _native_subset._UNION_ACCEPTED is None
    monkeypatch.setattr(_native_subset.NativeUnion, "accepted", lambda self, state: None)
    from_keys = masks()
    assert all(np.array_equal(a, b) for a, b in zip(with_c, from_keys, strict=True))


@pytest.mark.parametrize("node", KEY_CHAINS)
def test_a_key_chain_goes_to_its_c_context_with_its_first_row(
    node: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deferred chain of blocks (a key in every spelling) is laid out straight into its C
    context at its first row (`chain_started`): the same states, rows and language as a chain
    laid out in Python and handed to C at its first row past the spine; a pickle of it too."""
    from structgen.automata import chains

    if chains._CHAIN_STARTED is None:
        pytest.skip("the C extension is not built")
    structgen.clear_caches()
    direct = compile_ast(node, defer=True)  # type: ignore[arg-type]
    direct.row(direct.start)
    assert direct.native_states is not None and isinstance(direct._source, LiteralSource)
    monkeypatch.setattr(chains, "_CHAIN_STARTED", None)
    structgen.clear_caches()
    handed = compile_ast(node, defer=True)  # type: ignore[arg-type]
    handed.row(handed.start)
    assert handed.native_states is None  # (Python's lay-out: spine rows only)
    samples = _samples(node)
    for data in samples:
        assert direct.accepts(data) == handed.accepts(data), data
    direct.build_all()
    handed.build_all()
    n = handed.num_states
    assert direct.num_states == n
    assert np.array_equal(direct.table[:n], handed.table[:n])
    assert np.array_equal(direct.accepting[:n], handed.accepting[:n])
    clone = pickle.loads(pickle.dumps(direct))
    for data in samples:
        assert clone.accepts(data) == handed.accepts(data), data


def test_accept_mode_masks_are_the_same_with_key_chains_laid_out_in_c(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An accept-mode schema's masks along a text whose keys are spelled with escapes, with
    its key chains laid out into C at once and laid out in Python first."""
    from structgen.automata import chains

    tokenizer = load_tokenizer("llama3_1")
    vocab = Vocabulary.from_hf(tokenizer)
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "größe": {"enum": ["klein", "groß", None]}},
        "additionalProperties": {"type": "integer"},
    }
    text = '{"n\\u0061me": "x", "gr\\u00f6\\u00DFe": "groß", "other": 1, "na": 2}'
    ids = tokenizer.encode(text, add_special_tokens=False)

    def masks() -> list[np.ndarray]:
        accept = SchemaOptions(mode="accept")
        return _masks_along(lambda: Compiler(vocab).json_schema(schema, options=accept), ids)

    direct = masks()
    monkeypatch.setattr(chains, "_CHAIN_STARTED", None)
    handed = masks()
    structgen.clear_caches()
    assert all(np.array_equal(a, b) for a, b in zip(direct, handed, strict=True))


def test_only_a_chain_of_blocks_under_1024_states_goes_to_c_at_once() -> None:
    """`lay_out_native` makes nothing (not even a table) for a chain of one-byte blocks, whose
    states are all laid out, nor for one of 1,024 laid-out states or more (C would stop for a
    budget check on the way): Python lays those out, and the automaton is the same."""
    from structgen.automata import AutomataLimits, chains
    from structgen.automata.dfa import ByteDFA

    def no_table(states: int, native: bool) -> int:
        raise AssertionError("no table is made")

    masks = byte_chain(parse_regex("[Ss][Ee][Ll]"))
    assert masks is not None
    assert DeferredChainSource(masks).lay_out_native(1000, no_table) is None
    long_masks = [1 << ord("a") + i % 26 for i in range(1100)]
    blocks = byte_chain_blocks(long_masks)
    deferred = DeferredChainSource(long_masks, blocks)
    assert deferred.lay_out_native(10**6, no_table) is None
    limits = AutomataLimits(max_dfa_states=10**6)
    dfa = ByteDFA.unbuilt(deferred, fingerprint=chain_fingerprint(blocks), limits=limits)
    text = bytes(ord("a") + i % 26 for i in range(1100))
    assert dfa.accepts(text) and not dfa.accepts(text[:-1])
    assert dfa.native_states is None or not isinstance(dfa._source, DeferredChainSource)
    if chains._CHAIN_STARTED is not None:
        short = DeferredChainSource(long_masks[:20], blocks[:20])
        made = short.lay_out_native(1000, lambda states, native: 2 * states)
        assert made is not None
        source, native, table, accepting = made
        assert table.shape == (42, 256) and accepting.shape == (42,)
        assert native.num_states == 21 and source.final == 20
