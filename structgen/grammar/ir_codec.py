"""The grammar IR as JSON data and back, for the persistent compile cache.

Terminal ASTs share sub-trees heavily, so nodes are written once each into a table (children
before parents, referred to by index) and terminals point into it. Reading checks every field
and raises `IRDataError` on anything that is not such a table: cache files are data from disk,
never trusted.
"""

from __future__ import annotations

from typing import Any

from structgen.automata import (
    Alternation,
    CharClass,
    Concat,
    Difference,
    Empty,
    Node,
    Pattern,
    Repeat,
    String,
)
from structgen.grammar.ir import Grammar, Rule, TerminalDef

__all__ = ["IRDataError", "grammar_from_data", "grammar_to_data", "terminal_from_data"]

#: above the highest code point structgen's automata use (token and boundary markers included)
_MAX_POINT = 2**31 - 1


class IRDataError(ValueError):
    """The data is not a grammar written by `grammar_to_data`."""


def grammar_to_data(grammar: Grammar, *, rules: bool = True) -> dict[str, Any]:
    """`grammar` as JSON-serialisable data (lists, strings, ints); `rules=False` leaves the
    rules out (the compile cache keeps them numbered in the parser's tables)."""
    nodes: list[list[Any]] = []
    index: dict[int, int] = {}  # by object
    equal: dict[Pattern, int] = {}  # by structure (nodes cache their hashes)
    keep: list[Pattern] = []  # (ids of nodes stay unique while the walk runs)

    def visit(node: Pattern) -> int:
        hit = index.get(id(node))
        if hit is None:
            hit = equal.get(node)
        if hit is not None:
            index[id(node)] = hit
            keep.append(node)
            return hit
        entry: list[Any]
        if isinstance(node, Concat):
            entry = ["cat", [visit(c) for c in node.items]]
        elif isinstance(node, Alternation):
            entry = ["alt", [visit(c) for c in node.items]]
        elif isinstance(node, Repeat):
            entry = ["rep", visit(node.item), node.min, node.max]
        elif isinstance(node, String):
            entry = ["str", node.text]
        elif isinstance(node, CharClass):
            entry = ["cls", [bound for pair in node.ranges for bound in pair]]
        elif isinstance(node, Empty):
            entry = ["nil"]
        elif isinstance(node, Difference):
            entry = ["dif", visit(node.minuend), [visit(c) for c in node.subtrahends]]
        else:
            raise IRDataError(f"no data form for a {type(node).__name__} node")
        keep.append(node)
        hit = index[id(node)] = equal[node] = len(nodes)
        nodes.append(entry)
        return hit

    terminals = [
        [t.name, visit(t.pattern), [visit(extra) for extra in t.intersect]]
        for t in grammar.terminals
    ]
    return {
        "start": grammar.start,
        "rules": [[r.lhs, list(r.rhs)] for r in grammar.rules] if rules else None,
        "nodes": nodes,
        "terminals": terminals,
        "ignore": list(grammar.ignore),
    }


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise IRDataError(f"expected a string, got {type(value).__name__}")
    return value


def _int(value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise IRDataError(f"expected an integer in {low}..{high}, got {value!r}")
    return value


def _list(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise IRDataError(f"expected a list, got {type(value).__name__}")
    return value


def _node(entry: Any, built: Any, below: int) -> Pattern:
    """The node `entry` describes; its children are `built[i]` for indices up to `below` (its
    own index less one: children come before their parents, so no cycle can be written)."""
    entry = _list(entry)
    if not entry:
        raise IRDataError("an empty node entry")
    kind, args = entry[0], entry[1:]

    def child(value: Any) -> Node:
        node: Pattern = built[_int(value, 0, below)]
        if isinstance(node, Difference):
            raise IRDataError("a difference is a whole pattern, not a part of one")
        return node

    if kind == "cat" and len(args) == 1:
        return Concat(tuple(child(c) for c in _list(args[0])))
    if kind == "alt" and len(args) == 1:
        return Alternation(tuple(child(c) for c in _list(args[0])))
    if kind == "rep" and len(args) == 3:
        low = _int(args[1], 0, _MAX_POINT)
        high = None if args[2] is None else _int(args[2], low, _MAX_POINT)
        return Repeat(child(args[0]), low, high)
    if kind == "str" and len(args) == 1:
        text = _str(args[0])
        if not text:
            raise IRDataError("an empty String node")
        return String(text)
    if kind == "cls" and len(args) == 1:
        bounds = _list(args[0])
        if len(bounds) % 2:
            raise IRDataError("a class's bounds come in pairs")
        ranges = []
        last = -1
        for i in range(0, len(bounds), 2):
            lo = _int(bounds[i], last + 1, _MAX_POINT)  # sorted and disjoint
            last = _int(bounds[i + 1], lo, _MAX_POINT)
            ranges.append((lo, last))
        return CharClass(tuple(ranges))
    if kind == "nil" and not args:
        return Empty()
    if kind == "dif" and len(args) == 2:
        return Difference(child(args[0]), tuple(child(c) for c in _list(args[1])))
    raise IRDataError(f"an unknown node entry {kind!r}")


def grammar_from_data(data: Any, rules: tuple[str, tuple[Rule, ...]] | None = None) -> Grammar:
    """The `Grammar` `data` describes (`IRDataError` if it does not describe one); `rules`:
    the start and rules, for data written without them."""
    if not isinstance(data, dict):
        raise IRDataError("a grammar is a JSON object")
    built: list[Pattern] = []
    try:
        for entry in _list(data["nodes"]):
            built.append(_node(entry, built, len(built) - 1))
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, IRDataError):
            raise
        raise IRDataError(f"not a grammar: {exc}") from None
    try:
        top = len(built) - 1
        terminals = []
        for entry in _list(data["terminals"]):
            name, pattern, extras = _list(entry)
            terminals.append(
                TerminalDef(
                    _str(name),
                    built[_int(pattern, 0, top)],
                    tuple(built[_int(e, 0, top)] for e in _list(extras)),
                )
            )
        if rules is None:
            written = []
            for entry in _list(data["rules"]):
                lhs, rhs = _list(entry)
                written.append(Rule(_str(lhs), tuple(_str(s) for s in _list(rhs))))
            rules = (_str(data["start"]), tuple(written))
        ignore = tuple(_str(s) for s in _list(data["ignore"]))
        return Grammar(rules[0], rules[1], tuple(terminals), ignore)
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, IRDataError):
            raise
        raise IRDataError(f"not a grammar: {exc}") from None


def _child_indices(entry: Any) -> list[Any]:
    """The indices a node entry names as children (unchecked: `_node` checks them)."""
    if not isinstance(entry, list) or len(entry) < 2:
        return []
    kind = entry[0]
    if kind in ("cat", "alt"):
        return _list(entry[1])
    if kind == "rep":
        return [entry[1]]
    if kind == "dif" and len(entry) == 3:
        return [entry[1], *_list(entry[2])]
    return []


def terminal_from_data(data: Any, position: int, built: dict[int, Pattern]) -> TerminalDef:
    """Terminal `position` of the grammar `data` describes, reading only the nodes it reaches
    (`IRDataError` as `grammar_from_data`): a loaded grammar rebuilds one terminal's automaton
    at a time, and decoding all of a schema's nodes for it cost more than the build. `built`
    keeps the nodes decoded so far (by index) for the next terminal of the same data."""
    try:
        nodes = _list(data["nodes"])
        entry = _list(_list(data["terminals"])[_int(position, 0, 2**31)])
        name, pattern, extras = entry
        top = len(nodes) - 1
        roots = [_int(pattern, 0, top), *(_int(e, 0, top) for e in _list(extras))]
        needed: set[int] = set()
        stack = [i for i in roots if i not in built]
        while stack:
            i = stack.pop()
            if i in needed:
                continue
            needed.add(i)
            for c in _child_indices(nodes[i]):
                c = _int(c, 0, i - 1)  # (children come first: `_node` would refuse it too)
                if c not in built and c not in needed:
                    stack.append(c)
        for i in sorted(needed):
            built[i] = _node(nodes[i], built, i - 1)
        return TerminalDef(_str(name), built[roots[0]], tuple(built[i] for i in roots[1:]))
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        if isinstance(exc, IRDataError):
            raise
        raise IRDataError(f"not a grammar: {exc}") from None
