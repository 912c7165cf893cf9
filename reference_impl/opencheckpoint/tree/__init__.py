"""The ``tree`` payload: a msgpack document with a closed node vocabulary plus a raw data file.

:mod:`.nodes` defines the tags and the value types that have no Python
builtin; :mod:`.encode` plans and streams a tree to disk; :mod:`.decode`
parses and validates one; :mod:`.layout` checks the data file rules.
"""

from .nodes import ArrayRef, NamedTupleValue, PRNGKeyValue, Tag

__all__ = ["ArrayRef", "NamedTupleValue", "PRNGKeyValue", "Tag"]
