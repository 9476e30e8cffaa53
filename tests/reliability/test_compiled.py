"""The mypyc-compiled schema front end: used when built and current, never when stale, and the
same grammars as the pure-Python modules (the compiled code is the same source, but mypyc
checks annotations at run time and compiles some constructs differently)."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import structgen.schema._objects as objects_module
from structgen import _compiled
from structgen.errors import StructgenError
from structgen.schema import SchemaOptions, compile_schema
from tests.conftest import IN_CI, shared_dir

SAMPLE = 300
OPTIONS = {
    "accept": SchemaOptions(mode="accept", whitespace="flexible"),
    "generate": SchemaOptions(mode="generate", whitespace="spaced"),
}


def test_compiled_front_end_in_use_where_built() -> None:
    """Under CI the build must have compiled the front end (a build that silently fell back
    to pure Python would lose the speed without a sign); elsewhere, in use iff stamped."""
    compiled = objects_module.__file__ is not None and not objects_module.__file__.endswith(".py")
    assert compiled == _compiled.COMPILED_FRONT_END
    if IN_CI and not os.environ.get(_compiled.PURE_PYTHON_ENV):
        assert compiled, "the schema front end was not compiled: check the mypyc build output"
    if compiled:
        assert _compiled.stamp_matches()


def test_stamp_names_the_sources_as_they_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_compiled, "EXTRA_MODULES", ("_lru.py", "grammar/terminals.py"))
    (tmp_path / "schema").mkdir()
    (tmp_path / "grammar").mkdir()
    (tmp_path / "schema" / "__init__.py").write_text("")
    (tmp_path / "schema" / "_one.py").write_text("X = 1\n")
    (tmp_path / "schema" / "_two.py").write_text("Y = 2\n")
    (tmp_path / "_lru.py").write_text("Z = 3\n")
    (tmp_path / "grammar" / "terminals.py").write_text("W = 4\n")
    sources = _compiled.compiled_sources(tmp_path)
    names = [_compiled.module_name(path, tmp_path) for path in sources]
    assert names == [
        "structgen.schema._one",
        "structgen.schema._two",
        "structgen._lru",
        "structgen.grammar.terminals",
    ]
    assert not _compiled.stamp_matches(tmp_path)  # no stamp
    digest = _compiled.source_digest(sources, tmp_path)
    (tmp_path / _compiled.STAMP_NAME).write_text(json.dumps({"digest": digest}))
    assert _compiled.stamp_matches(tmp_path)
    (tmp_path / "schema" / "_two.py").write_text("Y = 3\n")  # an edit after the build
    assert not _compiled.stamp_matches(tmp_path)
    (tmp_path / "schema" / "_two.py").write_text("Y = 2\n")
    assert _compiled.stamp_matches(tmp_path)
    (tmp_path / "grammar" / "terminals.py").write_text("W = 5\n")  # an extra module edited
    assert not _compiled.stamp_matches(tmp_path)
    (tmp_path / "grammar" / "terminals.py").write_text("W = 4\n")
    (tmp_path / "schema" / "_three.py").write_text("")  # a new module the build did not compile
    assert not _compiled.stamp_matches(tmp_path)
    (tmp_path / _compiled.STAMP_NAME).write_text("{not json")
    assert not _compiled.stamp_matches(tmp_path)


def test_compiled_modules_whose_source_left_the_list_are_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # (a build compiled `_lru.py`, then it left the list: its extension, imported before the
    # source, would name a group library that no longer holds it; setup.py deletes it)
    import sysconfig

    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    monkeypatch.setattr(_compiled, "EXTRA_MODULES", ())
    (tmp_path / "schema").mkdir()
    (tmp_path / "automata").mkdir()
    for name in ("schema/_one", "_lru"):
        (tmp_path / f"{name}.py").write_text("X = 1\n")
        (tmp_path / f"{name}{suffix}").write_bytes(b"")
    (tmp_path / f"automata/_subset{suffix}").write_bytes(b"")  # (a C extension: no source)
    assert _compiled.stale_extensions(tmp_path) == [tmp_path / f"_lru{suffix}"]
    monkeypatch.setattr(_compiled, "EXTRA_MODULES", ("_lru.py",))
    assert _compiled.stale_extensions(tmp_path) == []


def test_another_interpreters_build_is_not_taken_for_this_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # (a checkout with the front end built for CPython 3.11 and the C extensions rebuilt for a
    # free-threaded 3.14t: 3.14t imports the sources, and says so)
    monkeypatch.setattr(_compiled, "EXTRA_MODULES", ())
    monkeypatch.setattr(_compiled, "ROOT", tmp_path)
    monkeypatch.setattr(_compiled, "COMPILED_FRONT_END", False)
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))  # (guard adds a finder)
    monkeypatch.delenv(_compiled.PURE_PYTHON_ENV, raising=False)
    (tmp_path / "schema").mkdir()
    (tmp_path / "schema" / "_objects.py").write_text("X = 1\n")
    digest = _compiled.source_digest(_compiled.compiled_sources(tmp_path), tmp_path)
    (tmp_path / _compiled.STAMP_NAME).write_text(json.dumps({"digest": digest}))
    (tmp_path / "schema" / "_objects.cpython-39x-other.so").write_bytes(b"")
    assert _compiled.guard() is False
    assert _compiled.COMPILED_FRONT_END is False
    import importlib.machinery

    (tmp_path / "schema" / f"_objects{importlib.machinery.EXTENSION_SUFFIXES[0]}").write_bytes(b"")
    assert _compiled.guard() is True


def _python(script: str, args: list[str], *, env: dict[str, str], cwd: Path) -> str:
    """`script`'s output in a fresh interpreter (its own import of structgen)."""
    result = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def _grammars(paths: list[Path]) -> list[str]:
    """Each schema's grammar fingerprint in both modes, or the error it raised."""
    out = []
    for path in paths:
        schema = json.loads(path.read_text())["schema"]
        for options in OPTIONS.values():
            try:
                out.append(compile_schema(schema, options=options).fingerprint())
            except StructgenError as exc:
                out.append(f"{type(exc).__name__}: {exc}")
    return out


def test_pure_python_and_compiled_give_the_same_grammars() -> None:
    """A sample of MaskBench schemas compiled here and in a pure-Python subprocess
    (STRUCTGEN_PURE_PYTHON=1): the same grammars, the same errors."""
    folder = shared_dir("maskbench-dev")
    paths = sorted(random.Random(7).sample(sorted(folder.glob("*.json")), SAMPLE))
    script = (
        "import json, sys\n"
        "import structgen._compiled as c, structgen.schema._objects as o\n"
        "assert not c.COMPILED_FRONT_END and o.__file__.endswith('.py'), o.__file__\n"
        "from pathlib import Path\n"
        "from tests.reliability.test_compiled import _grammars\n"
        "print(json.dumps(_grammars([Path(p) for p in sys.argv[1:]])))\n"
    )
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, _compiled.PURE_PYTHON_ENV: "1", "PYTHONPATH": str(root)}
    pure = json.loads(_python(script, [str(p) for p in paths], env=env, cwd=root))
    here = _grammars(paths)
    differ = [
        (paths[i // 2].name, a[:120], b[:120]) for i, (a, b) in enumerate(zip(here, pure)) if a != b
    ]
    assert not differ, differ[:5]
    assert sum(not g.startswith(("Schema", "Unsupported", "Limit")) for g in here) > SAMPLE


@pytest.mark.skipif(not _compiled.COMPILED_FRONT_END, reason="the front end is not compiled here")
def test_a_stale_build_falls_back_to_source(tmp_path: Path) -> None:
    """A copy of the built package loads its compiled modules; once a schema source in it is
    edited, every schema module loads from source (what a checkout edited after its build
    must do: otherwise the old compiled code would run silently)."""
    shutil.copytree(
        Path(_compiled.__file__).parent,
        tmp_path / "structgen",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    script = (
        "import structgen._compiled as c, structgen.schema._objects as o\n"
        "import structgen.schema._compiler as k\n"
        "from structgen.schema import SchemaOptions, compile_schema\n"
        "compile_schema({'type': 'object', 'properties': {'a': {'type': 'integer'}}},"
        " options=SchemaOptions())\n"
        "print(c.COMPILED_FRONT_END, *(m.__file__.endswith('.py') for m in (o, k)))\n"
    )

    def run() -> str:
        env = {**os.environ, "PYTHONPATH": str(tmp_path)}
        env.pop(_compiled.PURE_PYTHON_ENV, None)
        return _python(script, [], env=env, cwd=tmp_path).strip()

    assert run() == "True False False"
    objects = tmp_path / "structgen" / "schema" / "_objects.py"
    objects.write_text(objects.read_text() + "\n# an edit after the build\n")
    assert run() == "False True True"
