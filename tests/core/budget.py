"""How much of a campaign a test run pays for: the bounded sample in ``make test``, the whole under ``--long``.

The root ``conftest.py`` sets :data:`LONG` from pytest's ``--long`` option (``make test-long``) before any test
module is imported, so a module-level ``settings(max_examples=examples(120))`` sees it.

>>> examples(120, long=False), examples(120, long=True), examples(20, long=False)
(30, 120, 10)
"""

from __future__ import annotations

#: True under ``pytest --long``; set by the root conftest.py at start-up.
LONG = False


def examples(count: int, *, long: bool | None = None) -> int:
    """Hypothesis examples for a property: ``count`` under ``--long``, a quarter of it (at least 10) otherwise."""
    if LONG if long is None else long:
        return count
    return max(10, count // 4)
