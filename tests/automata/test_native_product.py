"""The C product rows (`_subset.c`, the union context's product mode) build the same
intersection DFAs as `ProductSource.expand`: the same tuples state by state, with liveness
decided in C up to a search size and by Python's guided search past it."""

from __future__ import annotations

import random
import re
from collections.abc import Callable

import pytest

import structgen.automata.dfa as dfa_module
from structgen.automata import AutomataLimits, ByteDFA, alternatives, compile_regex, intersect
from structgen.automata._native_subset import native_subset_available
from structgen.errors import LimitExceededError
from tests.automata.test_native_subset import _assert_isomorphic

pytestmark = pytest.mark.skipif(
    not native_subset_available(), reason="the C row builders are not built"
)

#: (label, the intersection, its regexes for `re` — None: checked by construction only)
PRODUCTS: list[tuple[str, Callable[[], ByteDFA], list[str] | None]] = [
    (
        "pattern and length",
        lambda: intersect(compile_regex(r"[a-z]+(-[a-z0-9]+)*"), compile_regex(r".{3,9}")),
        [r"[a-z]+(-[a-z0-9]+)*", r"(?s).{3,9}"],
    ),
    (
        "two patterns and a length",
        lambda: intersect(
            intersect(compile_regex(r"[a-c]{2,12}"), compile_regex(r".*(ab|ba).*")),
            compile_regex(r"(?:..)+"),
        ),
        [r"[a-c]{2,12}", r"(?s).*(ab|ba).*", r"(?s)(?:..)+"],
    ),
    (
        "dead tuples (a length no pattern string has)",
        lambda: intersect(compile_regex(r"(?:abc)+x?"), compile_regex(r"[a-x]{4,7}")),
        [r"(?:abc)+x?", r"[a-x]{4,7}"],
    ),
    (
        "a component Python builds",
        lambda: intersect(
            alternatives([b"alpha", b"alps", b"beta", b"bet"]), compile_regex(r".*[st].*")
        ),
        [r"alpha|alps|beta|bet", r"(?s).*[st].*"],
    ),
    (
        "witnesses past the C search (Python decides)",
        lambda: intersect(compile_regex(r"(?:[ab]{97})*"), compile_regex(r"(?:[ab]{89})*")),
        None,
    ),
]


def _product(make: Callable[[], ByteDFA], native: bool) -> ByteDFA:
    old = dfa_module.NATIVE_PRODUCT
    dfa_module.NATIVE_PRODUCT = native
    try:
        dfa = make()
        dfa.row(dfa.start)
        return dfa
    finally:
        dfa_module.NATIVE_PRODUCT = old


@pytest.mark.parametrize(("label", "make", "patterns"), PRODUCTS, ids=[p[0] for p in PRODUCTS])
def test_same_dfa_as_python(
    label: str, make: Callable[[], ByteDFA], patterns: list[str] | None
) -> None:
    native = _product(make, True)
    python = _product(make, False)
    assert native._native is not None
    old = dfa_module.NATIVE_PRODUCT
    try:
        dfa_module.NATIVE_PRODUCT = False  # (the Python product keeps building in Python)
        assert python._native is None
        n = _assert_isomorphic(native, python)
    finally:
        dfa_module.NATIVE_PRODUCT = old
    assert n == native.num_states == python.num_states
    if patterns is None:
        return
    rng = random.Random(label)
    alphabet = "abcxyz-09lphest"
    for _ in range(400):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 14)))
        want = all(re.fullmatch(p, text) for p in patterns)
        assert native.accepts(text.encode()) == want, text


def test_long_witnesses_are_found_in_c() -> None:
    """Every state of `([ab]{97})* ∩ ([ab]{89})*` between the empty text and the next
    acceptance (8,633 bytes on) needs a witness that long: past its first 256 tuples the C
    search asks for the components' distances once and then finds each witness alone."""
    from structgen.automata._native_subset import NativeUnion

    dfa = PRODUCTS[-1][1]()
    asked: list[str] = []
    provide_live, provide_guide = NativeUnion.provide_live, NativeUnion.provide_guide

    def live(self: NativeUnion) -> None:
        asked.append("live")
        provide_live(self)

    def guide(self: NativeUnion) -> None:
        asked.append("guide")
        provide_guide(self)

    NativeUnion.provide_live = live  # type: ignore[method-assign]
    NativeUnion.provide_guide = guide  # type: ignore[method-assign]
    try:
        assert dfa.accepts(b"") and dfa.accepts(b"a" * (97 * 89)) and dfa.accepts(b"ab" * 8633)
        assert not dfa.accepts(b"a" * 97) and not dfa.accepts(b"a" * (97 * 89 + 1))
    finally:
        NativeUnion.provide_live = provide_live  # type: ignore[method-assign]
        NativeUnion.provide_guide = provide_guide  # type: ignore[method-assign]
    assert dfa._native is not None
    assert asked == ["guide"]
    # the C memo of the 8,633 live tuples counts in the automaton's bytes (cache budgets)
    assert dfa._native.extra_bytes() >= 8633 * (2 * 4 + 8)
    assert dfa.memory_bytes() > dfa._native.extra_bytes()


@pytest.mark.parametrize("native", [True, False], ids=["c", "python"])
def test_searches_past_the_budget_raise_the_limit(native: bool) -> None:
    """The same witnesses under a budget of 4,000 tuples: both searches give up alike."""
    limits = AutomataLimits(max_dfa_states=4000)
    old = dfa_module.NATIVE_PRODUCT
    dfa_module.NATIVE_PRODUCT = native
    try:
        a = compile_regex(r"(?:[ab]{97})*", limits=limits)
        b = compile_regex(r"(?:[ab]{89})*", limits=limits)
        dfa = intersect(a, b, limits=limits)
        with pytest.raises(LimitExceededError) as info:
            dfa.row(dfa.start)
    finally:
        dfa_module.NATIVE_PRODUCT = old
    assert info.value.limit == "max_dfa_states"
    assert "product states" in str(info.value)
