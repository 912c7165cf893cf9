"""Names a package re-exports lazily (PEP 562): imported from their module on first use.

``import opencheckpoint`` and the read commands of the CLI must not pay for the save
path, torch or JAX, so the package root, ``run/`` and ``sharding/`` list their public
names with the module that defines each, and :func:`lazy_names` gives the package the
module-level ``__getattr__`` and ``__dir__`` that import a name when it is first read.
The package keeps the static imports under ``TYPE_CHECKING`` for type checkers and
the import graph.

>>> table = {"dedent": "textwrap"}
>>> namespace: dict = {}
>>> getattr_, dir_ = lazy_names("demo", table, namespace)
>>> getattr_("dedent")("  x")
'x'
>>> "dedent" in namespace, dir_()
(True, ['dedent'])
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_names(package: str, table: dict[str, str], namespace: dict[str, Any]
               ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: ``table`` maps each public name to its module (relative
    to ``package`` when it starts with a dot); a name read once is stored in ``namespace`` (the package's
    ``globals()``), so later reads are plain attribute reads."""

    def __getattr__(name: str) -> Any:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(table))

    return __getattr__, __dir__
