"""`ByteDFA.alphabet`: a byte outside it is dead in every state (the token-slice check skips
automata that can never allow a whole slice on that promise)."""

from __future__ import annotations

import pytest

from structgen.automata import ByteDFA, alternatives, compile_regex, intersect
from structgen.automata.dfa import ALL_BYTES, UnionSource


def read_bytes(dfa: ByteDFA) -> int:
    """The bytes some built transition reads, as a bitset (after building every state)."""
    dfa.build_all()
    seen = 0
    for state in range(dfa.num_states):
        row = dfa.row(state)
        for byte in range(256):
            if row[byte] >= 0:
                seen |= 1 << byte
    return seen


@pytest.mark.parametrize(
    "dfa_factory",
    [
        lambda: compile_regex(r"\(\d{3}\) \d{3}-\d{4}"),
        lambda: compile_regex(r"[a-zé]+|日本"),
        lambda: compile_regex(r"(?i)select|from"),
        lambda: alternatives([b"abc", b"abd", b"\xff\x00"]),
        lambda: intersect(compile_regex("[a-f0-9]{2,4}"), compile_regex("[0-9a-z]+")),
    ],
)
def test_alphabet_covers_every_transition(dfa_factory: object) -> None:
    dfa = dfa_factory()  # type: ignore[operator]
    alphabet = dfa.alphabet
    assert read_bytes(dfa) & ~alphabet == 0
    assert alphabet != ALL_BYTES  # these sources know their bytes


def test_union_alphabet_is_the_union_of_its_parts() -> None:
    a, b = compile_regex("[0-9]+"), alternatives([b"true", b"false"])
    union = ByteDFA(UnionSource([a, b]), fingerprint="test-union", limits=a.limits)
    assert union.alphabet == a.alphabet | b.alphabet
    assert read_bytes(union) & ~union.alphabet == 0
    assert union.parts_of(union.start) == [(a, a.start), (b, b.start)]
    assert a.parts_of(a.start) is None
