"""An incremental, persistent Earley recogniser over terminal symbols.

Any context-free grammar works — ambiguous, left- or right-recursive, with empty rules — which
is why structgen uses Earley rather than LR. Each `EarleySet` is immutable once built and points
at the sets its items started in, so a parse state is just a reference to its latest set: copying
a matcher or rolling it back costs nothing. Scanning the same terminals from the same set returns
the same child set (memoised weakly), so sequences that share a prefix share their parse.

Empty rules follow Aycock & Horspool: predicting a nullable nonterminal also advances over it.
See docs/design/context-free.md.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Collection, Iterable
from itertools import chain
from operator import itemgetter
from typing import Any

import numpy as np
import numpy.typing as npt

from structgen.automata.nfa import extension_module
from structgen.errors import GrammarError
from structgen.grammar.ir import Grammar, Rule

__all__ = ["EarleyGrammar", "EarleySet"]

Item = tuple[int, int, "EarleySet"]  # (rule id, dot position, origin set)
#: predicted items by next symbol as (rule id, dot) pairs, and the terminals among the symbols
Prediction = tuple[dict[int, tuple[tuple[int, int], ...]], frozenset[int]]


#: the C loops of `EarleySet` (`_earley.c`: `closure`, `scan_kernel`), or None: not built, or
#: switched off with STRUCTGEN_NATIVE=0 (then the Python loops below run; same sets)
_NATIVE = extension_module("structgen.grammar._earley")
#: whether the C loop also predicts (`predicts_of`, `prediction` in C over the same memos)
_NATIVE_PREDICTION = _NATIVE is not None and hasattr(_NATIVE, "prediction")
#: `EarleyGrammar._finish`'s rules by left-hand side in C, or None
_RULES_BY_LHS = getattr(_NATIVE, "rules_by_lhs", None)
#: `_rules_of_arrays` in C (a load's first step reads hundreds of rules), or None
_RULES_OF_ARRAYS = getattr(_NATIVE, "rules_of_arrays", None)
_INT32 = np.dtype(np.int32)


def known_closure(rules: list[Any], known: set[Any]) -> list[int]:
    """Add to `known` every left-hand side with a rule whose symbols are all known, until
    nothing changes (the productive symbols from the usable terminals, the nullable ones from
    nothing); returns the indices of the rules left with a symbol not known (the dead ones).
    Rules are `(lhs, rhs)` pairs or `ir.Rule`s. Linear in the grammar: each rule counts its
    symbols not yet known, and a symbol that becomes known counts down the rules that wait on
    it. In C where built (`_earley.c`: a large schema's grammar has thousands of rules); the
    schema emitter's dead-rule check and the Earley tables both ask here."""
    if _NATIVE is not None:
        dead: list[int] = _NATIVE.known_closure(rules, known)
        return dead
    pairs = [rule if type(rule) is tuple else (rule.lhs, rule.rhs) for rule in rules]
    waiting = [0] * len(pairs)
    users: dict[Any, list[int]] = {}
    ready = []
    for rid, (lhs, rhs) in enumerate(pairs):
        for sym in rhs:  # (a symbol the rule names twice is counted, and counted down, twice)
            if sym not in known:
                waiting[rid] += 1
                users.setdefault(sym, []).append(rid)
        if not waiting[rid]:
            ready.append(lhs)
    while ready:
        symbol = ready.pop()
        if symbol in known:
            continue
        known.add(symbol)
        for rid in users.get(symbol, ()):
            waiting[rid] -= 1
            if not waiting[rid]:
                ready.append(pairs[rid][0])
    return [rid for rid, left in enumerate(waiting) if left]


def _closure(rules: list[tuple[int, tuple[int, ...]]], known: set[int]) -> set[int]:
    """`known` closed under the rules (`known_closure`)."""
    known_closure(rules, known)
    return known


#: numbered rules: (left-hand side, right-hand side)
Rules = list[tuple[int, tuple[int, ...]]]


def _rules_of_lists(entries: Any, terminals: int, symbols: int) -> Rules:
    """`from_tables`'s rules from JSON lists, checked (`ValueError`)."""
    if not isinstance(entries, list) or not entries:
        raise ValueError("the first rule is the start rule")
    if set(map(type, entries)) != {list} or not all(entries):
        raise ValueError("a rule is a non-empty list of symbols")
    flat = list(chain.from_iterable(entries))  # (checked in C-level passes)
    if set(map(type, flat)) != {int} or min(flat) < 0 or max(flat) >= symbols:
        raise ValueError("a rule's symbols are out of range")
    if min(map(itemgetter(0), entries)) < terminals:
        raise ValueError("a rule's left-hand side is a terminal")
    return [(entry[0], tuple(entry[1:])) for entry in entries]


def _rules_of_arrays(
    flat: npt.NDArray[np.int32], sizes: npt.NDArray[np.int32], terminals: int, symbols: int
) -> Rules:
    """`from_tables`'s rules from `rule_arrays`, checked (`ValueError`) in array passes (in C
    where built: the same checks and messages)."""
    if flat.ndim != 1 or sizes.ndim != 1 or not len(sizes):
        raise ValueError("the first rule is the start rule")
    if (
        _RULES_OF_ARRAYS is not None
        and flat.dtype == _INT32
        and sizes.dtype == _INT32
        and flat.flags.c_contiguous
        and sizes.flags.c_contiguous
    ):
        rules: Rules = _RULES_OF_ARRAYS(flat, sizes, terminals, symbols)
        return rules
    ends = np.cumsum(sizes, dtype=np.int64)
    if sizes.min() < 1 or ends[-1] != len(flat):
        raise ValueError("a rule is a non-empty list of symbols")
    if flat.min() < 0 or flat.max() >= symbols:
        raise ValueError("a rule's symbols are out of range")
    starts = ends - sizes
    if flat[starts].min() < terminals:
        raise ValueError("a rule's left-hand side is a terminal")
    values = flat.tolist()
    return [(values[a], tuple(values[a + 1 : b])) for a, b in zip(starts.tolist(), ends.tolist())]


class EarleyGrammar:
    """The IR grammar with symbols numbered: terminals `0..T-1`, nonterminals `T..`.

    Unproductive rules (ones that can never derive a terminal string) are dropped so that every
    item the parser predicts can still be completed.
    """

    def __init__(self, grammar: Grammar, *, usable_terminals: Iterable[str] | None = None) -> None:
        names = [t.name for t in grammar.terminals]
        if len(set(names)) != len(names):
            raise GrammarError("terminal names must be unique")
        self.terminal_names: list[str] = names
        terminal_ids = {n: i for i, n in enumerate(names)}
        usable = set(names if usable_terminals is None else usable_terminals)
        lhs_names = sorted({r.lhs for r in grammar.rules})
        clash = set(lhs_names) & set(names)
        if clash:
            raise GrammarError(f"{sorted(clash)[0]!r} is both a rule and a terminal")
        start_name = "$start"
        nonterminals = [start_name, *lhs_names]
        nt_ids = {n: len(names) + i for i, n in enumerate(nonterminals)}
        ids = nt_ids | terminal_ids  # (a name in both is a terminal, as below)
        self.num_terminals = len(names)
        self.nonterminal_names = nonterminals
        if grammar.start not in nt_ids:
            raise GrammarError(f"the start rule {grammar.start!r} is not defined")
        raw: list[tuple[int, tuple[int, ...]]] = [(nt_ids[start_name], (nt_ids[grammar.start],))]
        numbered = None if _NATIVE is None else _NATIVE.number_rules(grammar.rules, ids)
        if numbered is not None:
            raw += numbered
        else:  # (no C, or a symbol that is not defined: this loop says which)
            for rule in grammar.rules:
                symbols: list[int] = []
                for sym in rule.rhs:
                    if sym in terminal_ids:
                        symbols.append(terminal_ids[sym])
                    elif sym in nt_ids:
                        symbols.append(nt_ids[sym])
                    else:
                        raise GrammarError(f"rule {rule.lhs!r} uses {sym!r}, which is not defined")
                raw.append((nt_ids[rule.lhs], tuple(symbols)))
        #: every rule as numbered, the start rule first (what `tables` writes), and the
        #: indices of those left out (unproductive)
        self.all_rules = raw
        if grammar.productive and usable.issuperset(names):
            # (a grammar the schema frontend checked, every terminal usable: nothing to drop)
            self.unproductive = []
            self.rules: list[tuple[int, tuple[int, ...]]] = raw
        else:
            productive = _closure(raw, {terminal_ids[n] for n in names if n in usable})
            if nt_ids[start_name] not in productive:
                raise GrammarError(
                    f"the grammar's language is empty: rule {grammar.start!r} derives no"
                    " finite text"
                )
            keep = [lhs in productive and all(s in productive for s in rhs) for lhs, rhs in raw]
            self.unproductive = [i for i, kept in enumerate(keep) if not kept]
            self.rules = [r for r, k in zip(raw, keep) if k]
        self._finish(frozenset(_closure(self.rules, set())))

    def tables(self) -> dict[str, Any]:
        """The numbered grammar as JSON data, for the compile cache (`from_tables`)."""
        return {
            "terminals": self.terminal_names,
            "nonterminals": self.nonterminal_names,
            "rules": [[lhs, *rhs] for lhs, rhs in self.all_rules],
            "unproductive": self.unproductive,
            "nullable": sorted(self.nullable),
        }

    def ir_rules(self) -> tuple[str, tuple[Rule, ...]]:
        """The IR grammar's start and rules, named again (the rules `tables` keeps them all)."""
        names = [*self.terminal_names, *self.nonterminal_names]
        start_rule = self.all_rules[0]
        rules = tuple(
            Rule(names[lhs], tuple(names[s] for s in rhs)) for lhs, rhs in self.all_rules[1:]
        )
        return names[start_rule[1][0]], rules

    def rule_arrays(self) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int32]]:
        """`tables()`'s rules as two arrays, for a file read without JSON: every rule's symbols
        (its left-hand side first) one after another, and each rule's count of them."""
        flat = [symbol for lhs, rhs in self.all_rules for symbol in (lhs, *rhs)]
        sizes = [1 + len(rhs) for _, rhs in self.all_rules]
        return np.array(flat, dtype=np.int32), np.array(sizes, dtype=np.int32)

    @classmethod
    def from_tables(
        cls,
        data: Any,
        rules: tuple[npt.NDArray[np.int32], npt.NDArray[np.int32]] | None = None,
    ) -> EarleyGrammar:
        """The grammar `tables()` wrote (`ValueError` if `data` is not such tables): no names
        to look up, no productivity to work out again. `rules`: its rules as `rule_arrays`
        gives them, in place of `data["rules"]`."""
        self = cls.__new__(cls)
        names, nonterminals = data["terminals"], data["nonterminals"]
        # (each check a builtin's loop over the lists: a load reads hundreds of rules)
        if not isinstance(names, list) or not isinstance(nonterminals, list) or not nonterminals:
            raise ValueError("symbol names are strings")
        if not set(map(type, names)) | set(map(type, nonterminals)) <= {str}:
            raise ValueError("symbol names are strings")
        self.terminal_names = list(names)
        self.nonterminal_names = list(nonterminals)
        self.num_terminals = terminals = len(names)
        symbols = terminals + len(nonterminals)
        rules_read = (
            _rules_of_lists(data["rules"], terminals, symbols)
            if rules is None
            else _rules_of_arrays(*rules, terminals, symbols)
        )
        if not rules_read or rules_read[0][0] != terminals or len(rules_read[0][1]) != 1:
            raise ValueError("the first rule is the start rule")
        unproductive = data["unproductive"]
        if not isinstance(unproductive, list):
            raise ValueError("bad unproductive rules")
        dropped = set(unproductive)
        if dropped and (
            not set(map(type, dropped)) <= {int}
            or min(dropped) < 1
            or max(dropped) >= len(rules_read)
        ):
            raise ValueError("bad unproductive rules")
        self.all_rules = rules_read
        self.unproductive = sorted(dropped)
        self.rules = (
            [rule for i, rule in enumerate(rules_read) if i not in dropped]
            if dropped
            else list(rules_read)
        )
        nullable = data["nullable"]
        if not isinstance(nullable, list) or (
            nullable
            and (
                not set(map(type, nullable)) <= {int}
                or min(nullable) < terminals
                or max(nullable) >= symbols
            )
        ):
            raise ValueError("a nullable symbol is out of range")
        self._finish(frozenset(nullable))
        return self

    def _finish(self, nullable: frozenset[int]) -> None:
        """What follows from the numbered rules (both constructors)."""
        self.start_rule = 0
        self.by_lhs: dict[int, list[int]]
        if _RULES_BY_LHS is not None:  # (in C: a schema's grammar has hundreds of rules)
            self.by_lhs = _RULES_BY_LHS(self.rules)
        else:
            self.by_lhs = {}
            for rid, (lhs, _) in enumerate(self.rules):
                self.by_lhs.setdefault(lhs, []).append(rid)
        self.nullable = nullable
        # Prediction, on demand (a large schema's grammar has thousands of nonterminals; a
        # generation predicts a few). When a set expects nonterminal N it predicts every rule
        # of every nonterminal in `predicts_of(N)` (N and, transitively, what stands first in
        # their rules after a nullable prefix). `own_items_of(M)` are M's predicted items, each
        # rule at dot 0 and, past nullable symbols, at the next dots too (Aycock & Horspool),
        # as (next symbol, rule id, dot); `start_nullable`: the start rule completes in a set
        # that predicts it. Predicted items that complete in their own set (nullable rules)
        # need no completion step: the items waiting on their nullable left-hand side were
        # advanced over it when it was predicted.
        self._own_items: dict[int, tuple[tuple[int, int, int], ...]] = {}
        self._first_nts: dict[int, frozenset[int]] = {}
        self._predicts: dict[int, frozenset[int]] = {}
        self.start_nullable = self.rules[self.start_rule][0] in self.nullable
        self._predictions: dict[frozenset[int], Prediction] = {}
        #: Earley sets by kernel (weak): structurally equal parse states are one object
        self.interned = InternedSets()
        #: what the C loop of `EarleySet` reads (`_earley.c`: `closure`), in one tuple; with
        #: the rules by left-hand side and the own-items memos, C predicts what the memos lack
        #: (an extension built before that reads the first six and calls the methods)
        self.native_tables: tuple[Any, ...] = (
            self.rules,
            self.nullable,
            self.num_terminals,
            self.start_rule,
            self._predicts,
            self._predictions,
        )
        if _NATIVE_PREDICTION:
            self.native_tables += (self.by_lhs, self._own_items, self._first_nts)

    def own_items_of(self, nt: int) -> tuple[tuple[int, int, int], ...]:
        """`nt`'s predicted items as (next symbol, rule id, dot) (see `__init__`)."""
        hit = self._own_items.get(nt)
        if hit is None:
            items: list[tuple[int, int, int]] = []
            firsts: set[int] = set()
            for rid in self.by_lhs.get(nt, ()):
                rhs = self.rules[rid][1]
                for dot, following in enumerate(rhs):
                    items.append((following, rid, dot))
                    if following >= self.num_terminals:
                        firsts.add(following)
                    if following not in self.nullable:
                        break
            # (the firsts first: another thread that finds the items reads the firsts next)
            self._first_nts[nt] = frozenset(firsts)
            hit = self._own_items[nt] = tuple(items)
        return hit

    def predicts_of(self, nt: int) -> frozenset[int]:
        """The nonterminals a set that expects `nt` predicts (`nt` included)."""
        hit = self._predicts.get(nt)
        if hit is None:
            if nt not in self.by_lhs:
                return frozenset()
            closure = {nt}
            stack = [nt]
            while stack:
                top = stack.pop()
                self.own_items_of(top)
                for nxt in self._first_nts[top]:
                    if nxt not in closure:
                        closure.add(nxt)
                        stack.append(nxt)
            hit = self._predicts[nt] = frozenset(closure)
        return hit

    def prediction(self, nonterminals: frozenset[int]) -> Prediction:
        """The items a set predicts when it predicts `nonterminals` (closed under prediction):
        `(rule id, dot)` pairs by next symbol, and the terminals among those symbols. Every set
        that predicts the same nonterminals shares one (its items' origin is the set itself)."""
        hit = self._predictions.get(nonterminals)
        if hit is None:
            grouped: dict[int, list[tuple[int, int]]] = {}
            for nt in nonterminals:
                for sym, rid, dot in self.own_items_of(nt):
                    grouped.setdefault(sym, []).append((rid, dot))
            by_symbol = {sym: tuple(pairs) for sym, pairs in grouped.items()}
            terminals = frozenset(sym for sym in by_symbol if sym < self.num_terminals)
            hit = (by_symbol, terminals)
            if len(self._predictions) >= 65536:
                self._predictions.clear()
            self._predictions[nonterminals] = hit
        return hit

    def is_terminal(self, symbol: int) -> bool:
        return symbol < self.num_terminals

    def initial_set(self) -> EarleySet:
        """The parse state before any input."""
        return EarleySet(self, [], seed=True)


class InternedSets:
    """Earley sets by kernel, held weakly: `refs[kernel]()` is the set, or None once it died
    (its entry then goes). A `WeakValueDictionary` did this with a Python `get`, a Python
    `__setitem__` and a `KeyedRef` made in Python per entry: ~2 us of each new parse state, and
    a first visit of a mask makes a few. Here a look-up is a dict's, an entry a plain weak
    reference whose callback (one per table, holding the table weakly: no cycle) drops it."""

    __slots__ = ("__weakref__", "_drop", "_kernels", "refs")

    def __init__(self) -> None:
        self.refs: dict[frozenset[Item], weakref.ref[EarleySet]] = {}
        #: each reference's kernel, for its callback (a dead reference still finds its entry:
        #: its hash was taken while the set lived, and the dict compares identity first)
        self._kernels: dict[weakref.ref[EarleySet], frozenset[Item]] = {}
        table = weakref.ref(self)

        def drop(ref: weakref.ref[EarleySet]) -> None:
            live = table()
            if live is not None:
                kernel = live._kernels.pop(ref, None)
                if kernel is not None and live.refs.get(kernel) is ref:
                    del live.refs[kernel]

        self._drop = drop

    def add(self, kernel: frozenset[Item], child: EarleySet) -> None:
        ref = weakref.ref(child, self._drop)
        self._kernels[ref] = kernel
        self.refs[kernel] = ref

    def get(self, kernel: frozenset[Item]) -> EarleySet | None:
        found = self.refs.get(kernel)
        return None if found is None else found()

    def __len__(self) -> int:
        return len(self.refs)


def _NOTHING_EXPECTED() -> None:
    """`EarleySet.scan`'s memo of terminals none of which is expected (a dead reference's
    answer, but never dead)."""
    return None


class EarleySet:
    """One Earley item set: the parse after some terminals. Immutable once built."""

    __slots__ = (
        "__weakref__",
        "by_next",
        "complete",
        "expected",
        "grammar",
        "memo",
        "predicted",
        "_children",
    )
    complete: bool  # the input so far is a sentence
    expected: frozenset[int]  # the terminals that may come next

    def __init__(
        self, grammar: EarleyGrammar, kernel: Collection[Item], *, seed: bool = False
    ) -> None:
        self.grammar = grammar
        #: the items carried over from earlier sets (kernel and completions), by next symbol
        self.by_next: dict[int, list[Item]] = {}
        #: the items predicted here (origin: this set), shared with sets predicting the same
        self.predicted: dict[int, tuple[tuple[int, int], ...]]
        #: per-set caches of the engine layered on top (lexer, masks); keyed freely
        self.memo: dict[Any, Any] = {}
        # scan's results by the terminal set asked (created on the first scan: many sets are
        # never scanned); weak references, so a parse state lives while a matcher holds it
        self._children: dict[frozenset[int], Callable[[], EarleySet | None]] | None = None
        if _NATIVE is not None:
            predicted_now: set[int] = set()
            if seed:
                predicted_now.update(grammar.predicts_of(grammar.rules[grammar.start_rule][0]))
            self.complete, self.predicted, self.expected = _NATIVE.closure(
                grammar.native_tables,
                grammar.predicts_of,
                grammar.prediction,
                kernel,
                self.by_next,
                predicted_now,
                seed and grammar.start_nullable,
            )
            return
        rules = grammar.rules
        nullable = grammar.nullable
        num_terminals = grammar.num_terminals
        predicts_of = grammar.predicts_of
        by_next = self.by_next
        # Nonterminals predicted here. Their items all start here, so they are kept apart as
        # (rule id, dot) pairs shared by every set predicting the same ones (`prediction`):
        # completion never needs them while this set is built, only later sets do.
        predicted: set[int] = set()
        seen: set[Item] = set()
        work: list[Item] = list(kernel)
        complete = seed and grammar.start_nullable  # the empty input is a sentence
        if seed:
            predicted.update(predicts_of(rules[grammar.start_rule][0]))
        while work:
            item = work.pop()
            if item in seen:
                continue
            seen.add(item)
            rid, dot, origin = item
            lhs, rhs = rules[rid]
            if dot < len(rhs):
                sym = rhs[dot]
                entry = by_next.get(sym)
                if entry is None:
                    by_next[sym] = [item]
                else:
                    entry.append(item)
                if sym >= num_terminals:
                    predicted.update(predicts_of(sym))
                    if sym in nullable:
                        work.append((rid, dot + 1, origin))
            else:
                if rid == grammar.start_rule:
                    complete = True
                    continue
                for prid, pdot, porigin in origin.by_next.get(lhs, ()):
                    work.append((prid, pdot + 1, porigin))
                for prid, pdot in origin.predicted.get(lhs, ()):
                    work.append((prid, pdot + 1, origin))
        self.predicted, predicted_terminals = grammar.prediction(frozenset(predicted))
        self.complete = complete
        carried = [s for s in by_next if s < num_terminals]
        self.expected = predicted_terminals.union(carried) if carried else predicted_terminals

    def scan(self, terminals: frozenset[int]) -> EarleySet | None:
        """The set after reading one of `terminals` here (None if none is expected).

        Remembered per `terminals` object asked (the lexer hands out one frozenset per lexer
        state, so its hash is computed once): most scans repeat one already made."""
        children = self._children
        if children is None:
            children = self._children = {}
        known = children.get(terminals)
        if known is not None:
            child = known()
            if child is not None or known is _NOTHING_EXPECTED:
                return child
        usable = terminals & self.expected
        if not usable:
            children[terminals] = _NOTHING_EXPECTED
            return None
        if _NATIVE is not None:
            kernel: frozenset[Item] = _NATIVE.scan_kernel(
                usable, self.by_next, self.predicted, self
            )
        else:
            items: list[Item] = []
            for t in usable:
                items.extend((rid, dot + 1, origin) for rid, dot, origin in self.by_next.get(t, ()))
                items.extend((rid, dot + 1, self) for rid, dot in self.predicted.get(t, ()))
            kernel = frozenset(items)
        # Hash-consing: a set is determined by its kernel, and origins are themselves
        # interned, so equal kernels mean equal parse futures. Reusing the object shares
        # its cached masks, e.g. after every element of one JSON array.
        interned = self.grammar.interned
        child = interned.get(kernel)
        if child is None:
            child = EarleySet(self.grammar, kernel)
            interned.add(kernel, child)
        children[terminals] = weakref.ref(child)
        return child
