"""Adapters turn live objects into components and back.

The core ships framework-free adapters (:mod:`.base`); framework adapters
(``opencheckpoint.adapters.torch``, ``opencheckpoint.adapters.jax``) are
imported only when an object of that framework is met, so
``import opencheckpoint`` imports neither torch nor JAX.
"""

from .base import (
    Adapter,
    ComponentReader,
    ComponentWriter,
    DataclassAdapter,
    DumpLoadAdapter,
    JsonAdapter,
    PreparedRestore,
    StateDictAdapter,
    TreeAdapter,
    prepare_restore,
    register_adapter,
    resolve_adapter,
)

__all__ = [
    "Adapter",
    "ComponentReader",
    "ComponentWriter",
    "DataclassAdapter",
    "DumpLoadAdapter",
    "JsonAdapter",
    "PreparedRestore",
    "StateDictAdapter",
    "TreeAdapter",
    "prepare_restore",
    "register_adapter",
    "resolve_adapter",
]
