"""Code point sets -> UTF-8 byte automata: exact, minimal-ish, never accepting invalid UTF-8."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from structgen.automata import ByteDFA, compile_regex
from structgen.automata import intervals as iv
from structgen.automata.utf8 import ByteDag, byte_dag, utf8_sequences


def dag_strings(dag: ByteDag) -> set[bytes]:
    """Every byte string the DAG accepts (for small sets)."""
    out: set[bytes] = set()

    def walk(node: int, prefix: bytes) -> None:
        for lo, hi, child in dag.nodes[node]:
            for b in range(lo, hi + 1):
                if child < 0:
                    out.add(prefix + bytes((b,)))
                else:
                    walk(child, prefix + bytes((b,)))

    walk(0, b"")
    return out


def count_accepted_by_length(dfa: ByteDFA, max_len: int) -> list[int]:
    """Number of accepted byte strings of each length 0..max_len (builds the DFA)."""
    n = dfa.build_all()
    counts = np.zeros(n, dtype=np.int64)
    counts[dfa.start] = 1
    out = []
    for _ in range(max_len + 1):
        out.append(int(counts[dfa.accepting].sum()))
        nxt = np.zeros(n, dtype=np.int64)
        table = dfa.table
        for s in np.flatnonzero(counts):
            targets = table[s]
            live = targets[targets >= 0]
            np.add.at(nxt, live, counts[s])
        counts = nxt
    return out


class TestSequences:
    def test_examples(self) -> None:
        assert utf8_sequences(((0, 0x7F),)) == [((0, 0x7F),)]
        assert utf8_sequences(((0x80, 0x7FF),)) == [((0xC2, 0xDF), (0x80, 0xBF))]
        assert utf8_sequences(((0x10000, 0x10FFFF),)) == [
            ((0xF0, 0xF0), (0x90, 0xBF), (0x80, 0xBF), (0x80, 0xBF)),
            ((0xF1, 0xF3), (0x80, 0xBF), (0x80, 0xBF), (0x80, 0xBF)),
            ((0xF4, 0xF4), (0x80, 0x8F), (0x80, 0xBF), (0x80, 0xBF)),
        ]
        # the surrogate gap: after the lead byte ED only 80..9F may follow
        seqs = utf8_sequences(((0xD000, 0xE0FF),))
        assert ((0xED, 0xED), (0x80, 0x9F), (0x80, 0xBF)) in seqs
        assert all(seq[0][1] < 0xED or seq[0][0] > 0xED or seq[1][1] <= 0x9F for seq in seqs)

    @given(
        st.lists(
            st.tuples(st.integers(0, 0x10FFFF), st.integers(0, 300)).map(
                lambda t: (t[0], min(t[0] + t[1], 0x10FFFF))
            ),
            min_size=1,
            max_size=4,
        )
    )
    @settings(max_examples=150, deadline=None)
    def test_dag_accepts_exactly_the_encodings(self, ranges: list[tuple[int, int]]) -> None:
        rs = iv.normalize(ranges)
        expected = {
            chr(cp).encode()
            for lo, hi in rs
            for cp in range(lo, hi + 1)
            if not 0xD800 <= cp <= 0xDFFF
        }
        assert dag_strings(byte_dag(rs)) == expected

    def test_dag_shares_suffixes(self) -> None:
        # "any code point" needs only a handful of nodes
        assert len(byte_dag(((0, 0x10FFFF),))) <= 10
        assert byte_dag(((0xD800, 0xDFFF),)).is_empty


class TestSharedTails:
    """Classes with the same non-ASCII part (built on `\\w`/`\\d` or their negations plus ASCII,
    "any character but these ASCII ones") share its DAG."""

    @pytest.mark.parametrize(
        "pattern",
        [r"[\w.-]", r"\w", r"\W", r"[^\d]", r"[\D ]", r"[\w\d_-]", r'[^"\\ab]', "[a-cé-ü]", "[aé]"],
    )
    def test_same_language_as_building_it_alone(self, pattern: str) -> None:
        from structgen.automata.regex_syntax import parse_regex
        from structgen.automata.utf8 import _TAIL, _build_dag, _tail_dag

        ranges = parse_regex(pattern).ranges  # type: ignore[attr-defined]
        shared, alone = byte_dag(ranges), _build_dag(ranges)
        tail = _tail_dag(iv.intersect(ranges, _TAIL))
        assert shared.nodes[1:] == tail.nodes[1:]  # the shared DAG was used
        rng = random.Random(5)
        points = list(range(0x800)) + [rng.randrange(0x110000) for _ in range(20_000)]
        points += [b for lo, hi in ranges for b in (lo, hi, lo - 1, hi + 1) if 0 <= b <= 0x10FFFF]
        for cp in points:
            if 0xD800 <= cp <= 0xDFFF:
                continue
            data = chr(cp).encode()
            assert (
                dag_accepts(shared, data) == dag_accepts(alone, data) == iv.contains(ranges, cp)
            ), hex(cp)


def dag_accepts(dag: ByteDag, data: bytes) -> bool:
    node = 0
    for i, byte in enumerate(data):
        for lo, hi, child in dag.nodes[node]:
            if lo <= byte <= hi:
                if child < 0:
                    return i == len(data) - 1
                node = child
                break
        else:
            return False
    return False


class TestUtf8Dfa:
    def test_dotall_accepts_exactly_one_encoded_character(self) -> None:
        counts = count_accepted_by_length(compile_regex(".", dotall=True), 5)
        # U+0000..U+007F, U+0080..U+07FF, U+0800..U+FFFF minus surrogates, U+10000..U+10FFFF
        assert counts == [0, 0x80, 0x800 - 0x80, 0x10000 - 0x800 - 0x800, 0x100000, 0]

    def test_negated_class_never_accepts_invalid_utf8(self) -> None:
        dfa = compile_regex("[^a]*")
        rng = random.Random(7)
        for _ in range(3000):
            data = bytes(rng.choice([0x61, 0x80, 0xBF, 0xC0, 0xC3, 0xE0, 0xED, 0xF0, 0xF4, 0xF5,
                                     0xFF, 0xA0, 0x9F, 0x41, 0x90])
                         for _ in range(rng.randint(0, 6)))  # fmt: skip
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                assert not dfa.accepts(data), data
            else:
                assert dfa.accepts(data) == ("a" not in text), data

    @pytest.mark.parametrize(
        "data",
        [b"\xc0\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe0\x80\x80", b"\xc3", b"\xff"],
    )
    def test_overlong_surrogate_and_out_of_range_rejected(self, data: bytes) -> None:
        assert not compile_regex(".*", dotall=True).accepts(data)

    def test_multibyte_characters(self) -> None:
        dfa = compile_regex("[é中😀]{3}")
        assert dfa.accepts("é中😀".encode())
        assert not dfa.accepts("é中".encode())
        assert not dfa.accepts("é中😀".encode()[:-1])

    def test_surrogate_only_pattern_is_empty(self) -> None:
        dfa = compile_regex("[\\ud800-\\udfff]")
        assert dfa.is_empty
        assert not dfa.is_live(dfa.start)
        assert dfa.num_states == 1
        assert (dfa.row(dfa.start) == -1).all()
