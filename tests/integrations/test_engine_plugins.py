"""The serving-engine plugins as packaged: entry points declared, clean errors without the engine.

The plugins themselves are exercised inside the real engines by tests/engines (`make
test-engines`); this file runs in the default environment, where SGLang and vLLM are absent.
"""

from __future__ import annotations

import importlib
import importlib.util
import subprocess
import sys
from importlib.metadata import entry_points

import pytest


@pytest.mark.parametrize(
    ("group", "target"),
    [
        ("sglang.srt.plugins", "structgen.integrations.sglang:register"),
        ("vllm.general_plugins", "structgen.integrations.vllm:register"),
    ],
)
def test_the_engines_find_structgen_through_their_entry_point_groups(
    group: str, target: str
) -> None:
    found = {ep.name: ep.value for ep in entry_points(group=group)}
    assert found.get("structgen") == target


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_without_the_engine_importing_its_plugin_names_the_missing_engine(engine: str) -> None:
    if importlib.util.find_spec(engine) is not None:
        pytest.skip(f"{engine} is installed here; tests/engines covers the plugin")
    with pytest.raises(ModuleNotFoundError, match=engine):
        importlib.import_module(f"structgen.integrations.{engine}")


def test_importing_structgen_integrations_does_not_import_the_engines() -> None:
    code = (
        "import sys, structgen, structgen.integrations; "
        "assert 'vllm' not in sys.modules and 'sglang' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
