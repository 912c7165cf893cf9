"""Run by tests/core/test_suite_order.py only (not named test_*, so the suite does not collect it): four tests that
share a module fixture, each recording the xdist worker it ran on and how often the fixture was built."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

RECORD = Path(os.environ.get("OC_GROUP_PROBE_RECORD", os.devnull))


@pytest.fixture(scope="module")
def shared() -> Iterator[str]:
    with RECORD.open("a") as record:
        record.write(f"built {os.environ.get('PYTEST_XDIST_WORKER', 'main')}\n")
    yield "built once"


@pytest.mark.parametrize("index", range(4))
def test_uses_the_shared_fixture(shared: str, index: int) -> None:
    with RECORD.open("a") as record:
        record.write(f"ran {os.environ.get('PYTEST_XDIST_WORKER', 'main')}\n")
    assert shared == "built once"
