"""The engines every benchmark drives, written once: how each one is set up for a tokenizer and
how its token loop runs (fill a mask, accept a token, ask whether the output may end).

A script subclasses one of these with what differs — `compile(source)` from a regex, a schema
or a grammar, `clear_caches()` for cold runs — and raises `EngineError` when the engine refuses
the source. `can_terminate` only asks (xgrammar's `is_completed()`, never an EOS fed in), so
the matcher's state is the same after it.
"""

from __future__ import annotations

import contextlib
import gc
import json
import time
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = [
    "EngineError",
    "LLGuidancePeer",
    "LLGuidanceProcessors",
    "OutlinesCorePeer",
    "StructgenPeer",
    "XGrammarPeer",
    "XGrammarProcessors",
    "cold_compile",
    "stop_worker",
    "token_table",
]


class EngineError(Exception):
    """The engine refused the source (unsupported syntax or keyword, a limit)."""


class StructgenPeer:
    """structgen: a `Vocabulary` with its per-vocabulary tables built up front (as the peers
    build their tokenizer tables), a `Matcher` per compile."""

    name = "structgen"

    def __init__(self, tokenizer: Any, vocab: Any = None) -> None:
        """`vocab`: another structgen engine's vocabulary, tables already built (shared)."""
        from structgen import Vocabulary, allocate_bitmask

        if vocab is None:
            vocab = self.prepared(Vocabulary.from_hf(tokenizer))
        self.vocab = vocab
        self.bitmask = allocate_bitmask(1, vocab.size, backend="numpy")
        self.matcher: Any = None

    @staticmethod
    def prepared(vocab: Any) -> Any:
        """`vocab` with its per-vocabulary tables built (once, like the peers' tokenizer
        tables): the trie, the C walk's token table and the tokens by first byte."""
        import structgen.masks._walker

        vocab.trie  # noqa: B018
        structgen.masks._walker.native_walk(vocab)
        structgen.masks._walker.first_byte_masks(vocab)
        return vocab

    def use(self, compiled: Any) -> None:
        from structgen import Matcher

        self.compiled = compiled
        self.matcher = Matcher(compiled)

    def start(self) -> None:
        """A fresh matcher for the last compiled constraint."""
        self.use(self.compiled)

    def release(self) -> None:
        """Drop the last constraint and its matcher (freed here, not inside the next timing)."""
        self.matcher = None
        self.compiled = None

    def reset(self) -> None:
        self.matcher.reset()

    def fill(self) -> None:
        self.matcher.fill_bitmask(self.bitmask, 0)

    def accept(self, token: int) -> bool:
        return bool(self.matcher.accept_token(token))

    def can_terminate(self) -> bool:
        return bool(self.matcher.can_terminate())


class LLGuidancePeer:
    """llguidance: an `LLMatcher` per compile, over `llguidance.hf.from_tokenizer`."""

    name = "llguidance"

    def __init__(self, tokenizer: Any, vocab_size: int | None = None) -> None:
        import llguidance
        import llguidance.hf
        import llguidance.numpy

        self.llg = llguidance
        if vocab_size is None:
            self.tokenizer = llguidance.hf.from_tokenizer(tokenizer)
        else:
            self.tokenizer = llguidance.hf.from_tokenizer(tokenizer, n_vocab=vocab_size)
        self.bitmask = llguidance.numpy.allocate_token_bitmask(1, self.tokenizer.vocab_size)

    def use(self, grammar: Any) -> None:
        """Match `grammar` (an llguidance grammar); `EngineError` when it is refused."""
        self.grammar = grammar
        self.start()

    def start(self) -> None:
        self.matcher = self.llg.LLMatcher(self.tokenizer, self.grammar, log_level=0)
        if self.matcher.is_error():
            raise EngineError(self.matcher.get_error()[:300])

    def release(self) -> None:
        """Drop the last grammar and its matcher (freed here, not inside the next timing)."""
        self.matcher = None
        self.grammar = None

    def reset(self) -> None:
        self.matcher.reset()

    def fill(self) -> None:
        self.llg.numpy.fill_next_token_bitmask(self.matcher, self.bitmask, 0)

    def accept(self, token: int) -> bool:
        return bool(self.matcher.consume_token(token)) and not self.matcher.is_error()

    def can_terminate(self) -> bool:
        return bool(self.matcher.is_accepting())


class XGrammarPeer:
    """xgrammar: a `GrammarMatcher` per compile; `compiler` is made fresh by `clear_caches`."""

    name = "xgrammar"

    def __init__(
        self, tokenizer: Any, vocab_size: int | None = None, *, threads: int = 1, info: Any = None
    ) -> None:
        import xgrammar

        self.xgr = xgrammar
        if info is None:
            kwargs = {} if vocab_size is None else {"vocab_size": vocab_size}
            info = xgrammar.TokenizerInfo.from_huggingface(tokenizer, **kwargs)
        self.info = info
        self.threads = threads
        self.bitmask = np.zeros((1, (info.vocab_size + 31) // 32), dtype=np.int32)
        self.clear_caches()

    def clear_caches(self) -> None:
        self.compiler = self.xgr.GrammarCompiler(
            self.info, cache_enabled=False, max_threads=self.threads
        )

    def use(self, compiled: Any) -> None:
        self.compiled = compiled
        self.start()

    def start(self) -> None:
        self.matcher = self.xgr.GrammarMatcher(self.compiled)

    def release(self) -> None:
        """Drop the last compiled grammar and its matcher (freed here, not inside the next
        timing)."""
        self.matcher = None
        self.compiled = None

    def reset(self) -> None:
        self.matcher.reset()

    def fill(self) -> None:
        self.matcher.fill_next_token_bitmask(self.bitmask, 0)

    def accept(self, token: int) -> bool:
        return bool(self.matcher.accept_token(token))

    def can_terminate(self) -> bool:
        return bool(self.matcher.is_completed())


class OutlinesCorePeer:
    """outlines-core: an `Index` per compile over a `Vocabulary` built from token bytes (its
    `from_pretrained` reaches for the Hub)."""

    name = "outlines-core"

    def __init__(self, eos_token_id: int, tokens: dict[bytes, list[int]], vocab_size: int) -> None:
        import outlines_core

        self.oc = outlines_core
        self.vocabulary = outlines_core.Vocabulary(eos_token_id, tokens)
        self.bitmask = np.zeros((1, (vocab_size + 31) // 32), dtype=np.int32)

    def use_regex(self, pattern: str) -> None:
        """Match `pattern`; `EngineError` when outlines-core refuses it."""
        try:
            self.index = self.oc.Index(pattern, self.vocabulary)
        except (ValueError, RuntimeError) as exc:
            raise EngineError(str(exc).splitlines()[0][:300] if str(exc) else repr(exc)) from exc
        self.start()

    def start(self) -> None:
        self.guide = self.oc.Guide(self.index)

    def release(self) -> None:
        """Drop the last index and its guide (freed here, not inside the next timing)."""
        self.guide = None
        self.index = None

    def fill(self) -> None:
        self.guide.write_mask_into(self.bitmask.ctypes.data, self.bitmask.shape[1], 4)

    def accept(self, token: int) -> bool:
        try:
            self.guide.advance(token, return_tokens=False)
        except ValueError:
            return False
        return True

    def can_terminate(self) -> bool:
        return bool(self.guide.is_finished())


# ------------------------------------------------------- as transformers logits processors


class LLGuidanceProcessors:
    """llguidance's matcher as a `transformers` logits processor (one matcher per row)."""

    def __init__(self, tokenizer: Any, vocab_size: int) -> None:
        import llguidance
        import llguidance.hf
        import llguidance.torch

        self.llg = llguidance
        self.lt = llguidance.torch
        self.tok = llguidance.hf.from_tokenizer(tokenizer, n_vocab=vocab_size)

    def check(self, schema: Any) -> None:
        grammar = self.llg.LLMatcher.grammar_from_json_schema(schema)
        matcher = self.llg.LLMatcher(self.tok, grammar)
        if matcher.is_error():
            raise ValueError(matcher.get_error())

    def processor(self, schemas: list[Any]) -> Callable[[Any, Any], Any]:
        grammars = [self.llg.LLMatcher.grammar_from_json_schema(s) for s in schemas]
        state: dict[str, Any] = {}

        def call(input_ids: Any, scores: Any) -> Any:
            rows = input_ids.shape[0]
            if "matchers" not in state:
                state["matchers"] = [self.llg.LLMatcher(self.tok, g) for g in grammars]
                state["mask"] = self.lt.allocate_token_bitmask(rows, self.tok.vocab_size)
            else:
                for row, m in enumerate(state["matchers"]):
                    if not m.is_stopped():
                        m.consume_token(int(input_ids[row, -1]))
            for row, m in enumerate(state["matchers"]):
                self.lt.fill_next_token_bitmask(m, state["mask"], row)
            self.lt.apply_token_bitmask_inplace(scores, state["mask"].to(scores.device))
            return scores

        return call


class XGrammarProcessors:
    """xgrammar's own `transformers` logits processor (`xgrammar.contrib.hf`)."""

    def __init__(self, tokenizer: Any, vocab_size: int) -> None:
        import xgrammar
        import xgrammar.contrib.hf

        self.xgr = xgrammar
        info = xgrammar.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size)
        self.compiler = xgrammar.GrammarCompiler(info, max_threads=1)

    def check(self, schema: Any) -> None:
        self.compiler.compile_json_schema(json.dumps(schema))

    def processor(self, schemas: list[Any]) -> Any:
        import xgrammar.contrib.hf

        compiled = [self.compiler.compile_json_schema(json.dumps(s)) for s in schemas]
        return xgrammar.contrib.hf.LogitsProcessor(compiled)


def token_table(vocab: Any) -> dict[bytes, list[int]]:
    """outlines-core's token table from a structgen `Vocabulary`: bytes → ids."""
    table: dict[bytes, list[int]] = {}
    for i in range(vocab.size):
        data = vocab.token_bytes(i)
        if data:
            table.setdefault(data, []).append(i)
    return table


def cold_compile(engine: Any, source: Any) -> tuple[float, float]:
    """One cold run's set-up: clear the engine's caches, collect, compile `source`, fill the
    first mask; returns (compile ms, first-mask ms). `EngineError` passes through."""
    engine.clear_caches()
    gc.collect()
    t0 = time.perf_counter()
    engine.compile(source)
    t1 = time.perf_counter()
    engine.fill()
    t2 = time.perf_counter()
    return (t1 - t0) * 1e3, (t2 - t1) * 1e3


def stop_worker(process: Any, conn: Any) -> None:
    """End a benchmark worker process: ask it to stop (None down the pipe), then kill it if it
    is still there after 5 s."""
    if process.is_alive():
        with contextlib.suppress(BrokenPipeError, OSError):
            conn.send(None)
        process.join(5)
    if process.is_alive():
        process.kill()
    process.join()
