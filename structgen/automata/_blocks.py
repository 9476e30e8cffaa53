"""Blocks: the finite, prefix-free sets of byte strings a chain (`chains.py`) is made of —
read from a regex AST (a literal's bytes, a class, a small choice such as a JSON key's
character in all its spellings) and determinised once, cached. Kept apart from the automaton
source so that it compiles with mypyc (`structgen/_compiled.py`): it is pure Python over
ints, tuples and dicts, run for every key of every schema. See docs/design/chains.md.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np
import numpy.typing as npt

from structgen.automata.dfa import _alphabet_of_ranges
from structgen.automata.regex_syntax import (
    Alternation,
    CharClass,
    Concat,
    Empty,
    Node,
    Repeat,
    String,
)

__all__ = [
    "Block",
    "byte_chain",
    "byte_chain_blocks",
    "byte_chain_fingerprint",
    "chain_blocks",
    "chain_fingerprint",
]

#: a block is made of at most this many spellings (an alternation with more is not a chain)
MAX_SPELLINGS = 64
#: a class of at most this many non-ASCII code points is spelled one code point at a time
MAX_CLASS_POINTS = 16
#: a block has at most this many states
MAX_BLOCK_STATES = 256


_DEAD = -(1 << 30)


class Block:
    """A prefix-free finite set of byte strings as a small DFA over local states ``0..size-1``
    (0 the start), leaving to local ``size`` (the next block's start).

    ``moves[s]``: local state `s`'s transitions, ``(bytes read, target local)``. ``first``: the
    local states one byte from the start, in the order their ids are given. ``row``: the
    start's 256 transitions as int32 bytes, relative to the block's first id (the next block
    is ``1 + len(first)``, a first state its rank from 1; dead `_DEAD`, below -1 whatever id is
    added). ``used``: the bytes read, as a bitset (bit b: byte b). ``digest``: of `moves`
    (which spell the language): a chain's fingerprint joins them. ``c_data``: the block for the
    C rows (`sg_chain`): size, width, rank, first, move offsets per local state, then (byte,
    target) pairs; int32, read-only.

    Immutable by convention, compared by identity. (Not a frozen dataclass: compiled with
    mypyc, its generated `__init__` stays in Python, ~1.3 µs a block, and a grammar's keywords
    make dozens; this one is native.)"""

    __slots__ = ("c_data", "digest", "first", "moves", "rank", "row", "size", "used", "width")

    def __init__(
        self,
        moves: tuple[tuple[tuple[bytes, int], ...], ...],
        first: tuple[int, ...],
        rank: tuple[int, ...],
        row: bytes,
        used: int,
        size: int,
        width: int,
        digest: bytes,
        c_data: npt.NDArray[np.int32],
    ) -> None:
        self.moves = moves
        self.first = first
        self.rank = rank  # local state -> its rank in `first` (0: not a first state)
        self.row = row
        self.used = used
        self.size = size  # local states
        self.width = width  # ids laid out up front: the start and the first states
        self.digest = digest
        self.c_data = c_data

    def __reduce__(self) -> tuple[type[Block], tuple[Any, ...]]:
        # (by its fields, as the frozen dataclass it was)
        return Block, (
            self.moves,
            self.first,
            self.rank,
            self.row,
            self.used,
            self.size,
            self.width,
            self.digest,
            self.c_data,
        )


def _block(spellings: Sequence[tuple[int, ...]]) -> Block | None:
    """The block of `spellings` (each a non-empty chain of byte sets, as bitsets), determinised
    by subset construction over (spelling, position) pairs; None when the set is not
    prefix-free (some spelling, read whole, could also go on) or the block grows too big."""
    if not spellings or any(not s or not all(s) for s in spellings):
        return None
    if len(spellings) == 1 and len(spellings[0]) == 1:
        return _one_byte_block(spellings[0][0])
    return _subset_block(spellings)


def _subset_block(spellings: Sequence[tuple[int, ...]]) -> Block | None:
    """`_block` by subset construction (any valid `spellings`)."""
    start = frozenset((i, 0) for i in range(len(spellings)))
    ids: dict[frozenset[tuple[int, int]], int] = {start: 0}
    order = [start]
    table: list[dict[int, int | None]] = []  # per local: byte -> target local (None: leave)
    for state in order:  # (grows as new subsets are found)
        targets: dict[int, set[tuple[int, int]]] = {}
        for which, pos in state:
            mask = spellings[which][pos]
            for byte in _bits(mask):
                targets.setdefault(byte, set()).add((which, pos + 1))
        row: dict[int, int | None] = {}
        for byte, after in sorted(targets.items()):  # (ascending: a canonical numbering)
            done = [1 for which, pos in after if pos == len(spellings[which])]
            if done:
                if len(done) != len(after):
                    return None  # a spelling ends where another goes on
                row[byte] = None
                continue
            key = frozenset(after)
            local = ids.get(key)
            if local is None:
                if len(order) >= MAX_BLOCK_STATES:
                    return None
                local = ids[key] = len(order)
                order.append(key)
            row[byte] = local
        table.append(row)
    size = len(order)
    moves = []
    used = 0
    for row in table:
        by_target: dict[int, bytearray] = {}
        for byte, target in row.items():
            by_target.setdefault(size if target is None else target, bytearray()).append(byte)
            used |= 1 << byte
        moves.append(tuple((bytes(sorted(b)), t) for t, b in sorted(by_target.items())))
    first = tuple(sorted({t for t in table[0].values() if t is not None}))
    rank = [0] * size
    for r, local in enumerate(first, 1):
        rank[local] = r
    start_row: npt.NDArray[np.int32] = np.full(256, _DEAD, dtype=np.int32)
    for byte, target in table[0].items():
        start_row[byte] = 1 + len(first) if target is None else rank[target]
    frozen = tuple(moves)
    digest = hashlib.blake2b(repr(frozen).encode(), digest_size=16).digest()
    offsets = [0]
    pairs: list[int] = []
    for local_moves in frozen:
        for data, target in local_moves:
            for byte in data:
                pairs += (byte, target)
        offsets.append(len(pairs) // 2)
    width = 1 + len(first)
    c_data = np.array([size, width, *rank, *first, *offsets, *pairs], dtype=np.int32)
    c_data.setflags(write=False)
    return Block(frozen, first, tuple(rank), start_row.tobytes(), used, size, width, digest, c_data)


def _one_byte_block(mask: int) -> Block:
    """`_block` of one byte from the set `mask` (a literal's byte, a class), written out
    directly: the start reads each byte of the set and leaves (most blocks of a grammar's
    keywords and punctuation; the subset construction cost ~8 µs each, in every cold compile)."""
    data = bytes(_bits(mask))
    frozen = (((data, 1),),)
    row = bytearray(_DEAD_ROW)
    pairs: list[int] = []
    for byte in data:
        row[4 * byte : 4 * byte + 4] = _LEAVE
        pairs += (byte, 1)
    digest = _mask_digest(mask)
    c_data = np.array([1, 1, 0, 0, len(data), *pairs], dtype=np.int32)
    c_data.setflags(write=False)
    return Block(frozen, (), (0,), bytes(row), mask, 1, 1, digest, c_data)


@lru_cache(maxsize=512)
def _mask_digest(mask: int) -> bytes:
    """The digest of the block of one byte from the set `mask` (`Block.digest`: of its moves),
    made without the block (`byte_chain_fingerprint`); a literal's byte (one bit) from a table
    made once."""
    if mask and not mask & (mask - 1):
        return _BYTE_DIGESTS[mask.bit_length() - 1]
    return _digest_of_mask(mask)


def _digest_of_mask(mask: int) -> bytes:
    frozen = (((bytes(_bits(mask)), 1),),)
    return hashlib.blake2b(repr(frozen).encode(), digest_size=16).digest()


_DEAD_ROW = np.full(256, _DEAD, dtype=np.int32).tobytes()
_LEAVE = np.array([1], dtype=np.int32).tobytes()  # (the start's move out of the block)


def _bits(mask: int) -> list[int]:
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out


#: the digest of each one-byte block (a literal's byte: the chains of every key and keyword
#: read them), a constant of the format made at import (`clear_caches` keeps it)
_BYTE_DIGESTS = tuple([_digest_of_mask(1 << b) for b in range(256)])


@lru_cache(maxsize=512)
def _set_block(mask: int) -> Block:
    """The block of one byte from the set `mask` (a literal's byte: one bit)."""
    block = _block([(mask,)])
    assert block is not None
    return block


def _spellings(node: Node, limit: int) -> list[tuple[int, ...]] | None:
    """`node`'s language as at most `limit` chains of byte sets, or None (an infinite or too
    big language, a code point with no UTF-8 spelling)."""
    kind = type(node)
    if kind is String:
        data = _utf8(node.text)  # type: ignore[union-attr]
        return None if data is None else [tuple(1 << b for b in data)]
    if kind is CharClass:
        return _class_spellings(node.ranges, limit)  # type: ignore[union-attr]
    if kind is Empty:
        return [()]
    if kind is Alternation:
        out: list[tuple[int, ...]] = []
        for item in node.items:  # type: ignore[union-attr]
            if len(out) >= limit:
                return None
            part = _spellings(item, limit - len(out))
            if part is None:
                return None
            out.extend(part)
        return out
    if kind is Concat:
        return _product(node.items, limit)  # type: ignore[union-attr]
    if kind is Repeat and node.max == node.min and node.min <= 8:  # type: ignore[union-attr]
        return _product((node.item,) * node.min, limit)  # type: ignore[union-attr]
    return None


def _product(items: Sequence[Node], limit: int) -> list[tuple[int, ...]] | None:
    """The spellings of `items` one after another (every combination)."""
    out: list[tuple[int, ...]] = [()]
    for item in items:
        options = _spellings(item, limit)
        if options is None or len(out) * len(options) > limit:
            return None
        out = [a + b for a in out for b in options]
    return out


def _class_spellings(
    ranges: tuple[tuple[int, int], ...], limit: int
) -> list[tuple[int, ...]] | None:
    """A class's spellings: its ASCII part one byte set, each other code point its UTF-8 bytes."""
    ascii_mask = _alphabet_of_ranges((lo, min(hi, 0x7F)) for lo, hi in ranges if lo <= 0x7F)
    points: list[int] = []
    for lo, hi in ranges:
        if hi > 0x7F:
            low = max(lo, 0x80)
            if len(points) + hi - low >= min(MAX_CLASS_POINTS, limit):
                return None
            points.extend(range(low, hi + 1))
    out: list[tuple[int, ...]] = [(ascii_mask,)] if ascii_mask else []
    for cp in points:
        data = _utf8(chr(cp)) if cp <= 0x10FFFF else None
        if data is None:
            return None
        out.append(tuple(1 << b for b in data))
    return out if len(out) <= limit else None


def _utf8(text: str) -> bytes | None:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # (a lone surrogate: no UTF-8 spelling; the NFA path says so)
        return None


@lru_cache(maxsize=4096)
def _node_block(node: Node) -> Block | None:
    """The block of a choice (`Alternation`) or a class; cached (a key's characters repeat)."""
    if _count_spellings(node, MAX_SPELLINGS) is None:
        return None  # (an enum's words, each character spelled two ways: counted, not listed)
    spellings = _spellings(node, MAX_SPELLINGS)
    return None if spellings is None else _block(spellings)


def _count_spellings(node: Node, limit: int) -> int | None:
    """How many chains `_spellings` makes of `node`, counted without making them; None when
    more than `limit` (or a node it does not spell). Only a filter: where a count is given,
    `_spellings` still decides."""
    kind = type(node)
    if kind is String or kind is Empty:
        return 1
    if kind is CharClass:
        ranges = node.ranges  # type: ignore[union-attr]
        # (the ASCII part one byte set, each other code point one chain)
        count = any(lo <= 0x7F for lo, _ in ranges) + sum(
            [hi - max(lo, 0x80) + 1 for lo, hi in ranges if hi > 0x7F]
        )
        return count if count <= limit else None
    if kind is Alternation or kind is Concat:  # (a choice adds its items' counts, a row multiplies)
        choice = kind is Alternation
        count = 0 if choice else 1
        for item in node.items:  # type: ignore[union-attr]
            part = _count_spellings(item, limit)
            if part is None:
                return None
            count = count + part if choice else count * part
            if count > limit:
                return None
        return count
    if kind is Repeat and node.max == node.min and node.min <= 8:  # type: ignore[union-attr]
        part = _count_spellings(node.item, limit)  # type: ignore[union-attr]
        if part is None:
            return None
        product = part**node.min  # type: ignore[union-attr]
        return product if product <= limit else None
    return None


_CHAIN_ITEMS = (String, CharClass, Alternation)
#: a fixed repetition of a class or choice (`[0-9a-f]{8}`) is this many blocks at most
MAX_FIXED_REPEAT = 64


def _fixed_repeat(item: Node) -> bool:
    """A class or choice repeated a fixed number of times (a UUID's `[0-9a-f]{8}`)."""
    return (
        type(item) is Repeat
        and item.min == item.max  # type: ignore[union-attr]
        and 1 <= item.min <= MAX_FIXED_REPEAT  # type: ignore[union-attr]
        and type(item.item) in (CharClass, Alternation)  # type: ignore[union-attr]
    )


def chain_blocks(node: Node) -> list[Block] | None:
    """`node` as a chain of blocks (`literal_dfa`) when it is one: a concatenation of literals,
    classes and finite prefix-free choices (a JSON key's characters), each possibly repeated a
    fixed number of times; else None."""
    items = node.items if type(node) is Concat else (node,)  # type: ignore[union-attr]
    if not all(type(item) in _CHAIN_ITEMS or _fixed_repeat(item) for item in items):
        return None  # (before any block is made)
    blocks: list[Block] = []
    for item in items:
        if type(item) is Repeat:
            block = _node_block(item.item)  # type: ignore[union-attr]
            if block is None:
                return None
            blocks.extend([block] * item.min)  # type: ignore[union-attr]
            continue
        if type(item) is String:
            data = _utf8(item.text)  # type: ignore[union-attr]
            if data is None:
                return None
            blocks.extend(_set_block(1 << b) for b in data)
            continue
        block = _node_block(item)  # (a class or a choice)
        if block is None:
            return None
        blocks.append(block)
    return blocks or None


def chain_fingerprint(blocks: Sequence[Block]) -> str:
    """A stable digest of the chain's language (its blocks' moves, in order): a chain's
    automaton is fingerprinted without walking its AST."""
    return _chain_digest([block.digest for block in blocks])


def _chain_digest(block_digests: list[bytes]) -> str:
    """A chain's fingerprint from its blocks' digests, in order."""
    return hashlib.blake2b(b"chain-1\0" + b"".join(block_digests), digest_size=32).hexdigest()


def byte_chain(node: Node) -> list[int] | None:
    """`node` as a chain of one-byte blocks — a literal, a keyword of ASCII classes (SQL's
    ``[Ss][Ee][Ll]...``) —, each block's byte set as a bitset, read without making the blocks
    (a grammar's terminal defers them to its first row: `chains.DeferredChainSource`); None
    where it is not such a chain (`chain_blocks` decides then). The blocks `chain_blocks`
    would make are `byte_chain_blocks` of these sets."""
    items = node.items if type(node) is Concat else (node,)  # type: ignore[union-attr]
    masks: list[int] = []
    for item in items:
        kind = type(item)
        if kind is String:
            data = _utf8(item.text)  # type: ignore[union-attr]
            if data is None:
                return None
            masks.extend([1 << b for b in data])
        elif kind is CharClass:
            ranges = item.ranges  # type: ignore[union-attr]
            if not ranges or ranges[-1][1] > 0x7F:  # (sorted: the last range ends highest)
                return None  # (empty, or a code point spelled in several bytes)
            masks.append(_alphabet_of_ranges(ranges))
        else:
            return None
    return masks or None


def byte_chain_blocks(masks: Sequence[int]) -> list[Block]:
    """The blocks of a `byte_chain` (those `chain_blocks` makes of its node)."""
    return [_set_block(mask) for mask in masks]


def byte_chain_fingerprint(masks: Sequence[int]) -> str:
    """`chain_fingerprint` of `byte_chain_blocks(masks)`, without making the blocks."""
    return _chain_digest([_mask_digest(mask) for mask in masks])
