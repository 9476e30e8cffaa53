"""`Compiler`: frontends → automata → `CompiledGrammar`, with a bounded compile cache.

Compile once, run many: a `CompiledGrammar` is immutable (its lazily built automaton and mask
cache only grow, under locks), shareable across threads and sequences, and cached by
(kind, source, options, vocabulary fingerprint, version).
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt

from structgen import automata
from structgen._args import describe, expect_bool, expect_int, expect_str
from structgen._budget import compile_budget
from structgen._gc import paused_gc
from structgen.automata import AutomataLimits
from structgen.compile_cache import ENV_VAR, CompileCache, key_text
from structgen.engines import Engine, GrammarEngine, RegexEngine
from structgen.engines._before import cached_mask_of
from structgen.errors import ArgumentError, StructgenError
from structgen.grammar.ir import Grammar
from structgen.vocab import Vocabulary

if TYPE_CHECKING:
    from structgen.schema import SchemaOptions

__all__ = ["CompileLimits", "CompiledGrammar", "Compiler"]

_COMPILER_VERSION = "0.1"
#: random outputs whose states a serving backend's compile thread visits (`prefetch_masks`):
#: most states of what a model writes do not depend on its words (benchmarks/engines.py: the
#: masks along a person schema's answer 1.86 -> 0.18 ms, two samples already most of it)
SERVING_PREFETCH_SAMPLES = 4


@dataclass(frozen=True, slots=True)
class CompileLimits:
    """Limits on compile work; hitting one raises an error that names the knob.

    `max_nfa_states` bounds a regex's expanded size (counted repetitions multiply it),
    `max_dfa_states` the lazily built automaton, `max_cached_masks` the per-grammar mask cache
    (each mask costs vocab_size/8 bytes), `max_compile_seconds` the wall time of one compile
    (None: unlimited; the lazy work done later while generating is bounded by the state
    limits). Up to `eager_dfa_states` DFA states, within `eager_seconds`, are built at compile
    time (breadth first), so that the first steps of generation do not pay for them.
    """

    max_nfa_states: int = 200_000
    max_dfa_states: int = 50_000
    max_cached_masks: int = 4096
    eager_dfa_states: int = 128
    eager_seconds: float = 0.0008
    max_compile_seconds: float | None = 60.0
    #: `automata()`, made once (every compile and load asks)
    _automata: AutomataLimits = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        limits = AutomataLimits(
            max_nfa_states=self.max_nfa_states, max_dfa_states=self.max_dfa_states
        )
        object.__setattr__(self, "_automata", limits)

    def automata(self) -> AutomataLimits:
        return self._automata


class CompiledGrammar:
    """A constraint compiled against one vocabulary: an engine plus its token-mask caches.

    Create `Matcher(compiled)` objects from it, one per sequence. The engine is a lazy DFA for
    regular constraints (regex, choice) or the Earley-based engine for context-free ones; both
    expose the same small interface (states are opaque to the Matcher).
    """

    __slots__ = (
        "_engine",
        "_planner",
        "_recipe",
        "_text_refused",
        "_text_words",
        "_tokens",
        "_fingerprint",
        "kind",
        "_source",
        "vocab",
    )

    def __init__(
        self,
        vocab: Vocabulary,
        engine: Engine,
        *,
        kind: str,
        source: str | Callable[[], str],
        recipe: tuple[Any, ...] | None = None,
    ) -> None:
        """`source`: the text shown for it, or a function that writes it when first asked
        (a schema's head: ~25 us, a tenth of a compile-cache load)."""
        self.vocab = vocab
        self.kind = kind
        self._source = source
        self._engine = engine
        self._recipe = recipe
        self._planner: Any = None  # closing.CompletionPlanner, made on first use
        # token terminals (grammar/tokens.py): id -> the marker bytes the engine reads for it
        self._tokens: dict[int, bytes] = {}
        self._text_refused: npt.NDArray[np.bool_] | None = None
        self._text_words: npt.NDArray[np.int32] | None = None
        token_ids: frozenset[int] = getattr(engine, "token_ids", frozenset())
        if token_ids:
            self._use_tokens(token_ids)
        self._fingerprint: str | None = None

    @property
    def source(self) -> str:
        """What was compiled, as text (a schema's or grammar's first 200 characters)."""
        source = self._source
        if not isinstance(source, str):
            source = self._source = source()
        return source

    @property
    def fingerprint(self) -> str:
        """Stable digest of (structgen version, kind, what the engine runs, vocabulary):
        computed when first asked (digesting a grammar's terminals is a few percent of a
        compile, and most compiles never need it)."""
        found = self._fingerprint
        if found is None:
            engine = self._engine
            text = (
                f"{_COMPILER_VERSION}\0{self.kind}\0{engine.fingerprint}\0{self.vocab.fingerprint}"
            )
            found = self._fingerprint = hashlib.sha256(text.encode()).hexdigest()
        return found

    def _use_tokens(self, token_ids: frozenset[int]) -> None:
        from structgen.grammar.tokens import text_clashes, token_marker

        vocab = self.vocab
        bad = sorted(t for t in token_ids if not 0 <= t < vocab.size or t in vocab.eos_token_ids)
        if bad:
            raise ArgumentError(
                f"the grammar matches token ids {bad[:5]}, which are outside the vocabulary or "
                "are its EOS tokens (the end of a grammar is where EOS is allowed: leave them "
                "out)"
            )
        self._tokens = {t: token_marker(t) for t in sorted(token_ids)}
        refused = text_clashes(vocab).copy()
        refused[list(token_ids)] = True  # their text reading gives way to the token terminal
        self._text_refused = refused
        from structgen.masks import pack_bool_mask

        self._text_words = pack_bool_mask(~refused[: vocab.size])

    @property
    def token_ids(self) -> frozenset[int]:
        """The ids the grammar's token terminals match (special or added tokens)."""
        return frozenset(self._tokens)

    def token_data(self, token_id: int) -> bytes | None:
        """The bytes the engine reads for `token_id` (None: the grammar never takes it): its
        text, or for an id of a token terminal its marker (grammar/tokens.py)."""
        marker = self._tokens.get(token_id)
        if marker is not None:
            return marker
        refused = self._text_refused
        if refused is not None and refused[token_id]:
            return None
        data = self.vocab.token_bytes(token_id)
        return data or None

    @property
    def initial_state(self) -> Any:
        return self._engine.initial_state

    def advance(self, state: Any, data: bytes) -> Any:
        """State after reading `data` from `state`; None when the constraint rejects it."""
        return self._engine.advance(state, data)

    def is_accepting(self, state: Any) -> bool:
        return bool(self._engine.is_accepting(state))

    def token_mask(self, state: Any) -> npt.NDArray[np.int32]:
        """Packed mask of the tokens allowed in `state` (EOS not included)."""
        mask = self._engine.token_mask(state)
        return self._with_tokens(state, mask) if self._tokens else mask  # (every row's fill)

    def cached_token_mask(self, state: Any) -> npt.NDArray[np.int32] | None:
        """`token_mask(state)` when the engine has it cached, else None (nothing computed):
        `fill_bitmasks` fills those rows at once and hands the others to its threads."""
        mask = cached_mask_of(self._engine, state)
        return None if mask is None else self._with_tokens(state, mask)

    def has_cached_mask(self, state: Any) -> bool:
        """Whether `cached_token_mask(state)` finds the engine's mask (without the token
        terminals' bits, which cost an `advance` each)."""
        return cached_mask_of(self._engine, state) is not None

    def _with_tokens(self, state: Any, mask: npt.NDArray[np.int32]) -> npt.NDArray[np.int32]:
        """`mask` with the bits of the token terminals (special tokens) `state` allows."""
        if not self._tokens:
            return mask
        assert self._text_words is not None
        mask = mask & self._text_words
        advance = self._engine.advance
        for token_id, marker in self._tokens.items():
            if advance(state, marker) is not None:
                mask[token_id >> 5] |= np.int32(np.uint32(1 << (token_id & 31)).view(np.int32))
        return mask

    def shortest_completion(self, state: Any, *, spaced: bool = False) -> bytes | None:
        """A short text that completes the output from `state` (b"" when it is complete; None
        when the engine finds none). The engine's proposal: `closing.CompletionPlanner` checks it
        (wrapping engines may refuse it) and searches on where it fails."""
        finder = getattr(self._engine, "shortest_completion", None)
        if finder is None:
            return None
        found: bytes | None = finder(state, spaced=spaced)
        return found

    def forced_bytes(self, state: Any, limit: int = 4096) -> bytes:
        """The bytes every continuation from `state` starts with (empty when there is a choice)."""
        forced: bytes = self._engine.forced_bytes(state, limit)
        return forced

    def prefetch_masks(
        self,
        limit: int = 64,
        *,
        samples: int = 0,
        max_bytes: int = 1024,
        max_seconds: float | None = 0.02,
    ) -> int:
        """Compute now, and cache, the token masks of the states along the text every output
        starts with (the forced prefix, up to `limit` bytes), at every byte of it: a model's
        tokens may split it anywhere; and the first rows of the grammar's terminal automata
        that the compile left to first use. A serving engine calls it on its compile thread, so
        the first decode steps of the request find their masks cached and their rows built
        instead of building them inside a batch step that every running request waits for
        (structgen's vLLM and SGLang backends do).

        `samples`: also walk that many random outputs of the constraint (a grammar's sentences,
        a regex's texts; seeded, so the same each time), computing the mask at every byte, up
        to `max_bytes` in all (shared by the samples) and `max_seconds` of wall time (None: no
        time limit). Past the
        forced prefix, which states come depends on what the model writes, but most of them
        do not depend on the words: the states between keys and values, after each value,
        inside a string, along a counted string's first places. A sample that meets a limit of
        the grammar stops there (the request's own steps report it). Returns how many states'
        masks it computed (1: the first only)."""
        expect_int(limit, "limit", minimum=0)
        expect_int(samples, "samples", minimum=0)
        expect_int(max_bytes, "max_bytes", minimum=0)
        if max_seconds is not None and not (
            isinstance(max_seconds, (int, float)) and max_seconds >= 0
        ):
            raise ArgumentError(f"max_seconds must be a number >= 0 or None, got {max_seconds!r}")
        rows = getattr(self._engine, "build_first_rows", None)
        if rows is not None:
            rows()
        state = self.initial_state
        self.token_mask(state)
        self.is_accepting(state)
        count = 1
        for byte in self.forced_bytes(state, limit):
            state = self.advance(state, bytes((byte,)))
            if state is None:  # (never, for forced bytes: defensive)
                break
            self.token_mask(state)
            self.is_accepting(state)
            count += 1
        if samples and max_bytes:
            count += self._prefetch_samples(samples, max_bytes, max_seconds)
        return count

    def _prefetch_samples(self, samples: int, max_bytes: int, max_seconds: float | None) -> int:
        """The masks at every byte of `samples` random outputs (`prefetch_masks`)."""
        sample = getattr(self._engine, "sample_texts", None)
        if sample is None:
            return 0
        deadline = None if max_seconds is None else time.perf_counter() + max_seconds
        count = 0
        try:
            texts: list[bytes] = sample(samples, seed=0, max_bytes=max_bytes)
            for k, text in enumerate(texts):
                # (the bytes left shared by the samples left: outputs start alike, and a long
                # first one would leave the others nothing)
                share = (max_bytes - count) // (len(texts) - k)
                state = self.initial_state
                for byte in text[:share]:
                    state = self.advance(state, bytes((byte,)))
                    if state is None:  # (a sample the grammar refuses: nothing more to learn)
                        break
                    self.token_mask(state)
                    self.is_accepting(state)
                    count += 1
                    if deadline is not None and time.perf_counter() > deadline:
                        return count
        except StructgenError:  # (a limit met: the request's steps report it if they meet it)
            pass
        return count

    def memory_parts(self, known: dict[int, int] | None = None) -> dict[int, int]:
        """Estimated bytes held, by object id: automata shared with other grammars (terminal
        automata, lexers) appear under the same id in each (see `structgen.cache_usage`).
        `known`: sizes measured so far in a measurement of many grammars (read, added to)."""
        parts = dict(self._engine.memory_parts(known))
        planner = self._planner
        if planner is not None:
            parts[id(planner)] = planner.memory_bytes()
        return parts

    def to_text(self) -> str:
        """What this compiled to, as text: a grammar's rules and terminals (GBNF-like, see
        `Grammar.to_text`), or a regex / choice as one rule."""
        writer = getattr(self._engine, "to_text", None)
        if writer is not None:
            text: str = writer()
            return text
        if self.kind == "regex":
            return f"root ::= /{self.source}/"
        return f"root ::= {self.source}"

    def memory_bytes(self) -> int:
        """An estimate of the memory this grammar holds (its automata, mask caches, parse
        states), shared parts included."""
        return sum(self.memory_parts().values())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CompiledGrammar) and other.fingerprint == self.fingerprint

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickles as its recipe (vocabulary, limits, what was compiled) and compiles again on
        load: automata and mask caches are rebuilt lazily, never shipped as pickled state, and
        the result is equal (same fingerprint) to the original."""
        if self._recipe is None:
            raise TypeError(f"{self!r} was not made by a Compiler and cannot be pickled")
        return (_rebuild, (self.vocab, *self._recipe))

    def __hash__(self) -> int:
        return hash(self.fingerprint)

    def __repr__(self) -> str:
        return f"CompiledGrammar(kind={self.kind!r}, source={self.source[:60]!r})"


class _Full(Exception):
    """`text_head` has written enough."""


def text_head(value: Any, limit: int) -> str:
    """`str(value)[:limit]`, writing out no more of a large dict or list than that (a grammar
    keeps the head of its schema's text for its repr; the whole text of a large schema cost
    ~1% of its compile)."""
    if isinstance(value, str):
        return value[:limit]
    parts: list[str] = []
    size = 0

    def put(text: str) -> None:
        nonlocal size
        parts.append(text)
        size += len(text)
        if size >= limit:
            raise _Full

    def write(v: Any) -> None:  # (each level writes a bracket first: at most `limit` deep)
        if type(v) is dict:
            put("{")
            for i, (key, item) in enumerate(v.items()):
                put(", " if i else "")
                write(key)
                put(": ")
                write(item)
            put("}")
        elif type(v) is list:
            put("[")
            for i, item in enumerate(v):
                put(", " if i else "")
                write(item)
            put("]")
        else:
            put(repr(v))

    try:
        write(value)
    except _Full:
        pass
    finally:
        write = None  # type: ignore[assignment]  # (it refers to itself: a cycle)
    return "".join(parts)[:limit]


def _rebuild(
    vocab: Vocabulary, limits: CompileLimits, method: str, args: tuple[Any, ...], kwargs: Any
) -> CompiledGrammar:
    """Unpickling: compile the recipe again (a cache hit when this process has it already)."""
    compiled: CompiledGrammar = getattr(Compiler(vocab, limits=limits), method)(*args, **kwargs)
    return compiled


#: what the persistent cache saves: grammars run by the grammar engine (a `uniqueItems` guard
#: or a reasoning wrapper around one is compiled again)
_PERSISTED = frozenset({"json_schema", "grammar", "ebnf", "structural_tag", "grammar_ir"})
_DISKS: dict[str, CompileCache] = {}


def _disk(directory: str | os.PathLike[str]) -> CompileCache:
    """One `CompileCache` per directory in a process (its counters add up)."""
    path = os.path.abspath(os.path.expanduser(os.fspath(directory)))
    with _CACHE_LOCK:
        cache = _DISKS.get(path)
        if cache is None:
            cache = _DISKS[path] = CompileCache(path)
        return cache


_CACHE: OrderedDict[tuple[Any, ...], CompiledGrammar] = OrderedDict()
_CACHE_LOCK = threading.Lock()
_CACHE_SIZE = 128
#: the compiled-grammar cache's byte budget (`structgen.set_cache_budget`): what its grammars
#: hold, shared automata counted once; the terminal automata and lexers are cached weakly, so
#: they live only while a grammar uses them
DEFAULT_CACHE_BYTES = 512 * 2**20
_BUDGET = {"bytes": int(os.environ.get("STRUCTGEN_CACHE_BYTES", DEFAULT_CACHE_BYTES))}
#: insertions since the last measurement, and after how many the next one runs
_TRIM = {"since": 0, "next": 0}


def cached_bytes() -> int:
    """The estimated bytes the compiled-grammar cache holds (shared parts counted once)."""
    with _CACHE_LOCK:
        grammars = list(_CACHE.values())
    _, sizes = _measured(grammars)
    return sum(sizes.values())


def _measured(
    grammars: list[CompiledGrammar],
) -> tuple[list[dict[int, int]], dict[int, int]]:
    """Every grammar's parts, and each part's bytes across them: shared parts read once, each
    counted at the largest size any grammar reports (a grammar's memo may be older)."""
    known: dict[int, int] = {}
    owned = [grammar.memory_parts(known) for grammar in grammars]
    sizes: dict[int, int] = {}
    for parts in owned:
        for pid, size in parts.items():
            if size > sizes.get(pid, -1):
                sizes[pid] = size
    return owned, sizes


def _trim_cache() -> None:
    """Evict the least recently used grammars once the cache is over its byte budget, down to
    three quarters of it (the newest always stays), so the next insertions need no eviction.

    A measurement reads every cached grammar's automata (128 MaskBench schemas' grammars:
    ~3,000 terminal automata, 12 ms) and used to run every eighth insertion: inside one
    compile in eight, most of the time to first mask of those at MaskBench's p90. It runs
    again after as many insertions as the last one's headroom holds grammars of their
    average size (at least 1; at most a quarter of the cache's 128): the budget is met within
    about a grammar, and far below it one compile in 32 measures."""
    budget = _BUDGET["bytes"]
    _TRIM["since"] += 1
    if _TRIM["since"] < _TRIM["next"]:
        return
    _TRIM["since"] = 0
    with _CACHE_LOCK:
        entries = list(_CACHE.items())  # oldest first
    parts_of, sizes = _measured([grammar for _, grammar in entries])
    owned = [(key, parts) for (key, _), parts in zip(entries, parts_of)]
    users: dict[int, int] = {}
    for parts in parts_of:
        for pid in parts:
            users[pid] = users.get(pid, 0) + 1
    total = sum(sizes.values())
    evict = []
    if total > budget:
        for key, parts in owned[:-1]:
            if total <= budget * 3 // 4:
                break
            evict.append(key)
            for pid in parts:
                users[pid] -= 1
                if not users[pid]:
                    total -= sizes[pid]
    if evict:
        with _CACHE_LOCK:
            for key in evict:
                _CACHE.pop(key, None)
    _TRIM["next"] = _next_measurement(budget, total, len(owned) - len(evict))


def _next_measurement(budget: int, total: int, grammars: int) -> int:
    """Insertions until the cache could have filled its budget, at its grammars' average size
    (see `_trim_cache`)."""
    if total >= budget:
        return 1
    average = total // max(grammars, 1)
    room = (budget - total) // average if average else _CACHE_SIZE
    return max(1, min(room, _CACHE_SIZE // 4))


class Compiler:
    """Compiles constraints against one vocabulary; results are cached and shareable."""

    def __init__(
        self,
        vocab: Vocabulary,
        *,
        limits: CompileLimits | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        """`cache_dir`: a directory where compiled grammars are saved and loaded from after a
        restart (default: `$STRUCTGEN_COMPILE_CACHE`, unset: none); see
        docs/guide/limits.md#the-persistent-compile-cache."""
        if not isinstance(vocab, Vocabulary):
            raise ArgumentError(
                f"Compiler needs a structgen.Vocabulary, got {type(vocab).__name__}; "
                "build one with Vocabulary.from_hf(tokenizer)"
            )
        if limits is not None and not isinstance(limits, CompileLimits):
            raise ArgumentError(f"limits must be CompileLimits, got {describe(limits)}")
        self.vocab = vocab
        self.limits = limits or CompileLimits()
        if cache_dir is None:
            cache_dir = os.environ.get(ENV_VAR) or None
        elif not isinstance(cache_dir, (str, os.PathLike)):
            raise ArgumentError(f"cache_dir must be a path, got {describe(cache_dir)}")
        self.disk_cache: CompileCache | None = None if cache_dir is None else _disk(cache_dir)

    def warm_up(self) -> None:
        """Build now what this vocabulary's first masks would otherwise build inside the first
        requests: the token trie, the C walk's token tables, the tokens by first byte, and the
        lexer of the parse states after which nothing may follow (every JSON value's end). A
        serving engine calls it at start-up (structgen's vLLM and SGLang backends do); built
        once per vocabulary, so later calls cost nothing."""
        from structgen.engines.grammar import empty_lexer
        from structgen.masks._walker import first_byte_masks, native_walk

        vocab = self.vocab
        vocab.trie  # noqa: B018  (built on first use)
        native_walk(vocab)
        first_byte_masks(vocab)
        empty_lexer(vocab, self.limits.automata(), self.limits.max_cached_masks)

    def regex(
        self,
        pattern: str,
        *,
        ignore_case: bool = False,
        dotall: bool = False,
        unicode: bool = False,
        dialect: automata.DialectSpec | None = None,
    ) -> CompiledGrammar:
        """Full-match constraint for a regular expression (Python `re` syntax by default).

        `\\d`, `\\w`, `\\s` and case-insensitivity are ASCII by default, as under `re.ASCII`
        (a model asked for `\\d{4}` writes `2024`, never `٢٠٢٤` or `🯲🯰🯲🯴`); `unicode=True`
        reads them as `re` does for str patterns. `dialect` names another reading: "ecma"
        (ECMA-262, `u` flag), "rust" (Rust `regex`), or a tuple of dialects — the first one's
        syntax, and only strings every one of them matches (see docs/design/regex-dialects.md).
        """
        expect_str(pattern, "pattern")
        for name, flag in (("ignore_case", ignore_case), ("dotall", dotall), ("unicode", unicode)):
            expect_bool(flag, name)
        if dialect is not None and unicode:
            raise ArgumentError("give either unicode=True or dialect=..., not both")
        chosen = automata.dialects_of(
            dialect if dialect is not None else "python" if unicode else "python-ascii"
        )
        key = ("regex", pattern, ignore_case, dotall, chosen)
        return self._cached(
            key,
            lambda: self._dfa_engine(
                automata.compile_regex(
                    pattern,
                    ignore_case=ignore_case,
                    dotall=dotall,
                    dialect=chosen,
                    limits=self.limits.automata(),
                )
            ),
            kind="regex",
            source=pattern,
            recipe=(
                "regex",
                (pattern,),
                {"ignore_case": ignore_case, "dotall": dotall, "dialect": chosen},
            ),
        )

    def choice(self, options: Sequence[str]) -> CompiledGrammar:
        """Exactly one of `options` (for classification)."""
        if (
            isinstance(options, (str, bytes))
            or not isinstance(options, (list, tuple))
            or not options
        ):
            raise ArgumentError(
                f"choice() needs a non-empty list of strings, got {describe(options)}"
            )
        for option in options:
            expect_str(option, "every choice() option")
        encoded = tuple(o.encode("utf-8") for o in options)
        key = ("choice", encoded)
        return self._cached(
            key,
            lambda: self._dfa_engine(
                automata.alternatives(list(encoded), limits=self.limits.automata())
            ),
            kind="choice",
            source=repr(list(options)),
            recipe=("choice", (list(options),), {}),
        )

    def grammar(self, lark_text: str, *, start: str = "start") -> CompiledGrammar:
        """A context-free constraint written in Lark's grammar language."""
        from structgen.grammar.lark_frontend import lark_to_ir

        expect_str(lark_text, "lark_text")
        expect_str(start, "start")
        key = ("grammar", lark_text, start)
        return self._cached(
            key,
            lambda: self._cfg_engine(lark_to_ir(lark_text, start)),
            kind="grammar",
            source=lark_text,
            recipe=("grammar", (lark_text,), {"start": start}),
        )

    def ebnf(self, ebnf_text: str, *, start: str = "root") -> CompiledGrammar:
        """A context-free constraint in GBNF-style EBNF (``root ::= ...``), as serving engines
        (llama.cpp, XGrammar, SGLang, vLLM) pass grammars."""
        from structgen.grammar.ebnf import ebnf_to_ir

        expect_str(ebnf_text, "ebnf_text")
        expect_str(start, "start")
        key = ("ebnf", ebnf_text, start)
        return self._cached(
            key,
            lambda: self._cfg_engine(ebnf_to_ir(ebnf_text, start, limits=self.limits.automata())),
            kind="grammar",
            source=ebnf_text,
            recipe=("ebnf", (ebnf_text,), {"start": start}),
        )

    def json_schema(self, schema: Any, *, options: SchemaOptions | None = None) -> CompiledGrammar:
        """JSON text valid against `schema` (a dict, JSON text, or a Pydantic model class)."""
        from structgen.schema import SchemaOptions as _Options
        from structgen.schema import compile_schema_guarded, data_fingerprint, schema_data

        if options is not None and not isinstance(options, _Options):
            raise ArgumentError(f"options must be SchemaOptions, got {describe(options)}")
        opts = options or _Options()
        # (the collector paused from the start: copying a large schema's data allocates enough
        # containers to set off a full collection of everything the process holds)
        with paused_gc():
            data = schema_data(schema, max_nesting=opts.max_nesting)
            key = ("json_schema", data_fingerprint(data), opts)
            return self._cached(
                key,
                lambda: self._schema_engine(
                    *compile_schema_guarded(
                        data, options=opts, limits=self.limits.automata(), loaded=True
                    )
                ),
                kind="json_schema",
                # (written when first asked; a dict's from the private copy, which the caller
                # cannot change meanwhile)
                source=lambda: text_head(schema if isinstance(schema, (str, type)) else data, 200),
                recipe=("json_schema", (data,), {"options": opts}),
            )

    def json(
        self, *, options: SchemaOptions | None = None, any_value: bool = False
    ) -> CompiledGrammar:
        """JSON mode: a JSON object, as OpenAI's `json_object` means it (`any_value=True`: any
        JSON value — a string, a number, an array ...)."""
        return self.json_schema({} if any_value else {"type": "object"}, options=options)

    def structural_tag(self, spec: Any, *, options: SchemaOptions | None = None) -> CompiledGrammar:
        """Free text with constrained regions: a structural tag in the JSON format vLLM and
        SGLang forward (xgrammar's; a dict or its JSON text). `options` are used for its JSON
        Schema contents. See docs/guide/structural-tags.md."""
        import json as _json

        from structgen.grammar.structural_tag import structural_tag_to_ir
        from structgen.schema import SchemaOptions as _Options

        if isinstance(spec, (str, bytes)):
            text = spec.decode() if isinstance(spec, bytes) else spec
        else:
            try:
                text = _json.dumps(spec, sort_keys=True, ensure_ascii=False)
            except (TypeError, ValueError) as exc:
                raise ArgumentError(f"a structural tag is JSON data: {exc}") from None
        if options is not None and not isinstance(options, _Options):
            raise ArgumentError(f"options must be SchemaOptions, got {describe(options)}")
        key = ("structural_tag", text, options)
        return self._cached(
            key,
            lambda: self._cfg_engine(
                structural_tag_to_ir(text, self.vocab, schema_options=options)
            ),
            kind="structural_tag",
            source=text[:200],
            recipe=("structural_tag", (text,), {"options": options}),
        )

    def reasoning(
        self,
        grammar: CompiledGrammar,
        *,
        begin: str = "<think>",
        end: str = "</think>",
        separator: str = "\n\n",
        opened: bool | None = None,
        max_think_tokens: int | None = None,
        style: Literal["think", "harmony"] = "think",
    ) -> CompiledGrammar:
        """`grammar` after a free think block (`begin` text `end`, then an optional
        `separator`): reasoning models think unconstrained, then answer under the constraint.
        Tags are matched as tokens where the vocabulary has them (Qwen3's `<think>`), as text
        otherwise; `opened`: the prompt already ends with `begin` (None: when the vocabulary
        has no token for it, since a text opening tag is not matched). The block may be left
        out (the answer straight away). `max_think_tokens`: at most that many tokens in the
        block, then only its closing tag. `style="harmony"`: gpt-oss's form instead — an
        optional analysis message, then the answer in the final channel (the tags are not
        used; `max_think_tokens` is refused). See docs/design/reasoning.md."""
        from structgen.engines.reasoning import ReasoningEngine

        if not isinstance(grammar, CompiledGrammar) or grammar.vocab != self.vocab:
            raise ArgumentError("reasoning() wraps a CompiledGrammar of this compiler's vocabulary")
        if style == "harmony":
            if max_think_tokens is not None:
                raise ArgumentError(
                    "max_think_tokens bounds a <think> block; Harmony's analysis message has "
                    "no token bound here (leave it out, or bound the output with max_new_tokens)"
                )
            return self._harmony_reasoning(grammar)
        if style != "think":
            raise ArgumentError(f"style must be 'think' or 'harmony', got {style!r}")
        for name, value in (("begin", begin), ("end", end), ("separator", separator)):
            expect_str(value, name)
        if not end:
            raise ArgumentError("the closing tag `end` must not be empty")
        if max_think_tokens is not None:
            expect_int(max_think_tokens, "max_think_tokens", minimum=0)
        from structgen.grammar.tokens import tag_token

        begin_token, end_token = tag_token(self.vocab, begin), tag_token(self.vocab, end)
        if opened is None:
            opened = begin_token is None
        elif begin and begin_token is None and not opened:
            raise ArgumentError(
                "a text opening tag is only supported when the prompt already ends with it "
                f"(opened=True); this vocabulary has no token {begin!r}"
            )
        key = ("reasoning", grammar.fingerprint, begin, end, separator, opened, max_think_tokens)
        return self._cached(
            key,
            lambda: ReasoningEngine(
                grammar._engine,
                self.vocab,
                begin=(begin if begin_token is None else begin_token) if begin else None,
                end=end if end_token is None else end_token,
                opened=bool(opened),
                separator=separator,
                max_think_tokens=max_think_tokens,
                inner_tokens=grammar.token_ids,
            ),
            kind=grammar.kind,
            source=grammar.source,
            recipe=(
                "reasoning",
                (grammar,),
                {
                    "begin": begin,
                    "end": end,
                    "separator": separator,
                    "opened": opened,
                    "max_think_tokens": max_think_tokens,
                },
            ),
        )

    def _harmony_reasoning(self, grammar: CompiledGrammar) -> CompiledGrammar:
        """`grammar` in gpt-oss's final channel, after an optional analysis message:
        `[<|channel|>analysis<|message|>…<|end|><|start|>assistant]<|channel|>final<|message|>`
        then the answer (Harmony; the tags are the vocabulary's special tokens)."""
        from structgen.automata import Concat, Repeat, String
        from structgen.engines.framed import FramedEngine
        from structgen.grammar.compose import ANY_CHAR
        from structgen.grammar.tokens import tag_token, token_node

        names = ("<|channel|>", "<|message|>", "<|end|>", "<|start|>")
        ids = [tag_token(self.vocab, name) for name in names]
        if None in ids:
            missing = [n for n, i in zip(names, ids) if i is None]
            raise ArgumentError(
                f"style='harmony' needs the special tokens {missing}, which this vocabulary "
                "does not have (gpt-oss's tokenizer has them)"
            )
        channel, message, end, start = (token_node(i) for i in ids if i is not None)
        analysis = Concat(
            (
                channel,
                String("analysis"),
                message,
                Repeat(ANY_CHAR, 0, None),
                end,
                start,
                String("assistant"),
            )
        )
        frame = Concat((Repeat(analysis, 0, 1), channel, String("final"), message))
        key = ("reasoning-harmony", grammar.fingerprint)
        tokens = frozenset(i for i in ids if i is not None)
        return self._cached(
            key,
            lambda: FramedEngine(
                self._dfa_engine(
                    automata.compile_ast(frame, limits=self.limits.automata(), pattern="Harmony")
                ),
                grammar._engine,
                frame_tokens=tokens,
            ),
            kind=grammar.kind,
            source=grammar.source,
            recipe=("reasoning", (grammar,), {"style": "harmony"}),
        )

    def grammar_ir(self, grammar: Grammar) -> CompiledGrammar:
        """A context-free constraint from the IR (what the JSON Schema frontend builds)."""
        key = ("ir", grammar.fingerprint())
        return self._cached(
            key,
            lambda: self._cfg_engine(grammar),
            kind="grammar",
            source=f"<IR {grammar.start}>",
            recipe=("grammar_ir", (grammar,), {}),
        )

    def _dfa_engine(self, dfa: Any) -> RegexEngine:
        return RegexEngine(
            self.vocab,
            dfa,
            max_cached_masks=self.limits.max_cached_masks,
            eager_states=self.limits.eager_dfa_states,
            eager_seconds=self.limits.eager_seconds,
        )

    def _schema_engine(self, grammar: Grammar, unique: tuple[Any, ...]) -> Any:
        """The grammar's engine, wrapped in the `uniqueItems` guard when some array needs it."""
        engine = self._cfg_engine(grammar)
        if not unique:
            return engine
        from structgen.engines.unique_items import UniqueItemsEngine

        return UniqueItemsEngine(engine, self.vocab, unique)

    def _cfg_engine(self, grammar: Grammar) -> GrammarEngine:
        return GrammarEngine(
            grammar,
            self.vocab,
            limits=self.limits.automata(),
            max_cached_masks=self.limits.max_cached_masks,
        )

    def _cached(
        self,
        key: tuple[Any, ...],
        build: Any,
        *,
        kind: str,
        source: str | Callable[[], str],
        recipe: tuple[str, tuple[Any, ...], dict[str, Any]],
    ) -> CompiledGrammar:
        full_key = (*key, self.vocab.fingerprint, self.limits, _COMPILER_VERSION)
        with _CACHE_LOCK:
            hit = _CACHE.get(full_key)
            if hit is not None:
                _CACHE.move_to_end(full_key)
                return hit
        disk = self.disk_cache if recipe[0] in _PERSISTED else None
        disk_key = None if disk is None else key_text(full_key)
        loaded = None
        if disk is not None and disk_key is not None:

            def compile_again() -> GrammarEngine:
                """The grammar compiled, for a loaded file that fails its checks on the first
                step (when the rest of it is read)."""
                with paused_gc(), compile_budget(self.limits.max_compile_seconds):
                    engine = build()
                if type(engine) is not GrammarEngine:  # (a file under a key never saved)
                    raise StructgenError(
                        f"the compile-cache file for this {kind} is foreign: delete "
                        f"{disk.path_for(disk_key)}"
                    )
                return engine

            with paused_gc():
                loaded = disk.load(
                    disk_key,
                    self.vocab,
                    self.limits.automata(),
                    self.limits.max_cached_masks,
                    compile_again,
                )

        def grammar_of(engine: Any) -> CompiledGrammar:
            return CompiledGrammar(
                self.vocab, engine, kind=kind, source=source, recipe=(self.limits, *recipe)
            )

        if loaded is None:
            with paused_gc(), compile_budget(self.limits.max_compile_seconds):
                compiled = grammar_of(build())
        else:  # (nothing to undo: a loaded engine shares nothing before its first step)
            compiled = grammar_of(loaded)
        saveable = loaded is None and type(compiled._engine) is GrammarEngine
        if saveable and disk is not None and disk_key is not None:
            # the first mask builds the rows a loaded copy needs first: save them too
            compiled.token_mask(compiled.initial_state)
            disk.save(disk_key, compiled._engine)
        with _CACHE_LOCK:
            compiled = _CACHE.setdefault(full_key, compiled)
            _CACHE.move_to_end(full_key)
            while len(_CACHE) > _CACHE_SIZE:
                _CACHE.popitem(last=False)
        _trim_cache()
        return compiled
