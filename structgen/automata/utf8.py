"""Code point sets as UTF-8 byte automata.

``utf8_sequences`` splits a code point range into the minimal list of byte-range sequences whose
concatenations are exactly the UTF-8 encodings of the range (the algorithm of Rust
regex-syntax's ``Utf8Sequences``). ``byte_dag`` merges the sequences of a whole set into a small
deterministic DAG with shared prefixes and suffixes; the NFA uses one such DAG per distinct set,
shared by every place (and every repetition copy) that consumes a character of that set.
Surrogates (U+D800..U+DFFF) have no UTF-8 encoding and are always left out.
"""

from __future__ import annotations

from functools import lru_cache

from structgen.automata import intervals as iv
from structgen.automata.intervals import Ranges

__all__ = ["ByteDag", "byte_dag", "encode_utf8", "utf8_sequences"]

_SURROGATES: Ranges = ((0xD800, 0xDFFF),)
_MAX_BY_LENGTH = (0x7F, 0x7FF, 0xFFFF)

Utf8Sequence = tuple[tuple[int, int], ...]

#: code point of token id 0 in a token terminal (`grammar/tokens.py`): above U+10FFFF, written
#: in the 4-byte pattern of `encode_utf8`
TOKEN_BASE = 0x140000


def encode_utf8(cp: int) -> bytes:
    """The UTF-8 encoding of a (non-surrogate) code point; above U+10FFFF (up to U+1FFFFF) the
    same 4-byte pattern, which no valid text contains: `grammar/tokens.py` spells token
    terminals with it."""
    if cp <= 0x10FFFF:
        return chr(cp).encode("utf-8")
    return bytes(
        (0xF0 | cp >> 18, 0x80 | (cp >> 12) & 0x3F, 0x80 | (cp >> 6) & 0x3F, 0x80 | cp & 0x3F)
    )


def _range_sequences(start: int, end: int, out: list[Utf8Sequence]) -> None:
    stack = [(start, end)]
    while stack:
        s, e = stack.pop()
        while True:
            split = False
            for mx in _MAX_BY_LENGTH:
                if s <= mx < e:
                    stack.append((mx + 1, e))
                    e = mx
                    break
            if e <= 0x7F:
                out.append(((s, e),))
                break
            for i in (1, 2, 3):
                m = (1 << (6 * i)) - 1
                if (s & ~m) != (e & ~m):
                    if (s & m) != 0:
                        stack.append(((s | m) + 1, e))
                        e = s | m
                        split = True
                        break
                    if (e & m) != m:
                        stack.append((e & ~m, e))
                        e = (e & ~m) - 1
                        split = True
                        break
            if split:
                continue
            lo, hi = encode_utf8(s), encode_utf8(e)
            out.append(tuple(zip(lo, hi)))
            break


def utf8_sequences(ranges: Ranges) -> list[Utf8Sequence]:
    """Byte-range sequences matching exactly the UTF-8 encodings of ``ranges``, in order."""
    out: list[Utf8Sequence] = []
    for lo, hi in iv.difference(ranges, _SURROGATES):
        _range_sequences(lo, hi, out)
    return out


class ByteDag:
    """A deterministic byte automaton accepting the UTF-8 encodings of one code point set.

    ``nodes[i]`` lists node ``i``'s transitions as ``(lo, hi, child)``; ``child == -1`` means the
    character is complete. Node 0 is the root; no node is both final and has transitions, as
    UTF-8 is prefix-free. An empty set has a root without transitions.
    """

    __slots__ = ("nodes",)

    def __init__(self, nodes: tuple[tuple[tuple[int, int, int], ...], ...]) -> None:
        self.nodes = nodes

    @property
    def is_empty(self) -> bool:
        return not self.nodes[0]

    def __len__(self) -> int:
        return len(self.nodes)


_TAIL: Ranges = ((0x80, iv.MAX_CODE_POINT),)


@lru_cache(maxsize=1024)
def _tail_dag(tail: Ranges) -> ByteDag:
    """The DAG of a class's non-ASCII part, shared by the classes that differ only in ASCII."""
    if tail == _TAIL:
        return _ANY_TAIL_DAG
    return _build_dag(tail)


@lru_cache(maxsize=4096)
def byte_dag(ranges: Ranges) -> ByteDag:
    """The minimal-ish UTF-8 DAG of a code point set (cached per set).

    Classes with the same non-ASCII part share its DAG (`_tail_dag`): classes such as `[\\w.-]`
    (`\\w` has ~700 ranges beyond ASCII) and the many "any character but these" of a schema's
    keys (`[^"\\\\ab]`: every character beyond ASCII) differ only in ASCII, which is one byte
    and one edge each.
    """
    if not ranges or ranges[-1][1] <= 0x7F:  # ASCII (digits, signs): an edge per range
        return ByteDag((tuple((lo, hi, -1) for lo, hi in ranges),))
    tail = iv.intersect(ranges, _TAIL)
    if tail and tail != ranges:
        shared = _tail_dag(tail)
        head = tuple((lo, hi, -1) for lo, hi in iv.intersect(ranges, ((0, 0x7F),)))
        # ASCII bytes end a character at once; the root is never a child (its edges read lead
        # bytes, every other node's continuation bytes), so the other nodes keep their ids
        return ByteDag((head + shared.nodes[0], *shared.nodes[1:]))
    return _build_dag(ranges)


def _build_dag(ranges: Ranges) -> ByteDag:
    # 1. a trie over the byte-range sequences (ranges on one level are equal or disjoint)
    trie: list[dict[tuple[int, int], int]] = [{}]
    for seq in utf8_sequences(ranges):
        node = 0
        for k, rng in enumerate(seq):
            last = k == len(seq) - 1
            child = trie[node].get(rng)
            if child is None:
                if last:
                    child = -1
                else:
                    child = len(trie)
                    trie.append({})
                trie[node][rng] = child
            node = child
    # 2. hash-cons bottom-up so equal suffixes become one node
    canon: dict[tuple[tuple[int, int, int], ...], int] = {}
    nodes: list[tuple[tuple[int, int, int], ...]] = []
    memo: dict[int, int] = {}

    def visit(n: int) -> int:
        if n in memo:
            return memo[n]
        sig = tuple(
            sorted((lo, hi, -1 if c == -1 else visit(c)) for (lo, hi), c in trie[n].items())
        )
        nid = canon.get(sig)
        if nid is None:
            nid = len(nodes)
            canon[sig] = nid
            nodes.append(sig)
        memo[n] = nid
        return nid

    root = visit(0)
    visit = None  # type: ignore[assignment]  # (it refers to itself: a cycle)
    # renumber so the root is 0
    order = [root] + [i for i in range(len(nodes)) if i != root]
    new_id = {old: new for new, old in enumerate(order)}
    renumbered = tuple(
        tuple((lo, hi, -1 if c == -1 else new_id[c]) for lo, hi, c in nodes[old]) for old in order
    )
    return ByteDag(renumbered)


#: every character beyond ASCII: the tail of most negated classes (`[^"\\]`, a JSON
#: string's character) and of `.`, a constant of UTF-8 made once per process (`clear_caches`
#: keeps it: rebuilding it cost ~60 µs of a cold compile)
_ANY_TAIL_DAG = _build_dag(_TAIL)
