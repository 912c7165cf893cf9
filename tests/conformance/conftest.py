"""Fixtures of the conformance tests."""

from __future__ import annotations

from typing import Any

import pytest
from oc_conformance_helpers import CASES


@pytest.fixture(scope="session")
def reference_report() -> Any:
    """The reference implementation run in-process as reader and writer over every case (once per session)."""
    import json

    from oc_conformance_helpers import CONFORMANCE

    from opencheckpoint.conformance.runner import reference_command, run

    known = json.loads((CONFORMANCE / "known-failures.json").read_text(encoding="utf-8"))
    return run(reader=reference_command(), writer=reference_command(), cases_dir=CASES, known_failures=known)
