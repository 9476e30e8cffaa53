"""The real regex engines the automata tests compare against."""

from __future__ import annotations

import pytest

from tests.automata.ecma_oracle import node_path
from tests.conftest import missing


@pytest.fixture(scope="module")
def node() -> None:
    """Node.js, the ECMA-262 oracle."""
    if node_path() is None:
        missing("node (Node.js, the ECMA-262 oracle)")


@pytest.fixture(scope="module")
def pydantic_core() -> None:
    """pydantic-core, whose patterns are Rust `regex`."""
    pytest.importorskip("pydantic")
