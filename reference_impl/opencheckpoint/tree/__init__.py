"""The ``tree`` payload: a msgpack document with a closed node vocabulary plus a raw data file.

:mod:`.nodes` defines the tags and the value types that have no Python
builtin; :mod:`.encode` plans and streams a tree to disk; :mod:`.decode`
parses and validates one; :mod:`.layout` checks the data file rules.

The tree codec layer: node values, tree paths, the exact and fast parsers,
planning and writing (``encode``, ``sink``, ``datafile``, ``shard_plan``),
the data file layout rules and exact comparison (``compare``). It may import
the format core (``format/``, ``rules/``) and storage (``container/``: the
archive writer, writeback); never ``sharding/``, ``read/``, adapters or above.
"""

from .nodes import ArrayRef, NamedTupleValue, PRNGKeyValue, Tag

__all__ = ["ArrayRef", "NamedTupleValue", "PRNGKeyValue", "Tag"]
