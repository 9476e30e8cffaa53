"""A grammar has one lexer automaton; each set of expected terminals is a start state of it, and
lexemes past their first bytes meet in shared states (built once, masks cached once)."""

from __future__ import annotations

import numpy as np

from structgen import Compiler, compiler
from structgen.engines import grammar as engine
from tests.conftest import load_vocab

# Keys in a fixed order, each optional: after every key the parser expects a different set of
# key terminals, and every set also expects the catch-all STRING.
KEYS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot"]
GRAMMAR = "\n".join(
    [
        'start: "{" ' + " ".join(f"k{i}?" for i in range(len(KEYS))) + ' extra* "}"',
        *[f'k{i}: KEY{i} ":" STRING ";"' for i in range(len(KEYS))],
        'extra: STRING ":" STRING ";"',
        *[f'KEY{i}: "\\"{k}\\""' for i, k in enumerate(KEYS)],
        r'STRING: /"[a-z ]{0,40}"/',
    ]
)


def test_one_lexer_many_start_states() -> None:
    vocab = load_vocab("llama3_1")
    compiler._CACHE.clear()
    engine._UNIONS.clear()
    compiled = Compiler(vocab).grammar(GRAMMAR)
    grammar_engine = compiled._engine  # type: ignore[attr-defined]
    text = '{"bravo":"x y";"echo":"hello world";"zulu":"q";}'
    state = grammar_engine.initial_state
    lexers = set()
    starts = set()
    for byte in text.encode():
        grammar_engine.token_mask(state)
        parse = state[0]
        lexer = grammar_engine.lexer(parse)
        lexers.add(id(lexer.dfa))
        starts.add(lexer.start)
        state = grammar_engine.advance(state, bytes([byte]))
        assert state is not None, byte
    assert grammar_engine.is_accepting(state)
    assert len(lexers) == 1  # one automaton for every parse state
    assert len(starts) >= 4  # ... entered at different start states
    dfa = next(iter(grammar_engine._lexers.values())).dfa
    # Inside a string only STRING (and maybe one key) is alive: those states are shared, so the
    # lexer stays small however many key sets the parse went through.
    assert dfa.num_states < 2_000


def test_masks_agree_with_byte_level_advance() -> None:
    """Mask bits equal feeding each token's bytes through the parser (sampled tokens), at every
    step of a text that visits several key sets."""
    vocab = load_vocab("llama3_1")
    compiler._CACHE.clear()
    engine._UNIONS.clear()
    grammar_engine = Compiler(vocab).grammar(GRAMMAR)._engine  # type: ignore[attr-defined]
    rng = np.random.default_rng(0)
    sample = rng.choice(vocab.size, 1500, replace=False)
    state = grammar_engine.initial_state
    for byte in b'{"alpha":"a b";"delta":"dd";"x":"y";}':
        words = grammar_engine.token_mask(state).view(np.uint32)
        bits = (words[np.arange(vocab.size) >> 5] >> (np.arange(vocab.size) & 31)) & 1
        allowed = set(np.flatnonzero(bits).tolist())
        for token in {*sample.tolist(), *list(allowed)[:300]}:
            data = vocab.token_bytes(token)
            if not data or vocab.is_special(token):
                continue
            expected = grammar_engine.advance(state, data) is not None
            assert (token in allowed) == expected, (byte, data)
        state = grammar_engine.advance(state, bytes([byte]))
        assert state is not None
    assert grammar_engine.is_accepting(state)


def test_grammars_share_the_lexer_that_reads_nothing() -> None:
    """Where nothing can follow (a value's end), the lexer reads nothing: one held for the
    vocabulary serves every grammar, also after the grammar that made it is gone (a weakly
    cached one was made again by each), and `clear_caches` lets it go."""
    import gc
    import weakref

    import structgen

    vocab = load_vocab("llama3_1")
    structgen.clear_caches()
    ends = []
    for text in ('start: "a"', 'start: "b" "c"'):
        grammar_engine = Compiler(vocab).grammar(text)._engine  # type: ignore[attr-defined]
        state = grammar_engine.initial_state
        for byte in text.split('"')[1].encode() + (b"c" if "c" in text else b""):
            state = grammar_engine.advance(state, bytes([byte]))
        grammar_engine.token_mask(state)  # (the end: only the lexer that reads nothing)
        after = grammar_engine.end_lexeme(state[0], state[1])
        assert after is not None and not after.expected
        ends.append(weakref.ref(grammar_engine.lexer(after).dfa))
        del grammar_engine, state, after
        compiler._CACHE.clear()  # (the grammar goes: nothing else holds its lexers)
        gc.collect()
    assert ends[0]() is not None and ends[0]() is ends[1]()  # (held, not made again)
    assert len(engine._EMPTY_UNIONS) == 1
    structgen.clear_caches()
    assert len(engine._EMPTY_UNIONS) == 0
