"""The public front: every name in `structgen.__all__` resolves, and `import structgen` stays
light (no torch, transformers or pydantic until a name that needs them is used)."""

from __future__ import annotations

import subprocess
import sys

import structgen


def test_every_public_name_resolves() -> None:
    missing = [name for name in structgen.__all__ if not hasattr(structgen, name)]
    assert not missing


def test_import_structgen_is_light() -> None:
    code = (
        "import sys, structgen\n"
        "heavy = [m for m in ('torch', 'transformers', 'pydantic') if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == ""
