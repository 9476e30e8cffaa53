"""Build the optional C trie walk, regex subset construction, Earley inner loops and schema data
check, and the schema front end compiled with mypyc; everything else is configured in
pyproject.toml."""

import importlib.util
import json
import os
import sys
import sysconfig
from pathlib import Path
from types import ModuleType

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


def _load_compiled_module() -> ModuleType:
    """structgen/_compiled.py on its own (the package's __init__ needs numpy, absent here)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "structgen", "_compiled.py")
    spec = importlib.util.spec_from_file_location("_structgen_compiled_for_setup", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# (the digest, the stamp's name and the opt-out come from the module that checks them)
_COMPILED = _load_compiled_module()
PACKAGE_DIR = Path("structgen")


def _mypyc_extensions() -> list[Extension]:
    """The schema front end (structgen/schema/_*.py, and structgen/_compiled.py's
    EXTRA_MODULES) as C extensions, when mypyc is there and STRUCTGEN_PURE_PYTHON is not set.
    Imports of other modules are not followed: their types count as Any there, which keeps the
    build about a minute (mypy's full check takes five)."""
    if _COMPILED.pure_python_asked():
        return []
    if sysconfig.get_config_var("Py_GIL_DISABLED"):
        # (its modules do not declare themselves safe without the GIL: importing one would
        # turn the GIL back on for the whole process)
        message = "structgen: a free-threaded build, the schema front end stays pure Python"
        print(message, file=sys.stderr)
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        print("structgen: mypyc not found, the schema front end stays pure Python", file=sys.stderr)
        return []
    sources = [str(path) for path in _COMPILED.compiled_sources(PACKAGE_DIR)]
    flags = ["--follow-imports=skip", "--ignore-missing-imports", "--no-warn-return-any"]
    try:
        extensions = mypycify(
            flags + sources, opt_level="3", debug_level="0", group_name="structgen._schema"
        )
    except (Exception, SystemExit) as exc:  # (mypyc exits on what it cannot compile)
        message = f"structgen: mypyc failed ({exc!r}), the schema front end stays pure Python"
        print(message, file=sys.stderr)
        return []
    for extension in extensions:
        extension.optional = True  # (a failed C build leaves no stamp: pure Python is used)
        extension._structgen_mypyc = True  # type: ignore[attr-defined]
    return extensions


class BuildExtensions(build_ext):
    """build_ext, then a stamp of the compiled sources' digest beside the compiled modules,
    written only when every one of them was built (structgen/_compiled.py checks it)."""

    def run(self) -> None:
        super().run()
        if self.inplace:
            self._remove_stale_modules()
        compiled = [e for e in self.extensions if getattr(e, "_structgen_mypyc", False)]
        if not compiled:
            return
        built = all(os.path.exists(self._output(e)) for e in compiled)
        directory = str(PACKAGE_DIR) if self.inplace else os.path.join(self.build_lib, PACKAGE_DIR)
        stamp = os.path.join(directory, _COMPILED.STAMP_NAME)
        if not built:
            if os.path.exists(stamp):
                os.remove(stamp)
            return
        os.makedirs(directory, exist_ok=True)
        digest = _COMPILED.source_digest(_COMPILED.compiled_sources(PACKAGE_DIR), PACKAGE_DIR)
        with open(stamp, "w") as handle:
            json.dump({"digest": digest}, handle)

    def _remove_stale_modules(self) -> None:
        """Delete compiled modules left in the checkout beside a `.py` no longer compiled:
        Python would import them before the source (`_compiled.stale_extensions`)."""
        for extension in _COMPILED.stale_extensions(PACKAGE_DIR):
            print(f"structgen: removing {extension} (not compiled now)", file=sys.stderr)
            extension.unlink()

    def _output(self, extension: Extension) -> str:
        path = self.get_ext_fullpath(extension.name)
        if self.inplace:
            build_py = self.get_finalized_command("build_py")
            path = self._get_inplace_equivalent(build_py, extension)[0]
        return path


#: what every C extension includes besides its source (a change rebuilds them all)
HEADERS = ["structgen/_module_gil.h"]

setup(
    cmdclass={"build_ext": BuildExtensions},
    ext_modules=[
        Extension(
            "structgen.masks._native",
            sources=["structgen/masks/_native.c"],
            extra_compile_args=["-O3"],
            depends=HEADERS,
            optional=True,  # without a C compiler structgen falls back to its numpy walker
        ),
        Extension(
            "structgen.automata._subset",
            sources=["structgen/automata/_subset.c", "structgen/automata/_thompson.c"],
            extra_compile_args=["-O3"],
            depends=HEADERS,
            optional=True,  # without it regex DFA rows are built in Python
        ),
        Extension(
            "structgen.grammar._earley",
            sources=["structgen/grammar/_earley.c"],
            extra_compile_args=["-O3"],
            depends=HEADERS,
            optional=True,  # without it Earley sets are built in Python
        ),
        Extension(
            "structgen.grammar._lark_lexer",
            sources=["structgen/grammar/_lark_lexer.c"],
            extra_compile_args=["-O3"],
            depends=HEADERS,
            optional=True,  # without it a Lark grammar's tokens are read by a regex
        ),
        Extension(
            "structgen._json_native",
            sources=["structgen/_json_native.c"],
            extra_compile_args=["-O3"],
            depends=HEADERS,
            optional=True,  # without it a schema's data is checked and copied in Python
        ),
        *_mypyc_extensions(),
    ],
)
