"""DFA snapshots: the rows of a lazy ``ByteDFA`` built so far, as plain arrays, and a DFA
restored from them that needs no NFA until it leaves them.

A snapshot holds a transition per state and *byte class* (``int32 [states, classes]``, ``-2``
where the row was not built), the accepting flags, the byte classes, the start and the
alphabet: everything a restored DFA answers without its source. The restored DFA's source is a
``SnapshotSource``: the first time a row outside the snapshot is needed, it rebuilds the
automaton from its recipe (a function that builds the same language from scratch) and maps the
snapshot's states onto the fresh DFA's by walking both from the start in step. States reached
by the same bytes have the same residual language in any two DFAs of one language, so the map
is exact whatever the fresh build numbers its states; ids already handed out (walker caches,
union keys) stay valid, new states get new ids. See docs/design/compile-cache.md.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from structgen.automata.dfa import (
    ByteDFA,
    _Source,
    class_representatives,
    table_capacity,
    unbuilt_rows,
)
from structgen.automata.nfa import AutomataLimits, extension_function

__all__ = [
    "DFASnapshot",
    "SnapshotBatch",
    "SnapshotError",
    "SnapshotSource",
    "restore_dfa",
    "snapshot_dfa",
]

UNBUILT = -2
#: the batch check in C (`_subset.c`; None: the numpy path below)
_CHECK_SNAPSHOTS = extension_function("check_snapshots")


class SnapshotError(ValueError):
    """The arrays do not describe a DFA (a corrupt or foreign cache entry)."""


@dataclass(frozen=True, slots=True)
class DFASnapshot:
    """The built part of a ``ByteDFA``: ``rows[s, c]`` is the target of state ``s`` on byte
    class ``c`` (-1 dead, -2 row not built)."""

    rows: npt.NDArray[np.int32]
    accepting: npt.NDArray[np.bool_]
    byte_classes: npt.NDArray[np.uint8]
    start: int
    empty: bool
    alphabet: int
    fingerprint: str

    def check(self) -> None:
        """Raise `SnapshotError` unless the arrays are a consistent DFA: ids in range, whole
        rows built or not, classes numbered without gaps. A restored DFA's rows are read by C
        through raw pointers: nothing out of range may reach them."""
        rows, accepting, classes = self.rows, self.accepting, self.byte_classes
        if rows.dtype != np.int32 or accepting.dtype != np.bool_ or classes.dtype != np.uint8:
            raise SnapshotError("wrong array types")
        if classes.shape != (256,) or rows.ndim != 2 or accepting.ndim != 1:
            raise SnapshotError("wrong array shapes")
        n, k = rows.shape
        if n < 1 or accepting.shape[0] != n or k != int(classes.max()) + 1:
            raise SnapshotError("the arrays disagree on the number of states or classes")
        if not np.bincount(classes, minlength=k).all():
            raise SnapshotError("byte classes are not numbered without gaps")
        if not 0 <= self.start < n:
            raise SnapshotError("the start state is out of range")
        if rows.size and (rows.min() < UNBUILT or rows.max() >= n):
            raise SnapshotError("a transition leads out of the automaton")
        unbuilt = rows == UNBUILT
        if not np.array_equal(unbuilt.any(axis=1), unbuilt.all(axis=1)):
            raise SnapshotError("a row is built only in part")
        if not 0 <= self.alphabet < 1 << 256:
            raise SnapshotError("the alphabet is not a set of bytes")


@dataclass(frozen=True, slots=True)
class SnapshotBatch:
    """Several snapshots in shared arrays, as a cache file stores them: `rows` and
    `accepting` concatenated, one `byte_classes` row per automaton. `check` validates them
    all in a few array operations; `snapshot(i)` is automaton `i` (views, no copy)."""

    rows: npt.NDArray[np.int32]
    accepting: npt.NDArray[np.bool_]
    byte_classes: npt.NDArray[np.uint8]
    states: list[int]
    classes: list[int]
    starts: list[int]
    empty: list[bool]
    alphabets: list[int]
    fingerprints: list[str]
    #: where each automaton's rows and states begin (computed once: `snapshot` is per terminal)
    _row_at: list[int] = field(init=False, repr=False, compare=False)
    _state_at: list[int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        sizes = [n * k for n, k in zip(self.states, self.classes)]
        object.__setattr__(self, "_row_at", [0, *itertools.accumulate(sizes)])
        object.__setattr__(self, "_state_at", [0, *itertools.accumulate(self.states)])

    def check(self) -> None:
        """Raise `SnapshotError` unless every automaton is consistent (as `DFASnapshot.check`)."""
        m = len(self.states)
        lists = (self.classes, self.starts, self.empty, self.alphabets, self.fingerprints)
        if any(len(x) != m for x in lists) or self.byte_classes.shape != (m, 256):
            raise SnapshotError("the automata's fields disagree in number")
        if not m:
            return
        if not all(0 <= st < n for st, n in zip(self.starts, self.states)):
            raise SnapshotError("a start state is out of range")
        if not all(0 <= a < 1 << 256 for a in self.alphabets):
            raise SnapshotError("an alphabet is not a set of bytes")
        if self.accepting.shape != (sum(self.states),):
            raise SnapshotError("the arrays' lengths do not match the automata")
        native = _CHECK_SNAPSHOTS
        if (
            native is not None
            and self.rows.dtype == np.int32
            and self.byte_classes.dtype == np.uint8
        ):
            why = native(self.rows, self.byte_classes, self.states, self.classes)
            if why is not None:
                raise SnapshotError(why)
            return
        self.check_arrays()

    def check_arrays(self) -> None:
        """The sizes, byte classes and transitions part of `check`, in numpy (the C check's
        fallback and oracle)."""
        ns = np.asarray(self.states, dtype=np.int64)
        ks = np.asarray(self.classes, dtype=np.int64)
        if ns.min() < 1 or ks.min() < 1 or ks.max() > 256:
            raise SnapshotError("bad automaton size")
        sizes = ns * ks
        if self.rows.shape != (int(sizes.sum()),) or self.accepting.shape != (int(ns.sum()),):
            raise SnapshotError("the arrays' lengths do not match the automata")
        classes = self.byte_classes.astype(np.int64)
        if not np.array_equal(classes.max(axis=1) + 1, ks):
            raise SnapshotError("the class counts do not match the byte classes")
        ordered = np.sort(classes, axis=1)  # numbered without gaps: k distinct values
        if not np.array_equal((np.diff(ordered, axis=1) > 0).sum(axis=1) + 1, ks):
            raise SnapshotError("byte classes are not numbered without gaps")
        rows = self.rows
        if rows.min() < UNBUILT or (rows >= np.repeat(ns, sizes)).any():
            raise SnapshotError("a transition leads out of the automaton")
        widths = np.repeat(ks, ns)  # one entry per state: its row's width
        unbuilt = np.add.reduceat((rows == UNBUILT).astype(np.int64), np.cumsum(widths) - widths)
        if ((unbuilt != 0) & (unbuilt != widths)).any():
            raise SnapshotError("a row is built only in part")

    def snapshot(self, i: int) -> DFASnapshot:
        """Automaton `i` (checked with the batch: `restore_dfa(..., checked=True)`)."""
        row_at, state_at = self._row_at[i], self._state_at[i]
        n, k = self.states[i], self.classes[i]
        return DFASnapshot(
            rows=self.rows[row_at : row_at + n * k].reshape(n, k),
            accepting=self.accepting[state_at : state_at + n],
            byte_classes=self.byte_classes[i],
            start=self.starts[i],
            empty=self.empty[i],
            alphabet=self.alphabets[i],
            fingerprint=self.fingerprints[i],
        )


def snapshot_dfa(dfa: ByteDFA) -> DFASnapshot:
    """The rows `dfa` has built so far (a copy; the DFA goes on growing)."""
    classes = dfa.byte_classes
    reps = class_representatives(classes)
    with dfa._lock:  # (rows a C walk finishes meanwhile are complete once byte 0 is written)
        n = dfa.num_states
        table = np.array(dfa._table[:n])
        accepting = np.array(dfa._accepting[:n], dtype=np.bool_)
    rows = np.ascontiguousarray(table[:, reps], dtype=np.int32)
    # a row is built when its byte 0 is (C writes it last); one finished after `n` was read
    # may point past it: it counts as not built
    unbuilt = (table[:, 0] == UNBUILT) | (rows >= n).any(axis=1)
    rows[unbuilt] = UNBUILT
    return DFASnapshot(
        rows=rows,
        accepting=accepting,
        byte_classes=np.array(classes, dtype=np.uint8),
        start=int(dfa.start),
        empty=bool(dfa.is_empty),
        alphabet=int(dfa.alphabet),
        fingerprint=dfa.fingerprint,
    )


class SnapshotSource(_Source):
    """The source of a restored DFA: snapshot states are keyed by their id (an int); states
    found after it by ``("new", id in the rebuilt DFA)``. The rebuilt DFA is made on the first
    row the snapshot lacks."""

    is_union = False

    def __init__(self, snapshot: DFASnapshot, rebuild: Callable[[], ByteDFA]) -> None:
        self.byte_classes = snapshot.byte_classes
        self._snapshot = snapshot
        self._rebuild = rebuild
        self._fresh: ByteDFA | None = None
        self._to_fresh: dict[int, int] = {}  # snapshot id -> fresh id
        self._from_fresh: dict[int, int] = {}  # fresh id -> snapshot id
        self._lock = threading.Lock()

    def start_key(self) -> Hashable:
        return self._snapshot.start

    def start_is_live(self) -> bool:
        return not self._snapshot.empty

    def is_accepting(self, key: Any) -> bool:
        if isinstance(key, int):
            return bool(self._snapshot.accepting[key])
        return self._fresh_dfa().is_accepting(key[1])

    def alphabet(self) -> int:
        return self._snapshot.alphabet

    def memory_bytes(self) -> int:
        fresh = self._fresh
        return 0 if fresh is None else fresh.memory_bytes()

    def saved_rows(self) -> npt.NDArray[np.int32]:
        """The snapshot's rows (its states' ids are the automaton's)."""
        return self._snapshot.rows

    @property
    def rebuilt(self) -> bool:
        """Whether the automaton had to be built again (a row outside the snapshot)."""
        return self._fresh is not None

    def expand(self, key: Any, intern: Callable[[Hashable], int]) -> list[int]:
        if isinstance(key, int):
            row = self._snapshot.rows[key]
            if row[0] != UNBUILT:  # (a saved row: its targets are saved states, ids as keys)
                targets: list[int] = row.tolist()
                return targets
        fresh = self._fresh_dfa()
        fid = self._to_fresh[key] if isinstance(key, int) else key[1]
        row = fresh.row(fid)
        out = []
        for byte in class_representatives(self.byte_classes):
            target = int(row[byte])
            if target < 0:
                out.append(-1)
            else:
                old = self._from_fresh.get(target)
                out.append(intern(old if old is not None else ("new", target)))
        return out

    def _fresh_dfa(self) -> ByteDFA:
        with self._lock:
            if self._fresh is None:
                fresh = self._rebuild()
                self._map_states(fresh)
                self._fresh = fresh
            return self._fresh

    def _map_states(self, fresh: ByteDFA) -> None:
        """Pair each snapshot state with the fresh DFA's state reached by the same bytes."""
        snap = self._snapshot
        reps = class_representatives(snap.byte_classes)
        to_fresh = {snap.start: fresh.start}
        queue = deque([snap.start])
        while queue:
            state = queue.popleft()
            row = snap.rows[state]
            if row[0] == UNBUILT:
                continue
            here = to_fresh[state]
            for cls, target in enumerate(row.tolist()):
                if target >= 0 and target not in to_fresh:
                    to_fresh[target] = fresh.next_state(here, int(reps[cls]))
                    queue.append(target)
        self._to_fresh = to_fresh
        self._from_fresh = {f: s for s, f in to_fresh.items()}


def restore_dfa(
    snapshot: DFASnapshot,
    rebuild: Callable[[], ByteDFA],
    limits: AutomataLimits,
    *,
    checked: bool = False,
) -> ByteDFA:
    """A ``ByteDFA`` answering from `snapshot` (checked first unless `checked`: the batch it
    came from was; `SnapshotError`), which calls `rebuild` for the same language only when it
    needs a row the snapshot lacks."""
    if not checked:
        snapshot.check()
    n = snapshot.rows.shape[0]
    if n > limits.max_dfa_states:
        raise SnapshotError("the snapshot has more states than the limits allow")
    capacity = table_capacity(n)
    # rows are copied out of the snapshot as they are first read (`SnapshotSource.expand`): a
    # loaded grammar reads a few of each terminal's saved rows, if any — into a table of its
    # own made then; until then every restored automaton reads one shared table of unbuilt rows
    table = unbuilt_rows(capacity)
    if table is None:
        table = np.full((capacity, 256), UNBUILT, dtype=np.int32)
    accepting = np.zeros(capacity, dtype=np.bool_)
    accepting[:n] = snapshot.accepting
    classes = snapshot.byte_classes
    if classes.flags.writeable:
        classes = classes.copy()
        classes.flags.writeable = False
    return ByteDFA.from_arrays(
        SnapshotSource(snapshot, rebuild),
        fingerprint=snapshot.fingerprint,
        limits=limits,
        byte_classes=classes,
        table=table,
        accepting=accepting,
        states=n,
        num_classes=snapshot.rows.shape[1],
        built=bytearray(n),
        start=snapshot.start,
        empty=snapshot.empty,
        alphabet=snapshot.alphabet,
    )
