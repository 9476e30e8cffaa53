"""Budget-aware closing: outputs that end complete within their token budget.

A sampler with `r` tokens left may take token `t` only if, after `t`, some valid completion
fits in `r - 1` tokens. `CompletionPlanner` knows one such completion for every state it is
asked about: the engine proposes a shortest text (`CompiledGrammar.shortest_completion`), the
planner checks it against the grammar (wrapping engines such as the uniqueItems guard may refuse
it) and searches on where it fails, then spells it in the fewest vocabulary tokens (a dynamic
program over the text; every prefix of a valid completion is live, so any spelling of it is a
valid token path). The plan is a real completion, so the rule never promises what the
vocabulary cannot spell; its length bounds the fewest tokens from above (it is exact where the
shortest text also spells shortest, as in the common closing brackets and quotes).

Keeping the rule exact needs one check per candidate token, not a mask over the vocabulary:
samplers draw, check the draw (`fits`) and draw again without it when it does not fit, which
samples exactly from the allowed tokens that fit. Following a plan never runs out: a state's
plan minus its first token is a plan of the next state. See docs/design/budgets.md.
"""

from __future__ import annotations

import bisect
import heapq
import threading
import time
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from structgen._lru import LRU
from structgen.errors import StructgenError
from structgen.grammar.tokens import NON_TEXT_BYTE, token_id_at

if TYPE_CHECKING:
    from structgen.compiler import CompiledGrammar
    from structgen.vocab import Vocabulary

__all__ = ["CompletionPlanner", "fewest_tokens", "planner_of"]

#: a search that repairs a refused proposal expands at most this many states ...
SEARCH_STATES = 200
#: ... and runs at most this long (seconds)
SEARCH_SECONDS = 0.25
#: ... branching at the refused byte and at most this many bytes before it
REPAIR_DEPTH = 8


class _Spellings:
    """A vocabulary's text tokens in byte order, for spelling a text in the fewest tokens."""

    def __init__(self, vocab: Vocabulary) -> None:
        eos = set(vocab.eos_token_ids)
        texts, ids = vocab.trie._lexicographic()  # (shared with forced_tokens)
        # (no text token holding a byte from F5 up: valid text never has one, and a token
        # terminal's marker must be spelled by its token, see grammar/tokens.py)
        keep = [
            i
            for i, t in enumerate(ids)
            if t not in eos and (not texts[i] or max(texts[i]) < NON_TEXT_BYTE)
        ]
        self.texts = [texts[i] for i in keep]
        self.ids = [ids[i] for i in keep]
        self.max_length = max((len(t) for t in self.texts), default=0)

    def prefixes(self, data: bytes, start: int) -> list[tuple[int, int]]:
        """(length, token id) of every token that `data[start:]` starts with (a token
        terminal's marker: that token alone)."""
        if data[start] >= NON_TEXT_BYTE:
            token_id = token_id_at(data, start)
            return [] if token_id is None else [(4, token_id)]
        texts = self.texts
        out: list[tuple[int, int]] = []
        end = min(len(data), start + self.max_length)
        for stop in range(start + 1, end + 1):
            piece = data[start:stop]
            pos = bisect.bisect_left(texts, piece)
            if pos == len(texts) or not texts[pos].startswith(piece):
                break  # no token starts with this piece, so none with a longer one
            if texts[pos] == piece:
                out.append((stop - start, self.ids[pos]))
        return out


_SPELLINGS: LRU[str, _Spellings] = LRU(8)


def _spellings(vocab: Vocabulary) -> _Spellings:
    return _SPELLINGS.get_or_make(vocab.fingerprint, lambda: _Spellings(vocab))


def fewest_tokens(vocab: Vocabulary, text: bytes) -> tuple[int, ...] | None:
    """The shortest spelling of `text` in text tokens of `vocab` (None: it cannot be spelled)."""
    if not text:
        return ()
    spell = _spellings(vocab)
    n = len(text)
    best: list[tuple[int, int, int] | None] = [None] * (n + 1)  # (count, length, token) from i
    best[n] = (0, 0, -1)
    for i in range(n - 1, -1, -1):
        choice: tuple[int, int, int] | None = None
        for length, token in spell.prefixes(text, i):
            rest = best[i + length]
            if rest is not None and (choice is None or rest[0] + 1 < choice[0]):
                choice = (rest[0] + 1, length, token)
        best[i] = choice
    if best[0] is None:
        return None
    out: list[int] = []
    i = 0
    while i < n:
        step = best[i]
        assert step is not None
        out.append(step[2])
        i += step[1]
    return tuple(out)


class CompletionPlanner:
    """Plans of completion (token ids) for the states of one compiled grammar, memoised."""

    def __init__(self, grammar: CompiledGrammar, *, max_entries: int = 8192) -> None:
        self._grammar = grammar
        self._vocab = grammar.vocab
        self._memo: OrderedDict[Any, tuple[int, ...] | None] = OrderedDict()
        self._max_entries = max_entries
        self._lock = threading.Lock()

    def memory_bytes(self) -> int:
        """An estimate: the memoised plans (a few tokens each)."""
        return len(self._memo) * 200

    def plan(self, state: Any) -> tuple[int, ...] | None:
        """Tokens that complete the output from `state` (() when it is complete; None when no
        completion was found, which callers treat as "does not fit")."""
        try:
            key: Any = state
            hash(key)
        except TypeError:
            key = None
        if key is not None:
            with self._lock:
                if key in self._memo:
                    self._memo.move_to_end(key)
                    return self._memo[key]
        try:
            plan = self._make(state)
        except StructgenError:  # a lazily hit automaton limit: no plan known
            plan = None
        if key is not None:
            with self._lock:
                self._memo[key] = plan
                while len(self._memo) > self._max_entries:
                    self._memo.popitem(last=False)
        return plan

    def remember(self, state: Any, plan: tuple[int, ...]) -> None:
        """Record a plan known to complete `state` (the rest of an earlier state's plan)."""
        try:
            hash(state)
        except TypeError:
            return
        with self._lock:
            old = self._memo.get(state)
            if old is None or len(plan) < len(old):
                self._memo[state] = plan
                self._memo.move_to_end(state)

    def _make(self, state: Any) -> tuple[int, ...] | None:
        grammar = self._grammar
        if grammar.is_accepting(state):
            return ()
        text = self._checked_text(state)
        if text is None:
            return None
        return fewest_tokens(self._vocab, text)

    def _valid(self, state: Any, text: bytes | None) -> bool:
        if text is None:
            return False
        after = self._grammar.advance(state, text)
        return after is not None and self._grammar.is_accepting(after)

    def _proposal(self, state: Any) -> bytes | None:
        grammar = self._grammar
        text = grammar.shortest_completion(state)
        if self._valid(state, text):
            return text
        spaced = grammar.shortest_completion(state, spaced=True)
        if spaced != text and self._valid(state, spaced):
            return spaced
        return None

    def _checked_text(self, state: Any) -> bytes | None:
        text = self._proposal(state)
        if text is not None:
            return text
        return self._search(state)

    def _search(self, state: Any) -> bytes | None:
        """Repair a refused proposal: best-first over states, priced by the bytes so far plus
        the engine's (unchecked) proposal from there. A popped state's proposal is followed
        while the grammar takes it; where it is refused, the search branches on other bytes at
        that point and up to `REPAIR_DEPTH` bytes before it (a repeated item is changed where
        it starts to differ). Bounded by `SEARCH_STATES` and `SEARCH_SECONDS`."""
        grammar = self._grammar
        deadline = time.perf_counter() + SEARCH_SECONDS
        counter = 0
        heap: list[tuple[int, int, int, bytes, Any]] = [(0, 0, 0, b"", state)]
        seen: set[bytes] = set()
        expanded = 0
        while heap and expanded < SEARCH_STATES and time.perf_counter() < deadline:
            _, _, _, path, current = heapq.heappop(heap)
            expanded += 1
            guess = grammar.shortest_completion(current)
            if guess is None:
                continue
            # follow the proposal as far as the grammar takes it
            states = [current]
            for byte in guess:
                nxt = grammar.advance(states[-1], bytes((byte,)))
                if nxt is None:
                    break
                states.append(nxt)
            taken = len(states) - 1
            if taken == len(guess) and grammar.is_accepting(states[-1]):
                return path + guess
            for back in range(taken, max(-1, taken - REPAIR_DEPTH - 1), -1):
                base = states[back]
                prefix = path + guess[:back]
                for byte in range(256):
                    if back < len(guess) and byte == guess[back]:
                        continue
                    step = prefix + bytes((byte,))
                    if step in seen:
                        continue
                    nxt = grammar.advance(base, bytes((byte,)))
                    if nxt is None:
                        continue
                    seen.add(step)
                    if grammar.is_accepting(nxt):
                        return step
                    rest = grammar.shortest_completion(nxt)
                    if rest is None:
                        continue
                    counter += 1
                    # deeper first among equals: the search follows one line before fanning out
                    heapq.heappush(heap, (len(step) + len(rest), -len(step), counter, step, nxt))
        return None


_PLANNER_LOCK = threading.Lock()


def planner_of(grammar: CompiledGrammar) -> CompletionPlanner:
    """The grammar's planner (one per compiled grammar, shared by its matchers)."""
    planner: CompletionPlanner | None = grammar._planner
    if planner is None:
        with _PLANNER_LOCK:
            planner = grammar._planner
            if planner is None:
                planner = CompletionPlanner(grammar)
                grammar._planner = planner
    return planner
