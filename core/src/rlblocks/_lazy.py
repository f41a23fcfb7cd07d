"""Faces that import their names on first use.

Every public face of rlblocks (``rlblocks``, ``rlblocks.contracts``, ``rlblocks.algo``...) lists
its names twice, as readers and tools expect: in ``__all__``, and as imports inside an
``if TYPE_CHECKING:`` block, which type checkers, the API reference and import-linter read. At run
time the face imports nothing: :func:`attach` reads that block once and gives the face a
module ``__getattr__`` (PEP 562) that imports a name's private module on first use. So
``import rlblocks`` and ``rlblocks list`` never import torch, and a plugin's light config module
can take its validators from a face without pulling in the training machinery.

Standard library only. Private to core: plugins import from the faces, never from here.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import sys
from collections.abc import Callable
from typing import Any


def _declared(path: str, package: str) -> dict[str, tuple[str, str]]:
    """``{public name: (module, attribute)}`` from the ``if TYPE_CHECKING:`` imports of the face
    at ``path`` (the ``__init__.py`` of ``package``)."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    names: dict[str, tuple[str, str]] = {}
    for node in tree.body:
        if not (isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"):
            continue
        for item in node.body:
            if not isinstance(item, ast.ImportFrom):
                continue
            if item.level:
                base = package.rsplit(".", item.level - 1)[0] if item.level > 1 else package
                module = f"{base}.{item.module}" if item.module else base
            else:
                module = item.module or ""
            for alias in item.names:
                names[alias.asname or alias.name] = (module, alias.name)
    return names


def attach(package: str, path: str) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for the face ``package`` whose ``__init__.py`` is ``path``.

    A name resolves to the attribute its ``TYPE_CHECKING`` import names, or to the submodule
    when the import names one (``from rlblocks.contracts import _validators as validators``);
    the value is then cached on the face, so each name is looked up once.
    """
    names = _declared(path, package)

    def __getattr__(name: str) -> Any:
        try:
            module_name, attribute = names[name]
        except KeyError:
            # a public subpackage (``rlblocks.tools``) is imported when first named
            if not name.startswith("_") and importlib.util.find_spec(f"{package}.{name}"):
                return importlib.import_module(f"{package}.{name}")
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        module = importlib.import_module(module_name)
        value = module.__dict__.get(attribute, _MISSING)
        if value is _MISSING:
            try:
                value = getattr(module, attribute)
            except AttributeError:
                value = importlib.import_module(f"{module_name}.{attribute}")
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(names)

    return __getattr__, __dir__


_MISSING = object()
