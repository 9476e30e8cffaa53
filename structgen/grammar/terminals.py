"""Terminal automata: each grammar terminal's lazy DFA (its pattern, intersected with the
patterns it must also match), built once and shared by every grammar alive that has the same
terminal. The frontends (schema satisfiability, EBNF lexeme inference) and the grammar engine
all take them from here."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from structgen._budget import compile_number, forget_on_failure, keep_alive, undo_on_failure
from structgen._lru import LRU
from structgen._weakmap import WeakValues
from structgen.automata import (
    AutomataLimits,
    ByteDFA,
    Difference,
    Pattern,
    compile_ast,
    difference,
    intersect_all,
)
from structgen.grammar.ir import TerminalDef, node_digest

__all__ = [
    "build_terminal_dfa",
    "clear_terminal_automata",
    "live_or_restored_dfa",
    "live_terminal_dfa",
    "terminal_dfa",
]

#: the terminal automata built or used last stay alive after the grammars that used them are
#: gone, up to this many bytes (estimated: `ByteDFA.memory_bytes`) ...
RECENT_TERMINAL_BYTES = 32 * 2**20
#: ... and this many automata
RECENT_TERMINALS = 4096
#: ... each of at most this many bytes when re-weighed: one that grew past it (a long counted
#: string's or a product's rows built by the masks) leaves the recent ones alone rather than
#: pushing out hundreds of small ones (keys), each freed inside a later compile. MaskBench, side
#: by side: TTFM p90 -2 to -7% (p99 -4 to -14%) without instances, -0.5 to -3% with them.
RECENT_TERMINAL_MAX_BYTES = 2**19
#: a terminal joins the recent ones only when a later compile uses it again (its key among the
#: last this many built or used): most of a schema's own keys never are, and each one admitted
#: pushed an older one out (freed inside the compile) and paid for re-weighing others; see
#: `_come_back`
SEEN_TERMINALS = 16384
#: a terminal's NFA is built with its automaton's first row where that is safe (the lexer
#: reads most terminals late or never; see `DeferredNFASource`)
DEFER_NFAS = True

# Weak: an automaton lives while a grammar (cached or held by the user) uses it, and every
# grammar alive shares it; the byte budget of the compiled-grammar cache bounds the total.
_TERMINAL_DFAS: WeakValues[tuple[Any, ...], ByteDFA] = WeakValues()
# The same automata by fingerprint (a digest of the terminal's patterns): how grammars loaded
# from the compile cache, which do not read their patterns, find the ones alive.
_BY_FINGERPRINT: WeakValues[tuple[Any, ...], ByteDFA] = WeakValues()
_TERMINAL_LOCK = threading.Lock()
# The hashes of the keys of the terminals built or used last, oldest first, each with the number
# of the compile that last did (`_come_back`).
_SEEN: dict[int, int] = {}
# ... and the most recently built or used ones are held strongly: the same terminals (a number,
# an integer range, a string of some length, the keys "name", "type", "id") come back schema
# after schema, and between two compiles nothing else may hold them. Bounded by bytes, not by
# count: a key's automaton is ~25 kB, a pattern's can be megabytes. Across MaskBench's 2,823
# schemas 32 MiB (~1,000 automata; ~1,250 with one table row per key state) cut the mean
# compile + first mask by ~10% against 64 automata (fewer rebuilt, and those found have their
# rows built already).
_RECENT: LRU[tuple[Any, ...], ByteDFA] = LRU(
    RECENT_TERMINALS,
    max_weight=RECENT_TERMINAL_BYTES,
    weigh=lambda dfa: dfa.memory_bytes(),
    max_entry_weight=RECENT_TERMINAL_MAX_BYTES,
)


def clear_terminal_automata() -> None:
    """Forget every shared terminal automaton — both indexes and the recent ones (a lookup
    reads those first) —: the next compiles build their terminals afresh."""
    with _TERMINAL_LOCK:
        _TERMINAL_DFAS.clear()
        _BY_FINGERPRINT.clear()
        _SEEN.clear()
    _RECENT.clear()


def terminal_dfa(terminal: TerminalDef, limits: AutomataLimits) -> ByteDFA:
    """The terminal's lazy DFA, shared by every grammar that has the same terminal.

    Terminals repeat across grammars (JSON strings, numbers, whitespace runs), and a shared
    DFA keeps the rows already built.
    """
    # Keyed by structure: AST nodes cache their hash and share subtrees, so equal terminals
    # from different schemas (number ranges, formats, keys) find the same automaton cheaply.
    key = (terminal.pattern, terminal.intersect, limits)
    hit = _RECENT.get(key)  # (no lock: most terminals are among the recent ones)
    if hit is not None:
        keep_alive(hit)
        return hit
    hit = _live(_TERMINAL_DFAS, key)
    if hit is not None:
        return hit
    dfa = build_terminal_dfa(terminal, limits)
    return _share(_TERMINAL_DFAS, key, dfa)


def build_terminal_dfa(terminal: TerminalDef, limits: AutomataLimits) -> ByteDFA:
    """A new lazy DFA of the terminal (not shared: `terminal_dfa` is the cached way)."""
    where = f"terminal {terminal.name}"
    if isinstance(terminal.pattern, Difference) and not terminal.intersect:
        return _difference_dfa(terminal.pattern, limits)
    if not terminal.intersect:
        # (a key, a literal: a chain, fingerprinted by its blocks without digesting the AST)
        return compile_ast(
            terminal.pattern,
            limits=limits,
            pattern=where,
            fingerprint=lambda: node_digest(terminal.pattern).hex(),
            defer=DEFER_NFAS,
        )
    parts = [terminal.pattern, *terminal.intersect]
    return intersect_all([_component_dfa(p, limits, where) for p in parts], limits=limits)


def _difference_dfa(node: Difference, limits: AutomataLimits) -> ByteDFA:
    """A difference over the shared automata of its parts: an object's "any other key" runs
    beside the automata its declared keys' terminals have already (no walk of the parts)."""
    parts = [terminal_dfa(TerminalDef("", p), limits) for p in (node.minuend, *node.subtrahends)]
    return difference(parts[0], parts[1:], limits=limits)


def _component_dfa(node: Pattern, limits: AutomataLimits, where: str) -> ByteDFA:
    """An intersected constraint's automaton, shared by fingerprint: the branches of a schema's
    `anyOf`s repeat the same lengths and patterns in many terminals, whose products then share
    the components' rows and their distance tables (`ProductSource`)."""
    if isinstance(node, Difference):
        return _difference_dfa(node, limits)
    fingerprint = node_digest(node).hex()
    live = live_terminal_dfa(fingerprint, limits)
    if live is not None:
        return live
    dfa = compile_ast(node, limits=limits, pattern=where, fingerprint=fingerprint)
    return _share(_BY_FINGERPRINT, (dfa.fingerprint, dfa.limits), dfa)


def live_terminal_dfa(fingerprint: str, limits: AutomataLimits) -> ByteDFA | None:
    """The shared automaton with this fingerprint, if one is alive (then held through the
    compile, and among the recent ones when it comes back, as `terminal_dfa` holds what it
    finds)."""
    return _live(_BY_FINGERPRINT, (fingerprint, limits))


def _live(cache: WeakValues[tuple[Any, ...], ByteDFA], key: tuple[Any, ...]) -> ByteDFA | None:
    """The automaton alive in `cache` under `key`, if any: held through the compile, and among
    the recent ones when it comes back (`_come_back`)."""
    with _TERMINAL_LOCK:
        hit = cache.get(key)
        admit = hit is not None and _come_back(key)
    if hit is not None:
        keep_alive(hit)
        if admit:
            _RECENT.put(key, hit)
    return hit


def live_or_restored_dfa(
    fingerprint: str, limits: AutomataLimits, restore: Callable[[], ByteDFA]
) -> ByteDFA:
    """The live shared automaton with this fingerprint (the same language: it may have more
    rows built), else `restore()` (a compile-cache file's), which becomes the shared one for
    later loads."""
    hit = live_terminal_dfa(fingerprint, limits)
    return hit if hit is not None else _share(_BY_FINGERPRINT, (fingerprint, limits), restore())


def _share(
    cache: WeakValues[tuple[Any, ...], ByteDFA],
    key: tuple[Any, ...],
    dfa: ByteDFA,
) -> ByteDFA:
    """The automaton `cache` holds under `key`, else `dfa` put there (and by fingerprint),
    kept alive through the compile, and among the recent ones when it comes back (`_come_back`);
    taken out if it fails."""
    with _TERMINAL_LOCK:
        found = cache.setdefault(key, dfa)
        _BY_FINGERPRINT.setdefault((found.fingerprint, found.limits), found)
        admit = _come_back(key)
    keep_alive(found)
    if admit:
        _RECENT.put(key, found)
        undo_on_failure(lambda: _RECENT.discard(key))
    forget_on_failure(cache, _TERMINAL_LOCK, key)
    return found


def _come_back(key: tuple[Any, ...]) -> bool:
    """Whether the terminal of `key`, built or found now, was built or used by an earlier
    compile too (its key's hash among the last `SEEN_TERMINALS`: a collision admits one early,
    which is harmless); it is remembered as this compile's either way. Under the lock.

    The recent terminals hold what the next schemas reuse: a JSON string, a number, the keys
    "name" and "id". Most of a schema's own keys and patterns never come back — a key repeated
    inside one schema is no sign that another has it — and admitting each cost the compile that
    built it an older automaton pushed out (freed there) and a few re-weighed (`LRU`): ~22 µs
    per terminal, a tenth of MaskBench's mean compile. Those not admitted live as long as their
    grammar and are freed with it."""
    seen = hash(key)
    now = compile_number()
    before = _SEEN.pop(seen, None)
    _SEEN[seen] = now  # (the newest last)
    if before is None:
        if len(_SEEN) > SEEN_TERMINALS:
            del _SEEN[next(iter(_SEEN))]
        return False
    return before != now or now == 0  # (outside a compile: the second use)
