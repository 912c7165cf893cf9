"""Helpers of the conformance tests: paths, and loading the top-level conformance scripts."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
CONFORMANCE = ROOT / "conformance"
CASES = CONFORMANCE / "cases" / "v1"


def load_script(name: str) -> ModuleType:
    """Import ``conformance/<name>.py`` (they are scripts, not a package) as ``oc_conformance_<name>``."""
    module_name = f"oc_conformance_{name}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, CONFORMANCE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module
