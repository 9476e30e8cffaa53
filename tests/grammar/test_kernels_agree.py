"""The C trie walk and the numpy fallback compute identical masks on a real vocabulary."""

from __future__ import annotations

import numpy as np
import pytest

from structgen import Compiler, Matcher, allocate_bitmask, compiler
from structgen.engines import grammar as engine
from structgen.grammar.lark_frontend import lark_to_ir, load_builtin
from structgen.grammar.sampler import sample_sentences
from structgen.masks import _walker
from structgen.masks._kernel import native_available
from tests.conftest import load_tokenizer, load_vocab


def masks_along(compiled: object, ids: list[int], size: int) -> list[np.ndarray]:
    matcher = Matcher(compiled)  # type: ignore[arg-type]
    out = []
    bitmask = allocate_bitmask(1, size, backend="numpy")
    for tid in ids:
        matcher.fill_bitmask(bitmask, 0)
        out.append(bitmask[0].copy())
        if not matcher.accept_token(tid):
            break
    return out


@pytest.mark.skipif(not native_available(), reason="the C trie walk is not built")
@pytest.mark.parametrize("grammar_name", ["json", "sql_select", "arithmetic"])
def test_native_and_numpy_masks_agree(grammar_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    vocab = load_vocab("llama3_1")
    tokenizer = load_tokenizer("llama3_1")
    text = load_builtin(grammar_name)
    sentences = sample_sentences(lark_to_ir(text), count=2, seed=1, max_terminals=30)
    token_lists = [tokenizer.encode(s, add_special_tokens=False) for s in sentences]
    compiler._CACHE.clear()
    native = [masks_along(Compiler(vocab).grammar(text), ids, vocab.size) for ids in token_lists]
    compiler._CACHE.clear()
    engine._UNIONS.clear()  # the shared lexers keep their walk results: start afresh
    monkeypatch.setattr(_walker, "native_walk", lambda v: None)
    fallback = [masks_along(Compiler(vocab).grammar(text), ids, vocab.size) for ids in token_lists]
    compiler._CACHE.clear()
    for a, b in zip(native, fallback, strict=True):
        assert len(a) == len(b)
        for step, (x, y) in enumerate(zip(a, b)):
            assert np.array_equal(x, y), (grammar_name, step)
