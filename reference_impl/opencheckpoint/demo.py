"""``make demo``: save, inspect, validate and reload a small checkpoint end to end (NumPy only)."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

from . import Checkpoint, read_component, validate
from .cli import main as cli_main


def main() -> int:
    rng = np.random.default_rng(0)
    weights = {"layer1": {"w": rng.standard_normal((64, 32), dtype=np.float32), "b": np.zeros(32, np.float32)}}
    config = {"lr": 3e-4, "gamma": 0.99}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "checkpoint"
        Checkpoint(weights=weights, config=config).save(path, metadata={"step": 100})
        print(f"saved {path}")
        cli_main(["inspect", str(path)])
        report = validate(path)
        print(f"validate: ok={report.ok}")
        loaded = read_component(path, "weights")
        same = np.array_equal(loaded["layer1"]["w"], weights["layer1"]["w"])
        print(f"reloaded weights bit-identical: {same}")
        return 0 if report.ok and same else 1


if __name__ == "__main__":
    sys.exit(main())
