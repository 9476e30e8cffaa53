"""Deferred terminal NFAs (`DeferredNFASource`): a terminal's automaton answers what a lexer
needs up front from its AST, builds its NFA with its first row, and is then the same automaton
as one built at once — same byte classes, same start, same language, same masks."""

from __future__ import annotations

import itertools
import json
import pickle
import random
import threading

import numpy as np
import pytest

from structgen import Compiler, Matcher, SchemaOptions, Vocabulary, allocate_bitmask
from structgen.automata import AutomataLimits, Difference, compile_ast, nfa, parse_regex
from structgen.automata.chains import chain_blocks
from structgen.errors import RegexError
from structgen.grammar import terminals
from structgen.schema import compile_schema
from tests.conftest import load_tokenizer

pytestmark = pytest.mark.skipif(nfa._thompson() is None, reason="the C NFA builder is not built")

PATTERNS = [
    r'"(?:[^"\\]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4}){0,40}"',
    r"-?(?:0|[1-9][0-9]{0,6})(?:\.[0-9]{1,3})?",
    r'"(?:n|\\u006[Ee])(?:a|\\u0061)(?:m|\\u006[Dd])(?:e|\\u0065)"',
    r"[\w.-]{2,40}@x",
    r"(?:ab|)*c{3,9}(?:é|ß){0,4}",
]


def _schema_terminals() -> list[object]:
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 12},
            "größe": {"type": "number", "minimum": -3, "maximum": 900},
            "tags": {"type": "array", "items": {"enum": ["a", "b\\c", "ü"]}},
        },
        "additionalProperties": {"type": "integer"},
    }
    grammar = compile_schema(schema, options=SchemaOptions(mode="accept"))
    # (the other keys are a `Difference`, which has no NFA to defer: test_difference.py)
    plain = [t.pattern for t in grammar.terminals if not t.intersect]
    return [p for p in plain if not isinstance(p, Difference)]


def _strings(alphabet: bytes, length: int) -> list[bytes]:
    out = [b""]
    for n in range(1, length + 1):
        out += [bytes(p) for p in itertools.product(alphabet, repeat=n)]
    return out


@pytest.mark.parametrize("node", [parse_regex(p) for p in PATTERNS] + _schema_terminals())
def test_a_deferred_automaton_is_the_eager_one(node: object) -> None:
    deferred = compile_ast(node, defer=True)  # type: ignore[arg-type]
    eager = compile_ast(node)  # type: ignore[arg-type]
    if chain_blocks(node) is not None:  # type: ignore[arg-type]
        # (a key, a literal: laid out with its first row, test_deferred_chain.py)
        assert deferred.is_deferred and type(deferred._source).__name__ == "DeferredChainSource"
        return
    if nfa.node_program(node).nfa_size + 1 <= nfa.NATIVE_ABOVE:  # type: ignore[arg-type]
        assert not deferred.is_deferred  # (small NFAs are built in Python, at once)
        return
    assert deferred.is_deferred
    # what a lexer reads before the first row: the same
    assert np.array_equal(deferred.byte_classes, eager.byte_classes)
    assert deferred.alphabet == eager.alphabet
    assert deferred.is_accepting(deferred.start) == eager.is_accepting(eager.start)
    assert not deferred.is_empty and deferred.is_live(deferred.start)
    # the same language: every short string over the bytes it reads, and random longer ones
    reps = b'"\\u006eEnamN0123-.9xbcr@' + "éßü".encode()
    rng = random.Random(0)
    samples = _strings(reps[:7], 3) + [
        bytes(rng.choice(reps) for _ in range(rng.randrange(1, 30))) for _ in range(300)
    ]
    for data in samples:
        assert deferred.accepts(data) == eager.accepts(data), data
    assert not deferred.is_deferred  # (built by the first row)
    assert np.array_equal(deferred.row(deferred.start), eager.row(eager.start))
    # its start made in C from the NFA's arrays: the same key, no lists read from them
    assert deferred.key_of(deferred.start) == eager.key_of(eager.start)
    assert deferred._source.nfa._kind is None  # type: ignore[attr-defined]
    # and it pickles and comes back the same (the lists made on demand there)
    clone = pickle.loads(pickle.dumps(deferred))
    for data in samples[:200]:
        assert clone.accepts(data) == eager.accepts(data), data


def test_limits_and_empty_languages_are_decided_at_once() -> None:
    """Over the NFA limit: the compile fails now, as without deferral; a language that may be
    empty (a lone surrogate, an empty alternation) is built at once, and is empty."""
    big = parse_regex(r'"[a-z]{2000}"')
    with pytest.raises(RegexError, match="max_nfa_states"):
        compile_ast(big, defer=True, limits=AutomataLimits(max_nfa_states=500))
    empty = parse_regex(r"\ud800(?:abcdefghij){5}")
    dfa = compile_ast(empty, defer=True)
    assert not dfa.is_deferred and dfa.is_empty


def test_threads_build_a_deferred_automaton_once() -> None:
    node = parse_regex(PATTERNS[0])
    dfa = compile_ast(node, defer=True)
    assert dfa.is_deferred
    rows = [row for row, _ in start_rows_read_by_threads(dfa)]
    assert all(np.array_equal(r, rows[0]) for r in rows)
    assert np.array_equal(rows[0], compile_ast(node).row(0))


def start_rows_read_by_threads(dfa: object, n: int = 4) -> list[tuple[np.ndarray, object]]:
    """`n` threads released at once each read `dfa`'s start row: (the row, the source the
    automaton had just after) per thread."""
    out: list[tuple[np.ndarray, object]] = []
    barrier = threading.Barrier(n)

    def read() -> None:
        barrier.wait()
        row = np.array(dfa.row(dfa.start))  # type: ignore[attr-defined]
        out.append((row, dfa._source))  # type: ignore[attr-defined]

    threads = [threading.Thread(target=read) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def test_grammar_masks_are_the_same_with_and_without_deferral(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A schema's masks along valid and invalid texts, token by token, with the terminals'
    NFAs deferred and built at once (fresh automata each way)."""
    tokenizer = load_tokenizer("gpt2")
    vocab = Vocabulary.from_hf(tokenizer)
    schema = {
        "type": "object",
        "properties": {
            "title": {"type": "string", "maxLength": 20},
            "count": {"type": "integer", "minimum": 0},
            "labels": {"type": "array", "items": {"type": "string", "pattern": "^[a-z]+$"}},
        },
        "required": ["title"],
    }
    texts = [
        json.dumps({"title": "Das Rätsel", "count": 3, "labels": ["x", "yz"]}),
        json.dumps({"title": "x" * 25}),
        '{"count": 2, "title": "\\u0041b"}',
    ]

    def masks(defer: bool) -> list[bytes]:
        monkeypatch.setattr(terminals, "DEFER_NFAS", defer)
        terminals.clear_terminal_automata()
        from structgen import compiler

        compiler._CACHE.clear()
        compiled = Compiler(vocab).json_schema(schema, options=SchemaOptions(mode="accept"))
        out = []
        bitmask = allocate_bitmask(1, vocab.size, backend="numpy")
        for text in texts:
            matcher = Matcher(compiled)
            for token in tokenizer.encode(text):
                matcher.fill_bitmask(bitmask, 0)
                out.append(bytes(bitmask.tobytes()))
                if not matcher.accept_token(token):
                    break
            matcher.fill_bitmask(bitmask, 0)
            out.append(bytes(bitmask.tobytes()))
        return out

    assert masks(True) == masks(False)


def test_the_start_made_in_one_call_is_the_start_made_in_four(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`subset_started` (context, table, budget and start in one C call) against the calls it
    replaces: the same states, rows and acceptance, state by state."""
    from structgen.automata import _native_subset

    if _native_subset._SUBSET_STARTED is None:
        pytest.skip("the extension has no subset_started")
    node = parse_regex(PATTERNS[0])
    one = compile_ast(node, defer=True)
    one.row(one.start)
    monkeypatch.setattr(_native_subset, "_SUBSET_STARTED", None)
    monkeypatch.setattr(nfa, "_NFA_STARTED", None)  # (else the NFA's one call makes it)
    four = compile_ast(node, defer=True)
    four.row(four.start)
    assert isinstance(one._native, _native_subset.NativeSubset)  # type: ignore[attr-defined]
    assert isinstance(four._native, _native_subset.NativeSubset)  # type: ignore[attr-defined]
    assert one.build_all() == four.build_all()
    n = one.num_states
    assert np.array_equal(one.table[:n], four.table[:n])
    assert np.array_equal(one.accepting[:n], four.accepting[:n])
    assert [one.key_of(s) for s in range(n)] == [four.key_of(s) for s in range(n)]


@pytest.mark.parametrize("node", [parse_regex(p) for p in PATTERNS] + _schema_terminals())
def test_the_nfa_and_start_made_in_one_call_are_those_made_step_by_step(
    node: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`nfa_started` (pool, NFA, context and start in one C call, `build_nfa_started`) against
    `build_nfa` and `subset_started`: the same NFA arrays and pool, and state by state the same
    automaton."""
    from structgen.automata import _native_subset

    if nfa._NFA_STARTED is None:
        pytest.skip("the extension has no nfa_started")
    one = compile_ast(node, defer=True)  # type: ignore[arg-type]
    if not one.is_deferred or chain_blocks(node) is not None:  # type: ignore[arg-type]
        return  # (a small NFA: built at once; a chain: no NFA)
    one.row(one.start)
    with monkeypatch.context() as patched:
        patched.setattr(nfa, "_NFA_STARTED", None)
        steps = compile_ast(node, defer=True)  # type: ignore[arg-type]
        steps.row(steps.start)
    a, b = one._source.nfa, steps._source.nfa  # type: ignore[attr-defined]
    assert a._kind is None and a._arrays is None  # (nothing read from C's bytes yet)
    assert isinstance(one._native, _native_subset.NativeSubset)  # type: ignore[attr-defined]
    assert len(a) == len(b) and a.start == b.start and a.ranges == b.ranges
    for x, y in zip(a.arrays, b.arrays, strict=True):  # type: ignore[arg-type]
        assert x.dtype == y.dtype and np.array_equal(x, y)
    assert len(a.pool) == len(b.pool) and a.pool.bases == b.pool.bases
    assert [a.pool[i] for i in range(len(a.pool))] == [b.pool[i] for i in range(len(b.pool))]
    for x, y in zip(a.pool.arrays(), b.pool.arrays(), strict=True):
        assert np.array_equal(x, y)
    assert one.build_all() == steps.build_all()
    n = one.num_states
    assert np.array_equal(one.table[:n], steps.table[:n])
    assert np.array_equal(one.accepting[:n], steps.accepting[:n])
    assert [one.key_of(s) for s in range(n)] == [steps.key_of(s) for s in range(n)]
    assert a.kind == b.kind and a.live == b.live and list(a.eps) == list(b.eps)


def test_nfa_started_checks_its_arguments() -> None:
    started = nfa.extension_function("nfa_started")
    if started is None:
        pytest.skip("the extension has no nfa_started")
    program = nfa.node_program(parse_regex(PATTERNS[1]))
    leaves = nfa.leaf_pieces(program)
    table = np.full((16, 256), -2, dtype=np.int32)
    accepting = np.zeros(16, dtype=np.uint8)
    classes = np.zeros(256, dtype=np.uint8)
    tables = (program.typ, program.arg_a, program.arg_b, program.offsets, program.children)
    top, at = program.top, program.leaf_at
    with pytest.raises(TypeError, match="nfa_started"):
        started(*tables, top, at, leaves.pieces)
    with pytest.raises(ValueError, match="one leaf entry per piece"):
        started(*tables, top, at[:-1], leaves.pieces, classes, 10, table, accepting)
    with pytest.raises(ValueError, match="out of range"):
        started(*tables, top, [10**6] * len(at), leaves.pieces, classes, 10, table, accepting)
    with pytest.raises(ValueError, match="inconsistent"):
        started(*tables, top, at, leaves.pieces, classes[:100], 10, table, accepting)
    with pytest.raises(ValueError, match="inconsistent program tables"):
        entries = len(nfa.column(program.typ))
        started(*tables[:4], tables[4], entries, at, leaves.pieces, classes, 10, table, accepting)
    bases, start, arrays, owner, address, sid = started(
        *tables, top, at, leaves.pieces, classes, 10, table, accepting
    )
    assert bases[0] == 0 and len(arrays) == 11 and address and sid == 0 and start >= 0
    del owner  # (frees the context)


def test_subset_started_checks_its_arguments() -> None:
    started = nfa.extension_function("subset_started")
    if started is None:
        pytest.skip("the extension has no subset_started")
    table = np.full((16, 256), -2, dtype=np.int32)
    accepting = np.zeros(16, dtype=np.uint8)
    kind = np.zeros(1, dtype=np.int8)
    live = np.ones(1, dtype=np.uint8)
    one = np.zeros(1, dtype=np.int32)
    two = np.zeros(2, dtype=np.int32)
    classes = np.zeros(256, dtype=np.uint8)
    arrays = (kind, live, one, one, two, one, two, one, one, one, classes)
    with pytest.raises(TypeError, match="subset_started"):
        started(arrays, 1, 10)
    with pytest.raises(ValueError, match="eleven"):
        started(arrays[:5], 1, 10, table, accepting, 0)
    with pytest.raises(ValueError, match="inconsistent"):
        started(arrays, 1, 10, table, accepting, 1)  # (no NFA state 1)
    with pytest.raises(ValueError, match="inconsistent"):
        started(arrays, 1, 10, table, accepting[:8], 0)  # (one flag per row)
    with pytest.raises(ValueError, match="inconsistent"):
        started((*arrays[:10], classes[:100]), 1, 10, table, accepting, 0)
    with pytest.raises(BufferError):
        started(arrays, 1, 10, table.tobytes(), accepting, 0)  # (read-only)
    # a one-state NFA whose only state matches: its start is state 0, accepting
    kind[0] = nfa.MATCH
    owner, address, start = started(arrays, 1, 10, table, accepting, 0)
    assert start == 0 and address and accepting[0] == 1
    del owner  # (frees the context)
