"""The context-free engine: Earley parser × terminal lexer × token masks.

A parse state is `(earley_set, lexer_state, fresh)`. The lexer of an Earley set is the lazy union
DFA of the terminals that set expects plus the `%ignore` terminals; its state says how far the
current lexeme has got. Lexing is greedy (longest match, like Lark's standard and contextual
lexers and llguidance): a lexeme ends only when the next byte cannot extend it.

Masks split along the lexeme boundary (the lexer/parser split, docs/design/architecture.md):
* tokens whose bytes all stay inside the current lexeme depend on the lexer state alone: the
  vectorised walker computes and caches them per lexer state;
* tokens that end the lexeme part-way (the walk dies at a byte where the lexer accepts) are few;
  each is finished in Python through the parser, and the result is cached on the Earley set.
See docs/design/context-free.md.
"""

from __future__ import annotations

import heapq
import threading
import weakref
from collections import deque
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from structgen._budget import forget_on_failure
from structgen._gc import paused_gc
from structgen._lru import LRU
from structgen.automata import AutomataLimits, ByteDFA
from structgen.automata.dfa import UnionSource, shortest_paths
from structgen.automata.nfa import extension_function
from structgen.automata.snapshot import SnapshotError
from structgen.grammar.earley import EarleyGrammar, EarleySet
from structgen.grammar.ir import Grammar
from structgen.grammar.sampler import sample_sentences
from structgen.grammar.terminals import terminal_dfa
from structgen.grammar.tokens import grammar_tokens
from structgen.masks import Events, TokenMaskWalker, pack_bool_mask
from structgen.vocab import Vocabulary

__all__ = ["GrammarEngine", "ParseState", "RestoredParts", "empty_lexer"]

ParseState = tuple[EarleySet, int, bool]

#: the initial lexer state of a restored engine whose automata are not restored yet (the first
#: mask is in the cache file: they are restored when anything else is asked)
PENDING_START = -2


class _SharedUnion:
    """A union DFA of some terminal automata with its walker (mask caches), shared by every
    grammar with the same terminals (a compiled grammar compiled again finds its rows and masks
    already built).

    Every lexer of a grammar is a *start state* of this one DFA: the components of the terminals
    that parse state expects, each at its start. States are keyed by the components still alive,
    so once a lexeme is past the bytes that tell its terminals apart (inside a key, a string),
    the lexers of all parse states meet in the same states, and their rows and masks are built
    once rather than once per set of expected terminals.
    """

    __slots__ = ("__weakref__", "_accepted", "dfa", "parts", "source", "walker")

    def __init__(
        self,
        parts: tuple[ByteDFA, ...],
        vocab: Vocabulary,
        limits: AutomataLimits,
        max_cached_masks: int,
    ) -> None:
        self.parts = parts  # keeps the components alive while the entry is cached
        self.source = UnionSource(parts)
        names = ",".join([p.fingerprint[:12] for p in parts])
        self.dfa = ByteDFA(self.source, fingerprint=f"lexer:{names}", limits=limits)
        self.walker = TokenMaskWalker(vocab, self.dfa, max_cached_masks=max_cached_masks)
        self._accepted: dict[int, frozenset[int]] = {}

    def memory_bytes(self) -> int:
        """The union DFA and its mask caches (the component automata are counted apart)."""
        return self.dfa.memory_bytes() + self.walker.memory_bytes() + len(self._accepted) * 100

    def growth_stamp(self) -> tuple[int, ...]:
        """What changes whenever this lexer (or a component automaton through it) grows: its
        states, cached masks and walks, memos (`GrammarEngine.memory_parts`)."""
        return (self.dfa.num_states, *self.walker.growth_stamp(), len(self._accepted))

    def start(self, components: frozenset[int]) -> int:
        """The state where exactly `components` (live ones) are at their start."""
        parts = self.parts
        key = tuple((i, parts[i].start) for i in sorted(components))
        return self.dfa.state_of(key)

    def accepted(self, state: int) -> frozenset[int]:
        """The components whose lexeme may end in `state` (every parse state asks again)."""
        hit = self._accepted.get(state)
        if hit is None:
            native = self.dfa.native_states  # (C reads the flags: no key built in Python)
            found: Iterable[int] | None = None if native is None else native.accepted(state)
            if found is None:
                found = self.source.accepted(self.dfa.key_of(state))  # type: ignore[arg-type]
            hit = self._accepted[state] = frozenset(found)
        return hit


#: `words[indices] |= values` in C (`_subset.c`), or None (numpy's fancy indexing)
_OR_WORDS = extension_function("or_words")
#: `out |= a & b` over packed masks in C (`_subset.c`), or None (numpy)
_OR_AND = extension_function("or_and")

_UNIONS: weakref.WeakValueDictionary[tuple[Any, ...], _SharedUnion] = (
    weakref.WeakValueDictionary()
)  # weak, as `_TERMINAL_DFAS`
_UNION_LOCK = threading.Lock()
#: a grammar's one lexer DFA serves all its parse states: it may grow larger than one regex's
LEXER_STATES_FACTOR = 8


def shared_union(
    parts: tuple[ByteDFA, ...], vocab: Vocabulary, limits: AutomataLimits, max_cached_masks: int
) -> _SharedUnion:
    """The cached union lexer of `parts` (in this order) over `vocab`."""
    key = (tuple(map(id, parts)), vocab.fingerprint, limits, max_cached_masks)
    with _UNION_LOCK:
        hit = _UNIONS.get(key)
    if hit is not None and all(a is b for a, b in zip(hit.parts, parts)):
        return hit
    union = _SharedUnion(parts, vocab, limits, max_cached_masks)
    with _UNION_LOCK:
        found = _UNIONS.get(key)
        if found is not None and all(a is b for a, b in zip(found.parts, parts)):
            union = found
        else:
            _UNIONS[key] = union
    forget_on_failure(_UNIONS, _UNION_LOCK, key)
    return union


#: the lexers that read nothing (where nothing can follow: every JSON value's end), held for
#: the last two vocabularies: a weakly cached one was made again by each grammar (~90 µs, once
#: per MaskBench schema)
_EMPTY_UNIONS: LRU[tuple[Any, ...], _SharedUnion] = LRU(2)


def empty_lexer(vocab: Vocabulary, limits: AutomataLimits, max_cached_masks: int) -> None:
    """Make the lexer that reads nothing for `vocab` now (`Compiler.warm_up`): the first
    grammar whose parse can end would make it inside a mask (~90 µs, once per vocabulary)."""
    _empty_union(vocab, limits, max_cached_masks)


def _empty_union(vocab: Vocabulary, limits: AutomataLimits, max_cached_masks: int) -> _SharedUnion:
    key = (vocab.fingerprint, limits, max_cached_masks)
    union = _EMPTY_UNIONS.get(key)
    if union is None:
        union = shared_union((), vocab, limits, max_cached_masks)
        _EMPTY_UNIONS.put(key, union)
    return union


class _Lexer:
    """The lexer of the parse states that expect one set of terminals: a start state of the
    grammar's union DFA. Component `i` of the union is grammar terminal `i`."""

    __slots__ = ("accepted", "dfa", "start", "walker")

    def __init__(self, union: _SharedUnion, start: int) -> None:
        self.dfa = union.dfa
        self.walker = union.walker
        self.start = start
        self.accepted = union.accepted


class _PendingParse:
    """The initial parse state of a loaded grammar whose parser is not read yet: its first mask
    (the file's copy, under `("mask", PENDING_START, True)`) and whether an empty output is
    complete. Every other question first reads the rest of the file (`_unpacked`)."""

    __slots__ = ("complete", "memo")

    def __init__(self, first_mask: npt.NDArray[np.int32], complete: bool) -> None:
        self.memo: dict[Any, Any] = {("mask", PENDING_START, True): first_mask}
        self.complete = complete


@dataclass(frozen=True, slots=True)
class UnpackedParts:
    """The rest of a compile-cache file, read and checked on a loaded grammar's first step: the
    parser, an automaton per terminal on demand (restored snapshots or live shared ones), and
    the full grammar on demand (its terminal patterns are read only for `to_text`)."""

    parser: EarleyGrammar
    ignore: frozenset[int]  # the parser's ids of the `%ignore` terminals
    terminal_dfas: Callable[[], tuple[ByteDFA, ...]]
    grammar: Callable[[], Grammar]


@dataclass(frozen=True, slots=True)
class RestoredParts:
    """What a compile-cache file gives a `GrammarEngine` in place of building it. A load reads
    only what the first mask needs — the mask itself, the grammar's fingerprint and token ids;
    the first step reads the rest (`unpack`, which raises `SnapshotError` for a file that
    fails its checks: then `rebuild` compiles the grammar again, and the engine goes on with
    what it built)."""

    unpack: Callable[[], UnpackedParts]
    rebuild: Callable[[], GrammarEngine] | None
    automata_bytes: int  # what the restored automata will hold (the cache budget's estimate)
    fingerprint: str
    token_ids: frozenset[int]
    first_mask: npt.NDArray[np.int32]  # the initial state's mask, as saved
    initial_complete: bool  # whether the empty output is complete


class GrammarEngine:
    """Runs an IR `Grammar` against a vocabulary (the engine behind `Compiler.grammar`)."""

    def __init__(
        self,
        grammar: Grammar | None,
        vocab: Vocabulary,
        *,
        limits: AutomataLimits,
        max_cached_masks: int = 4096,
        restored: RestoredParts | None = None,
    ) -> None:
        """`restored`: what a compile-cache file holds (then `grammar` is not read: pass
        None)."""
        self.vocab = vocab
        self.limits = limits
        self.max_cached_masks = max_cached_masks
        self._restored = restored
        self._pending: _PendingParse | None = None
        self._restore: Callable[[], tuple[ByteDFA, ...]] | None = None
        self._full_grammar: Callable[[], Grammar] | None = None
        self._restored_bytes = 0
        self._lexers: dict[frozenset[int], _Lexer] = {}
        self._union: _SharedUnion | None = None
        self._lock = threading.RLock()
        self._parser: EarleyGrammar | None
        self._ignore: frozenset[int]
        self._initial: EarleySet | None
        if restored is None:
            assert grammar is not None
            self._grammar: Grammar | None = grammar
            self._terminal_dfas: list[ByteDFA] | None = [
                terminal_dfa(t, limits) for t in grammar.terminals
            ]
            self._fingerprint: str | None = None  # (digested when first asked)
            self.token_ids = grammar_tokens(grammar)  # token terminals (read by CompiledGrammar)
            dfas = zip(grammar.terminals, self._terminal_dfas)
            usable = [t.name for t, d in dfas if not d.is_empty]
            self._parser = parser = EarleyGrammar(grammar, usable_terminals=usable)
            names = parser.terminal_names
            self._ignore = frozenset(names.index(n) for n in grammar.ignore if n in usable)
            self._initial = parser.initial_set()
            self.lexer(self._initial)  # (the grammar's lexer and its first state's)
        else:
            # (the parser, the initial parse and the automata come with the first step)
            self._grammar = None
            self._terminal_dfas = None
            self._restored_bytes = restored.automata_bytes
            self._fingerprint = restored.fingerprint
            self.token_ids = restored.token_ids
            self._parser = None
            self._ignore = frozenset()
            self._initial = None
            self._pending = _PendingParse(restored.first_mask, restored.initial_complete)
        # Parse states are memoised weakly; the most recent ones are kept alive here so that the
        # next steps of a generation find their masks and children still cached.
        self._recent: deque[EarleySet] = deque(maxlen=2048)
        self._shortest: _ShortestTexts | None = None  # built on the first completion asked for
        self._parts_memo: tuple[Hashable, dict[int, int]] | None = None  # see `memory_parts`

    @property
    def parser(self) -> EarleyGrammar:
        parser = self._parser
        if parser is None:
            self._unpacked()
            parser = self._parser
            assert parser is not None
        return parser

    @property
    def ignore(self) -> frozenset[int]:
        """The parser's ids of the `%ignore` terminals."""
        if self._parser is None:
            self._unpacked()
        return self._ignore

    def _unpacked(self) -> EarleySet:
        """The initial parse state (a loaded grammar reads the rest of its file first)."""
        initial = self._initial
        if initial is None:
            with self._lock:
                initial = self._initial
                if initial is None:
                    initial = self._unpack()
        return initial

    def _unpack(self) -> EarleySet:
        restored = self._restored
        assert restored is not None
        try:
            with paused_gc():
                parts = restored.unpack()
                initial = parts.parser.initial_set()
                if initial.complete != restored.initial_complete:
                    raise SnapshotError("the file's first state disagrees with its parser")
        except SnapshotError:
            if restored.rebuild is None:
                raise
            # (a file that passed the load's checks but not these: the grammar compiled again,
            # its parts taken over — the first mask it answered came from the same checks)
            fresh = restored.rebuild()
            self._grammar = fresh.grammar
            self._terminal_dfas = fresh.terminal_dfas
            self._lexers = fresh._lexers
            self._union = fresh._union
            self._ignore = fresh.ignore
            self._parser = fresh.parser
            self._initial = initial = fresh._unpacked()
            self._restored = None
            return initial
        self._ignore = parts.ignore
        self._restore = parts.terminal_dfas
        self._full_grammar = parts.grammar
        self._parser = parts.parser
        self._initial = initial
        self._restored = None  # (it holds the file)
        return initial

    def build_first_rows(self) -> int:
        """Build the first row of each terminal automaton built at compile (a small regex's
        NFA, a difference, a product; not a deferred NFA or a laid-out chain, whose first row
        is their materialisation); returns how many. A first mask reads only the terminals its
        lexer expects, and later first visits build the others' rows when they read them: this
        is for a server's compile thread (`CompiledGrammar.prefetch_masks`), so that those
        first visits, inside batch steps, find them built (a regex automaton also moves to its
        C builder there)."""
        built = 0
        for dfa in self.terminal_dfas:
            source = dfa._source
            if not (source.deferred or source.laid_out):
                dfa.row(dfa.start)
                built += 1
        return built

    def sample_texts(self, count: int, *, seed: int, max_bytes: int) -> list[bytes]:
        """`count` random sentences of the grammar (`sample_sentences`, plain, seeded; each cut
        at `max_bytes`), for `CompiledGrammar.prefetch_masks` to walk: most of the states a
        model's output visits do not depend on its words. Empty when the sampler cannot draw
        one (a grammar of token terminals only, a difference it gives up on)."""
        grammar = self.grammar
        try:
            sentences = sample_sentences(
                grammar,
                count=count,
                seed=seed,
                max_terminals=max(8, max_bytes // 4),
                ignore_rate=0.5 if grammar.ignore else 0.0,
                plain=True,  # (a writer's text: characters, not escapes; words, not letters)
            )
        except (ValueError, TypeError, RecursionError):  # (GrammarError is a ValueError)
            return []
        return [s.encode("utf-8", "surrogatepass")[:max_bytes] for s in sentences]

    @property
    def fingerprint(self) -> str:
        """Stable sha256 of the grammar (`Grammar.fingerprint`), digested when first asked."""
        found = self._fingerprint
        if found is None:
            assert self._grammar is not None
            found = self._fingerprint = self._grammar.fingerprint()
        return found

    @property
    def terminal_dfas(self) -> list[ByteDFA]:
        """The automaton of each terminal (a loaded grammar restores them on first use)."""
        dfas = self._terminal_dfas
        if dfas is None:
            initial = self._unpacked()
            with self._lock:
                dfas = self._terminal_dfas
                if dfas is None:
                    assert self._restore is not None
                    with paused_gc():  # (from `advance` too: a few objects per terminal)
                        dfas = self._terminal_dfas = list(self._restore())
                    self._restore = None  # (it holds the file's arrays)
                    start = self.lexer(initial).start
                    if self._pending is not None:  # the saved first mask serves the real start
                        first = self._pending.memo[("mask", PENDING_START, True)]
                        initial.memo.setdefault(("mask", start, True), first)
        return dfas

    @property
    def grammar(self) -> Grammar:
        """The IR grammar (a restored engine reads its terminal patterns on first use)."""
        grammar = self._grammar
        if grammar is None:
            self._unpacked()
            if self._grammar is not None:  # (compiled again: the file failed its checks)
                return self._grammar
            assert self._full_grammar is not None
            grammar = self._grammar = self._full_grammar()
        return grammar

    def to_text(self) -> str:
        return self.grammar.to_text()

    def memory_parts(self, known: dict[int, int] | None = None) -> dict[int, int]:
        """Estimated bytes of what this engine holds, by object id (shared automata appear in
        several grammars' parts and are counted once by the cache budget; with `known`, they
        are measured once: a cache of 128 schemas' grammars refers to ~4x as many terminal
        automata as there are).

        Memoised until the grammar's lexer grows (a new state, mask or memo) or it keeps more
        parse states: its terminal automata grow only as a lexer made of them does. One shared
        with another grammar may have grown through that grammar's lexer: the cache budget
        counts each automaton at the largest size any grammar reports."""
        union = self._union
        stamp = (
            id(self._terminal_dfas),  # (None until a loaded grammar's first step)
            id(union),
            len(self._recent),
            len(self._lexers),
            None if union is None else union.growth_stamp(),
        )
        memo = self._parts_memo
        if memo is not None and memo[0] == stamp:
            return dict(memo[1])
        parts = self._measured_parts(known)
        self._parts_memo = (stamp, parts)
        return dict(parts)

    def _measured_parts(self, known: dict[int, int] | None) -> dict[int, int]:
        mask = ((self.vocab.size + 31) // 32) * 4

        def size_of(part: ByteDFA | _SharedUnion) -> int:
            """`part`'s bytes, read once per measurement (`known`)."""
            if known is None:
                return part.memory_bytes()
            size = known.get(id(part))
            if size is None:
                size = known[id(part)] = part.memory_bytes()
            return size

        dfas = self._terminal_dfas
        if dfas is None:  # (not restored yet: estimated from the file)
            parts = {id(self._pending): self._restored_bytes}
        else:
            parts = {id(d): size_of(d) for d in dfas}
        union = self._union  # every lexer of the grammar is a start state of this one DFA
        if union is not None:
            parts[id(union)] = size_of(union)
        # the recent parse states: their masks and memo (estimated: one mask and 2 kB each)
        parts[id(self)] = len(self._recent) * (mask + 2048) + len(self._lexers) * 200
        return parts

    # ------------------------------------------------------------------ lexers

    def lexer(self, parse: EarleySet) -> _Lexer:
        lexer = parse.memo.get("lexer")
        if lexer is None:
            wanted = parse.expected | self._ignore  # (a real parse state: the parser is read)
            with self._lock:
                lexer = self._lexers.get(wanted)
                if lexer is None:
                    if wanted:
                        union = self._grammar_union()
                        lexer = _Lexer(union, union.start(wanted))
                    else:  # nothing can follow: a lexer that reads nothing
                        union = _empty_union(self.vocab, self.limits, self.max_cached_masks)
                        lexer = _Lexer(union, union.dfa.start)
                    self._lexers[wanted] = lexer
            parse.memo["lexer"] = lexer
        return lexer

    def _grammar_union(self) -> _SharedUnion:
        union = self._union
        if union is None:
            limits = replace(
                self.limits, max_dfa_states=self.limits.max_dfa_states * LEXER_STATES_FACTOR
            )
            parts = tuple(self.terminal_dfas)
            union = shared_union(parts, self.vocab, limits, self.max_cached_masks)
            self._union = union
        return union

    # ------------------------------------------------------------------ the engine interface

    @property
    def initial_state(self) -> ParseState:
        pending = self._pending
        if pending is not None and self._terminal_dfas is None:
            return (pending, PENDING_START, True)  # type: ignore[return-value]
        initial = self._initial
        assert initial is not None
        return (initial, self.lexer(initial).start, True)

    def _resolved(self, state: ParseState) -> ParseState:
        """`state` with a real parse and lexer state (the pending initial state of a loaded
        grammar reads the rest of its file and restores the automata)."""
        if state[1] == PENDING_START:
            initial = self._unpacked()
            return (initial, self.lexer(initial).start, True)
        return state

    def end_lexeme(self, parse: EarleySet, lexer_state: int) -> EarleySet | None:
        """The parse after the current lexeme ends in `lexer_state` (None: it cannot end)."""
        # (the accepted terminals are memoised per lexer state)
        return self._after_lexeme(parse, self.lexer(parse).accepted(lexer_state))

    def _after_lexeme(self, parse: EarleySet, accepted: frozenset[int]) -> EarleySet | None:
        """The parse after a lexeme of one of `accepted` (None: none fits here)."""
        # scan() memoises children weakly: states stay alive only while a matcher holds them.
        result = parse.scan(accepted) if accepted else None
        if result is None and accepted & self._ignore:
            result = parse
        elif result is not None:
            self._recent.append(result)
        return result

    def advance(self, state: ParseState, data: bytes) -> ParseState | None:
        parse, lex_state, fresh = state
        if lex_state == PENDING_START:
            parse, lex_state, fresh = self._resolved(state)
        lexer = self.lexer(parse)
        dfa = lexer.dfa
        for byte in data:
            nxt = dfa.next_state(lex_state, byte)
            if nxt < 0:
                if fresh:
                    return None
                after = self.end_lexeme(parse, lex_state)
                if after is None:
                    return None
                parse = after
                lexer = self.lexer(parse)
                dfa = lexer.dfa
                nxt = dfa.next_state(lexer.start, byte)
                if nxt < 0:
                    return None
            lex_state = nxt
            fresh = False
        return (parse, lex_state, fresh)

    def is_accepting(self, state: ParseState) -> bool:
        parse, lex_state, fresh = state
        if fresh:  # (a pending state is fresh)
            return parse.complete
        # Asked at every mask fill: the verdict is memoised on the parse state (a bool, so no
        # reference to the next parse state keeps it alive).
        key = ("accepting", lex_state)
        verdict: bool | None = parse.memo.get(key)
        if verdict is None:
            after = self.end_lexeme(parse, lex_state)
            verdict = parse.memo[key] = after is not None and after.complete
        return verdict

    def cached_token_mask(self, state: ParseState) -> npt.NDArray[np.int32] | None:
        """`token_mask(state)` when it was computed before, else None (nothing computed)."""
        parse, lex_state, fresh = state
        cached: npt.NDArray[np.int32] | None = parse.memo.get(("mask", lex_state, fresh))
        return cached

    def token_mask(self, state: ParseState) -> npt.NDArray[np.int32]:
        parse, lex_state, fresh = state
        cached: npt.NDArray[np.int32] | None = parse.memo.get(("mask", lex_state, fresh))
        if cached is not None:
            return cached
        with paused_gc():  # (a first visit: many small objects, all kept or freed by count)
            return self._new_mask(state)

    def _new_mask(self, state: ParseState) -> npt.NDArray[np.int32]:
        parse, lex_state, fresh = state
        key = ("mask", lex_state, fresh)
        if lex_state == PENDING_START:
            return self.token_mask(self._resolved(state))
        walker = self.lexer(parse).walker
        inside = walker.mask_and_events(lex_state)
        if inside is not None:
            mask = self._native_mask(state, inside)
            parse.memo[key] = mask
            return mask
        mask = walker.mask(lex_state)
        if not fresh:
            after = self.end_lexeme(parse, lex_state)
            if after is not None:
                # The lexeme may end right here: a token whose first byte cannot extend it starts
                # the next lexeme, so the next state's mask decides it.
                fresh_mask = self.token_mask((after, self.lexer(after).start, True))
                mask = mask | (fresh_mask & walker.first_byte_dead(lex_state))
        extra: npt.NDArray[np.bool_] | None = None
        for cut, before, positions in walker.boundary_candidates(lex_state):
            after = self.end_lexeme(parse, before)
            if after is None:
                continue
            ok = self._continue_tokens(after, positions, cut)
            if ok:
                if extra is None:
                    extra = np.zeros(self.vocab.size, dtype=bool)
                extra[self.vocab.trie.ids[ok]] = True
        if extra is not None:
            mask = mask | pack_bool_mask(extra)
        mask.setflags(write=False)
        parse.memo[key] = mask
        return mask

    def _native_mask(
        self, state: ParseState, inside: tuple[npt.NDArray[np.uint32], Events]
    ) -> npt.NDArray[np.int32]:
        """The mask with the C walk: inside tokens, then each boundary event's subtree walked
        again with the next lexer (recursively), then tokens that start the next lexeme."""
        parse, lex_state, fresh = state
        walker = self.lexer(parse).walker
        inside_words = inside[0]  # (read-only, the walker's: copied before the first OR)
        words: npt.NDArray[np.uint32] | None = None
        pending = [(parse, inside[1])]
        after_lexeme = self._after_lexeme
        while pending:
            current, events = pending.pop()
            accepted_in = self.lexer(current).accepted  # (one lookup for all its groups)
            # Events that end in the same lexer state lead to the same next parse state: walk
            # all their subtrees with the next lexer in one call. (The lexers looked up once
            # per parse state: a first visit has a few dozen groups.)
            for before, spans in events.groups():
                after = after_lexeme(current, accepted_in(before))
                if after is None:
                    continue
                lexer = after.memo.get("lexer")
                if lexer is None:
                    lexer = self.lexer(after)
                indices, values, more = lexer.walker.continue_walk(spans, lexer.start)
                if len(indices):
                    if words is None:
                        words = inside_words.copy()
                    if _OR_WORDS is not None:  # (bytes: int64 indices, uint32 values)
                        _OR_WORDS(words, indices, values)
                    else:
                        at = np.frombuffer(indices, np.int64)
                        words[at] |= np.frombuffer(values, np.uint32)
                if len(more):
                    pending.append((after, more))
        if not fresh:
            after = self.end_lexeme(parse, lex_state)
            if after is not None:
                fresh_mask = self.token_mask((after, self.lexer(after).start, True))
                if words is None:
                    words = inside_words.copy()
                mask = words.view(np.int32)  # (in place: `words` is this mask's own copy)
                dead = walker.first_byte_dead(lex_state)
                if _OR_AND is not None:
                    _OR_AND(mask, fresh_mask, dead)
                else:
                    np.bitwise_or(mask, fresh_mask & dead, out=mask)
        if words is None:
            return inside_words.view(np.int32)  # (nothing added: the walker's own, read-only)
        mask = words.view(np.int32)
        mask.setflags(write=False)
        return mask

    def _continue_tokens(
        self, parse: EarleySet, positions: npt.NDArray[np.int64], cut: int
    ) -> list[int]:
        """Trie positions whose bytes from `cut` on parse on from a fresh lexeme of `parse`.

        Verdicts are memoised on the parse state per suffix: tokens that cross a boundary mostly
        end in a few shapes (`,`, `}`, `": "`), so most lookups are hits.
        """
        trie = self.vocab.trie
        memo: dict[bytes, bool] = parse.memo.setdefault("suffix", {})
        start: ParseState = (parse, self.lexer(parse).start, True)
        token_bytes = self.vocab.token_bytes
        allowed: list[int] = []
        for pos, token_id in zip(positions.tolist(), trie.ids[positions].tolist()):
            suffix = token_bytes(token_id)[cut:]
            verdict = memo.get(suffix)
            if verdict is None:
                verdict = self.advance(start, suffix) is not None
                memo[suffix] = verdict
            if verdict:
                allowed.append(pos)
        return allowed

    def forced_bytes(self, state: ParseState, limit: int = 4096) -> bytes:
        """Bytes every continuation starts with, across lexeme boundaries that cannot be avoided.

        Follows the lexer while exactly one byte is possible; a lexeme that is complete and cannot
        grow ends (the parser moves on) and the next one continues. It stops at any choice,
        including "end here or go on" and "stop (EOS) or go on".
        """
        parse, lex_state, fresh = self._resolved(state)
        out = bytearray()
        while len(out) < limit:
            dfa = self.lexer(parse).dfa
            alive = np.flatnonzero(dfa.row(lex_state) >= 0)
            if not fresh and dfa.is_accepting(lex_state):
                if len(alive):
                    break  # the lexeme may end here or grow: a choice
                after = self.end_lexeme(parse, lex_state)
                if after is None or after.complete:
                    break
                parse, lex_state, fresh = after, self.lexer(after).start, True
                continue
            if len(alive) != 1:
                break
            byte = int(alive[0])
            out.append(byte)
            lex_state = dfa.next_state(lex_state, byte)
            fresh = False
        return bytes(out)

    # ------------------------------------------------------------------ shortest completions

    def shortest_completion(self, state: ParseState, *, spaced: bool = False) -> bytes | None:
        """A shortest text that completes the parse from `state` (a proposal, for budgets).

        The current lexeme is finished by its shortest path to an end the parser takes, then
        each terminal of the shortest terminal string that completes the parse follows in its
        own shortest text. Greedy lexing may read the joined pieces otherwise (a name running
        into the next keyword): the caller checks the text, and asks again with `spaced=True`,
        which puts the shortest `%ignore` text between the pieces.
        """
        parse, lex_state, fresh = self._resolved(state)
        shortest = self._shortest_texts()
        separator = shortest.separator if spaced else b""
        if fresh:
            pieces = shortest.completion(parse)
            return None if pieces is None else separator.join(pieces)
        lexer = self.lexer(parse)
        key = (id(lexer.dfa), lex_state)  # (the lexeme's ends depend on the lexer alone)
        ends = shortest.lexeme_ends.get(key)
        if ends is None:
            ends = shortest_paths(
                lexer.dfa,
                lex_state,
                lambda q: bool(lexer.accepted(q)),
                max_goals=8,
                max_states=2048,
            )
            if len(shortest.lexeme_ends) >= 65536:
                shortest.lexeme_ends.clear()
            shortest.lexeme_ends[key] = ends
        best: bytes | None = None
        for path, end in ends:
            if best is not None and len(path) >= len(best):
                break
            after = self.end_lexeme(parse, end)
            if after is None:
                continue
            pieces = shortest.completion(after)
            if pieces is None:
                continue
            text = separator.join([path, *pieces]) if pieces else path
            if best is None or len(text) < len(best):
                best = text
        return best

    def _shortest_texts(self) -> _ShortestTexts:
        shortest = self._shortest
        if shortest is None:
            with self._lock:
                shortest = self._shortest
                if shortest is None:
                    shortest = self._shortest = _ShortestTexts(self)
        return shortest


_INFINITE = 1 << 60


class _ShortestTexts:
    """Shortest texts of a grammar's terminals, nonterminals and parse states (in bytes).

    Terminals: a breadth-first search of their automata. Nonterminals: Knuth's generalisation
    of Dijkstra (a rule is priced once all its nonterminals are), so the chosen rules never
    loop. A parse state: the cheapest item to finish, and after it what its origin set needs
    (`finish_table`, memoised on each Earley set: the cost of completing the parse once a
    nonterminal that started there is done).
    """

    def __init__(self, engine: GrammarEngine) -> None:
        parser = engine.parser
        self.parser = parser
        self.terminals: list[bytes | None] = []
        for dfa in engine.terminal_dfas:
            found = [] if dfa.is_empty else shortest_paths(dfa, dfa.start, dfa.is_accepting)
            self.terminals.append(found[0][0] if found else None)
        rules = parser.rules
        num_terminals = parser.num_terminals
        pending = [0] * len(rules)
        partial = [0] * len(rules)
        uses: dict[int, list[int]] = {}
        heap: list[tuple[int, int, int]] = []
        for rid, (lhs, rhs) in enumerate(rules):
            for sym in rhs:
                if sym < num_terminals:
                    text = self.terminals[sym]
                    partial[rid] += _INFINITE if text is None else len(text)
                else:
                    pending[rid] += 1
                    uses.setdefault(sym, []).append(rid)
            if not pending[rid] and partial[rid] < _INFINITE:
                heapq.heappush(heap, (partial[rid], lhs, rid))
        #: nonterminal -> (length of its shortest text, the rule that gives it)
        self.nonterminals: dict[int, tuple[int, int]] = {}
        while heap:
            cost, lhs, rid = heapq.heappop(heap)
            if lhs in self.nonterminals:
                continue
            self.nonterminals[lhs] = (cost, rid)
            for user in uses.get(lhs, ()):
                pending[user] -= 1
                partial[user] += cost
                if not pending[user] and partial[user] < _INFINITE:
                    heapq.heappush(heap, (partial[user], rules[user][0], user))
        self._suffix: dict[tuple[int, int], int] = {}
        #: (lexer DFA id, state) -> the shortest paths to the ends of the current lexeme
        self.lexeme_ends: dict[tuple[int, int], list[tuple[bytes, int]]] = {}
        self._pieces: dict[int, tuple[bytes, ...]] = {}
        ignored = [self.terminals[i] for i in engine.ignore]
        options = [t for t in ignored if t]
        self.separator = min(options, key=len) if options else b""

    def length(self, symbol: int) -> int:
        if symbol < self.parser.num_terminals:
            text = self.terminals[symbol]
            return _INFINITE if text is None else len(text)
        hit = self.nonterminals.get(symbol)
        return _INFINITE if hit is None else hit[0]

    def suffix(self, rid: int, dot: int) -> int:
        """The length of the shortest text of rule `rid`'s symbols from `dot` on."""
        key = (rid, dot)
        hit = self._suffix.get(key)
        if hit is None:
            rhs = self.parser.rules[rid][1]
            hit = min(_INFINITE, sum(self.length(sym) for sym in rhs[dot:]))
            self._suffix[key] = hit
        return hit

    def pieces(self, symbol: int) -> tuple[bytes, ...]:
        """The terminal texts of `symbol`'s shortest text, in order."""
        if symbol < self.parser.num_terminals:
            text = self.terminals[symbol]
            return () if text is None else (text,)
        hit = self._pieces.get(symbol)
        if hit is None:
            out: list[bytes] = []
            stack = [symbol]
            while stack:  # iterative: the chosen rules form a DAG, but it can be deep
                sym = stack.pop()
                if sym < self.parser.num_terminals:
                    text = self.terminals[sym]
                    if text is not None:
                        out.append(text)
                    continue
                done = self._pieces.get(sym)
                if done is not None:
                    out.extend(done)
                    continue
                _, rid = self.nonterminals[sym]
                stack.extend(reversed(self.parser.rules[rid][1]))
            hit = tuple(out)
            self._pieces[symbol] = hit
        return hit

    def rule_pieces(self, rid: int, dot: int) -> list[bytes]:
        out: list[bytes] = []
        for sym in self.parser.rules[rid][1][dot:]:
            out.extend(self.pieces(sym))
        return out

    def finish_table(self, parse: EarleySet) -> dict[int, tuple[int, int, int, EarleySet | None]]:
        """Per nonterminal `A` that items of `parse` wait on: the cheapest way to complete the
        parse once an `A` that started at `parse` is done, as (cost, rule, dot, origin)."""
        table: dict[int, tuple[int, int, int, EarleySet | None]] | None = parse.memo.get("finish")
        if table is not None:
            return table
        # The origins' tables first, without recursion (right-recursive rules chain origins as
        # long as the input).
        stack = [parse]
        while stack:
            top = stack[-1]
            missing = [
                origin
                for items in top.by_next.values()
                for _, _, origin in items
                if "finish" not in origin.memo and origin is not top
            ]
            if missing:
                stack.extend(dict.fromkeys(missing))
                continue
            stack.pop()
            if "finish" not in top.memo:
                top.memo["finish"] = self._table(top)
        done: dict[int, tuple[int, int, int, EarleySet | None]] = parse.memo["finish"]
        return done

    def _table(self, parse: EarleySet) -> dict[int, tuple[int, int, int, EarleySet | None]]:
        """`finish_table` of `parse`, its origins' tables being known."""
        parser = self.parser
        rules = parser.rules
        num_terminals = parser.num_terminals
        table: dict[int, tuple[int, int, int, EarleySet | None]] = {}
        for sym, items in parse.by_next.items():
            if sym < num_terminals:
                continue
            for rid, dot, origin in items:
                cost = self.item_cost(rid, dot + 1, origin)
                if cost < _INFINITE and cost < table.get(sym, (_INFINITE,))[0]:
                    table[sym] = (cost, rid, dot + 1, origin)
        edges: dict[int, list[tuple[int, int, int, int]]] = {}
        for sym, pairs in parse.predicted.items():
            if sym < num_terminals:
                continue
            for rid, dot in pairs:
                weight = self.suffix(rid, dot + 1)
                if weight >= _INFINITE:
                    continue
                if rid == parser.start_rule:
                    if weight < table.get(sym, (_INFINITE,))[0]:
                        table[sym] = (weight, rid, dot + 1, None)
                else:
                    edges.setdefault(rules[rid][0], []).append((sym, rid, dot + 1, weight))
        heap = [(entry[0], sym) for sym, entry in table.items()]
        heapq.heapify(heap)
        final: set[int] = set()
        while heap:
            cost, sym = heapq.heappop(heap)
            if sym in final or cost > table[sym][0]:
                continue
            final.add(sym)
            for target, rid, dot, weight in edges.get(sym, ()):
                total = cost + weight
                if total < table.get(target, (_INFINITE,))[0]:
                    table[target] = (total, rid, dot, parse)
                    heapq.heappush(heap, (total, target))
        return table

    def item_cost(self, rid: int, dot: int, origin: EarleySet | None) -> int:
        """The cost of finishing item (rid, dot) and then the parse it belongs to."""
        rest = self.suffix(rid, dot)
        if rid == self.parser.start_rule or origin is None or rest >= _INFINITE:
            return rest
        after = self.finish_table(origin).get(self.parser.rules[rid][0])
        return _INFINITE if after is None else rest + after[0]

    def completion(self, parse: EarleySet) -> list[bytes] | None:
        """The terminal texts of a shortest completion of `parse` (None: none is known)."""
        if parse.complete:
            return []
        memo = parse.memo
        if "completion" in memo:
            hit: list[bytes] | None = memo["completion"]
            return hit
        best: tuple[int, int, int, EarleySet | None] = (_INFINITE, -1, 0, None)
        for items in parse.by_next.values():
            for rid, dot, origin in items:
                cost = self.item_cost(rid, dot, origin)
                if cost < best[0]:
                    best = (cost, rid, dot, origin)
        for pairs in parse.predicted.values():
            for rid, dot in pairs:
                cost = self.item_cost(rid, dot, parse)
                if cost < best[0]:
                    best = (cost, rid, dot, parse)
        result: list[bytes] | None = None
        if best[0] < _INFINITE:
            result = self._unwind(best[1], best[2], best[3])
        memo["completion"] = result
        return result

    def _unwind(self, rid: int, dot: int, origin: EarleySet | None) -> list[bytes]:
        rules = self.parser.rules
        out: list[bytes] = []
        while True:
            out.extend(self.rule_pieces(rid, dot))
            if rid == self.parser.start_rule or origin is None:
                return out
            _, rid, dot, origin = self.finish_table(origin)[rules[rid][0]]
