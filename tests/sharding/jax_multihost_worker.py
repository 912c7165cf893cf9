"""One process of a 2-process ``jax.distributed`` CPU job for ``test_multihost.py``, run as a subprocess.

``python jax_multihost_worker.py PROCESS_ID PORT BUCKET``: 4 CPU devices per process (a global 4x2 mesh), its
own ``TMPDIR`` (set by the launcher), only the S3 server of ``AWS_ENDPOINT_URL`` shared. It runs while the 2 torch
ranks of ``multihost_worker.py resume`` do, and hands checkpoints to them through the store (``store_handoff``):

* ``jax``: a collective save of arrays sharded over both processes to ``s3://`` (the checkpoint the torch ranks
  restore into DTensors), restored in another layout;
* ``torch->jax``: once the 2 torch ranks have saved theirs, that FSDP2 checkpoint restored onto a
  ``NamedSharding``, each process reading only the shards of its own devices' rows (the shards and bytes it
  read are printed);
* ``torch->nnx``: the same into a Flax NNX model sharded over both processes (``restore_nnx``);
* ``disagree``: the processes load different checkpoints: both raise ``CollectiveError``, nothing restored.
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":  # not when pytest's doctest collection imports this file: its own process keeps 8
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"

import json
import tempfile

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from store_handoff import get_expected, read_summary, record_reads, wait_for_checkpoint

from opencheckpoint import Checkpoint, open_checkpoint
from opencheckpoint.remote import publish

FULL = np.arange(64, dtype=np.float32).reshape(8, 8)


def record_uploads(pid: int) -> None:
    """Print the objects this process uploads itself (process 1; process 0's go with its commit)."""
    upload = publish.RankUpload.upload

    def uploading(self: publish.RankUpload) -> None:
        print(f"process {pid}: uploads {json.dumps(self.objects)}", flush=True)
        upload(self)

    publish.RankUpload.upload = uploading  # type: ignore[method-assign]


def jax_round_trip(pid: int, bucket: str) -> None:
    mesh = jax.make_mesh((4, 2), ("x", "y"))
    w = jax.make_array_from_callback((8, 8), NamedSharding(mesh, P("x", "y")), lambda index: FULL[index])
    rows = jax.make_array_from_callback((8, 8), NamedSharding(mesh, P("x")), lambda index: FULL[index] * 2)
    for name in ("jax", "jax-other"):
        Checkpoint(params={"w": w, "rows": rows}, meta={"step": 3 if name == "jax" else 4}).save(
            f"s3://{bucket}/{name}", timeout=60)
    columns = NamedSharding(jax.make_mesh((2, 4), ("x", "y")), P(None, ("x", "y")))
    target = {"w": jax.ShapeDtypeStruct((8, 8), np.float32, sharding=columns), "rows": rows}
    loaded = Checkpoint(params=target, meta={"step": 0}).load(f"s3://{bucket}/jax", timeout=60).values
    restored = loaded["params"]
    same = loaded["meta"]["step"] == 3 and restored["w"].sharding == columns and all(
        np.array_equal(np.asarray(s.data), FULL[s.index]) for s in restored["w"].addressable_shards) and all(
        np.array_equal(np.asarray(s.data), FULL[s.index] * 2) for s in restored["rows"].addressable_shards)
    print(f"process {pid}: jax bit-exact {same}", flush=True)


def torch_to_jax(pid: int, bucket: str) -> None:
    """The user's lines: a mesh, an abstract target per stored key, one load (2 FSDP2 ranks saved ``torch2``)."""
    expected = get_expected(f"{bucket}/expected/torch2.npz")
    reads = record_reads()
    # the lines of docs/scaling-out.md "Across frameworks and processes"
    mesh = jax.make_mesh((4, 2), ("x", "y"))
    with open_checkpoint(f"s3://{bucket}/torch2") as stored:  # shapes and dtypes only, no array read
        target = {k: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=NamedSharding(mesh, P("x")))
                  for k, a in stored.tree("model").items()}
    assert not reads, "opening the checkpoint for its shapes read no shard"
    weights = Checkpoint(model=target).load(f"s3://{bucket}/torch2").values["model"]
    same = all(weights[key].sharding == NamedSharding(mesh, P("x")) and all(
        np.array_equal(np.asarray(s.data), expected[f"model.{key}"][s.index]) for s in weights[key].addressable_shards)
        for key in target)
    print(f"process {pid}: torch->jax bit-exact {same} ({len(target)} arrays)", flush=True)
    print(f"process {pid}: torch->jax read {read_summary(reads)}", flush=True)
    total = sum(array.nbytes for key, array in expected.items() if key.startswith("model."))
    print(f"process {pid}: torch->jax stored bytes {total}", flush=True)


def torch_to_nnx(pid: int, bucket: str) -> None:
    """The same checkpoint into a Flax NNX model sharded over both processes (``restore_nnx`` agrees too)."""
    from flax import nnx

    from opencheckpoint.adapters.jax import restore_nnx
    from opencheckpoint.tools.interchange import torch_to_nnx_rename

    class MLP(nnx.Module):  # the NNX twin of the torch Sequential(Linear(8, 16), ReLU(), Linear(16, 8))
        def __init__(self, rngs: nnx.Rngs) -> None:
            self.hidden, self.out = nnx.Linear(8, 16, rngs=rngs), nnx.Linear(16, 8, rngs=rngs)

    expected = get_expected(f"{bucket}/expected/torch2.npz")
    mesh = jax.make_mesh((4, 2), ("x", "y"))
    graphdef, abstract = nnx.split(nnx.eval_shape(lambda: MLP(nnx.Rngs(0))))
    abstract = jax.tree_util.tree_map(lambda s: jax.ShapeDtypeStruct(
        s.shape, s.dtype, sharding=NamedSharding(mesh, P("x", "y") if len(s.shape) == 2 else P("x"))), abstract)
    model = restore_nnx(f"s3://{bucket}/torch2", "model", (graphdef, abstract),
                        rename=torch_to_nnx_rename({"0": "hidden", "2": "out"}, transpose=True))
    same = all(all(np.array_equal(np.asarray(s.data), expected[f"model.{key}.weight"].T[s.index])
                   for s in getattr(model, name).kernel.get_value().addressable_shards)
               for name, key in (("hidden", "0"), ("out", "2")))
    print(f"process {pid}: torch->nnx bit-exact {same}", flush=True)


def disagree(pid: int, bucket: str) -> None:
    """Process 1 loads another checkpoint than process 0: every process raises, naming the difference."""
    mesh = jax.make_mesh((4, 2), ("x", "y"))
    sharding = NamedSharding(mesh, P("x"))
    target = {"w": jax.ShapeDtypeStruct((8, 8), np.float32, sharding=sharding),
              "rows": jax.ShapeDtypeStruct((8, 8), np.float32, sharding=sharding)}
    try:
        Checkpoint(params=target).load(f"s3://{bucket}/{'jax' if pid == 0 else 'jax-other'}", timeout=30)
    except Exception as exc:
        print(f"process {pid}: disagree raised {type(exc).__name__}: {exc}", flush=True)
    else:
        print(f"process {pid}: disagree loaded", flush=True)


def main() -> None:
    pid, port, bucket = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=2, process_id=pid, initialization_timeout=60)
    print(f"process {pid}: scratch {tempfile.gettempdir()}", flush=True)
    record_uploads(pid)
    jax_round_trip(pid, bucket)
    wait_for_checkpoint(f"{bucket}/torch2", f"process {pid}")  # the 2 torch ranks save it meanwhile
    torch_to_jax(pid, bucket)
    torch_to_nnx(pid, bucket)
    disagree(pid, bucket)
    jax.distributed.shutdown()  # together: process 0 hosts the coordination service


if __name__ == "__main__":
    main()
