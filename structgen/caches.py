"""What a process keeps between compiles, and how to bound it.

- Compiled grammars (`Compiler` results, by what was compiled): at most 128, and at most
  `cache_budget()` bytes (default 512 MiB, or `STRUCTGEN_CACHE_BYTES`) of what they hold —
  their automata, mask caches and recent parse states, estimated, shared parts counted once.
  The least recently used go first, down to three quarters of the budget, measured when a
  compile adds one: every time near the budget, one compile in 32 far below it.
- Terminal automata and lexers, shared between grammars: weakly, so they live only while a
  grammar uses them (inside the budget above, or held by the caller); besides, the terminal
  automata built or used last are held, up to 32 MiB of them (`recent_terminal_bytes`).
- Per vocabulary, for as long as the process runs: the token table of the C walk and the
  first-byte masks (a few MB for 128k tokens), token classes per byte partition (at most 64).
- Small bounded memo tables (regex parses, digests, number ranges): a few MB at most.

`clear_caches()` drops all of them (compiled grammars still held by the caller keep working,
and rebuild what they need lazily). See docs/guide/limits.md.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

from structgen import compiler as _compiler
from structgen._args import expect_int
from structgen._lru import clear_all

__all__ = ["cache_budget", "cache_usage", "clear_caches", "set_cache_budget"]


def cache_budget() -> int:
    """The compiled-grammar cache's byte budget."""
    return _compiler._BUDGET["bytes"]


def set_cache_budget(nbytes: int) -> None:
    """Bound the compiled-grammar cache by `nbytes` (estimated; see the module docstring). A
    smaller budget takes effect at the next compile."""
    _compiler._BUDGET["bytes"] = expect_int(nbytes, "nbytes", minimum=0)
    _compiler._TRIM["next"] = 0  # measure at the next insertion


def cache_usage() -> dict[str, int]:
    """Entries and estimated bytes: `grammars`, `grammar_bytes` (the compiled-grammar cache),
    `terminal_automata` and `lexers` alive (weakly cached; the terminal automata built or
    used last are held, up to 32 MiB: `recent_terminal_automata`, `recent_terminal_bytes`,
    estimated when each was stored), `budget`."""
    from structgen.engines import grammar as engine
    from structgen.grammar import terminals

    with _compiler._CACHE_LOCK:
        grammars = len(_compiler._CACHE)
    with terminals._TERMINAL_LOCK:  # (counting sweeps the weak index: under its lock)
        terminal_automata = len(terminals._TERMINAL_DFAS)
    return {
        "grammars": grammars,
        "grammar_bytes": _compiler.cached_bytes(),
        "terminal_automata": terminal_automata,
        "recent_terminal_automata": len(terminals._RECENT),
        "recent_terminal_bytes": terminals._RECENT.weight,
        "lexers": len(engine._UNIONS),
        "budget": cache_budget(),
    }


def clear_caches() -> None:
    """Forget every cached grammar, automaton, table and memo (memory back at once; what is
    needed again is rebuilt on use)."""
    from structgen.engines import grammar as engine
    from structgen.grammar import terminals
    from structgen.masks import _walker

    with _compiler._CACHE_LOCK:
        _compiler._CACHE.clear()
    terminals.clear_terminal_automata()
    for cache, lock in (
        (engine._UNIONS, engine._UNION_LOCK),
        (_walker._FIRST_BYTE, _walker._FIRST_BYTE_LOCK),
        (_walker._NATIVE, _walker._NATIVE_LOCK),
    ):
        with lock:
            cache.clear()
    clear_all()  # token classes, spellings, digests
    from structgen.schema._recent import clear_recent

    clear_recent()  # (the schema front end's memos)
    # Every module-level memo of every structgen module loaded (the regex, NFA and UTF-8 ones,
    # and the chains', the schema compiler's, the dialects' and the Unicode tables'): a list of
    # modules had left later ones behind.
    for name, module in list(sys.modules.items()):
        if module is None or not name.startswith("structgen."):
            continue
        for value in list(vars(module).values()):
            clear: Any = getattr(value, "cache_clear", None)
            if isinstance(value, functools._lru_cache_wrapper) and clear is not None:
                clear()
