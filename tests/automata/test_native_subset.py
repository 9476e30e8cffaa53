"""The C subset construction (`_subset.c`) builds the same DFAs as `NFASource.expand`."""

from __future__ import annotations

import pickle
import random
import threading
from collections import deque
from collections.abc import Callable, Iterator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import structgen.automata.dfa as dfa_module
from structgen.automata import AutomataLimits, ByteDFA, _native_subset, compile_regex
from structgen.automata._native_subset import native_subset_available
from structgen.errors import LimitExceededError

pytestmark = pytest.mark.skipif(
    not native_subset_available(), reason="the C subset construction is not built"
)

PATTERNS = [
    r"\(\d{3}\) \d{3}-\d{4}",
    r"((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)",
    r"\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])T([01]\d|2[0-3]):[0-5]\d(\.\d+)?Z",
    r".{0,40}",
    r"(?s).{2,5}",
    r"\w+@[a-zé]+\.(com|org|co\.uk)",
    r"[ab]*a[ab]{6}",
    r"(?i)straße|ǅx|[σς]+",
    r"[^\x00-\x7f]{1,3}x|\S+,\S+",
    r"[\u0800-\uffff\U00010000-\U0010ffff]+z?",
    r"",
    r"a|",
    r"(a|b|)*c{0,3}",
    "|".join(f"w{i}x{i * 7919 % 1000}" for i in range(300)),
]


@pytest.fixture
def python_subset(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(dfa_module, "NATIVE_SUBSET", False)
    yield


def _compile(pattern: str, native: bool, **kw: int) -> ByteDFA:
    old = dfa_module.NATIVE_SUBSET
    dfa_module.NATIVE_SUBSET = native
    try:
        d = compile_regex(pattern, limits=AutomataLimits(**kw)) if kw else compile_regex(pattern)
        d.row(d.start)
        return d
    finally:
        dfa_module.NATIVE_SUBSET = old


def _assert_isomorphic(a: ByteDFA, b: ByteDFA) -> int:
    """Breadth first from both starts: the state maps must agree, with equal keys."""
    old = dfa_module.NATIVE_SUBSET
    mapping = {a.start: b.start}
    queue = deque([a.start])
    while queue:
        x = queue.popleft()
        y = mapping[x]
        assert a.key_of(x) == b.key_of(y)
        assert a.is_accepting(x) == b.is_accepting(y)
        dfa_module.NATIVE_SUBSET = old
        ra, rb = a.row(x).tolist(), b.row(y).tolist()
        for tx, ty in zip(ra, rb):
            assert (tx < 0) == (ty < 0)
            if tx < 0:
                continue
            if tx in mapping:
                assert mapping[tx] == ty
            else:
                mapping[tx] = ty
                queue.append(tx)
    assert len(set(mapping.values())) == len(mapping)
    return len(mapping)


@pytest.mark.parametrize("pattern", PATTERNS)
def test_same_dfa_as_python(pattern: str) -> None:
    native = _compile(pattern, True)
    python = _compile(pattern, False)
    assert native._native is not None or python.is_empty
    assert python._native is None
    old = dfa_module.NATIVE_SUBSET
    try:
        dfa_module.NATIVE_SUBSET = False  # the Python DFA keeps building in Python
        n = _assert_isomorphic(native, python)
    finally:
        dfa_module.NATIVE_SUBSET = old
    assert n == native.build_all() == native.num_states
    assert native.table.shape == (n, 256)
    assert (native.table != -2).all()
    assert native.accepting.tolist() == [native.is_accepting(i) for i in range(n)]


def test_empty_language_stays_in_python() -> None:
    d = compile_regex(r"[^\x00-\U0010ffff]")
    assert d.is_empty and d.row(d.start).tolist() == [-1] * 256 and d._native is None


def test_accepts_like_re() -> None:
    import re

    rng = random.Random(1)
    alphabet = "0123456789().-:TZab xé€😀\n"
    for pattern in PATTERNS[:9]:
        d = _compile(pattern, True)
        rx = re.compile(pattern)
        for _ in range(300):
            text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
            assert d.accepts(text.encode()) == (rx.fullmatch(text) is not None), (pattern, text)


def test_limit_then_rows_stay_valid() -> None:
    d = _compile("[ab]*a[ab]{12}", True, max_dfa_states=300)
    assert d._native is not None
    with pytest.raises(LimitExceededError) as info:
        d.build_all()
    assert info.value.limit == "max_dfa_states"
    assert d.num_states == 300
    ref = _compile("[ab]*a[ab]{12}", False)
    for data in (b"a" * 13, b"ab" * 7, b"b" * 20, b"a" + b"b" * 12):
        state = d.start
        try:
            for byte in data:
                state = d.next_state(state, byte)
        except LimitExceededError:
            continue
        assert d.is_accepting(state) == ref.accepts(data)


def test_pickle_round_trip_goes_native_again() -> None:
    d = _compile(r"\w{1,30}@x", True)
    for byte in b"abc":
        d.next_state(d.start, byte)
    n = d.num_states
    clone = pickle.loads(pickle.dumps(d))
    assert clone._native is None and clone.num_states == n
    assert [clone.key_of(i) for i in range(n)] == [d.key_of(i) for i in range(n)]
    assert clone.accepts(b"a" * 20 + b"@x") and not clone.accepts(b"a" * 31 + b"@x")
    assert clone._native is not None  # new rows came from C, on the same ids
    assert [clone.key_of(i) for i in range(n)] == [d.key_of(i) for i in range(n)]
    assert clone.build_all() == d.build_all()


def test_python_rows_then_native() -> None:
    """A DFA whose first rows came from Python (switch off) continues in C with the same ids."""
    d = _compile(r"\d+(\.\d+)?", False)
    d.row(1)
    keys = [d.key_of(i) for i in range(d.num_states)]
    dfa_module_native = dfa_module.NATIVE_SUBSET
    assert dfa_module_native
    d.build_all()
    assert d._native is not None
    assert [d.key_of(i) for i in range(len(keys))] == keys
    assert d.accepts(b"12.5") and not d.accepts(b"1.")


def run_in_threads(check: Callable[[bytes], None], inputs: list[bytes], threads: int = 4) -> None:
    """`check` every input, the inputs dealt out to `threads` threads at once; re-raise the
    first failure."""
    errors: list[BaseException] = []

    def work(part: list[bytes]) -> None:
        try:
            for data in part:
                check(data)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    running = [threading.Thread(target=work, args=(inputs[i::threads],)) for i in range(threads)]
    for t in running:
        t.start()
    for t in running:
        t.join()
    if errors:
        raise errors[0]


def test_threads_build_one_dfa() -> None:
    pattern = r"[a-f0-9]{0,64}-[a-z]{0,16}"
    d = _compile(pattern, True)
    ref = _compile(pattern, False)
    rng = random.Random(2)
    inputs = [
        bytes(rng.choice(b"abcdef0123-xyz") for _ in range(rng.randint(0, 90))) for _ in range(400)
    ]

    def check(data: bytes) -> None:
        assert d.accepts(data) == ref.accepts(data)

    run_in_threads(check, inputs)
    old = dfa_module.NATIVE_SUBSET
    try:
        dfa_module.NATIVE_SUBSET = False
        _assert_isomorphic(d, ref)
    finally:
        dfa_module.NATIVE_SUBSET = old


def test_switch_off(python_subset: None) -> None:
    d = compile_regex(r"[0-9]{3}")
    assert d.build_all() == 4 and d._native is None


@pytest.mark.parametrize("native", [True, False])
def test_build_first_rows_in_id_order(native: bool) -> None:
    """Compile-time eager building: the first states' rows, in C in one call when it can."""
    d = _compile(r"[a-f0-9]{0,64}-[a-z]{0,16}", native)
    old = dfa_module.NATIVE_SUBSET
    try:
        dfa_module.NATIVE_SUBSET = native
        assert d.build_first(0, 1.0) == 0
        built = d.build_first(40, 1.0)
        assert built == 40
        table = d.table
        assert (table[:40] != -2).all()
        assert d.build_first(256, 0.0) <= 256  # no time: stops at once
        assert d.build_first(10_000, 5.0) == d.num_states  # all of them (breadth first)
        assert (d.table != -2).all()
        assert (d._native is not None) == native
    finally:
        dfa_module.NATIVE_SUBSET = old
    ref = _compile(r"[a-f0-9]{0,64}-[a-z]{0,16}", False)
    try:
        dfa_module.NATIVE_SUBSET = False
        _assert_isomorphic(d, ref)
    finally:
        dfa_module.NATIVE_SUBSET = old


def test_addresses_are_the_arrays_data() -> None:
    """The extension's `addresses` (or its ctypes fallback) gives what `ctypes.data` gives,
    read-only arrays and views included, and refuses a strided array."""
    from structgen.automata._native_subset import addresses

    a = np.arange(10, dtype=np.int32)
    frozen = np.zeros(3, dtype=np.uint8)
    frozen.flags.writeable = False
    assert addresses(a, a[3:], frozen) == (a.ctypes.data, a[3:].ctypes.data, frozen.ctypes.data)
    if _native_subset._ADDRESSES is not None:
        with pytest.raises(ValueError, match="contiguous"):
            addresses(np.zeros((4, 4))[:, ::2])


@given(
    st.lists(
        st.tuples(st.integers(0, 255), st.integers(0, 255)).map(lambda p: (min(p), max(p))),
        max_size=200,
    )
)
@settings(max_examples=300, deadline=None)
def test_byte_classes_in_c_are_the_python_ones(ranges: list[tuple[int, int]]) -> None:
    """The C `byte_classes` numbers the same partition as the numpy path, many ranges (several
    64-bit words per byte) and duplicates included; bad pairs are refused."""
    native = _native_subset.native_byte_classes
    if native is None:
        pytest.skip("the extension predates byte_classes")
    expected = dfa_module._python_byte_classes(ranges)
    got = np.frombuffer(native(ranges), dtype=np.uint8)
    assert got.tolist() == expected.tolist()
    assert dfa_module.byte_classes_from_ranges(frozenset(ranges)).tolist() == expected.tolist()


def test_byte_classes_in_c_refuses_bad_ranges() -> None:
    native = _native_subset.native_byte_classes
    if native is None:
        pytest.skip("the extension predates byte_classes")
    for bad in ([(3, 2)], [(0, 256)], [(-1, 4)], [(1,)], [[1, 2]], [("a", "b")]):
        with pytest.raises((ValueError, TypeError)):
            native(bad)
    with pytest.raises(TypeError):
        native(5)


@pytest.mark.parametrize("pattern", PATTERNS)
def test_build_all_in_c_is_the_python_dfa(pattern: str) -> None:
    """`build_all` on a fresh automaton: every row in C (one call per stop), the same DFA."""
    native = _compile(pattern, True)
    n = native.build_all()
    assert n == native.num_states and (native.table != -2).all()
    assert native._native is not None or native.is_empty
    python = _compile(pattern, False)
    old = dfa_module.NATIVE_SUBSET
    try:
        dfa_module.NATIVE_SUBSET = False
        assert _assert_isomorphic(native, python) == n
    finally:
        dfa_module.NATIVE_SUBSET = old


def test_a_context_is_freed_by_its_owner(monkeypatch: pytest.MonkeyPatch) -> None:
    """A C context goes with the object that owns it: through a capsule whose destructor is C,
    or (an extension built before it) a small owner whose `__del__` frees it via ctypes."""
    import gc

    capsule = _native_subset._CONTEXT_CAPSULE
    if capsule is not None:
        with pytest.raises(ValueError):
            capsule(3, 1)
        with pytest.raises(ValueError):
            capsule(0, 0)
    freed: list[int] = []
    real_free = _native_subset._LIB.sg_subset_free

    def free(ctx: int) -> None:
        freed.append(ctx)
        real_free(ctx)

    monkeypatch.setattr(_native_subset, "_CONTEXT_CAPSULE", None)
    monkeypatch.setattr(_native_subset, "_SUBSET_STARTED", None)  # (nor a started context)
    monkeypatch.setattr(_native_subset._LIB, "sg_subset_free", free)
    d = _compile(r"[a-z]{2,9}@x", True)
    native = d._native
    assert isinstance(native, _native_subset.NativeSubset)
    ctx = native.ctx
    del d, native
    gc.collect()
    assert freed == [ctx]
