"""Masks around ignored lexemes (`%ignore`): the C walk's boundary events, continued walk by
walk from Python, against the Python path.

Where a lexeme of an ignored terminal ends, the parse stays as it was and the next lexeme
starts from the same lexer start. The masks must be exactly the ones the Python path gives
(the numpy walk and `advance`, byte by byte): compared along random token paths on a
vocabulary of every short string over the grammars' characters, on grammars chosen for the
edge cases — an ignored terminal the grammar also uses, one whose lexemes end
in a state another terminal accepts too, a greedy ignore a lazy reading would split, comments
— and against Lark's parser where its reading is the same.
"""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from structgen import Compiler, Matcher, Vocabulary, allocate_bitmask
from structgen import compiler as compiler_module
from structgen.masks import _walker, unpack_bitmask
from structgen.masks._kernel import native_available
from tests.grammar.test_grammar_engine import lark_complete

pytestmark = pytest.mark.skipif(not native_available(), reason="the C trie walk is not built")

CHARS = ["[", "]", ",", "1", "2", " ", "\n", "x", "y", "#"]


def vocabulary() -> Vocabulary:
    """EOS and every string of one to three of CHARS."""
    pieces: list[bytes | None] = [None]
    for n in (1, 2, 3):
        pieces += ["".join(p).encode() for p in itertools.product(CHARS, repeat=n)]
    return Vocabulary.from_tokens(pieces, eos_token_ids=[0])


VOCAB = vocabulary()

GRAMMARS = {
    # the common case: whitespace between any two tokens
    "list": 'start: "[" [NUM ("," NUM)*] "]"\nNUM: /[0-9]+/\nWS: /[ \\n]+/\n%ignore WS\n',
    # whitespace and line comments, both ignored
    "comments": (
        'start: "[" [NUM ("," NUM)*] "]"\nNUM: /[0-9]+/\nWS: /[ \\n]+/\n'
        "COMMENT: /#[^\\n]*\\n/\n%ignore WS\n%ignore COMMENT\n"
    ),
    # an ignored terminal the grammar also reads: where the parse expects it, no restart
    "ignored_and_used": (
        'start: NUM (SEP NUM)* ("," NUM)*\nNUM: /[0-9]+/\nSEP: / +/\n%ignore SEP\n'
    ),
    # a lexeme that ends where another terminal accepts as well: not an ignored-only end
    "shared_end": 'start: ("x" | "xy")+ "]"\nX: /x/\n%ignore X\n',
    # greedy: the ignored `x+` eats every x, so "xxy" never reads as "x" then "xy"
    "greedy": 'start: ("xy" | "1")+\nXS: /x+/\n%ignore XS\n',
}


def allowed_ids(matcher: Matcher) -> set[int]:
    bitmask = allocate_bitmask(1, VOCAB.size, backend="numpy")
    matcher.fill_bitmask(bitmask, 0)
    return set(np.flatnonzero(unpack_bitmask(bitmask[0], VOCAB.size)).tolist())


def masks_along(
    grammar: str, paths: list[list[int]] | None, seed: int = 0
) -> tuple[list[list[int]], list[set[int]]]:
    """The allowed ids in every state of each path, its last included (12 random paths of up
    to 10 tokens when `paths` is None), and the paths."""
    compiled = Compiler(VOCAB).grammar(grammar)
    rng = random.Random(seed)
    made: list[list[int]] = []
    masks: list[set[int]] = []
    for p in range(12 if paths is None else len(paths)):
        matcher = Matcher(compiled)
        path: list[int] = []
        allowed = allowed_ids(matcher)
        masks.append(allowed)
        for step in range(10 if paths is None else len(paths[p])):
            if paths is not None:
                tid = paths[p][step]
            else:
                choices = sorted(allowed - set(VOCAB.eos_token_ids))
                if not choices:
                    break
                tid = rng.choice(choices)
            assert matcher.accept_token(tid)
            path.append(tid)
            allowed = allowed_ids(matcher)
            masks.append(allowed)
        made.append(path)
    return made, masks


@pytest.mark.parametrize("name", sorted(GRAMMARS))
def test_masks_equal_the_python_paths(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    grammar = GRAMMARS[name]
    compiler_module._CACHE.clear()
    paths, native = masks_along(grammar, None, seed=len(name))
    assert sum(len(p) for p in paths) > 30  # (the paths went somewhere)
    compiler_module._CACHE.clear()
    monkeypatch.setattr(_walker, "native_walk", lambda vocab: None)
    _, python = masks_along(grammar, paths)
    compiler_module._CACHE.clear()
    for i, (a, b) in enumerate(zip(native, python, strict=True)):
        assert a == b, (name, i, sorted(a ^ b)[:10])


@pytest.mark.parametrize("name", ["list", "comments"])
def test_masks_equal_lark_at_the_start(name: str) -> None:
    """Every token at the start is allowed exactly when Lark can parse on from it (each token
    here completes with at most a few characters: tried)."""
    grammar = GRAMMARS[name]
    compiler_module._CACHE.clear()
    _, masks = masks_along(grammar, [[]])
    allowed = masks[0]
    endings = ["", "\n", "]", "1]", "[]", "\n]", "\n1]", "\n[]"]
    for tid in range(1, VOCAB.size):
        text = VOCAB.token_bytes(tid).decode()
        viable = any(lark_complete(grammar, (text + end).encode()) for end in endings)
        assert (tid in allowed) == viable, (name, text)
