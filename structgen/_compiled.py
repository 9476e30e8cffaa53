"""The schema front end's modules compiled with mypyc, used only while they match their source.

`setup.py` compiles `structgen/schema/_*.py` into C extensions next to the sources and writes a
stamp with the digest of the sources it compiled. Python imports an extension before a `.py`
of the same name, so a compiled module left behind after its source changed (an edit in a
checkout, a `git pull` without re-installing) would silently run the old code. `guard()` runs
before anything imports the schema package: when the stamp is missing or stale, or
`STRUCTGEN_PURE_PYTHON=1` is set, a path finder makes every one of those modules load from
its source (all of them: compiled modules call each other directly, so the set is all or
nothing). Design: docs/design/compiled-front-end.md.
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

PACKAGE = "structgen.schema"
PACKAGE_DIR = Path(__file__).resolve().parent / "schema"
STAMP_NAME = "_compiled.json"
PURE_PYTHON_ENV = "STRUCTGEN_PURE_PYTHON"

# Whether the compiled front end is in use (set by `guard()`, which `import structgen` runs).
COMPILED_FRONT_END = False


def compiled_sources(package_dir: Path = PACKAGE_DIR) -> list[Path]:
    """The modules setup.py compiles: the schema package's private modules."""
    return sorted(path for path in package_dir.glob("_*.py") if path.name != "__init__.py")


def source_digest(sources: Sequence[Path]) -> str:
    """sha256 over the names and bytes of `sources` (what a stamp records)."""
    digest = hashlib.sha256()
    for path in sources:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def stamp_matches(package_dir: Path = PACKAGE_DIR) -> bool:
    """Whether the stamp setup.py wrote names the sources as they are now."""
    try:
        stamp = json.loads((package_dir / STAMP_NAME).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(stamp, dict) and stamp.get("digest") == source_digest(
        compiled_sources(package_dir)
    )


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
    wanted = os.environ.get(PURE_PYTHON_ENV, "") in ("", "0")
    if wanted and stamp_matches():
        COMPILED_FRONT_END = any(PACKAGE_DIR.glob("_objects.*.so")) or any(
            PACKAGE_DIR.glob("_objects.*.pyd")
        )
        return COMPILED_FRONT_END
    if not any(isinstance(finder, _SourceFinder) for finder in sys.meta_path):
        sources = {f"{PACKAGE}.{path.stem}": path for path in compiled_sources()}
        sys.meta_path.insert(0, _SourceFinder(sources))
    COMPILED_FRONT_END = False
    return False


if __name__ == "structgen._compiled":  # (setup.py loads this file under another name)
    guard()  # on import: `structgen.schema` imports this module before any of its own
