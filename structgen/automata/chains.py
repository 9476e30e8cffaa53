"""Chains of spellings: a terminal that is one fixed sequence of small finite choices — a
literal, an ASCII case-insensitive keyword, a JSON key spelled every way JSON allows (each
character raw or as a `\\uXXXX` escape in either case of hex) — built as a DFA directly, with
no regex program, NFA or subset construction at compile time.

The language is a concatenation of *blocks*. A block is a finite, prefix-free set of byte
strings (no spelling of one character is a prefix of another), made deterministic once and
cached: a byte set is a block of one state; a JSON key's character ``s`` is the block
``s | \\u0073``. Because each block is prefix-free, the blocks chain without any further
determinisation: leaving a block is entering the next one.

Layout (`literal_dfa`): state ids are given block by block — a block's start (its *spine*
state), then the states one byte into the block (its *first* states) — and the final,
accepting state last. Spine rows are written at once from the blocks' cached rows (one C
call for the whole chain, a few numpy operations without the extension); the other rows are
built on first visit, as the walks of a vocabulary seldom leave the spine (an escape is read
only by the tokens that spell one): in C (`NativeChain`, from each block's `c_data`), so that a
grammar's lexer, a union of many keys, builds them without a call into Python; in Python
(`LiteralSource.expand`) without the extension. A grammar's terminal lays its chain out with
its first row (`DeferredChainSource`): a lexer reads few of its keywords and keys early, many
never. See docs/design/chains.md.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Hashable, Sequence
from functools import reduce
from itertools import accumulate
from operator import or_
from typing import Any

import numpy as np
import numpy.typing as npt

from structgen.automata import _native_subset
from structgen.automata._blocks import (
    Block,
    byte_chain,
    byte_chain_blocks,
    byte_chain_fingerprint,
    chain_blocks,
    chain_fingerprint,
)
from structgen.automata._native_subset import _NativeStates
from structgen.automata.dfa import (
    _DEFERRED_START,
    ByteDFA,
    _Source,
    _table_memory,
    classes_of_mask,
)
from structgen.automata.nfa import AutomataLimits, extension_function

__all__ = [
    "Block",
    "DeferredChainSource",
    "LiteralSource",
    "chain_blocks",
    "chain_fingerprint",
    "chain_states",
    "deferred_chain_dfa",
    "literal_dfa",
]

#: rows past the spine built in C (`NativeChain`) where the extension is built; False: Python
NATIVE_CHAINS = True


class LiteralSource(_Source):
    """A chain of blocks (see the module docstring). Keys: a state's id for the states laid
    out up front (spine, first and final states), ``(block, local state)`` for the others."""

    #: a chain's table, one row per laid-out state, doubles when its first deeper state comes
    #: (an escape's few states), not eightfold: thousands of keys stay among the recent
    #: automata, and a bigger fresh table is more pages to fault in at a first visit
    growth = 2
    finite = True  # (a word's spellings: slice checks skip its states)
    laid_out = True  # (`literal_dfa` builds the spine's rows with the automaton)

    def __init__(
        self,
        blocks: Sequence[Block] | None,
        laid_out: tuple[list[int], int, npt.NDArray[np.uint8], int] | None = None,
        *,
        byte_sets: Sequence[int] | None = None,
    ) -> None:
        """`laid_out`: the spine, bytes read, byte classes and their count, when made already
        (`chain_arrays` in C). `blocks` None: a chain of one-byte blocks of `byte_sets`
        (`byte_chain`), laid out whole (`byte_chain_arrays`), whose blocks are made if they are
        ever asked for (a pickle's copy does not need them: every state is built)."""
        self._blocks = None if blocks is None else tuple(blocks)
        self._byte_sets = None if byte_sets is None else tuple(byte_sets)
        if laid_out is None:
            spine = [0, *accumulate(block.width for block in self.blocks)]
            used = reduce(or_, (block.used for block in self.blocks))
            read = used.bit_count()
            laid_out = (spine, used, classes_of_mask(used), read + (read < 256))
        # the id of each block's start (and after the last, the final state's)
        self.spine, self._used, self.byte_classes, self.num_classes = laid_out
        self.classes_mask = self._used  # (each byte read its own class: `_Source.classes_mask`)
        self.final = self.spine[-1]

    @property
    def blocks(self) -> tuple[Block, ...]:
        """The chain's blocks (made on first use when laid out from byte sets)."""
        blocks = self._blocks
        if blocks is None:
            assert self._byte_sets is not None
            blocks = self._blocks = tuple(byte_chain_blocks(self._byte_sets))
        return blocks

    @property
    def num_laid_out(self) -> int:
        """States with an id from the start (`literal_dfa`)."""
        return self.final + 1

    def alphabet(self) -> int:
        return self._used

    def start_key(self) -> int:
        return 0

    def start_is_live(self) -> bool:
        return True

    def is_accepting(self, key: Any) -> bool:
        return type(key) is int and key == self.final

    def make_native(self, max_states: int) -> _NativeStates | None:
        """The rows past the spine built in C (`NativeChain`): a union of terminals (a
        grammar's lexer) reads them without asking Python."""
        if not NATIVE_CHAINS or _native_subset._CHAIN_CONTEXT is None:
            return None
        return _native_subset.NativeChain(self.blocks, self.num_laid_out, max_states)

    def expand(self, key: Any, intern: Callable[[Hashable], int]) -> list[int]:
        if key == self.final:
            return [-1] * self.num_classes
        if type(key) is tuple:
            i, local = key
            base = self.spine[i]
        else:  # (an id laid out up front: a first state)
            i = bisect_right(self.spine, key) - 1
            base = self.spine[i]
            local = self.blocks[i].first[key - base - 1]
        block = self.blocks[i]
        out = [-1] * self.num_classes
        classes = self.byte_classes
        for data, target in block.moves[local]:
            if target == block.size:  # (laid-out states are their own ids: not interned)
                sid = self.spine[i + 1]
            elif block.rank[target]:
                sid = base + block.rank[target]
            else:
                sid = intern((i, target))
            for byte in data:
                out[int(classes[byte])] = sid
        return out


_CHAIN_ARRAYS = extension_function("chain_arrays")
#: what `DeferredChainSource.lay_out_native` makes: the source, its C context, table and flags
_Started = tuple[
    LiteralSource, _native_subset.NativeChain, npt.NDArray[np.int32], npt.NDArray[np.bool_]
]
#: `DeferredChainSource.lay_out_native`: a chain of blocks laid out into its C context
_CHAIN_STARTED = extension_function("chain_started")
#: `DeferredChainSource.lay_out` of a chain of one-byte blocks in C, without the blocks
_BYTE_CHAIN_ARRAYS = extension_function("byte_chain_arrays")


def chain_states(blocks: Sequence[Block]) -> int:
    """The states of a chain of `blocks` (each block's local states, and the final one)."""
    return 1 + sum([block.size for block in blocks])


def literal_dfa(blocks: Sequence[Block], *, fingerprint: str, limits: AutomataLimits) -> ByteDFA:
    """The DFA of a chain of blocks (non-empty), spine rows built (`LiteralSource`)."""
    source, table, accepting, built = lay_out_chain(blocks)
    return ByteDFA.from_arrays(
        source,
        fingerprint=fingerprint,
        limits=limits,
        byte_classes=source.byte_classes,
        num_classes=source.num_classes,
        table=table,
        accepting=accepting,
        states=source.num_laid_out,
        built=built,
        ids_from_source=True,
    )


def lay_out_chain(
    blocks: Sequence[Block],
) -> tuple[LiteralSource, npt.NDArray[np.int32], npt.NDArray[np.bool_], bytes | bytearray]:
    """A chain's source and arrays (`literal_dfa`): its table with the spine rows built, the
    accepting flags and the built ones, one per laid-out state."""
    if _CHAIN_ARRAYS is not None:  # (one C call lays it all out)
        table_data, accepting_data, built, spine, used, classes, count = _CHAIN_ARRAYS(blocks)
        byte_classes = np.frombuffer(classes, dtype=np.uint8)
        source = LiteralSource(blocks, (spine, used, byte_classes, count))
        table = np.frombuffer(table_data, dtype=np.int32).reshape(-1, 256)
        accepting = np.frombuffer(accepting_data, dtype=np.bool_)
    else:
        source = LiteralSource(blocks)
        table = np.full((source.num_laid_out, 256), -2, dtype=np.int32)
        spine_ids = np.asarray(source.spine[:-1], dtype=np.int32)
        rows = b"".join([block.row for block in source.blocks])
        relative = np.frombuffer(rows, dtype=np.int32).reshape(-1, 256)
        table[spine_ids] = np.maximum(relative + spine_ids[:, None], -1)
        table[source.final] = -1
        built = bytearray(source.num_laid_out)
        for sid in source.spine:
            built[sid] = 1
        accepting = np.zeros(table.shape[0], dtype=np.bool_)
        accepting[source.final] = True
    return source, table, accepting, built


class DeferredChainSource(_Source):
    """A chain before its rows exist: what a grammar's lexer needs up front — the byte
    classes (each byte read its own class, as the chain's), the alphabet, a non-empty language
    whose start does not accept — comes from the blocks' byte sets, and the chain is laid out
    when the automaton builds its first row (`ByteDFA._materialize` takes its source and
    arrays). A chain of one-byte blocks (a keyword, a literal key: `byte_chain`) has not even
    its blocks made until then. A grammar's lexer reads few of its keywords in the first masks
    (SQL's start reads ``SELECT``), and a schema's first masks few of its keys (those of the
    outer object), most of them later or never."""

    deferred = True
    finite = True

    def __init__(self, masks: Sequence[int], blocks: Sequence[Block] | None = None) -> None:
        """`masks`: each block's bytes read (`Block.used`); `blocks`: the blocks, where made
        already (else each is the block of one byte from its mask: `byte_chain_blocks`)."""
        self.masks = tuple(masks)
        self.blocks = None if blocks is None else tuple(blocks)
        self.byte_masks = self.masks if blocks is None else None  # (C may lay it out)
        used = self._used = reduce(or_, self.masks)
        self.classes_mask = used
        self.byte_classes = classes_of_mask(used)
        read = used.bit_count()
        self.num_classes = read + (read < 256)

    def alphabet(self) -> int:
        return self._used

    def start_key(self) -> Hashable:
        return _DEFERRED_START

    def start_is_live(self) -> bool:
        return True

    def is_accepting(self, key: Any) -> bool:
        return False  # (every spelling of every block reads a byte)

    def expand(self, key: Any, intern: Callable[[Hashable], int]) -> list[int]:
        raise AssertionError("a deferred source is replaced before its first row")

    def lay_out_native(
        self, max_states: int, rows_for: Callable[[int, bool], int]
    ) -> _Started | None:
        """A chain of blocks laid out straight into a new C context (`chain_started` in
        _subset.c) that builds every row, the spine's too, into a fresh table of
        `rows_for(laid-out states, True)` rows (`ByteDFA._grown_rows`): (the source, the
        context, the table, the accepting flags). None — nothing made — for a chain of one-byte
        blocks (all its states are laid out, none deeper: `lay_out`), without the extension,
        and for a chain of 1,024 laid-out states or more (C would stop on the way for a budget
        check)."""
        blocks = self.blocks
        if blocks is None or not NATIVE_CHAINS or _CHAIN_STARTED is None:
            return None
        spine = [0, *accumulate([block.width for block in blocks])]
        if spine[-1] + 1 >= 1024:
            return None
        rows = rows_for(spine[-1] + 1, True)
        table = _table_memory(rows)
        accepting = np.zeros(rows, dtype=np.bool_)
        owner, ctx, laid = _CHAIN_STARTED(blocks, max_states, table, accepting.view(np.uint8))
        if laid != spine[-1] + 1:  # (no other stop is possible: out of memory)
            raise MemoryError("the C chain context could not lay out its states")
        source = LiteralSource(blocks, (spine, self._used, self.byte_classes, self.num_classes))
        native = _native_subset.NativeChain.adopted(blocks, laid, max_states, owner, ctx)
        return source, native, table, accepting

    def lay_out(
        self,
    ) -> tuple[LiteralSource, npt.NDArray[np.int32], npt.NDArray[np.bool_], bytes | bytearray]:
        """The chain laid out now (`lay_out_chain`): the automaton takes its source and
        arrays over."""
        blocks = self.blocks
        if blocks is not None:
            return lay_out_chain(blocks)
        if _BYTE_CHAIN_ARRAYS is None:
            return lay_out_chain(byte_chain_blocks(self.masks))
        # (one C call from the byte sets: no blocks made, the spine is every state)
        table_data, accepting_data, built = _BYTE_CHAIN_ARRAYS(self.masks)
        spine = list(range(len(self.masks) + 1))
        laid_out = (spine, self._used, self.byte_classes, self.num_classes)
        source = LiteralSource(None, laid_out, byte_sets=self.masks)
        table = np.frombuffer(table_data, dtype=np.int32).reshape(-1, 256)
        accepting = np.frombuffer(accepting_data, dtype=np.bool_)
        return source, table, accepting, built


def deferred_chain_dfa(node: Any, limits: AutomataLimits, max_states: int) -> ByteDFA | None:
    """`node`'s chain automaton with its rows deferred to its first row (`DeferredChainSource`)
    when it is a chain of fewer than `max_states` states, else None. A chain of one-byte blocks
    is read without making them."""
    masks = byte_chain(node)
    if masks is not None:
        if 1 + len(masks) >= max_states:
            return None
        source = DeferredChainSource(masks)
        fingerprint = byte_chain_fingerprint(masks)
    else:
        blocks = chain_blocks(node)
        if blocks is None or chain_states(blocks) >= max_states:
            return None
        source = DeferredChainSource([block.used for block in blocks], blocks)
        fingerprint = chain_fingerprint(blocks)
    return ByteDFA.unbuilt(source, fingerprint=fingerprint, limits=limits)
