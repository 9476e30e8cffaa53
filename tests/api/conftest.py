"""The default model as an `LM`, once per test process (skips locally when it is missing)."""

from __future__ import annotations

import functools

from structgen.api import LM
from tests.conftest import default_model_dir


@functools.cache
def default_lm() -> LM:
    """SmolLM2-135M-Instruct on the CPU, shared by the api tests."""
    default_model_dir()  # skip (or fail under CI=true) when the fixture is missing
    return LM.default()
