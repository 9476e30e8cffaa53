"""The automata layer: regexes and string sets -> lazily built byte-level DFAs.

Pipeline: ``regex_syntax`` parses a regex dialect (Python ``re``, ECMA-262, Rust ``regex``;
``dialects.py``) into a flag-free AST; ``nfa`` expands it
into a trimmed byte NFA (code point sets become shared UTF-8 DAGs); ``dfa.ByteDFA`` runs the
subset construction lazily, one row per first visit. ``alternatives``/``literal`` build the DFA
of a finite set of byte strings directly, and ``intersect`` forms a lazy product with liveness
checks. See docs/design/automata.md.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from functools import partial

import numpy as np

from structgen.automata.chains import (
    chain_blocks,
    chain_fingerprint,
    chain_states,
    deferred_chain_dfa,
    literal_dfa,
)
from structgen.automata.counted import COUNT_ABOVE, compile_counted
from structgen.automata.dfa import (
    ByteDFA,
    DeferredNFASource,
    DifferenceSource,
    NFASource,
    ProductSource,
    TrieSource,
)
from structgen.automata.dialects import Dialect, DialectSpec, dialects_of
from structgen.automata.nfa import (
    NATIVE_ABOVE,
    AutomataLimits,
    Program,
    _thompson,
    build_nfa,
    leaf_pieces,
    nfa_size,
    node_program,
)
from structgen.automata.regex_syntax import (
    Alternation,
    CharClass,
    Concat,
    Difference,
    Empty,
    Node,
    Pattern,
    Repeat,
    SearchLanguage,
    String,
    UnsupportedRegexError,
    alternation,
    concat,
    literal_node,
    parse_regex,
    repeat,
    search_language,
)
from structgen.errors import LimitExceededError

__all__ = [
    "Alternation",
    "AutomataLimits",
    "ByteDFA",
    "CharClass",
    "Concat",
    "Dialect",
    "DialectSpec",
    "Difference",
    "Empty",
    "Node",
    "Pattern",
    "Repeat",
    "SearchLanguage",
    "String",
    "UnsupportedRegexError",
    "alternation",
    "alternatives",
    "chain_dfa",
    "compile_ast",
    "compile_regex",
    "concat",
    "dialects_of",
    "difference",
    "intersect",
    "intersect_all",
    "literal",
    "literal_node",
    "parse_regex",
    "repeat",
    "search_language",
]

_VERSION = "automata-1"
_DEFAULT_LIMITS = AutomataLimits()


def _digest(*parts: bytes) -> str:
    h = hashlib.sha256(_VERSION.encode())
    for part in parts:
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.hexdigest()


def compile_regex(
    pattern: str,
    *,
    ignore_case: bool = False,
    dotall: bool = False,
    dialect: DialectSpec = "python",
    limits: AutomataLimits | None = None,
) -> ByteDFA:
    """The DFA of the UTF-8 encodings of the strings ``re.fullmatch(pattern, s)`` accepts
    (in ``dialect``'s syntax and meaning; see ``dialects.py``).

    Raises ``RegexError`` (with the offset) for malformed or unsupported patterns and when the
    NFA would exceed ``limits.max_nfa_states``. Only the start state is built here.
    """
    flags = ("i" if ignore_case else "") + ("s" if dotall else "")
    node = parse_regex(pattern, flags=flags, dialect=dialect)
    names = ",".join(dialects_of(dialect))
    parts = [b"regex", flags.encode(), pattern.encode("utf-8", "surrogatepass")]
    if names != "python":  # the fingerprints of Python patterns stay what they were
        parts.append(names.encode())
    fingerprint = _digest(*parts)
    return compile_ast(node, limits=limits, fingerprint=fingerprint, pattern=pattern)


def compile_ast(
    node: Pattern,
    *,
    limits: AutomataLimits | None = None,
    fingerprint: str | Callable[[], str] | None = None,
    pattern: str | None = None,
    defer: bool = False,
) -> ByteDFA:
    """The DFA of an AST (e.g. a grammar terminal assembled from ``parse_regex`` pieces).

    ``fingerprint`` defaults to a digest of the AST (a chain's: of its blocks); a callable is
    called only for a node that is not a chain (a chain is fingerprinted by its blocks, with
    no walk of the AST); ``pattern`` names the source in errors.
    ``defer``: where it is safe, build the NFA only with the automaton's first row
    (`DeferredNFASource`; a grammar's terminals) — the limits are checked now all the same.
    """
    limits = limits or _DEFAULT_LIMITS
    if type(node) is String and not node.text:  # (the empty string: no leaf to spell it)
        node = Empty()
    if isinstance(node, Difference):
        parts = [compile_ast(p, limits=limits, pattern=pattern) for p in node.subtrahends]
        minuend = compile_ast(node.minuend, limits=limits, pattern=pattern)
        return difference(minuend, parts, limits=limits)
    given = None if callable(fingerprint) else fingerprint
    if defer and given is None and DEFER_CHAINS and LITERAL_DFAS:
        laid_out_later = deferred_chain_dfa(node, limits, _chain_limit(limits))
        if laid_out_later is not None:
            return laid_out_later
    chain = chain_dfa(node, limits=limits, fingerprint=given)
    if chain is not None:
        return chain
    if callable(fingerprint):
        fingerprint = fingerprint()
    # (a terminal's program is at hand from its fingerprint: its size without another walk;
    # else the program's digest is the fingerprint, as a terminal's is: no repr of the AST)
    program = node_program(node) if defer or fingerprint is None else None
    if fingerprint is None:
        assert program is not None
        fingerprint = program.digest.hex()
    size = nfa_size(node) if program is None else program.nfa_size
    if COUNT_ABOVE < size < limits.max_nfa_states:  # (over the limit: build_nfa says so)
        counted = compile_counted(
            node,
            lambda part: compile_ast(part, limits=limits, pattern=pattern),
            fingerprint=fingerprint,
            limits=limits,
        )
        if counted is not None:
            return counted
    where = pattern if pattern else "<regex AST>"
    if defer and program is not None:
        deferred = _deferred_source(node, program, size + 1, limits, where)
        if deferred is not None:
            return ByteDFA.unbuilt(deferred, fingerprint=fingerprint, limits=limits)
    nfa = build_nfa(node, max_states=limits.max_nfa_states, pattern=where)
    return ByteDFA(NFASource(nfa), fingerprint=fingerprint, limits=limits)


#: a chain of literals, classes and small choices (a JSON key's spellings) is built directly
#: (`chains.literal_dfa`), not through a regex program and NFA
LITERAL_DFAS = True
#: a deferred terminal (`compile_ast(..., defer=True)`) that is a chain (a keyword, a literal,
#: a key in its spellings) is laid out with its first row (`chains.DeferredChainSource`)
DEFER_CHAINS = True


def chain_dfa(
    node: Node, *, limits: AutomataLimits | None = None, fingerprint: str | None = None
) -> ByteDFA | None:
    """The DFA of `node` built directly when it is a chain of literals, classes and small
    choices (`chains.py`: a literal, a keyword, a JSON key in all its spellings), else None.
    ``fingerprint`` defaults to the chain's own (`chain_fingerprint`: no walk of the AST)."""
    if not LITERAL_DFAS:
        return None
    limits = limits or _DEFAULT_LIMITS
    blocks = chain_blocks(node)
    if blocks is None or chain_states(blocks) >= _chain_limit(limits):
        return None
    if fingerprint is None:
        fingerprint = chain_fingerprint(blocks)
    return literal_dfa(blocks, fingerprint=fingerprint, limits=limits)


def _chain_limit(limits: AutomataLimits) -> int:
    return min(limits.max_dfa_states, limits.max_nfa_states)


def _deferred_source(
    node: Node, program: Program, states: int, limits: AutomataLimits, pattern: str
) -> DeferredNFASource | None:
    """A deferred source for `node`, or None where building now is needed: an NFA the C
    builder would not make (small ones are built in Python, which skips `x{0}`'s leaves: the
    byte classes read from the program's leaves must be the NFA's), a language that may be
    empty (a leaf with no UTF-8 spelling, an empty alternation), or one over the size limit
    (build_nfa says so now)."""
    if states <= NATIVE_ABOVE or _thompson() is None:
        return None
    if program.empty_alternation:
        return None
    leaves = leaf_pieces(program)
    if leaves.has_empty_leaf or states + sum(leaves.sizes) > limits.max_nfa_states:
        return None
    build = partial(
        build_nfa, node, max_states=limits.max_nfa_states, pattern=pattern, program=program
    )
    return DeferredNFASource(build, leaves.ranges, program.nullable, program)


def literal(data: bytes, *, limits: AutomataLimits | None = None) -> ByteDFA:
    """The DFA accepting exactly ``data`` (any bytes, not necessarily UTF-8)."""
    return _string_set([bytes(data)], _digest(b"literal", bytes(data)), limits)


def alternatives(options: Iterable[bytes], *, limits: AutomataLimits | None = None) -> ByteDFA:
    """The DFA accepting exactly the given byte strings (an empty list: the empty language).

    Cost is one sort of the options; rows are found by binary search on first visit. The total
    option length counts against ``limits.max_nfa_states`` (``LimitExceededError``).
    """
    opts = sorted({bytes(o) for o in options})
    parts = [b"alternatives", len(opts).to_bytes(8, "little")]
    h = hashlib.sha256()
    for o in opts:
        h.update(len(o).to_bytes(8, "little"))
        h.update(o)
    parts.append(h.digest())
    return _string_set(opts, _digest(*parts), limits)


def _string_set(opts: Sequence[bytes], fingerprint: str, limits: AutomataLimits | None) -> ByteDFA:
    limits = limits or _DEFAULT_LIMITS
    total = 1 + sum(len(o) for o in opts)
    if total > limits.max_nfa_states:
        raise LimitExceededError(
            f"the options total {total - 1} bytes, more than the automaton size limit",
            limit="max_nfa_states",
            value=limits.max_nfa_states,
        )
    return ByteDFA(TrieSource(opts), fingerprint=fingerprint, limits=limits)


def intersect(a: ByteDFA, b: ByteDFA, *, limits: AutomataLimits | None = None) -> ByteDFA:
    """The lazy product DFA accepting the byte strings both ``a`` and ``b`` accept.

    Product states are created only when they can still reach acceptance (a memoised search
    bounded by ``limits.max_dfa_states``), so the result keeps the "every state is live"
    guarantee; ``is_empty`` tells whether the intersection is empty. A product's components
    are taken over (products are flattened), so a chain of intersections is one search.
    """
    return intersect_all([a, b], limits=limits)


def intersect_all(dfas: Sequence[ByteDFA], *, limits: AutomataLimits | None = None) -> ByteDFA:
    """``intersect`` over several automata at once (one liveness check, not one per step)."""
    if len(dfas) == 1:
        return dfas[0]
    limits = limits or _DEFAULT_LIMITS
    fingerprint = dfas[0].fingerprint
    for dfa in dfas[1:]:  # (the fingerprint of the chain of pairwise intersections)
        fingerprint = _digest(b"intersect", fingerprint.encode(), dfa.fingerprint.encode())
    parts = [part for dfa in dfas for part in _product_parts(dfa)]
    # the same language twice adds nothing but work (``allOf`` branches often repeat one)
    by_fingerprint: dict[str, ByteDFA] = {}
    for part in parts:
        by_fingerprint.setdefault(part.fingerprint, part)
    unique = list(by_fingerprint.values())
    if len(unique) == 1:
        return unique[0]
    source = ProductSource(unique, limits.max_dfa_states)
    return ByteDFA(source, fingerprint=fingerprint, limits=limits)


def difference(
    minuend: ByteDFA, subtrahends: Sequence[ByteDFA], *, limits: AutomataLimits | None = None
) -> ByteDFA:
    """The lazy DFA of the texts `minuend` accepts and no subtrahend does (`DifferenceSource`):
    an object's "any other key" is any quoted string but its declared names, run beside them
    instead of spelled as a trie of everything that leaves them.

    Exact where `minuend` has infinitely many texts after every state with a transition and
    accepts in every state without one, and each subtrahend's language is finite: checked
    here (the minuend is built whole, a subtrahend that is not a chain of literals too);
    raises ``ValueError`` otherwise.
    """
    limits = limits or _DEFAULT_LIMITS
    if not _open_ended(minuend):
        raise ValueError("the minuend must have an infinite future from every state with a move")
    for part in subtrahends:
        if not _finite(part):
            raise ValueError("a subtrahend's language must be finite")
    fingerprint = _digest(
        b"difference", minuend.fingerprint.encode(), *(p.fingerprint.encode() for p in subtrahends)
    )
    source = DifferenceSource([minuend, *subtrahends])
    return ByteDFA(source, fingerprint=fingerprint, limits=limits)


def _successors(dfa: ByteDFA) -> list[set[int]]:
    """Every state's targets, the automaton built whole (bounded by its limits)."""
    count = dfa.build_all()
    return [set(np.unique(dfa.row(s)).tolist()) - {-1} for s in range(count)]


def _finite_futures(succ: list[set[int]]) -> set[int]:
    """The states with finitely many texts after them (every state live): those whose every
    target has a finite future, from the states without a move up."""
    finite = {s for s, out in enumerate(succ) if not out}
    grew = True
    while grew:
        grew = False
        for s, out in enumerate(succ):
            if s not in finite and out <= finite:
                finite.add(s)
                grew = True
    return finite


def _open_ended(dfa: ByteDFA) -> bool:
    """Whether every state with a move has infinitely many texts after it and every state
    without one accepts (memoised on the automaton: the minuends are few and shared)."""
    known: bool | None = getattr(dfa, "_open_ended", None)
    if known is None:
        succ = _successors(dfa)
        known = all(not succ[s] and dfa.is_accepting(s) for s in _finite_futures(succ))
        dfa._open_ended = known  # type: ignore[attr-defined]
    return known


def _finite(dfa: ByteDFA) -> bool:
    """Whether the language is finite: a chain of literals is; else the start's future."""
    if dfa._source.finite:  # (a chain, laid out or deferred)
        return True
    return dfa.start in _finite_futures(_successors(dfa))


def _product_parts(dfa: ByteDFA) -> Sequence[ByteDFA]:
    source = dfa._source
    return source.parts if isinstance(source, ProductSource) else (dfa,)
