"""One compiled grammar shared by many threads, each with its own matcher, gives the masks a
single thread gives — including while the lazy automata and mask caches are being built."""

from __future__ import annotations

import json
import threading

import pytest

from structgen import CompiledGrammar, CompileLimits, Compiler, Matcher, allocate_bitmask
from tests.conftest import load_tokenizer, load_vocab

pytestmark = pytest.mark.slow

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 20},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "tags": {"type": "array", "items": {"enum": ["a", "bb", "ccc"]}, "maxItems": 4},
        "email": {"type": "string", "format": "email"},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}
DOCS = [
    {"name": "Ada Lovelace", "age": 36, "tags": ["a", "ccc"]},
    {"name": "Alan", "age": 41, "email": "alan@example.org"},
    {"name": "", "age": 0, "tags": []},
    {"name": "Grace Hopper", "age": 150, "tags": ["bb", "bb", "a"]},
]
THREADS = 8


def _walk(grammar: CompiledGrammar, tokens: list[int]) -> list[bytes]:
    """The mask before each token and at the end (bytes, to compare exactly)."""
    matcher = Matcher(grammar)
    bitmask = allocate_bitmask(1, grammar.vocab.size, backend="numpy")  # (runs without torch)
    out = []
    for token in tokens:
        matcher.fill_bitmask(bitmask)
        out.append(bitmask.tobytes())
        assert matcher.accept_token(token)
    matcher.fill_bitmask(bitmask)
    out.append(bitmask.tobytes())
    assert matcher.can_terminate()
    return out


def test_threads_share_one_grammar_and_agree_with_a_single_thread() -> None:
    vocab = load_vocab("gpt2")
    tokenizer = load_tokenizer("gpt2")
    sequences = [tokenizer.encode(json.dumps(doc)) for doc in DOCS]
    # Limits unique to this test: a cold grammar (and cold union lexers) the threads build
    # together; the reference below uses other limits, so it shares none of those caches.
    shared = Compiler(vocab, limits=CompileLimits(max_cached_masks=4093)).json_schema(SCHEMA)
    reference = Compiler(vocab, limits=CompileLimits(max_cached_masks=4091)).json_schema(SCHEMA)
    assert shared is not reference

    barrier = threading.Barrier(THREADS)
    results: dict[int, list[list[bytes]]] = {}
    errors: list[BaseException] = []

    def work(index: int) -> None:
        try:
            barrier.wait()
            order = sequences[index % len(sequences) :] + sequences[: index % len(sequences)]
            results[index] = [_walk(shared, seq) for seq in order]
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors[0]
    expected = [_walk(reference, seq) for seq in sequences]
    for index, walks in results.items():
        shift = index % len(sequences)
        order = expected[shift:] + expected[:shift]
        for got, want in zip(walks, order):
            assert len(got) == len(want)
            assert got == want


def test_the_compile_cache_is_safe_under_concurrent_compiles() -> None:
    vocab = load_vocab("gpt2")
    limits = CompileLimits(max_cached_masks=4089)
    got: list[CompiledGrammar] = []
    lock = threading.Lock()
    barrier = threading.Barrier(THREADS)

    def work() -> None:
        barrier.wait()
        grammar = Compiler(vocab, limits=limits).regex(r"[a-z]{2,5}@[a-z]+\.(com|org)")
        with lock:
            got.append(grammar)

    threads = [threading.Thread(target=work) for _ in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert len(got) == THREADS
    assert all(g is got[0] for g in got)  # one object: the cache hands out the first one built
