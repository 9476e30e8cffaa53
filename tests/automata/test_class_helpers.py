"""The byte-class helpers in C (`_subset.c`: `joint_classes`, `class_firsts`) give what their
numpy definitions give (`dfa._number_rows` of the stacked classes, `np.unique`'s first
indices), on class arrays of every shape: numbered by first byte or not, with gaps or not."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from structgen.automata import compile_regex, intersect
from structgen.automata.dfa import (
    _CLASS_FIRSTS,
    _JOINT_CLASSES,
    _number_rows,
    class_representatives,
    joint_classes,
)

pytestmark = pytest.mark.skipif(
    _JOINT_CLASSES is None or _CLASS_FIRSTS is None, reason="the C extension is not built"
)


@st.composite
def class_arrays(draw: st.DrawFn) -> npt.NDArray[np.uint8]:
    """256 class ids: runs of bytes with ids drawn from a small or a large range."""
    top = draw(st.sampled_from([1, 2, 5, 40, 256]))
    cuts = sorted(draw(st.sets(st.integers(1, 255), max_size=12)))
    ids = draw(st.lists(st.integers(0, top - 1), min_size=len(cuts) + 1, max_size=len(cuts) + 1))
    out = np.zeros(256, dtype=np.uint8)
    for start, end, value in zip([0, *cuts], [*cuts, 256], ids):
        out[start:end] = value
    if draw(st.booleans()):  # scattered ids too, not only runs
        out[draw(st.integers(0, 255))] = draw(st.integers(0, top - 1))
    return out


@settings(max_examples=400, deadline=None)
@given(st.lists(class_arrays(), min_size=1, max_size=6))
def test_joint_classes_number_the_stacked_rows(parts: list[npt.NDArray[np.uint8]]) -> None:
    native = np.frombuffer(_JOINT_CLASSES(parts), dtype=np.uint8)
    assert np.array_equal(native, _number_rows(np.stack(parts, 1)))


@settings(max_examples=400, deadline=None)
@given(class_arrays())
def test_class_firsts_are_the_first_bytes(classes: npt.NDArray[np.uint8]) -> None:
    native = np.frombuffer(_CLASS_FIRSTS(classes), dtype=np.int64)
    assert np.array_equal(native, np.unique(classes, return_index=True)[1])


def test_products_and_unions_use_them() -> None:
    a, b = compile_regex(r"[a-f]+[0-9]"), compile_regex(r"[c-x]{2,4}[0-9]")
    product = intersect(a, b)
    expected = _number_rows(np.stack([a.byte_classes, b.byte_classes], 1))
    assert np.array_equal(joint_classes([a.byte_classes, b.byte_classes]), expected)
    assert np.array_equal(product.byte_classes, expected)
    reps = class_representatives(product.byte_classes)
    assert np.array_equal(reps, np.unique(product.byte_classes, return_index=True)[1])
    assert product.accepts(b"cdef1") and not product.accepts(b"ab1")


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError):
        _JOINT_CLASSES([np.zeros(10, dtype=np.uint8)])
    with pytest.raises(ValueError):
        _CLASS_FIRSTS(np.zeros(300, dtype=np.uint8))
    with pytest.raises(TypeError):
        _JOINT_CLASSES(5)
