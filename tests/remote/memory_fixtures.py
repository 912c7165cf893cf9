"""The ``memory://`` fixtures of the remote tests (a pytest plugin: the repository's ``conftest.py`` loads it)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture
def memfs() -> Any:
    """fsspec's in-memory filesystem (process-wide: each test works below its own prefix)."""
    return pytest.importorskip("fsspec").filesystem("memory")


@pytest.fixture
def mem_url(memfs: Any) -> Iterator[str]:
    """A fresh ``memory://`` prefix, removed after the test."""
    root = f"/oc-test-{uuid.uuid4().hex[:12]}"
    yield f"memory://{root}"
    if memfs.exists(root):
        memfs.rm(root, recursive=True)
