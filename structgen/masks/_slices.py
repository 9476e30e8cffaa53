"""Token slices: groups of tokens that an unconstrained context allows all at once.

Large masks are the slow ones: inside a JSON string or an identifier nearly every token is
allowed, and the trie walk visits most of the vocabulary's nodes to find that out. So the
vocabulary is split once into *slices* — tokens made only of JSON string characters (no `"`,
`\\` or control characters), only of word characters, only of lowercase letters, or of a
space then lowercase letters, each by byte length — and the rest. A lexer state that keeps
every string of a slice alive (up to the slice's longest token) allows every token of it: its
precomputed mask is ORed in and only the other slices' tries are walked (`NativeWalk` lays the
vocabulary out as one trie per slice, beside the plain trie). The check
(`sg_contained_groups`, C) is a breadth-first search over pairs (DFA state, slice automaton
state) and costs microseconds; the walk it saves visits up to 270k trie nodes.

The same idea as llguidance's "slicer"; see docs/design/token-slices.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["DEFAULT_SLICES", "SlicePlan", "TokenSlice", "forest_order", "plan_slices"]


@dataclass(frozen=True)
class TokenSlice:
    """Tokens made of `lead` (a literal, usually empty) then characters that all belong to
    `char_class` (a regex class), at most `max_bytes` bytes long (None: any length). `rank`
    orders classes by inclusion: a class contains every class of a lower rank, so a state that
    allows a slice allows every slice of lower rank with the same lead (or with a lead made of
    the class's characters), and no more bytes."""

    char_class: str
    rank: int
    max_bytes: int | None
    lead: str = ""

    @property
    def language(self) -> str:
        """The regex of the strings whose prefixes the slice's check keeps alive."""
        return f"{re.escape(self.lead)}(?:{self.char_class})*"

    def contains(self, other: TokenSlice) -> bool:
        """Every string of `other`'s language is one of this slice's."""
        if other.rank > self.rank:
            return False
        if other.lead == self.lead:
            return True
        return not self.lead and re.fullmatch(f"(?:{self.char_class})*", other.lead) is not None


_LOWER = r"[a-z]"
_WORD = r"[A-Za-z0-9_]"
_JSON = r'[^"\\\x00-\x1f\x7f]'

#: The default slices, in claiming order: a token joins the first one it fits.
#: (By byte length: a string with `maxLength` allows the short ones first; and proving a slice
#: costs a search as deep as its longest token, where the few tokens over 16 bytes would cost
#: the most — they are a slice of their own.)
DEFAULT_SLICES: tuple[TokenSlice, ...] = (
    TokenSlice(_LOWER, 0, 4),
    TokenSlice(_LOWER, 0, 8),
    TokenSlice(_LOWER, 0, 16),
    TokenSlice(_LOWER, 0, 4, " "),
    TokenSlice(_LOWER, 0, 8, " "),
    TokenSlice(_LOWER, 0, 16, " "),
    TokenSlice(_WORD, 1, 4),
    TokenSlice(_WORD, 1, 8),
    TokenSlice(_WORD, 1, 16),
    TokenSlice(_JSON, 2, 4),
    TokenSlice(_JSON, 2, 8),
    TokenSlice(_JSON, 2, 16),
    TokenSlice(_JSON, 2, None),
)
#: the most groups a forest may have (slices plus the rest; `SG_MAX_GROUPS` in _native.c)
MAX_GROUPS = 16


@dataclass
class SlicePlan:
    """The vocabulary's split into groups (one per non-empty slice, then the rest) and the
    tables `sg_contained_groups` checks them with."""

    #: group of each token, in the trie's lexicographic order; `n_groups - 1` is the rest
    group: npt.NDArray[np.int32]
    n_groups: int
    #: the slice automata as one CSR of live bytes per state
    u_start: npt.NDArray[np.int64]
    u_byte: npt.NDArray[np.uint8]
    u_next: npt.NDArray[np.int32]
    #: the checks, in order: start state, byte bound, groups implied, own group
    check_u0: npt.NDArray[np.int32]
    check_len: npt.NDArray[np.int32]
    check_implies: npt.NDArray[np.int64]
    check_group: npt.NDArray[np.int32]
    #: check 0 is the floor, the check most others imply: its failure skips those
    floor: bool


def _slice_automaton(language: str) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.bool_]]:
    """The full transition table (-1: dead) of a slice's language (`lead(?:class)*`) over
    UTF-8 bytes (state 0 starts) and its accepting states."""
    from structgen.automata import compile_regex  # (the automata layer imports masks lazily)

    dfa = compile_regex(language)
    dfa.build_all()
    return np.array(dfa.table, dtype=np.int32), np.array(dfa.accepting, dtype=np.bool_)


def plan_slices(lex: dict[str, npt.NDArray[Any]], slices: tuple[TokenSlice, ...]) -> SlicePlan:
    """Assign each token (lexicographic order) to the first slice it fits, or to the rest."""
    if len(slices) >= MAX_GROUPS:
        raise ValueError(f"at most {MAX_GROUPS - 1} token slices")
    lengths = lex["lengths"].astype(np.int64)
    offsets = lex["offsets"].astype(np.int64)
    blob = lex["blob"]
    n = len(lengths)
    max_len = int(lengths.max()) if n else 0
    tables: dict[str, tuple[int, npt.NDArray[np.int32]]] = {}  # class: (first state, table)
    accepting: dict[str, npt.NDArray[np.bool_]] = {}
    parts = []  # the same tables with their states numbered after the previous ones'
    base = 0
    for sl in slices:
        if sl.language not in tables:
            table, accepting[sl.language] = _slice_automaton(sl.language)
            tables[sl.language] = (base, table)
            parts.append(np.where(table >= 0, table + base, -1))
            base += len(table)
    # Which tokens are strings of each class: run every class automaton over all tokens at once.
    in_class: dict[str, npt.NDArray[np.bool_]] = {}
    for cls, (_, table) in tables.items():
        state = np.zeros(n, dtype=np.int32)
        for k in range(max_len):
            live = np.flatnonzero((lengths > k) & (state >= 0))
            if not len(live):
                break
            state[live] = table[state[live], blob[offsets[live] + k]]
        in_class[cls] = (state >= 0) & accepting[cls][np.maximum(state, 0)] & (lengths > 0)
    rest = len(slices)
    group = np.full(n, rest, dtype=np.int32)
    for i, sl in enumerate(slices):
        fits = in_class[sl.language] & (group == rest) & (lengths > len(sl.lead.encode()))
        if sl.max_bytes is not None:
            fits &= lengths <= sl.max_bytes
        group[fits] = i
    # Drop empty slices; renumber groups densely (the rest last).
    used = [i for i in range(len(slices)) if (group == i).any()]
    renumber = np.full(len(slices) + 1, len(used), dtype=np.int32)
    renumber[used] = np.arange(len(used), dtype=np.int32)
    group = renumber[group]
    longest = [int(lengths[group == g].max()) for g in range(len(used))]
    ranks = [slices[i].rank for i in used]

    def implies(a: int, b: int) -> bool:  # a's check covers b's tokens
        return slices[used[a]].contains(slices[used[b]]) and longest[b] <= longest[a]

    order = sorted(range(len(used)), key=lambda g: (-ranks[g], -longest[g]))
    # the floor: the check most others imply (its failure skips them), if any other does
    implied_by = [sum(implies(o, g) for o in order if o != g) for g in range(len(used))]
    floor = max(range(len(used)), key=implied_by.__getitem__, default=None)
    if floor is not None and not implied_by[floor]:
        floor = None
    if floor is not None:
        order.remove(floor)
        order.insert(0, floor)
    table = np.concatenate(parts) if parts else np.zeros((0, 256), dtype=np.int32)
    moves = table >= 0
    u_start = np.zeros(len(table) + 1, dtype=np.int64)
    u_start[1:] = np.cumsum(moves.sum(axis=1))
    rows, cols = np.nonzero(moves)
    u_next = table[rows, cols].astype(np.int32)
    return SlicePlan(
        group=group,
        n_groups=len(used) + 1,
        u_start=u_start,
        u_byte=cols.astype(np.uint8),
        u_next=u_next,
        check_u0=np.array([tables[slices[used[g]].language][0] for g in order], np.int32),
        check_len=np.array([longest[g] for g in order], dtype=np.int32),
        check_implies=np.array(
            [sum(1 << b for b in range(len(used)) if implies(g, b)) for g in order], np.int64
        ),
        check_group=np.array(order, dtype=np.int32),
        floor=floor is not None,
    )


def forest_order(
    lex: dict[str, npt.NDArray[Any]], group: npt.NDArray[np.int32]
) -> tuple[dict[str, npt.NDArray[Any]], npt.NDArray[np.int64]]:
    """The tokens regrouped (group by group, lexicographic inside each) with their common-prefix
    lengths recomputed, so `trie_nodes` lays out one trie per group one after another; and the
    first token of each group (plus the end)."""
    # Empty tokens end at no node (the trie leaves them out today): should one come, it goes
    # first, in no group, as in the plain layout, so no node's token range takes it in.
    key = np.where(lex["lengths"] > 0, group, -1)
    order = np.argsort(key, kind="stable")
    n = len(order)
    lengths = lex["lengths"][order]
    # Original neighbour prefixes, with a sentinel so every window below ends inside the array.
    lcp_sorted = np.append(lex["lcp"].astype(np.int64), 0)
    lcp = np.zeros(n, dtype=np.int64)
    grouped = key[order]
    for g in np.unique(grouped[grouped >= 0]).tolist():
        pos = np.flatnonzero(grouped == g)  # this group's slots in the new order
        if len(pos) < 2:
            continue
        # Its tokens' lexicographic positions p_0 < p_1 < ...: consecutive ones share the
        # minimum of the original neighbour prefixes over (p_{i-1}, p_i]; the windows are
        # contiguous, so one reduceat computes them all. A group's first token shares nothing.
        members = order[pos]
        lcp[pos[1:]] = np.minimum.reduceat(lcp_sorted, members + 1)[:-1]
    lcp = np.minimum(lcp, lengths)
    offsets = lex["offsets"].astype(np.int64)[order]
    new_offsets = np.zeros(n, dtype=np.int64)
    if n:
        new_offsets[1:] = np.cumsum(lengths[:-1], dtype=np.int64)
    total = int(lengths.sum())
    source = np.repeat(offsets - new_offsets, lengths) + np.arange(total, dtype=np.int64)
    blob = lex["blob"][source]
    bounds = np.searchsorted(grouped, np.arange(int(group.max(initial=0)) + 2))
    return (
        {
            "ids": lex["ids"][order],
            "lengths": lengths,
            "lcp": lcp.astype(np.int32),
            "offsets": new_offsets,
            "blob": np.ascontiguousarray(blob, dtype=np.uint8),
        },
        bounds.astype(np.int64),
    )
