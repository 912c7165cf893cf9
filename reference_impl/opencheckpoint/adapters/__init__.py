"""Adapters turn live objects into components and back.

The core ships framework-free adapters (:mod:`.base`); framework adapters
(``opencheckpoint.adapters.torch``, ``opencheckpoint.adapters.jax``) are
imported only when an object of that framework is met, so
``import opencheckpoint`` imports neither torch nor JAX.

The adapters layer owns the adapter protocol and resolution, the component
writer and reader, and one module per framework (plus the collectives of
torch.distributed and jax.distributed). It may import every layer below it
(format core, storage, ``tree/``, ``sharding/``, ``read/``) and, lazily,
torch, JAX, Flax and optax; it never imports the write path, ``Checkpoint``,
``run/`` or tools. The read path finds an adapter module by name through the
table of frameworks (``format/frameworks``) and never imports this package.
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
