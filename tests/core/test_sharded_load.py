"""A sharded checkpoint loads into plain, unsharded live objects in one process (torch module, NumPy arrays)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from opencheckpoint import Checkpoint, open_checkpoint
from opencheckpoint.format.errors import IntegrityError
from opencheckpoint.format.manifest import serialize_manifest
from opencheckpoint.testing.sharded import DataFiles, write_checkpoint
from opencheckpoint.tools.inspect import describe

R0, R1 = "shards/rank-00000.bin", "shards/rank-00001.bin"


def sharded_linear(path: Path, weight: np.ndarray, bias: np.ndarray) -> Path:
    """A torch Linear's state as rank 0 and rank 1 of a row-sharded save would store it (bias replicated)."""
    files = DataFiles()
    rows = weight.shape[0] // 2
    node = {"weight": files.sharded(weight, [(R0, (0, 0), (rows, weight.shape[1])),
                                             (R1, (rows, 0), (weight.shape[0] - rows, weight.shape[1]))]),
            "bias": files.array(bias)}
    write_checkpoint(path, {"model": (node, files)})
    body = json.loads((path / "manifest.json").read_bytes())
    body.pop("manifest_crc32c")
    body["components"]["model"]["hints"] = {"framework": "torch", "class": "torch.nn.modules.linear.Linear"}
    (path / "manifest.json").write_bytes(serialize_manifest(body))
    return path


def test_a_plain_torch_module_loads_a_sharded_checkpoint(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    weight = np.arange(24, dtype=np.float32).reshape(6, 4)
    bias = np.linspace(-1, 1, 6).astype(np.float32)
    path = sharded_linear(tmp_path / "c", weight, bias)
    module = torch.nn.Linear(4, 6)
    Checkpoint(model=module).load(path)
    assert np.array_equal(module.weight.detach().numpy(), weight)
    assert np.array_equal(module.bias.detach().numpy(), bias)


def test_a_corrupt_shard_leaves_the_live_module_unchanged(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    path = sharded_linear(tmp_path / "c", np.ones((6, 4), np.float32), np.zeros(6, np.float32))
    raw = bytearray((path / "components/model" / R1).read_bytes())
    raw[3] ^= 0x40
    (path / "components/model" / R1).write_bytes(bytes(raw))
    module = torch.nn.Linear(4, 6)
    before = module.weight.detach().clone()
    with pytest.raises(IntegrityError):
        Checkpoint(model=module).load(path)
    assert torch.equal(module.weight.detach(), before)


def test_numpy_targets_and_inspect_see_the_global_array(tmp_path: Path) -> None:
    weight = np.arange(12, dtype=np.float32).reshape(6, 2)
    path = sharded_linear(tmp_path / "c", weight, np.zeros(6, np.float32))
    live = {"weight": np.zeros((6, 2), np.float32), "bias": np.ones(6, np.float32)}
    with open_checkpoint(path) as ckpt:
        tree = ckpt.read_into("model", live)
    assert np.array_equal(tree["weight"], weight) and bool((live["bias"] == 0).all())
    summary = describe(path)
    arrays = {a["path"]: a for a in summary["components"]["model"]["arrays"]}
    assert summary["ok"] and summary["format_version"] == 2
    assert arrays["$.weight"]["shape"] == [6, 2] and arrays["$.weight"]["shards"] == 2
