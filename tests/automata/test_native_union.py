"""The C union rows (`_subset.c`, `sg_union_*`) build the same lexer DFAs as
`UnionSource.expand`: the same keys state by state, whatever builds the components' rows (C
regex contexts, Python tries and products) and however stale the C side's view of them is."""

from __future__ import annotations

import pickle
import random
import re
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import structgen.automata.dfa as dfa_module
from structgen.automata import (
    AutomataLimits,
    ByteDFA,
    alternatives,
    compile_regex,
    intersect,
)
from structgen.automata._native_subset import native_subset_available
from structgen.automata.dfa import UnionSource
from tests.automata.test_native_subset import _assert_isomorphic, run_in_threads

pytestmark = pytest.mark.skipif(
    not native_subset_available(), reason="the C row builders are not built"
)

LIMITS = AutomataLimits()
PARTS: list[Callable[[], ByteDFA]] = [
    lambda: compile_regex(r"[a-z_][a-z0-9_]*"),
    lambda: compile_regex(r"(?i)select|from|where|not|null"),
    lambda: compile_regex(r"-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?"),
    lambda: compile_regex(r'"([^"\\]|\\.)*"'),
    lambda: compile_regex(r"[ \t\n]+"),
    lambda: alternatives([b"<=", b">=", b"<>", b"=", b"<", b">", b"not", b"nothing"]),
    lambda: intersect(compile_regex(r"[a-z]{2,12}"), compile_regex(r".*(ab|ba).*")),
    lambda: compile_regex(r"[\u00e0-\u00ff\u4e00-\u4e0f]{1,3}"),
]


def _union(native: bool, parts: list[ByteDFA] | None = None) -> ByteDFA:
    old = dfa_module.NATIVE_UNION
    dfa_module.NATIVE_UNION = native
    try:
        parts = parts if parts is not None else [make() for make in PARTS]
        d = ByteDFA(UnionSource(parts), fingerprint="test-union", limits=LIMITS)
        d.row(d.start)
        return d
    finally:
        dfa_module.NATIVE_UNION = old


def _which(d: ByteDFA, data: bytes) -> tuple[int, ...] | None:
    """The components that accept all of `data` (None: the union dies on it)."""
    state = d.start
    for byte in data:
        state = d.next_state(state, byte)
        if state < 0:
            return None
    source = d._source
    assert isinstance(source, UnionSource)
    return source.accepted(d.key_of(state))  # type: ignore[arg-type]


@pytest.mark.parametrize("one_call", [True, False])
def test_same_dfa_as_python(one_call: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Also with the context made, its components told and the table taken through ctypes
    (`union_context` and `adopt_table` are the one-call ways)."""
    from structgen.automata import _native_subset

    if not one_call:
        monkeypatch.setattr(_native_subset, "_UNION_CONTEXT", None)
        monkeypatch.setattr(_native_subset, "_ADOPT_TABLE", None)
    native = _union(True)
    python = _union(False)
    assert native._native is not None and python._native is None
    old = dfa_module.NATIVE_UNION
    try:
        dfa_module.NATIVE_UNION = False  # the Python union keeps building in Python
        n = _assert_isomorphic(native, python)
    finally:
        dfa_module.NATIVE_UNION = old
    assert n == native.num_states > 100
    assert (native.table != -2).all()


def test_accepted_components_match_re() -> None:
    d = _union(True)
    patterns = [
        r"[a-z_][a-z0-9_]*",
        r"(?i)select|from|where|not|null",
        r"-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?",
        r'"([^"\\]|\\.)*"',
        r"[ \t\n]+",
        r"<=|>=|<>|=|<|>|not|nothing",
        None,  # the intersection: checked by hand below
        r"[\u00e0-\u00ff\u4e00-\u4e0f]{1,3}",
    ]
    rng = random.Random(3)
    alphabet = 'abnotSELECT_09.-e" \\<>=é一'
    for _ in range(600):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 9)))
        expected = []
        for i, pattern in enumerate(patterns):
            if pattern is None:
                ok = re.fullmatch(r"[a-z]{2,12}", text) and ("ab" in text or "ba" in text)
            else:
                ok = re.fullmatch(pattern, text)
            if ok:
                expected.append(i)
        got = _which(d, text.encode())
        if got is not None:
            assert list(got) == expected, text
        else:
            assert not expected, text


def test_c_accepted_components_match_the_keys() -> None:
    """`NativeUnion.accepted` (C reads the components' flags) names the components the key
    says accept, state by state; where the C side's view of a component is stale it declines
    (None) rather than guess."""
    parts = [make() for make in PARTS]
    d = _union(True, parts)
    d.build_all()
    native = d.native_states
    assert native is not None
    source = d._source
    assert isinstance(source, UnionSource)
    answered = 0
    for state in range(d.num_states):
        expected = set(source.accepted(d.key_of(state)))  # type: ignore[arg-type]
        got = native.accepted(state)
        if got is not None:
            answered += 1
            assert set(got) == expected, state
    assert answered == d.num_states
    assert any(native.accepted(s) for s in range(d.num_states))
    assert native.accepted(d.num_states) is None  # (no such state)
    # components grown behind the union's back: stale views decline, never mislead
    fresh = [make() for make in PARTS]
    e = _union(True, fresh)
    for part in fresh:
        part.build_all()
    e_native, e_source = e.native_states, e._source
    assert e_native is not None and isinstance(e_source, UnionSource)
    for state in range(e.num_states):
        got = e_native.accepted(state)
        if got is not None:
            assert set(got) == set(e_source.accepted(e.key_of(state))), state  # type: ignore[arg-type]


def test_python_built_components_and_stale_views() -> None:
    """Components whose rows Python builds (a trie, a product) grow after the C side last saw
    them: the union asks Python for the rows (and fresh arrays) and still matches Python."""
    parts = [make() for make in PARTS]
    native = _union(True, parts)
    # grow the components well past their tables' first capacity, behind the union's back
    for part in parts:
        part.build_all()
    assert max(p.capacity for p in parts) > 16
    asked = []
    provide = type(native._native).provide_row  # type: ignore[union-attr]

    def counting(self: object) -> None:
        asked.append(1)
        provide(self)  # type: ignore[arg-type]

    python = _union(False, [make() for make in PARTS])
    old = dfa_module.NATIVE_UNION
    try:
        type(native._native).provide_row = counting  # type: ignore[method-assign,union-attr]
        dfa_module.NATIVE_UNION = False
        _assert_isomorphic(native, python)
    finally:
        type(native._native).provide_row = provide  # type: ignore[method-assign,union-attr]
        dfa_module.NATIVE_UNION = old
    assert asked  # the stale views did send the C side back to Python


def test_pickle_round_trip_goes_native_again() -> None:
    d = _union(True)
    for data in (b"select", b"12.5e3", b'"a\\"b"'):
        _which(d, data)
    n = d.num_states
    clone = pickle.loads(pickle.dumps(d))
    assert clone._native is None and clone.num_states == n
    assert [clone.key_of(i) for i in range(n)] == [d.key_of(i) for i in range(n)]
    assert _which(clone, b"nothing") == _which(d, b"nothing") == (0, 5)
    assert clone._native is not None  # new rows from C, on the same ids
    assert [clone.key_of(i) for i in range(n)] == [d.key_of(i) for i in range(n)]


def test_threads_build_one_union() -> None:
    ref = _union(False)
    rng = random.Random(4)
    inputs = [
        bytes(rng.choice(b'abnotSELECT_09.-e" <>=') for _ in range(rng.randint(1, 30)))
        for _ in range(400)
    ]
    old = dfa_module.NATIVE_UNION
    try:
        dfa_module.NATIVE_UNION = False
        expected = {data: _which(ref, data) for data in inputs}
    finally:
        dfa_module.NATIVE_UNION = old
    d = _union(True)

    def check(data: bytes) -> None:
        assert _which(d, data) == expected[data]

    run_in_threads(check, inputs)
    assert d._native is not None


def test_switch_off() -> None:
    d = _union(False)
    old = dfa_module.NATIVE_UNION
    try:
        dfa_module.NATIVE_UNION = False
        assert _which(d, b"select") == (0, 1)
        assert d._native is None
    finally:
        dfa_module.NATIVE_UNION = old


def test_one_call_keys_and_accepting_components(monkeypatch: pytest.MonkeyPatch) -> None:
    """`states_key` and `union_accepted` (one CPython call each) answer what the ctypes queries
    answer, state by state, and None past the last state."""
    from structgen.automata import _native_subset

    if _native_subset._STATES_KEY is None or _native_subset._UNION_ACCEPTED is None:
        pytest.skip("the extension is built without the one-call queries")
    d = _union(True)
    d.build_all()
    native = d.native_states
    assert native is not None
    one_call = [(native.key(s), native.accepted(s)) for s in range(d.num_states)]
    assert native.accepted(d.num_states) is None
    with pytest.raises(IndexError):
        native.key(d.num_states)
    monkeypatch.setattr(_native_subset, "_STATES_KEY", None)
    monkeypatch.setattr(_native_subset, "_UNION_ACCEPTED", None)
    for state, (key, accepted) in enumerate(one_call):
        assert key == native.key(state), state
        ctypes_accepted = native.accepted(state)
        assert (accepted is None) == (ctypes_accepted is None), state
        assert set(accepted or ()) == set(ctypes_accepted or ()), state
    with pytest.raises(IndexError):
        native.key(d.num_states)
    # `union_intern` (a state from its elements as Python ints) finds each state as ctypes does
    ids = [native.intern(key) for key, _ in one_call]
    monkeypatch.setattr(_native_subset, "_UNION_INTERN", None)
    assert ids == [native.intern(key) for key, _ in one_call] == list(range(d.num_states))


def test_one_call_queries_of_a_wide_union() -> None:
    """Seventy components alive and accepting at once: past the queries' small buffers."""
    from structgen.automata import _native_subset

    if _native_subset._STATES_KEY is None or _native_subset._UNION_ACCEPTED is None:
        pytest.skip("the extension is built without the one-call queries")
    parts = [compile_regex(f"a|b{i}") for i in range(70)]
    d = _union(True, parts)
    after = d.next_state(d.start, ord("a"))
    native = d.native_states
    assert native is not None and after >= 0
    assert set(native.accepted(after) or ()) == set(range(70))
    assert len(native.key(d.start)) == 70


def test_part_fields_follow_the_arrays() -> None:
    """`ByteDFA.part_fields` (what a union's C context reads of a component) is repacked
    whenever the arrays or the C builder change: growing, and moving to C."""
    from structgen.automata import _native_subset, compile_regex

    d = compile_regex(r"[a-z]{0,40}x")
    for _ in range(2):
        fields = _native_subset.PART_FIELDS.unpack(d.part_fields)
        assert fields == (
            d.table_address,
            d.accepting_address,
            d.capacity,
            d.native_builder,
            d.native_context,
        )
        d.build_all()  # (grows the table past its first 16 rows, in C where built)


def test_unbounded_parts_are_the_keys_unbounded_pairs() -> None:
    """`parts_of(state, unbounded=True)` (C picks the pairs of the components whose language
    is not finite: `union_parts_in`) is `parts_of(state)` less the finite components (key
    chains), in every state of a union of keys, a string and a number — and the same in
    Python mode and past the small buffer of seventy components."""
    from structgen.automata import String, _native_subset, compile_ast, concat
    from structgen.automata.chains import LiteralSource
    from structgen.schema._strings import literal_body

    keys = [
        compile_ast(concat([String('"'), literal_body(k), String('"')]), limits=LIMITS)
        for k in [f"key{i}" for i in range(75)]
    ]
    assert all(isinstance(k._source, LiteralSource) for k in keys)
    others = [compile_regex(r'"([^"\\]|\\.)*"'), compile_regex(r"-?[0-9]+")]
    for native in (True, False):
        d = _union(native, [*keys[:40], others[0], *keys[40:], others[1]])
        rng = random.Random(7)
        for _ in range(40):
            state = d.start
            for byte in rng.choice([b'"key1', b'"key7"', b'"ke', b'"x\\"', b"-12", b'"']):
                state = d.next_state(state, byte)
                if state < 0:
                    break
            if state < 0:
                continue
            everything = d.parts_of(state)
            assert everything is not None
            expected = [(p, s) for p, s in everything if not p._source.finite]
            assert d.parts_of(state, unbounded=True) == expected
        if native and _native_subset._UNION_PARTS_IN is not None:
            states = d.native_states
            assert states is not None and d._native is not None
            wanted = d._source.unbounded_parts  # type: ignore[attr-defined]
            assert wanted.count(1) == 2 and len(wanted) == 77
            assert states.parts_in(d.start, wanted) == ((40, others[0].start), (76, 0))
            assert states.parts_in(d.start, b"") == ()  # (none wanted)
            assert states.parts_in(10**6, wanted) is None  # (an unknown state)
            with pytest.raises(TypeError):
                _native_subset._UNION_PARTS_IN(states.ctx, d.start)
            with pytest.raises(ValueError):
                _native_subset._UNION_PARTS_IN(0, d.start, wanted)


def test_union_context_checks_its_arguments() -> None:
    from structgen.automata import _native_subset

    make = _native_subset._UNION_CONTEXT
    if make is None:
        pytest.skip("the extension has no union_context")
    parts = [PARTS[0](), PARTS[4]()]
    fields = [p.part_fields for p in parts]
    classes = bytes(256)
    with pytest.raises(TypeError, match="union_context"):
        make(fields, classes, 100)
    with pytest.raises(ValueError, match="one component"):
        make([], classes, 100, 0, None, 0, -1)
    with pytest.raises(ValueError, match="40 bytes"):
        make([b"x" * 39], classes, 100, 0, None, 0, -1)
    with pytest.raises(ValueError, match="256"):
        make(fields, bytes(255), 100, 0, None, 0, -1)
    with pytest.raises(ValueError, match="one start per component"):
        make(fields, classes, 100, _native_subset.SEQUENCE, [0], 0, -1)
    with pytest.raises(TypeError):
        make(fields, classes, 100, _native_subset.SEQUENCE, None, 0, -1)
    with pytest.raises(ValueError, match="bad composed DFA mode"):
        make(fields, classes, 100, 9, [0, 0], 0, -1)
    with pytest.raises(ValueError, match="bad composed DFA mode"):
        make(fields, classes, 100, _native_subset.COUNTED, [0, 0], 0, -1)  # (one unit only)
    owner, address = make(fields, classes, 100, _native_subset.UNION, None, 0, -1)
    assert address
    del owner  # (frees the context)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 255), st.integers(0, 255)), max_size=40))
def test_alphabet_of_ranges_in_c_is_the_python_loop(pairs: list[tuple[int, int]]) -> None:
    """`alphabet_of_ranges` (C) against the Python loop it replaces, and its bad input."""
    c_alphabet = dfa_module._ALPHABET_OF_RANGES
    if c_alphabet is None:
        pytest.skip("the extension is built without it")
    ranges = frozenset((min(a, b), max(a, b)) for a, b in pairs)
    expected = 0
    for lo, hi in ranges:
        expected |= ((1 << (hi - lo + 1)) - 1) << lo
    assert c_alphabet(ranges) == expected == dfa_module._alphabet_of_ranges(ranges)
    for bad, error in (([(3, 2)], ValueError), ([(0, 256)], ValueError), ([(1,)], ValueError)):
        with pytest.raises(error):
            c_alphabet(bad)
    with pytest.raises(TypeError):
        c_alphabet(5)
