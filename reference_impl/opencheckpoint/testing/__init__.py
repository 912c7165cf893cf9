"""The OpenCheckpoint test kit, for adapter authors and for testing readers and writers.

Four modules, imported on demand (``import opencheckpoint`` imports none,
and this package imports none of them):

* :mod:`opencheckpoint.testing.strategies` — Hypothesis strategies for every
  tree node type, whole trees and checkpoint components, and
  :func:`~opencheckpoint.testing.strategies.assert_tree_equal`, an exact
  (bitwise) comparison of trees. Needs ``hypothesis``.
* :mod:`opencheckpoint.tree.compare` — :func:`assert_tree_equal` alone
  (NumPy only).
* :mod:`opencheckpoint.testing.adapter_tests` — :class:`AdapterTests`, a pytest
  base class: subclass it as ``TestMyAdapter``, say how to build your live
  object, and inherit the behaviour tests every adapter must pass. Needs ``pytest``.
* :mod:`opencheckpoint.testing.hostile_zip` — builders of malformed ZIP
  archives (every header field overridable), to prove a reader rejects them.

A layer above the public API: it may import any layer of the package (and
the package root), and nothing in the package imports it.

>>> from opencheckpoint.tree.compare import assert_tree_equal
>>> assert_tree_equal((1, "a"), (1, "a"))
>>> assert_tree_equal((1, "a"), [1, "a"])
Traceback (most recent call last):
...
AssertionError: $: type differs: tuple != list
"""

from __future__ import annotations

__all__: list[str] = []
