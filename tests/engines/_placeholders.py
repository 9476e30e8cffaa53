"""Import-time placeholders for the engine tests' environment (nothing here is exercised).

SGLang's config package imports ``torchvision`` at module level for InternVL image
preprocessing. PyPI's torchvision wheels are CUDA builds that cannot load beside the CPU torch
wheel this project pins, and nothing on the grammar path touches images, so when torchvision is
missing the engine tests install a placeholder package: every ``torchvision.*`` module imports,
and any attribute of it is an object that raises if it is ever called or used.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from typing import Any


class _Unavailable:
    def __init__(self, name: str) -> None:
        self._name = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{self._name} is a placeholder: torchvision is not installed here")

    def __getattr__(self, attr: str) -> _Unavailable:
        return _Unavailable(f"{self._name}.{attr}")

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[type, ...]:
        return (object,)


class _PlaceholderModule(types.ModuleType):
    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Unavailable(f"{self.__name__}.{attr}")


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, root: str) -> None:
        self.root = root

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname == self.root or fullname.startswith(self.root + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> types.ModuleType:
        module = _PlaceholderModule(spec.name)
        module.__path__ = []
        module.__version__ = "0.0.0+placeholder"  # type: ignore[attr-defined]
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


def install_torchvision_placeholder() -> bool:
    """Install the placeholder when torchvision cannot be found; True if it was installed."""
    if importlib.util.find_spec("torchvision") is not None:
        return False
    sys.meta_path.append(_Finder("torchvision"))
    return True
