"""Issue 25 on real process groups: gloo ranks (FSDP2) and a JAX mesh of 8 CPU devices, each launch bounded.

* differing plain values refused on every rank naming the key; ``PerRank`` stored per rank and restored to each;
  a collective save to ``memory://`` (one process's memory) refused on every rank (``values``);
* ``rename=`` into an FSDP2 model, each rank opening only the shard files of its rows (``rename``);
* FSDP2 (2 ranks) -> Flax NNX on a 4x2 JAX mesh -> FSDP2, bit-exact, names and transposes done by the restore
  plan inside region reads (``torch-save``, the JAX script, ``torch-load-nnx``).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch.distributed.tensor")
if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

pytestmark = pytest.mark.slow  # each launch starts 2 Python processes importing torch

WORKER = Path(__file__).with_name("restore_worker.py")
#: Seconds a whole launch may take (process start and imports included) on 2 busy cores.
LAUNCH_BOUND = 150


def launch(scenario: str, world: int, path: Path | str) -> list[str]:
    """Run ``world`` ranks of ``scenario``; each rank's output (its exit code checked)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(WORKER.parent)}
    ranks = [subprocess.Popen([sys.executable, str(WORKER), scenario, str(rank), str(world), str(port), str(path)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for rank in range(world)]
    outputs = []
    try:
        for rank in ranks:
            stdout, stderr = rank.communicate(timeout=LAUNCH_BOUND)
            assert rank.returncode == 0, stdout + stderr[-3000:]
            outputs.append(stdout)
    finally:
        for rank in ranks:
            if rank.poll() is None:
                rank.kill()
    return outputs


def test_differing_values_are_refused_per_rank_values_restore_to_each_rank_and_process_memory_is_refused(
        tmp_path: Path) -> None:
    for rank, out in enumerate(launch("values", 2, tmp_path)):
        assert f"rank {rank}: differing: raised UnsupportedValue field=$.plain: " in out, out
        assert "saved the value at $.plain of components/extra differing from the coordinator's" in out
        assert f"rank {rank}: per-rank: ok" in out and f"rank {rank}: load: ok" in out, out
        assert f"rank {rank}: restored {10 + rank} {[rank] * 3}" in out, out
        assert f"rank {rank}: url: raised UnsupportedLocation" in out and "memory of one process" in out, out
        assert "opencheckpoint-upload" not in out
    assert not (tmp_path / "a").exists()


def test_rename_into_fsdp2_reads_each_ranks_rows_by_the_renamed_key_and_refuses_an_unmatched_key(
        tmp_path: Path) -> None:
    """7 rows saved as 4+3 by 2 ranks: each rank opens only its own rank file (the layouts agree)."""
    for rank, out in enumerate(launch("rename", 2, tmp_path / "ckpt")):
        assert f"rank {rank}: rename: ok" in out, out
        assert f"rank {rank}: bit-exact True" in out, out
        opened = json.loads(next(line for line in out.splitlines() if line.startswith(f"rank {rank}: opened "))
                            .split(": opened ", 1)[1])
        assert opened == [f"components/model/shards/rank-0000{rank}.bin"], opened
        assert f"rank {rank}: unmatched: raised IncompatibleComponent" in out, out
        assert "rename= key 'module.' matches no stored key path" in out, out


JAX_SCRIPT = textwrap.dedent("""
    import os, sys
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
    import jax, numpy as np
    from flax import nnx
    from jax.sharding import NamedSharding, PartitionSpec as P
    from opencheckpoint import Checkpoint
    from opencheckpoint.adapters.jax import restore_nnx
    from opencheckpoint.tools.interchange import torch_to_nnx_rename

    class MLP(nnx.Module):
        def __init__(self, rngs):
            self.hidden = nnx.Linear(8, 16, rngs=rngs)
            self.out = nnx.Linear(16, 8, rngs=rngs)

    torch_path, nnx_path = sys.argv[1], sys.argv[2]
    mesh = jax.make_mesh((4, 2), ("x", "y"))
    graphdef, abstract = nnx.split(nnx.eval_shape(lambda: MLP(nnx.Rngs(0))))
    abstract = jax.tree_util.tree_map(lambda s: jax.ShapeDtypeStruct(
        s.shape, s.dtype, sharding=NamedSharding(mesh, P("x", "y") if len(s.shape) == 2 else P("x"))), abstract)
    reads = []
    from opencheckpoint.read.sharded import ShardedReads
    original = ShardedReads.shard
    def shard(self, record, *, verify):
        reads.append(record.file)
        return original(self, record, verify=verify)
    ShardedReads.shard = shard
    rename = torch_to_nnx_rename({"0": "hidden", "2": "out"}, transpose=True)  # names and transposes
    model = restore_nnx(torch_path, "model", (graphdef, abstract), rename=rename)
    expected = np.load(torch_path + ".expected.npz")
    kernel = model.hidden.kernel.get_value()
    assert kernel.sharding == NamedSharding(mesh, P("x", "y")), kernel.sharding
    for name, torch_name in (("hidden", "0"), ("out", "2")):
        layer = getattr(model, name)
        assert np.array_equal(np.asarray(layer.kernel.get_value()), expected[torch_name + ".weight"].T), name
        assert np.array_equal(np.asarray(layer.bias.get_value()), expected[torch_name + ".bias"]), name
    print("nnx: bit-exact", sorted(set(reads)), flush=True)
    Checkpoint(model=model).save(nnx_path)
    print("nnx: saved", flush=True)
""")


def test_fsdp2_on_two_ranks_to_nnx_on_a_jax_mesh_and_back_is_bit_exact(tmp_path: Path) -> None:
    pytest.importorskip("flax")
    for rank, out in enumerate(launch("torch-save", 2, tmp_path / "torch")):
        assert f"rank {rank}: saved" in out, out
    script = tmp_path / "nnx_side.py"
    script.write_text(JAX_SCRIPT)
    jax_side = subprocess.run([sys.executable, str(script), str(tmp_path / "torch"), str(tmp_path / "nnx")],
                              capture_output=True, text=True, timeout=LAUNCH_BOUND,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert jax_side.returncode == 0, jax_side.stdout + jax_side.stderr[-3000:]
    assert "nnx: bit-exact ['shards/rank-00000.bin', 'shards/rank-00001.bin']" in jax_side.stdout, jax_side.stdout
    for rank, out in enumerate(launch("torch-load-nnx", 2, tmp_path / "nnx")):
        assert f"rank {rank}: nnx->fsdp2: ok" in out, out
        assert f"rank {rank}: bit-exact True" in out, out
