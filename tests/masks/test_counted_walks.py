"""Walks shared between the states of a long (counted) string that behave alike over a token's
length: every mask is the one a walk of that very state gives."""

from __future__ import annotations

import json

import numpy as np
import pytest

from structgen import Compiler, SchemaOptions, compiler
from structgen.engines import grammar as engine
from structgen.grammar import terminals
from structgen.masks import _walker
from structgen.masks._kernel import native_available
from tests.conftest import load_tokenizer, load_vocab
from tests.grammar.test_kernels_agree import masks_along

pytestmark = pytest.mark.skipif(not native_available(), reason="the C trie walk is not built")

SCHEMA = {
    "type": "object",
    "properties": {
        "text": {"type": "string", "minLength": 150, "maxLength": 400},
        "n": {"type": "integer"},
    },
    "required": ["text"],
}
UNITS = [
    "Lorem",
    " ipsum",
    ",",
    " dolor",
    " ",
    '\\"',
    "sit",
    '\\"',
    " amet:",
    " ü",
    " €",
    " 𝄞",
    " ",
    "\\n",
    "\\t",
]


def body_of(length: int) -> str:
    """JSON string content of `length` characters (escapes count once, as validators count)."""
    out = ""
    while len(json.loads(f'"{out}"')) < length:
        unit = UNITS[len(out) % len(UNITS)]
        out += unit if len(json.loads(f'"{out}{unit}"')) <= length else "x"
    return out


def _masks(text: str, mode: str, valid: bool) -> list[np.ndarray]:
    vocab = load_vocab("llama3_1")
    ids = load_tokenizer("llama3_1").encode(text, add_special_tokens=False)
    compiler._CACHE.clear()
    engine._UNIONS.clear()  # the shared lexers keep their walk results: start afresh
    terminals.clear_terminal_automata()
    compiled = Compiler(vocab).json_schema(SCHEMA, options=SchemaOptions(mode=mode))  # type: ignore[arg-type]
    out = masks_along(compiled, ids, vocab.size)
    assert (len(out) == len(ids)) == valid  # (an invalid text: the masks up to its error)
    return out


@pytest.mark.parametrize("mode", ["accept", "generate"])
@pytest.mark.parametrize("length", [140, 150, 396, 400, 401])
def test_shared_walks_give_each_states_own_mask(
    mode: str, length: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Along strings that end below, at and between the length bounds (then the object goes on:
    the masks hold tokens that close the string), masks with shared walks equal masks walked
    state by state."""
    text = f'{{"text": "{body_of(length)}", "n": 12}}'
    valid = 150 <= length <= 400
    shared = _masks(text, mode, valid)
    monkeypatch.setattr(_walker, "SHARE_COUNTED_WALKS", False)
    plain = _masks(text, mode, valid)
    assert len(shared) == len(plain)
    for k, (a, b) in enumerate(zip(shared, plain, strict=True)):
        assert np.array_equal(a, b), (mode, length, k)


def test_states_far_from_the_bounds_share_one_walk() -> None:
    """Between `minLength` and `maxLength` less a token's length, a string's states are walked
    once per state of the character being read, not once per count."""
    vocab = load_vocab("llama3_1")
    compiler._CACHE.clear()
    engine._UNIONS.clear()
    terminals.clear_terminal_automata()
    schema = {"type": "string", "maxLength": 5000}
    compiled = Compiler(vocab).json_schema(schema)
    ids = load_tokenizer("llama3_1").encode(f'"{body_of(1200)}"', add_special_tokens=False)
    masks_along(compiled, ids, vocab.size)
    walkers = [u.walker for u in engine._UNIONS.values()]
    walked = sum(len(w._bounded_events) for w in walkers)
    visited = sum(len(w._events) for w in walkers)
    assert 0 < walked < visited / 4, (walked, visited)
