"""The C extensions are optional for users, but CI has a compiler: there, a build that failed
(setuptools skips an optional extension silently) must fail the run, not skip the C tests."""

from __future__ import annotations

import pytest

from structgen.automata import _native_subset, dfa, snapshot
from structgen.automata._native_subset import native_subset_available
from structgen.grammar import earley
from structgen.masks import _kernel
from tests.conftest import IN_CI


@pytest.mark.skipif(not IN_CI, reason="only CI requires the C extensions to be built")
def test_c_extensions_are_built() -> None:
    assert _kernel.native_available(), "structgen.masks._native did not build"
    assert _kernel.equality_available()
    assert _kernel._EXT is not None and _kernel._ENDS is not None
    for entry in ("walk", "contained", "bounded_equal", "take_words"):
        assert hasattr(_kernel._EXT, entry), entry
    assert native_subset_available(), "structgen.automata._subset did not build"
    assert _native_subset._ADDRESSES is not None
    assert _native_subset.native_byte_classes is not None
    assert dfa._JOINT_CLASSES is not None and dfa._CLASS_FIRSTS is not None
    assert snapshot._CHECK_SNAPSHOTS is not None
    assert earley._NATIVE is not None, "structgen.grammar._earley did not build"
    assert hasattr(earley._NATIVE, "known_closure") and hasattr(earley._NATIVE, "number_rules")
    from structgen.grammar import lark_reader

    assert lark_reader._LEXER is not None, "structgen.grammar._lark_lexer did not build"
    from structgen.automata import nfa

    assert nfa._NFA_STARTED is not None
    from structgen import schema

    assert schema._PLAIN_JSON is not None, "structgen._json_native did not build"
