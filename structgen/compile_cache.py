"""The persistent compile cache: compiled grammars saved in a directory, loaded after a restart.

Opt-in: `Compiler(vocab, cache_dir=...)`, or the `STRUCTGEN_COMPILE_CACHE` environment variable
for every compiler made without one. A file holds what a compile built that is costly to build
again and cheap to read: the grammar IR (so the frontend does not run) and the rows of every
terminal automaton built so far (DFA snapshots, `automata/snapshot.py`). A load reads only the
file's head (a small header and the first mask); the first step reads the rest, and a loaded
automaton rebuilds itself from its pattern only if generation leaves the saved rows.

Files are keyed by (constraint, options, limits, vocabulary fingerprint, structgen's code) and
hold their key's sha256, a sha256 of their head and one of their rest, and a format number.
Nothing is unpickled: the header is JSON, the arrays raw numbers, and both are checked (types,
shapes, every state id in range) before use. A file that fails a check — corrupt, truncated,
foreign, from another version — is ignored, compiled again and overwritten (on the first step,
for its rest). Writes go to a temporary file renamed into place, so readers never see half a
file. See docs/design/compile-cache.md.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import itertools
import json
import os
import tempfile
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from structgen.automata.dfa import table_capacity
from structgen.automata.snapshot import (
    UNBUILT,
    DFASnapshot,
    SnapshotBatch,
    SnapshotError,
    restore_dfa,
    snapshot_dfa,
)

if TYPE_CHECKING:
    from structgen.automata import AutomataLimits, ByteDFA
    from structgen.engines import GrammarEngine
    from structgen.engines.grammar import UnpackedParts
    from structgen.grammar.ir import Grammar, TerminalDef
    from structgen.vocab import Vocabulary

__all__ = ["ENV_VAR", "CompileCache", "key_text"]

ENV_VAR = "STRUCTGEN_COMPILE_CACHE"
FORMAT = 8
MAGIC = b"structgen-compiled\n"
SUFFIX = ".sgc"
#: files larger than this are not written (a grammar whose automata grew huge)
MAX_FILE_BYTES = 256 * 2**20
_HEADER_LIMIT = 64 * 2**20

_CODE: dict[str, str] = {}


def code_fingerprint() -> str:
    """sha256 of structgen's own source files: any change to the code makes new keys (a
    development version number does not change with every commit)."""
    hit = _CODE.get("digest")
    if hit is None:
        root = Path(__file__).resolve().parent
        digest = hashlib.sha256(b"structgen-code\0")
        for path in sorted(root.rglob("*")):
            if path.suffix in (".py", ".c") and path.is_file():
                digest.update(str(path.relative_to(root)).encode() + b"\0")
                digest.update(path.read_bytes())
        hit = _CODE["digest"] = digest.hexdigest()
    return hit


#: `_stable`'s texts of frozen dataclasses (options, limits), by (type, value)
_DATACLASS_TEXTS: dict[Any, str] = {}


def _stable(value: Any) -> str:
    """A text for `value` that is the same in every process (set order and hash seeds aside)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return repr(value)
    if isinstance(value, bytes):
        return f"b:{value.hex()}"
    if isinstance(value, (tuple, list)):
        return "(" + ",".join(_stable(v) for v in value) + ")"
    if isinstance(value, (frozenset, set)):
        return "{" + ",".join(sorted(_stable(v) for v in value)) + "}"
    if isinstance(value, dict):
        items = sorted((_stable(k), _stable(v)) for k, v in value.items())
        return "{" + ",".join(f"{k}:{v}" for k, v in items) + "}"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        # (options and limits repeat in every key: a frozen one's text is kept, by type and
        # value; one that can change is written out each time)
        params = getattr(type(value), "__dataclass_params__", None)
        memo: Any = (type(value), value) if params is not None and params.frozen else None
        if memo is not None:
            try:
                hit = _DATACLASS_TEXTS.get(memo)
            except TypeError:  # (a field that cannot be hashed)
                memo = hit = None
            if hit is not None:
                return hit
        fields = (  # (what equality compares: not a cached hash)
            f"{f.name}={_stable(getattr(value, f.name))}"
            for f in dataclasses.fields(value)
            if f.compare
        )
        text = f"{type(value).__name__}(" + ",".join(fields) + ")"
        if memo is not None:
            if len(_DATACLASS_TEXTS) >= 256:
                _DATACLASS_TEXTS.clear()
            _DATACLASS_TEXTS[memo] = text
        return text
    raise TypeError(f"no stable text for a {type(value).__name__}")


def key_text(full_key: tuple[Any, ...]) -> str | None:
    """The file key of a compile-cache key (None: it holds something with no stable text)."""
    try:
        return f"structgen-compiled-{FORMAT}\0{code_fingerprint()}\0{_stable(full_key)}"
    except TypeError:
        return None


def _key_digest(key: str) -> str:
    """The sha256 of a key's text: files are named by its head and hold all of it."""
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def _read_file(path: str, limit: int | None = None) -> bytes:
    """The file's first `limit` bytes (None: all of them), with plain system calls
    (`Path.read_bytes` goes through a buffered file object: twice as long for a median cache
    file, ~26 against ~13 us)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
    try:
        if limit is not None:
            return os.read(fd, limit)  # (a regular file: short only at its end)
        size = os.fstat(fd).st_size
        chunks: list[bytes] = []
        while True:
            chunk = os.read(fd, max(size, 1 << 16))
            if not chunk:
                return b"".join(chunks)  # (one chunk: itself)
            chunks.append(chunk)
            size = 1 << 16  # (the file grew, or a short read: read on to its end)
    finally:
        os.close(fd)


class CompileCache:
    """One cache directory (created with owner-only permissions when missing)."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory).expanduser()
        self._directory_text = str(self.directory)
        self._warned = False
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self.rejected = 0  # files found but not trusted (ignored, then overwritten)

    def path_for(self, key: str) -> str:
        return self._path(_key_digest(key))

    def _path(self, digest: str) -> str:
        return os.path.join(self._directory_text, digest[:40] + SUFFIX)

    # ------------------------------------------------------------------------ load

    def load(
        self,
        key: str,
        vocab: Vocabulary,
        limits: AutomataLimits,
        max_cached_masks: int,
        compile: Callable[[], GrammarEngine] | None = None,
    ) -> GrammarEngine | None:
        """The engine saved under `key`, or None (no file, or one that fails a check).

        A load reads what the first mask needs; the rest of the file is read and checked on
        the grammar's first step. Should it fail there, `compile` (the grammar's compile)
        builds the engine's parts again and the file is overwritten."""
        digest = _key_digest(key)
        path = self._path(digest)
        try:
            data = _read_file(path, _FIRST_READ)
        except OSError:
            self.misses += 1
            return None

        def rebuild() -> GrammarEngine:
            with self._lock:
                self.rejected += 1
            assert compile is not None
            engine = compile()
            self.save(key, engine)
            return engine

        try:
            engine = _decode(
                data,
                path,
                digest,
                vocab,
                limits,
                max_cached_masks,
                None if compile is None else rebuild,
            )
        except Exception:  # anything wrong with the file: compile again (and overwrite it)
            self.rejected += 1
            self.misses += 1
            return None
        self.hits += 1
        return engine

    # ------------------------------------------------------------------------ save

    def save(self, key: str, engine: Any) -> bool:
        """Write `engine` (a `GrammarEngine`) under `key`; False when it cannot be saved. An
        unwritable directory warns once and is then skipped quietly."""
        try:
            blob = _encode(engine, key)
        except (TypeError, ValueError):  # (a node kind with no data form)
            return False
        if len(blob) > MAX_FILE_BYTES:
            return False
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-", suffix=SUFFIX)
            try:
                with os.fdopen(fd, "wb") as out:
                    out.write(blob)
                os.replace(tmp, self.path_for(key))
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        except OSError as exc:
            with self._lock:
                if not self._warned:
                    self._warned = True
                    warnings.warn(
                        f"structgen: cannot write the compile cache in {self.directory} "
                        f"({exc}); compiled grammars will not be saved",
                        RuntimeWarning,
                        stacklevel=3,
                    )
            return False
        return True

    def clear(self) -> int:
        """Delete every cache file in the directory; return how many."""
        count = 0
        for path in self.directory.glob(f"*{SUFFIX}"):
            with contextlib.suppress(OSError):
                path.unlink()
                count += 1
        return count


# ---------------------------------------------------------------------------- the file format
#
#   MAGIC | sha256 of the head (32 bytes) | header length (8 bytes, little-endian) | header JSON
#   | payload (the arrays, each at the offset the header gives)
#
# The head is the header length, the header and the payload's first `head` bytes (the first
# mask): all a load reads. The rest of the payload (the parser's tables, the automata, the IR)
# is read on the grammar's first step and checked against the sha256 the header gives.

#: a load reads this much of a file first (the head of most files — a header of ~0.4 kB, a first
#: mask of a few nonzero words —; more when it is longer)
_FIRST_READ = 4096


def _encode(engine: GrammarEngine, key: str) -> bytes:
    from structgen.grammar.ir_codec import grammar_to_data

    grammar_data = grammar_to_data(engine.grammar, rules=False)  # (the parser's tables have them)
    payload = bytearray()
    # the IR is read only when an automaton is rebuilt or the grammar shown: JSON of its own
    ir_text = json.dumps(grammar_data, separators=(",", ":")).encode()
    payload.extend(ir_text)

    def put(array: np.ndarray[Any, Any]) -> list[int]:
        data = np.ascontiguousarray(array).tobytes()
        offset = len(payload)
        payload.extend(data)
        return [offset, len(data)]

    snapshots: list[DFASnapshot] = []
    index: dict[int, int] = {}

    def add(dfa: ByteDFA) -> int:
        """`dfa`'s place among the snapshots (saved once)."""
        at = index.get(id(dfa))
        if at is None:
            at = index[id(dfa)] = len(snapshots)
            # A terminal whose NFA waits for its first row (`DeferredNFASource`) gets it now:
            # a file without the start row would send the loaded grammar back to the schema
            # for that terminal at its first use.
            dfa.row(dfa.start)
            _build_ahead(dfa)
            snapshots.append(snapshot_dfa(dfa))
        return at

    terminal_dfa = [add(dfa) for dfa in engine.terminal_dfas]
    composites = _composites(engine.terminal_dfas, add, lambda at: snapshots[at], set(terminal_dfa))
    empty: np.ndarray[Any, Any] = np.zeros(0, dtype=np.uint8)
    rows = np.concatenate([x.rows.ravel() for x in snapshots] or [empty.astype(np.int32)])
    # 16 bits a transition when every state id fits (the rows are most of a file)
    row_type = "<i2" if not len(rows) or int(rows.max()) < 1 << 15 else "<i4"
    # per automaton: states, byte classes, start, whether its language is empty
    sizes = [[x.rows.shape[0], x.rows.shape[1], x.start, x.empty] for x in snapshots]
    dfas = {
        "count": len(snapshots),
        "sizes": put(np.array(sizes, dtype="<i4").reshape(-1, 4)),
        "alphabets": put(
            np.frombuffer(b"".join(x.alphabet.to_bytes(32, "little") for x in snapshots), "u1")
        ),
        "fingerprints": [x.fingerprint for x in snapshots],
        "rows": put(rows.astype(row_type)),
        "row_type": row_type,
        "accepting": put(np.concatenate([x.accepting for x in snapshots] or [empty]).astype("u1")),
        "byte_classes": put(np.concatenate([x.byte_classes for x in snapshots] or [empty])),
        "composites": composites,
    }
    parser = engine.parser.tables()
    symbols, rule_sizes = engine.parser.rule_arrays()
    parser["rules"] = {
        "symbols": put(symbols.astype("<i4")),
        "sizes": put(rule_sizes.astype("<i4")),
    }
    # what the first step reads (a load reads only the header and the first mask); the long
    # lists of numbers as arrays (JSON's were most of that step's reading)
    tables = json.dumps(
        {
            "grammar": [0, len(ir_text)],
            "parser": parser,
            "ignore": sorted(engine.ignore),
            "dfas": dfas,
            "terminal_dfa": put(np.array(terminal_dfa, dtype="<i4")),
        },
        separators=(",", ":"),
    ).encode()
    tables_at = [len(payload), len(tables)]
    payload.extend(tables)
    # the head: the first mask, as its nonzero words where that is shorter (most first masks
    # allow a few hundred tokens: a `{`, spaces)
    rest = bytes(payload)
    payload = bytearray()
    initial = engine.initial_state
    words = engine.token_mask(initial).astype("<i4")
    nonzero = np.flatnonzero(words)
    if 2 * len(nonzero) < len(words):
        first_mask = {"at": put(nonzero.astype("<u4")), "values": put(words[nonzero])}
    else:
        first_mask = {"words": put(words)}
    head = len(payload)
    automata_bytes = sum(table_capacity(int(x.rows.shape[0])) for x in snapshots) * 1024
    header = json.dumps(
        {
            "format": FORMAT,
            "key": _key_digest(key),  # (its sha256: the key's text is long)
            "fingerprint": engine.fingerprint,
            "token_ids": sorted(engine.token_ids),
            "first_mask": first_mask,
            "initial_complete": bool(engine.is_accepting(initial)),
            "automata_bytes": automata_bytes,
            "head": head,
            "tables": tables_at,  # (the rest's offsets count from its start)
            "rest": hashlib.sha256(rest).hexdigest(),
            "payload": head + len(rest),
        },
        separators=(",", ":"),
    ).encode()
    first = len(header).to_bytes(8, "little") + header + bytes(payload)
    return MAGIC + hashlib.sha256(first).digest() + first + rest


def _composites(
    dfas: list[ByteDFA],
    add: Callable[[ByteDFA], int],
    snapshot_at: Callable[[int], DFASnapshot],
    terminals: set[int],
) -> list[list[Any]]:
    """`[at, kind, [parts' ats]]` for each difference and product among `dfas` (an object's
    "any other key", a string with a pattern and a length) whose parts are saved too: a loaded
    grammar that leaves such an automaton's saved rows builds it again from its restored parts
    — the keys, the string — not from its pattern (the grammar's IR read, every part compiled:
    0.4–5 ms). A part qualifies if it is a terminal's automaton (rebuilt from its pattern if
    need be), a qualifying composite, or saved with every row built (a part from a regex is
    built whole first, up to `PART_STATES` states); otherwise the composite is rebuilt from its
    pattern as before."""
    from structgen.automata.dfa import DifferenceSource, ProductSource

    found: dict[int, list[Any] | None] = {}
    own = {id(dfa) for dfa in dfas}  # (the terminals' automata: rebuilt from their patterns)

    def visit(dfa: ByteDFA) -> bool:
        source = dfa._source
        kind = {DifferenceSource: "difference", ProductSource: "product"}.get(type(source))
        if kind is None:
            return False
        at = add(dfa)
        if at in found:
            return found[at] is not None
        found[at] = None  # (a cycle cannot qualify)
        for part in source.parts:  # type: ignore[attr-defined]
            if id(part) not in own:
                _build_ahead(part, PART_STATES)  # (a no-op for a part saved already)
        parts = [add(part) for part in source.parts]  # type: ignore[attr-defined]
        for part, part_at in zip(source.parts, parts):  # type: ignore[attr-defined]
            if not (part_at in terminals or visit(part) or _complete(snapshot_at(part_at))):
                return False
        found[at] = [at, kind, parts]
        return True

    for dfa in dfas:
        visit(dfa)
    return [entry for entry in found.values() if entry is not None]


def _complete(snapshot: DFASnapshot) -> bool:
    """Whether every state's row is saved (an automaton that never needs its pattern)."""
    return not bool((snapshot.rows[:, 0] == UNBUILT).any())


#: a saved terminal automaton that is cheap to build (from a regex or a literal chain) is saved
#: with up to this many states built: the first mask reads few of a grammar's terminals (a `{`,
#: a number), the next steps the others (each key of an object), which a loaded grammar would
#: otherwise build again from their patterns
BUILD_AHEAD_STATES = 64


#: a part of a composite that is not a terminal (a string's length beside its pattern) is saved
#: with up to this many states built: whole, it spares the composite a rebuild from its pattern
PART_STATES = 1024


def _build_ahead(dfa: ByteDFA, states: int | None = None) -> None:
    """Build `dfa`'s first `states` (default `BUILD_AHEAD_STATES`) states, in the order they
    are found, when its rows come from a regex or a literal chain (an object's keys: C lays
    out its rows); products (whose rows search) and counters are saved as they are."""
    from structgen.automata.chains import LiteralSource
    from structgen.automata.dfa import DeferredNFASource, NFASource, TrieSource

    if not isinstance(dfa._source, (DeferredNFASource, NFASource, TrieSource, LiteralSource)):
        return
    limit = BUILD_AHEAD_STATES if states is None else states
    state = 0
    while state < min(dfa.num_states, limit):
        dfa.row(state)
        state += 1


def _decode(
    data: bytes,
    path: str,
    digest: str,
    vocab: Vocabulary,
    limits: AutomataLimits,
    max_cached_masks: int,
    rebuild: Callable[[], GrammarEngine] | None = None,
) -> GrammarEngine:
    """The engine in the file at `path`, whose first bytes are `data` (`SnapshotError` unless
    its head is whole and for the key whose sha256 is `digest`). Only what the first mask
    needs is read here; the rest of the file — the parser's tables and the automata — is read
    and checked on the grammar's first step (`unpack`), and `rebuild` compiles the grammar
    again if it fails then."""
    from structgen.engines import GrammarEngine
    from structgen.engines.grammar import RestoredParts

    if not data.startswith(MAGIC):
        raise SnapshotError("not a structgen compile-cache file")
    start = len(MAGIC) + 32  # (the head's digest before it)
    size = int.from_bytes(data[start : start + 8], "little")
    if not 0 < size <= _HEADER_LIMIT:
        raise SnapshotError("bad header length")
    if len(data) < start + 8 + size:
        data = _read_file(path)
    header = json.loads(data[start + 8 : start + 8 + size])
    if (
        not isinstance(header, dict)
        or header.get("format") != FORMAT
        or header.get("key") != digest
    ):
        raise SnapshotError("a file of another format or for another key")
    head, total = header["head"], header["payload"]
    if not (type(head) is int and type(total) is int and 0 <= head <= total):
        raise SnapshotError("bad lengths")
    rest_at = start + 8 + size + head  # (where the rest begins)
    if len(data) < rest_at:
        data = _read_file(path)
    if hashlib.sha256(memoryview(data)[start:rest_at]).digest() != data[len(MAGIC) : start]:
        raise SnapshotError("the head's checksum does not match (corrupt or truncated)")
    fingerprint = header["fingerprint"]
    token_ids = header["token_ids"]
    complete = header["initial_complete"]
    automata_bytes = header["automata_bytes"]
    if not isinstance(fingerprint, str) or not fingerprint:
        raise SnapshotError("no fingerprint")
    if not isinstance(token_ids, list) or not all(
        isinstance(t, int) and 0 <= t < vocab.size for t in token_ids
    ):
        raise SnapshotError("bad token ids")
    if type(complete) is not bool or type(automata_bytes) is not int or automata_bytes < 0:
        raise SnapshotError("bad first state")
    first_mask = _first_mask(memoryview(data)[start + 8 + size : rest_at], header, vocab)
    tables_at, rest_digest = header["tables"], header["rest"]
    if not isinstance(rest_digest, str):
        raise SnapshotError("no digest of the rest")

    def unpack() -> UnpackedParts:
        try:
            # (a file the load read whole — a small one, a long head — is not read again)
            whole = data if len(data) == rest_at - head + total else _read_file(path)
            rest = memoryview(whole)[rest_at:]
            if (
                len(rest) != total - head
                or hashlib.sha256(rest).hexdigest() != rest_digest
                or whole[len(MAGIC) : start] != data[len(MAGIC) : start]  # (the same head)
            ):
                raise SnapshotError("the file's rest does not match its head")
            return _unpack(rest, tables_at, limits)
        except SnapshotError:
            raise
        except Exception as exc:  # (gone since the load; a malformed table: a wrong type)
            raise SnapshotError(f"bad tables: {exc!r}") from exc

    parts = RestoredParts(
        unpack,
        rebuild,
        automata_bytes,
        fingerprint,
        frozenset(token_ids),
        first_mask,
        complete,
    )
    return GrammarEngine(
        None, vocab, limits=limits, max_cached_masks=max_cached_masks, restored=parts
    )


def _first_mask(
    head: memoryview, header: dict[str, Any], vocab: Vocabulary
) -> npt.NDArray[np.int32]:
    """The first mask in the head: all its words, or its nonzero ones (`_encode`)."""
    words = (vocab.size + 31) // 32
    saved = header["first_mask"]
    if not isinstance(saved, dict):
        raise SnapshotError("bad first mask")
    if "words" in saved:
        mask = _array(head, saved["words"], "<i4", words).astype(np.int32)
    else:
        where = saved["at"]
        count = where[1] // 4 if isinstance(where, list) and len(where) == 2 else -1
        at = _array(head, where, "<u4", count)
        values = _array(head, saved["values"], "<i4", count)
        if count <= 64:  # (most first masks: a few words, checked without numpy's overheads)
            places = at.tolist()
            ordered = all(a < b for a, b in itertools.pairwise(places))
        else:
            places = at.astype(np.intp)
            ordered = bool((np.diff(places) > 0).all())
        if count and (not ordered or places[-1] >= words):
            raise SnapshotError("the first mask's words are out of order or range")
        mask = np.zeros(words, dtype=np.int32)
        mask[places] = values
    if vocab.size % 32 and mask[-1] >> (vocab.size % 32):  # bits past the vocabulary
        raise SnapshotError("the first mask allows tokens outside the vocabulary")
    mask.setflags(write=False)
    return mask


def _read_composites(data: Any, count: int) -> dict[int, tuple[str, list[int]]]:
    """The file's composites (`_composites`) by automaton, checked (`SnapshotError`)."""
    if not isinstance(data, list):
        raise SnapshotError("bad composites")
    out: dict[int, tuple[str, list[int]]] = {}
    for entry in data:
        if not (isinstance(entry, list) and len(entry) == 3):
            raise SnapshotError("bad composite")
        at, kind, parts = entry
        if (
            type(at) is not int
            or not 0 <= at < count
            or at in out
            or kind not in ("difference", "product")
            or not isinstance(parts, list)
            or len(parts) < 2
            or not all(type(p) is int and 0 <= p < count and p != at for p in parts)
        ):
            raise SnapshotError("bad composite")
        out[at] = (kind, parts)
    return out


def _compose(kind: str, parts: list[ByteDFA], fingerprint: str, limits: AutomataLimits) -> ByteDFA:
    """A difference or product over restored parts, as `automata.difference` and
    `intersect_all` made it at compile time (their checks passed then: not made again)."""
    from structgen.automata import ByteDFA
    from structgen.automata.dfa import DifferenceSource, ProductSource

    if kind == "difference":
        return ByteDFA(DifferenceSource(parts), fingerprint=fingerprint, limits=limits)
    source = ProductSource(parts, limits.max_dfa_states)
    return ByteDFA(source, fingerprint=fingerprint, limits=limits)


def _array(payload: memoryview, where: Any, dtype: str, count: int) -> np.ndarray[Any, Any]:
    """`count` items of `dtype` at `where` ([offset, length]) of the payload, checked."""
    if not (isinstance(where, list) and len(where) == 2):
        raise SnapshotError("an array has no place")
    offset, length = where
    item = np.dtype(dtype).itemsize
    if (
        not (isinstance(offset, int) and isinstance(length, int))
        or count < 0  # (numpy's "all of it")
        or length != count * item
    ):
        raise SnapshotError("an array has the wrong size")
    if offset < 0 or offset + length > len(payload):
        raise SnapshotError("an array lies outside the file")
    return np.frombuffer(payload, dtype=dtype, count=count, offset=offset)


def _items(payload: memoryview, where: Any, dtype: str) -> np.ndarray[Any, Any]:
    """The array at `where` of the payload, as many items of `dtype` as its length holds."""
    length = where[1] if isinstance(where, list) and len(where) == 2 else None
    size = np.dtype(dtype).itemsize
    if not isinstance(length, int) or length % size:
        raise SnapshotError("an array has the wrong size")
    return _array(payload, where, dtype, length // size)


def _unpack(payload: memoryview, tables_at: list[int], limits: AutomataLimits) -> UnpackedParts:
    """The rest of a file (`_decode`), read and checked on the grammar's first step."""
    from structgen.engines.grammar import UnpackedParts
    from structgen.grammar.earley import EarleyGrammar
    from structgen.grammar.ir_codec import grammar_from_data, terminal_from_data
    from structgen.grammar.terminals import build_terminal_dfa, live_or_restored_dfa

    tables = json.loads(bytes(_array(payload, tables_at, "u1", tables_at[1])))
    parser_data, entries = tables["parser"], tables["dfas"]
    rules = parser_data["rules"]
    parser = EarleyGrammar.from_tables(
        parser_data,
        (_items(payload, rules["symbols"], "<i4"), _items(payload, rules["sizes"], "<i4")),
    )
    ignore = tables["ignore"]
    if not all(type(i) is int and 0 <= i < parser.num_terminals for i in ignore):
        raise SnapshotError("bad ignored terminals")
    full: list[Grammar] = []
    ir_data: list[Any] = []
    nodes: dict[int, Any] = {}  # the IR's nodes decoded so far, by index (`terminal_from_data`)
    full_lock = threading.Lock()

    def read_ir() -> Any:
        if not ir_data:
            ir_data.append(json.loads(ir_text))
        return ir_data[0]

    def full_grammar() -> Grammar:
        """The grammar with its patterns (read once, on the first need)."""
        with full_lock:
            if not full:
                full.append(grammar_from_data(read_ir(), parser.ir_rules()))
            return full[0]

    def terminal(position: int) -> TerminalDef:
        """One terminal with its pattern: only the nodes it reaches are read."""
        with full_lock:
            if full:
                return full[0].terminals[position]
            return terminal_from_data(read_ir(), position, nodes)

    ir_at = tables["grammar"]
    ir_text = bytes(_array(payload, ir_at, "u1", ir_at[1]))

    row_type = entries["row_type"]
    if row_type not in ("<i2", "<i4"):
        raise SnapshotError("an unknown transition type")
    count = entries["count"]
    if type(count) is not int or count < 0:
        raise SnapshotError("bad automata count")
    sizes = _array(payload, entries["sizes"], "<i4", 4 * count).reshape(count, 4)
    states, classes_of, starts, empty = sizes.T.tolist()
    if min(states, default=1) < 1 or min(classes_of, default=1) < 1:
        raise SnapshotError("bad automaton size")
    total_rows = sum(n * k for n, k in zip(states, classes_of))
    alphabets = _array(payload, entries["alphabets"], "u1", 32 * count).tobytes()
    classes = _array(payload, entries["byte_classes"], "u1", 256 * count)
    classes = classes.reshape(-1, 256).copy()
    classes.flags.writeable = False  # (each automaton's row is a read-only view of it)
    batch = SnapshotBatch(
        rows=_array(payload, entries["rows"], row_type, total_rows).astype(np.int32),
        accepting=_array(payload, entries["accepting"], "u1", sum(states)).astype(np.bool_),
        byte_classes=classes,
        states=states,
        classes=classes_of,
        starts=starts,
        empty=[x != 0 for x in empty],
        alphabets=[
            int.from_bytes(alphabets[i : i + 32], "little") for i in range(0, 32 * count, 32)
        ],
        fingerprints=[str(x) for x in entries["fingerprints"]],
    )
    batch.check()

    which = _items(payload, tables["terminal_dfa"], "<i4").tolist()
    if len(which) != parser.num_terminals:
        raise SnapshotError("one automaton per terminal")
    if which and (min(which) < 0 or max(which) >= len(states)):
        raise SnapshotError("a terminal names no automaton")
    if states and max(states) > limits.max_dfa_states:
        raise SnapshotError("an automaton has more states than the limits allow")

    composites = _read_composites(entries["composites"], len(states))
    position_of: dict[int, int] = {}  # each terminal automaton's first terminal
    for position, at in enumerate(which):
        position_of.setdefault(at, position)
    fingerprints = batch.fingerprints
    restored: dict[int, ByteDFA] = {}
    buildable: dict[int, bool] = {}

    def from_parts(at: int) -> bool:
        """Whether automaton `at` can be built again from saved parts (`_composites`)."""
        known = buildable.get(at)
        if known is None:
            buildable[at] = False  # (a cycle does not qualify)
            entry = composites.get(at)
            known = entry is not None and all(
                part in position_of or from_parts(part) or _complete(batch.snapshot(part))
                for part in entry[1]
            )
            buildable[at] = known
        return known

    def automaton(at: int) -> ByteDFA:
        """Automaton `at`: a live shared one with its fingerprint, else the file's."""
        dfa = restored.get(at)
        if dfa is None:  # (terminals that share an automaton adopt it once)

            def rebuild() -> ByteDFA:
                """The same automaton built again: it left the saved rows."""
                if from_parts(at):
                    kind, parts = composites[at]
                    return _compose(kind, [automaton(p) for p in parts], fingerprints[at], limits)
                if at not in position_of:  # (a complete part: never asked; a file's lie)
                    raise SnapshotError("an automaton without a pattern left its saved rows")
                return build_terminal_dfa(terminal(position_of[at]), limits)

            def restore() -> ByteDFA:
                return restore_dfa(batch.snapshot(at), rebuild, limits, checked=True)

            dfa = restored[at] = live_or_restored_dfa(fingerprints[at], limits, restore)
        return dfa

    def restore_automata() -> tuple[ByteDFA, ...]:
        """The terminals' automata: live shared ones where there are, else the file's."""
        return tuple([automaton(at) for at in which])

    return UnpackedParts(parser, frozenset(ignore), restore_automata, full_grammar)
