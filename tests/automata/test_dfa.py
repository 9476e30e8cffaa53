"""ByteDFA: the interface the mask computation relies on, limits, pickling, sets, intersection."""

from __future__ import annotations

import itertools
import pickle
import random
import re
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from structgen.automata import (
    AutomataLimits,
    ByteDFA,
    _native_subset,
    alternatives,
    compile_ast,
    compile_regex,
    intersect,
    intersect_all,
    literal,
    parse_regex,
)
from structgen.automata import dfa as dfa_module
from structgen.errors import LimitExceededError, RegexError

PATTERNS = [
    r"[a-z]{1,5}@[a-z]+\.(com|org)",
    r"\d{4}-\d{2}-\d{2}",
    r"\w+( \w+)*",
    r".{0,6}",
    r"(ab|a)*c?",
    r"[^\s\d]+é?",
]


def walk_all(dfa: ByteDFA, limit: int = 3000) -> None:
    """Build rows breadth-first from the start (at most ``limit`` states)."""
    i = 0
    while i < min(dfa.num_states, limit):
        dfa.row(i)
        i += 1


class TestInterface:
    @pytest.mark.parametrize("pattern", PATTERNS)
    def test_row_agrees_with_next_state(self, pattern: str) -> None:
        dfa = compile_regex(pattern)
        walk_all(dfa, 300)
        for s in range(min(dfa.num_states, 300)):
            row = dfa.row(s)
            assert row.dtype == np.int32 and row.shape == (256,)
            assert not row.flags.writeable
            for b in range(256):
                assert dfa.next_state(s, b) == row[b]
            assert ((row >= -1) & (row < dfa.num_states)).all()

    @pytest.mark.parametrize("pattern", PATTERNS)
    def test_byte_classes_are_sound(self, pattern: str) -> None:
        dfa = compile_regex(pattern)
        walk_all(dfa, 300)
        classes = dfa.byte_classes
        assert classes.dtype == np.uint8 and classes.shape == (256,)
        assert dfa.num_byte_classes == len(set(classes.tolist()))
        built = [s for s in range(dfa.num_states) if dfa.table[s, 0] != -2]
        for s in built:
            row = dfa.row(s)
            for c in range(dfa.num_byte_classes):
                assert len(set(row[classes == c].tolist())) == 1

    def test_byte_classes_are_coarse(self) -> None:
        dfa = compile_regex(r'"[a-z]*"')
        assert dfa.num_byte_classes == 3  # '"', a-z, everything else

    def test_table_and_accepting_views(self) -> None:
        dfa = compile_regex("(ab|c)d*")  # (a regex automaton: `ab|c` alone is a chain, built whole)
        assert dfa.table.shape == (dfa.num_states, 256)
        assert (dfa.table[dfa.start] == -2).all()  # lazy: nothing built yet
        dfa.row(dfa.start)
        assert (dfa.table[dfa.start] >= -1).all()
        assert dfa.accepting.shape == (dfa.num_states,)
        assert not dfa.table.flags.writeable and not dfa.accepting.flags.writeable
        s = dfa.next_state(dfa.start, ord("c"))
        assert dfa.accepting[s] and dfa.is_accepting(s)
        assert not dfa.is_accepting(-1)
        assert dfa.next_state(-1, 0) == -1
        assert (dfa.row(-1) == -1).all()

    def test_every_state_is_live(self) -> None:
        dfa = compile_regex(r"(a|b[^x])*c")
        walk_all(dfa)
        for s in range(dfa.num_states):
            assert dfa.is_live(s)
            assert _reaches_acceptance(dfa, s)

    def test_states_are_built_lazily(self) -> None:
        dfa = compile_regex(r"[a-z]{1,256}")
        assert dfa.num_states == 1
        dfa.row(dfa.start)
        assert dfa.num_states == 2

    def test_accepts(self) -> None:
        dfa = compile_regex(r"\d+(\.\d+)?")
        assert dfa.accepts(b"12.5") and not dfa.accepts(b"12.") and not dfa.accepts(b"")

    def test_growth_keeps_rows(self) -> None:
        dfa = compile_regex(r"[a-z]{0,200}")
        s = dfa.start
        for _ in range(200):
            s = dfa.next_state(s, ord("q"))
        assert dfa.num_states > 16  # the table grew
        assert dfa.is_accepting(s)
        assert dfa.next_state(s, ord("q")) == -1

    def test_grown_tables_count_only_the_rows_written(self) -> None:
        # A table C fills grows several-fold at once; its spare rows are never written, so
        # the memory estimate (what cache budgets count) leaves them out, and a pickle does
        # not carry them.
        dfa = compile_regex(r"[a-z]{0,200}")
        s = dfa.start
        for _ in range(150):
            s = dfa.next_state(s, ord("q"))
        if dfa._native is None:
            pytest.skip("the C builder is not built")
        capacity = dfa._table.shape[0]
        assert capacity >= 8 * 16  # (grown by GROWTH_NATIVE, not doubled)
        assert capacity >= 4 * dfa.num_states  # (mostly spare rows)
        assert dfa.num_states * 1024 <= dfa.memory_bytes() < dfa._table.nbytes
        clone = pickle.loads(pickle.dumps(dfa))
        assert clone._table.shape[0] == dfa_module.table_capacity(dfa.num_states)
        assert clone.accepts(b"q" * 200) and not clone.accepts(b"q" * 201)


def _reaches_acceptance(dfa: ByteDFA, state: int) -> bool:
    seen = {state}
    todo = [state]
    while todo:
        s = todo.pop()
        if dfa.is_accepting(s):
            return True
        for t in set(dfa.row(s).tolist()):
            if t >= 0 and t not in seen:
                seen.add(t)
                todo.append(t)
    return False


class TestLimits:
    def test_counted_repetitions_compile_quickly(self) -> None:
        for pattern, sample in [("[a-z]{1,256}", "a" * 256), (".{0,500}", "é" * 500)]:
            t = time.perf_counter()
            dfa = compile_regex(pattern)
            assert time.perf_counter() - t < 0.1
            assert dfa.accepts(sample.encode())
            assert not dfa.accepts((sample + "a").encode())

    def test_nested_repetition_fails_fast(self) -> None:
        t = time.perf_counter()
        with pytest.raises(RegexError) as info:
            compile_regex("(a{1000}){1000}")
        assert time.perf_counter() - t < 0.5
        assert "max_nfa_states" in info.value.reason
        assert info.value.pattern == "(a{1000}){1000}"

    def test_huge_counts_fail_fast(self) -> None:
        with pytest.raises(RegexError, match="max_nfa_states"):
            compile_regex("a{0,4294967294}")
        with pytest.raises(RegexError, match="max_nfa_states"):
            compile_regex("(?:a{0,100000}){0,100000}")

    def test_nfa_limit_is_configurable(self) -> None:
        limits = AutomataLimits(max_nfa_states=50)
        compile_regex("a{40}", limits=limits)
        with pytest.raises(RegexError, match="max_nfa_states=50"):
            compile_regex("a{60}", limits=limits)
        with pytest.raises(RegexError, match="UTF-8 nodes"):
            compile_regex(r"\w", limits=limits)  # the \w DAG alone is large

    def test_dfa_limit(self) -> None:
        dfa = compile_regex("[ab]*a[ab]{12}", limits=AutomataLimits(max_dfa_states=100))
        with pytest.raises(LimitExceededError) as info:
            walk_all(dfa, 10_000)
        assert info.value.limit == "max_dfa_states"
        assert info.value.value == 100
        assert dfa.num_states == 100
        # built states stay usable after the error
        assert dfa.row(dfa.start).shape == (256,)

    def test_alternatives_limit(self) -> None:
        with pytest.raises(LimitExceededError) as info:
            alternatives([b"x" * 60, b"y" * 60], limits=AutomataLimits(max_nfa_states=100))
        assert info.value.limit == "max_nfa_states"

    def test_invalid_limits(self) -> None:
        with pytest.raises(ValueError):
            AutomataLimits(max_dfa_states=0)


class TestPickleAndThreads:
    def test_pickle_round_trip(self) -> None:
        dfa = compile_regex(r"(\w+)@(\w+)\.com")
        dfa.row(dfa.start)
        clone = pickle.loads(pickle.dumps(dfa))
        assert clone.fingerprint == dfa.fingerprint
        assert clone.num_states == dfa.num_states
        assert (clone.table == dfa.table).all()
        for s in ["ab@cd.com", "é@ü.com", "a@b.org", "@b.com"]:
            assert clone.accepts(s.encode()) == dfa.accepts(s.encode())
        assert clone.num_states > 2  # the clone keeps building lazily

    @pytest.mark.parametrize("malloc_from", [None, 0])
    def test_grown_tables_and_their_pickles_read_right(
        self, malloc_from: int | None, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        # A grown table is not filled: C fills each new state's row when it creates it. Grow
        # several times, pickle mid-way (the copy's unused rows must read as unbuilt), then
        # both go on building states the other has not: every verdict matches Python's re.
        # (`malloc_from=0`: every grown table is uninitialised malloc memory, as big ones are.)
        if malloc_from is not None:
            monkeypatch.setattr(dfa_module, "BIG_TABLE_BYTES", malloc_from)
        pattern = r"[abcé]{0,150}x?[a-c\n]{0,20}"
        dfa = compile_regex(pattern)
        rng = random.Random(5)
        texts = [
            "".join(rng.choice("abcé" * 9 + "x\n") for _ in range(rng.randrange(130)))
            for _ in range(300)
        ]
        for text in texts[:150]:
            assert dfa.accepts(text.encode()) == bool(re.fullmatch(pattern, text, re.S))
        assert dfa.num_states > 64  # (grown from 16 at least once)
        clone = pickle.loads(pickle.dumps(dfa))
        built = dfa.num_states
        for text in texts[150:]:
            expected = bool(re.fullmatch(pattern, text, re.S))
            assert clone.accepts(text.encode()) == expected
            assert dfa.accepts(text.encode()) == expected
        assert clone.num_states > built and dfa.num_states > built

    def test_pickle_product_and_sets(self) -> None:
        d = intersect(compile_regex("[a-c]+"), alternatives([b"ab", b"abd", b"cc"]))
        clone = pickle.loads(pickle.dumps(d))
        assert clone.accepts(b"ab") and clone.accepts(b"cc") and not clone.accepts(b"abd")

    def test_fingerprint_is_stable_across_processes(self) -> None:
        code = (
            "from structgen.automata import compile_regex, alternatives, intersect;"
            "print(compile_regex('a+b', ignore_case=True).fingerprint);"
            "print(intersect(compile_regex('x'), alternatives([b'x', b'y'])).fingerprint)"
        )
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout.split()
        assert out[0] == compile_regex("a+b", ignore_case=True).fingerprint
        assert out[1] == intersect(compile_regex("x"), alternatives([b"x", b"y"])).fingerprint

    def test_fingerprints_distinguish(self) -> None:
        prints = {
            compile_regex("ab").fingerprint,
            compile_regex("ab", ignore_case=True).fingerprint,
            compile_regex("ab", dotall=True).fingerprint,
            compile_regex("a").fingerprint,
            literal(b"ab").fingerprint,
            alternatives([b"ab"]).fingerprint,
            alternatives([b"a", b"b"]).fingerprint,
            alternatives([b"ab", b""]).fingerprint,
            compile_ast(parse_regex("ab")).fingerprint,
        }
        assert len(prints) == 9
        assert (
            alternatives([b"b", b"a", b"a"]).fingerprint == alternatives([b"a", b"b"]).fingerprint
        )

    def test_concurrent_building_is_consistent(self) -> None:
        pattern = r"[a-f0-9]{8}-[a-f0-9]{4}-[a-z]{1,10}"
        reference = compile_regex(pattern)
        shared = compile_regex(pattern)
        rng = random.Random(3)
        samples = [
            "".join(rng.choice("abf09-xz") for _ in range(rng.randint(0, 25))) for _ in range(300)
        ] + ["deadbeef-0a1b-" + "q" * k for k in range(12)]
        errors: list[str] = []

        def work(offset: int) -> None:
            for s in samples[offset:] + samples[:offset]:
                if shared.accepts(s.encode()) != reference.accepts(s.encode()):
                    errors.append(s)

        threads = [threading.Thread(target=work, args=(k * 37,)) for k in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        for s in range(shared.num_states):
            if shared.table[s, 0] != -2:
                assert (shared.row(s) >= -1).all()


class TestStringSets:
    def test_literal(self) -> None:
        dfa = literal(b"\xffa\x00")
        assert dfa.accepts(b"\xffa\x00")
        assert not dfa.accepts(b"\xffa") and not dfa.accepts(b"\xffa\x00\x00")
        empty = literal(b"")
        assert empty.accepts(b"") and not empty.accepts(b"a")

    def test_shared_prefixes(self) -> None:
        options = [b"", b"a", b"ab", b"abc", b"abd", b"b", b"ba", b"\xff", b"\xff\xff"]
        dfa = alternatives(options)
        for data in [*options, b"abcd", b"c", b"bb", b"\xfe", b"\xff\xff\xff", b"ac"]:
            assert dfa.accepts(data) == (data in options), data
        walk_all(dfa)
        for s in range(dfa.num_states):
            assert dfa.is_live(s) and _reaches_acceptance(dfa, s)

    def test_byte_classes(self) -> None:
        dfa = alternatives([b"yes", b"no"])
        assert dfa.num_byte_classes == 6  # e, n, o, s, y, everything else

    def test_empty_set(self) -> None:
        dfa = alternatives([])
        assert dfa.is_empty and not dfa.is_live(dfa.start)
        assert not dfa.accepts(b"") and (dfa.row(dfa.start) == -1).all()

    def test_ten_thousand_options_are_fast(self) -> None:
        rng = random.Random(5)
        options = [
            "".join(rng.choice("abcdefghijklmnopqrstuvwxyz_") for _ in range(rng.randint(1, 14)))
            for _ in range(10_000)
        ]
        encoded = [o.encode() for o in options]
        t = time.perf_counter()
        dfa = alternatives(encoded)
        dfa.row(dfa.start)
        assert time.perf_counter() - t < 0.25
        option_set = set(encoded)
        for o in encoded[:300]:
            assert dfa.accepts(o)
            assert dfa.accepts(o + b"x") == (o + b"x" in option_set)
            assert dfa.accepts(o[:-1]) == (o[:-1] in option_set)


class TestIntersection:
    CASES = (
        (r"[a-z0-9]{3,8}", r".*\d.*"),
        (r"\w+", r"[^_]{2,4}"),
        (r"(ab)*", r"a.*b|"),
        (r"[a-c]*", r"[b-d]*"),
        (r"\d+", r"[1-9]\d*|0"),
        (r".{0,5}", r"[éa]*"),
        (r"a*", r"b+"),  # empty intersection
    )
    SAMPLES = ("", "a", "ab", "abab", "a1", "1", "01", "10", "abc1", "é", "aé", "_x", "xy_z", "bb",
               "abcd", "aaaa1", "zz9zz9zz9", "ééé", "b", "123456789")  # fmt: skip

    @pytest.mark.parametrize(("p", "q"), CASES)
    def test_against_re(self, p: str, q: str) -> None:
        dfa = intersect(compile_regex(p), compile_regex(q))
        for s in self.SAMPLES:
            expected = re.fullmatch(p, s) is not None and re.fullmatch(q, s) is not None
            assert dfa.accepts(s.encode()) == expected, (p, q, s)

    @pytest.mark.parametrize(("p", "q"), CASES)
    def test_every_product_state_is_live(self, p: str, q: str) -> None:
        dfa = intersect(compile_regex(p), compile_regex(q))
        walk_all(dfa)
        for s in range(dfa.num_states):
            if dfa.is_empty:
                assert s == dfa.start and not dfa.is_live(s)
            else:
                assert dfa.is_live(s) and _reaches_acceptance(dfa, s)

    def test_empty_intersection(self) -> None:
        dfa = intersect(compile_regex("a+"), compile_regex("b+"))
        assert dfa.is_empty
        assert (dfa.row(dfa.start) == -1).all()

    def test_dead_branches_are_pruned(self) -> None:
        # "ab" is a live prefix of [a-z]+ but no continuation has length 2 and ends in 'z'
        dfa = intersect(compile_regex("[a-z]{2}"), compile_regex(".*z"))
        s = dfa.next_state(dfa.start, ord("a"))
        assert s >= 0
        assert dfa.next_state(s, ord("b")) == -1
        assert dfa.is_accepting(dfa.next_state(s, ord("z")))

    def test_nested_and_with_sets(self) -> None:
        words = alternatives([b"cat", b"car", b"cart", b"dog", b"do"])
        dfa = intersect(intersect(words, compile_regex("c.*")), compile_regex(".{3}"))
        assert [w for w in [b"cat", b"car", b"cart", b"dog", b"do"] if dfa.accepts(w)] == [
            b"cat",
            b"car",
        ]

    def test_chains_are_one_product(self) -> None:
        parts = [compile_regex(p) for p in ("[a-d]{4,6}", ".*ab.*", ".*cd.*", "[^b]*b[^b]*")]
        chain = intersect(intersect(intersect(parts[0], parts[1]), parts[2]), parts[3])
        flat = intersect_all(parts)
        assert chain.fingerprint == flat.fingerprint
        assert len(flat._source.parts) == len(chain._source.parts) == 4  # type: ignore[attr-defined]
        for n in range(8):
            for letters in itertools.product("abcd", repeat=n):
                s = "".join(letters)
                expected = all(
                    re.fullmatch(p, s) for p in ("[a-d]{4,6}", ".*ab.*", ".*cd.*", "[^b]*b[^b]*")
                )
                assert flat.accepts(s.encode()) == bool(expected), s
                assert chain.accepts(s.encode()) == bool(expected), s
        walk_all(flat)
        assert all(_reaches_acceptance(flat, s) for s in range(flat.num_states))
        # the same language twice is one component (and alone, the automaton itself)
        twice = intersect_all([parts[1], compile_regex(".*ab.*"), parts[2]])
        assert len(twice._source.parts) == 2  # type: ignore[attr-defined]
        assert intersect(parts[1], compile_regex(".*ab.*")) is parts[1]

    def test_witness_search_is_guided(self) -> None:
        # Eight substrings to place in exactly 40 characters: breadth first meets every
        # combination of partial progress at every length before the first witness; guided by
        # each component's distance to acceptance, the search goes (almost) straight to one.
        words = ("ab1", "b12", "bc1", "c12", "ca1", "a12", "xyz", "zyx")
        limits = AutomataLimits(max_dfa_states=2000)
        parts = [compile_regex(".{40}", limits=limits)]
        parts += [compile_regex(f".*{w}.*", limits=limits) for w in words]
        dfa = intersect_all(parts, limits=limits)
        assert not dfa.is_empty
        text = "ab12bc12ca12xyzyx" + "q" * 23
        assert dfa.accepts(text.encode()) and not dfa.accepts(text[1:].encode())

    def test_liveness_search_is_bounded(self) -> None:
        limits = AutomataLimits(max_dfa_states=50)
        a = compile_regex("[ab]*", limits=limits)
        b = compile_regex("[ab]{60}c", limits=AutomataLimits())
        with pytest.raises(LimitExceededError) as info:
            intersect(a, b, limits=limits)
        assert info.value.limit == "max_dfa_states"


def test_terminals_share_their_intersected_components() -> None:
    """Branches of a schema's `anyOf`s repeat a length or a pattern in many terminals: each
    distinct component is one automaton (its rows and distance table built once)."""
    from structgen.automata import parse_regex
    from structgen.grammar.ir import TerminalDef
    from structgen.grammar.terminals import build_terminal_dfa

    length = parse_regex(r"[a-z0-9]{3,12}")
    limits = AutomataLimits()
    first = build_terminal_dfa(
        TerminalDef("A", length, (parse_regex(r".*1.*"), parse_regex(r"a.*"))), limits
    )
    second = build_terminal_dfa(
        TerminalDef("B", length, (parse_regex(r".*1.*"), parse_regex(r"b.*"))), limits
    )
    a, b = first._source.parts, second._source.parts  # type: ignore[attr-defined]
    assert a[0] is b[0] and a[1] is b[1] and a[2] is not b[2]
    assert first.accepts(b"a1x") and not first.accepts(b"b1x") and second.accepts(b"b1x")


def test_guided_search_and_its_pruning_keep_the_language_exact(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Guided from the first tuple (and pruning tuples whose components' distances contradict
    a length bound), the product refuses exactly the dead prefixes: checked against every
    string of the alphabet up to the bound."""
    import structgen.automata.dfa as dfa_module

    monkeypatch.setattr(dfa_module, "UNGUIDED_STEPS", 0)
    patterns = ("[abc]{5,8}", ".*ab.*", ".*ca.*", ".*bb.*")
    product = intersect_all([compile_regex(p) for p in patterns])
    words = {
        "".join(letters)
        for n in range(9)
        for letters in itertools.product("abc", repeat=n)
        if all(re.fullmatch(p, "".join(letters)) for p in patterns)
    }
    live_prefixes = {w[:i] for w in words for i in range(len(w) + 1)}
    for n in range(9):
        for letters in itertools.product("abc", repeat=n):
            text = "".join(letters)
            state = product.start
            for byte in text.encode():
                state = product.next_state(state, byte)
            assert (state >= 0) == (text in live_prefixes), text
            assert product.accepts(text.encode()) == (text in words), text


@pytest.mark.skipif(
    not _native_subset.native_subset_available(), reason="the C subset construction is not built"
)
def test_a_product_never_read_is_freed_without_the_collector() -> None:
    # A product decides its start's liveness in a C context it keeps for its DFA's rows; the
    # context referred back to the product (its `decide`), so a product dropped before any
    # row was built waited for a full collection (MaskBench: thousands of objects per compile
    # of some schemas, whose intersections the first masks never read).
    import weakref

    product = intersect_all([compile_regex("[a-z]+[0-9]*"), compile_regex(".{0,9}")])
    assert product.native_states is None  # (no row built yet)
    source = weakref.ref(product._source)
    del product
    assert source() is None
