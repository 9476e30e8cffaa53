"""The modules compiled with mypyc, used only while they match their source.

`setup.py` compiles the schema front end (`structgen/schema/_*.py`, and any `EXTRA_MODULES`)
into C extensions next to the sources, and writes a stamp with the digest of the sources it
compiled. Python imports an extension before a `.py` of the same name, so a compiled module
left behind after its source changed (an edit in a checkout, a `git pull` without
re-installing) would silently run the old code. `guard()` runs first when `structgen` is
imported: when the stamp is missing or stale, or `STRUCTGEN_PURE_PYTHON=1` is set, a path
finder makes every one of those modules load from its source (all of them: compiled modules
call each other directly, so the set is all or nothing). Design:
docs/design/compiled-front-end.md.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent  # the structgen package
STAMP_NAME = "_compiled.json"
PURE_PYTHON_ENV = "STRUCTGEN_PURE_PYTHON"
# Modules beyond the schema package to compile (paths under structgen/): JSON pointers, a
# chain's blocks, the regex AST's nodes, the grammar IR's rules and the Lark reader. Tried and
# left out (docs/design/compiled-front-end.md): `_lru.py` (no measurable gain; its tuples'
# identity and its weak references change meaning compiled; the front end's own memos are
# `schema/_recent.py`) and `grammar/terminals.py`.
EXTRA_MODULES: tuple[str, ...] = (
    "_json_data.py",
    "automata/_blocks.py",
    "automata/_nodes.py",
    "automata/intervals.py",
    "automata/utf8.py",
    "automata/regex_syntax.py",
    "grammar/ir.py",
    "grammar/lark_literals.py",
    "grammar/lark_reader.py",
)

# Whether the compiled modules are in use (set by `guard()`, which `import structgen` runs).
COMPILED_FRONT_END = False


def pure_python_asked() -> bool:
    """Whether `STRUCTGEN_PURE_PYTHON` asks for the Python source (at build and run time)."""
    return os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0")


def compiled_sources(root: Path = ROOT) -> list[Path]:
    """The modules setup.py compiles: the schema package's private modules and the extras."""
    schema = root / "schema"
    private = sorted(path for path in schema.glob("_*.py") if path.name != "__init__.py")
    return [*private, *(root / name for name in EXTRA_MODULES)]


def stale_extensions(root: Path = ROOT) -> list[Path]:
    """Extension modules beside a `.py` that is not compiled (any more): left in a checkout
    after a module left the compiled list, they would be imported before the source and name
    a group library that no longer holds them. `setup.py build_ext --inplace` deletes them."""
    import sysconfig  # (here: not on every `import structgen`)

    compiled = {path.resolve() for path in compiled_sources(root)}
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    stale = []
    for extension in sorted(root.rglob("*" + suffix)):
        source = extension.with_name(extension.name[: -len(suffix)] + ".py")
        if source.exists() and source.resolve() not in compiled:
            stale.append(extension)
    return stale


def module_name(path: Path, root: Path = ROOT) -> str:
    """`structgen.schema._objects` for `<root>/schema/_objects.py`."""
    return ".".join(("structgen", *path.relative_to(root).with_suffix("").parts))


def source_digest(sources: Sequence[Path], root: Path = ROOT) -> str:
    """sha256 over the paths (relative to `root`) and bytes of `sources` (what a stamp records)."""
    digest = hashlib.sha256()
    for path in sources:
        name = path.relative_to(root).as_posix()
        digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def stamp_matches(root: Path = ROOT) -> bool:
    """Whether the stamp setup.py wrote names the sources as they are now."""
    try:
        stamp = json.loads((root / STAMP_NAME).read_text())
        digest = source_digest(compiled_sources(root), root)
    except (OSError, ValueError):
        return False
    return isinstance(stamp, dict) and stamp.get("digest") == digest


class _SourceFinder(importlib.abc.MetaPathFinder):
    """Finds the listed modules at their `.py` files, ahead of any extension beside them."""

    def __init__(self, sources: dict[str, Path]) -> None:
        self.sources = sources

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        source = self.sources.get(fullname)
        if source is None:
            return None
        return importlib.util.spec_from_file_location(fullname, source)


def guard() -> bool:
    """Use the compiled modules if their stamp matches the sources (and the environment does
    not ask for pure Python); else load them all from source. Returns whether compiled."""
    global COMPILED_FRONT_END
    if not pure_python_asked() and stamp_matches(ROOT):
        # (built for this interpreter: a checkout may hold another's, e.g. 3.11's beside 3.14t's)
        suffixes = importlib.machinery.EXTENSION_SUFFIXES
        if any((ROOT / "schema" / ("_objects" + suffix)).exists() for suffix in suffixes):
            COMPILED_FRONT_END = True
            return True
    if not any(isinstance(finder, _SourceFinder) for finder in sys.meta_path):
        sources = {module_name(path, ROOT): path for path in compiled_sources(ROOT)}
        sys.meta_path.insert(0, _SourceFinder(sources))
    COMPILED_FRONT_END = False
    return False


if __name__ == "structgen._compiled":  # (setup.py loads this file under another name)
    guard()  # on import: `import structgen` imports this module before any other of its own
