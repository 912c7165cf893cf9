"""Holding a save just before it writes one component, to test what happens while a save is in flight.

Shared by the async-save and rotation tests (``tests/publish``, ``tests/run``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from opencheckpoint.container import publish


@pytest.fixture(autouse=True)
def reset_fault_hook() -> Iterator[None]:
    """Leave no hold installed after a test (autouse where imported)."""
    yield
    publish.FAULT_HOOK = None


def hold_writes(component: str) -> tuple[threading.Event, threading.Event]:
    """Make writers stop before writing ``component`` until ``release`` is set; ``reached`` is set when one does."""
    reached, release = threading.Event(), threading.Event()

    def hook(operation: str) -> None:
        if operation == f"write-component:{component}":
            reached.set()
            assert release.wait(30)

    publish.FAULT_HOOK = hook
    return reached, release
