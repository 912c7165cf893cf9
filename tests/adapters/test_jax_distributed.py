"""Two and four JAX processes (``jax.distributed`` on CPU, loopback, gloo) save one sharded checkpoint; one
process loads it.

The global mesh always has 8 CPU devices (4x2, ``P('x', 'y')``): 4 in each of 2 processes, or 2 in each of
4; each process writes only its own shards and the coordinator (process 0) publishes once; then each
process restores its own devices' blocks of another layout. Bounded: every wait has a timeout.
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

jax = pytest.importorskip("jax")

import numpy as np  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from opencheckpoint import Checkpoint, open_checkpoint, read_component  # noqa: E402

pytestmark = pytest.mark.jax

WORKER = textwrap.dedent("""
    import os, sys
    nproc = int(sys.argv[5])
    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={8 // nproc}"
    import jax
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P

    port, process_id, path, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=nproc, process_id=process_id,
                               initialization_timeout=60)
    from opencheckpoint import Checkpoint
    from opencheckpoint.adapters.jax_collective import JaxCollective
    from opencheckpoint.format.errors import CheckpointError, UnsupportedValue

    full = np.arange(64, dtype=np.float32).reshape(8, 8)
    mesh = jax.make_mesh((4, 2), ("x", "y"))
    w = jax.make_array_from_callback((8, 8), NamedSharding(mesh, P("x", "y")), lambda index: full[index])
    rows = jax.make_array_from_callback((8, 8), NamedSharding(mesh, P("x")), lambda index: full[index] * 2)
    bias = jax.make_array_from_callback((8,), NamedSharding(mesh, P()), lambda index: full[0][index])  # replicated
    timeout = float(os.environ["OC_TEST_TIMEOUT"])

    class DiesBeforeReporting(JaxCollective):
        def gather_bytes(self, data, root=0):
            os._exit(7)  # process 1 wrote its shard file into the staging directory, then dies

    # "save": a jax.distributed job of 2 processes saves collectively by default; "die": the collective given
    group = None if mode == "save" else (DiesBeforeReporting if process_id == 1 else JaxCollective)(timeout=timeout)
    try:
        Checkpoint(state={"w": w, "rows": rows, "bias": bias, "step": 3}).save(path, process_group=group,
                                                                               timeout=timeout)
    except CheckpointError as exc:
        print(f"failed: {type(exc).__name__}: {exc}", flush=True)
        os._exit(5)
    # every process restores its own devices' blocks of another layout (no collective needed to load)
    columns = NamedSharding(jax.make_mesh((2, 4), ("x", "y")), P(None, ("x", "y")))
    target = {"w": jax.ShapeDtypeStruct((8, 8), np.float32, sharding=columns), "rows": rows, "bias": bias, "step": 0}
    restored = Checkpoint(state=target).load(path).values["state"]
    assert restored["w"].sharding == columns and restored["step"] == 3
    for shard in restored["w"].addressable_shards:
        assert (np.asarray(shard.data) == full[shard.index]).all(), shard.index
    assert (np.asarray(restored["bias"].addressable_data(0)) == full[0]).all()
    print("saved and restored", flush=True)
    # PRNG keys sharded over the processes: no process holds their whole data, which a key node stores
    key_data = np.asarray(jax.random.key_data(jax.random.split(jax.random.key(0), 8)))
    keys = jax.random.wrap_key_data(jax.make_array_from_callback((8, 2), NamedSharding(mesh, P("x")),
                                                                 lambda index: key_data[index]))
    try:
        Checkpoint(state={"k": keys}).save(path + "-keys", timeout=timeout)
    except UnsupportedValue as exc:
        print(f"keys refused: {exc}", flush=True)
    # Each process saving alone (not the collective form) to one path: refused, nothing written (issue 20)
    from opencheckpoint.sharding import LocalCollective
    try:
        Checkpoint(state={"w": w}).save(path + "-alone", process_group=LocalCollective(), timeout=timeout)
    except UnsupportedValue as exc:
        print(f"alone refused: {exc}", flush=True)
    # Every process is alive here: leave together (a barrier), so that process 0, which hosts JAX's
    # coordination service, never exits while another process still talks to it (that one would abort).
    jax.distributed.shutdown()
    os._exit(0)
""")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _launch(tmp_path: Path, target: Path, mode: str, timeout_s: float,
            nproc: int = 2) -> list[subprocess.CompletedProcess[str]]:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    port = str(_free_port())
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "OC_TEST_TIMEOUT": str(timeout_s)}
    env.pop("XLA_FLAGS", None)
    procs = [subprocess.Popen([sys.executable, str(script), port, str(rank), str(target), mode, str(nproc)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for rank in range(nproc)]
    done = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=120)
            done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return done


# 2 processes in ``make test``; 4 (2 devices each, the same checks) in ``make test-long``: the launch of 4
# processes importing JAX costs twice the CPU of 2 and checks no path that 2 do not.
@pytest.mark.parametrize("nproc", [2, pytest.param(4, marks=pytest.mark.long)], ids=["2-processes", "4-processes"])
def test_processes_save_and_one_process_loads(tmp_path: Path, nproc: int) -> None:
    target = tmp_path / "ckpt"
    done = _launch(tmp_path, target, "save", 60, nproc)
    assert [d.returncode for d in done] == [0] * nproc, [d.stderr[-2000:] for d in done]
    assert all("saved and restored" in d.stdout for d in done)
    assert all("keys refused: " in d.stdout and "sharded over several processes" in d.stdout for d in done)
    assert all("alone refused: " in d.stdout and "collective form" in d.stdout for d in done)  # issue 20
    # keys and each process alone: nothing published, no debris
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt", "worker.py"]
    assert json.loads((target / "manifest.json").read_text())["format_version"] == 2
    ranks = sorted(p.name for p in target.rglob("rank-*.bin"))
    assert ranks == [f"rank-{rank:05d}.bin" for rank in range(nproc)]  # each process wrote its own shards
    full = np.arange(64, dtype=np.float32).reshape(8, 8)
    with open_checkpoint(target) as ckpt:
        stored = ckpt.tree("state")["rows"]
        regions = [(tuple(s.start), tuple(s.size)) for s in stored.ref.shards]
    assert len(regions) == len(set(regions)) == 4  # P('x') over 4x2: 4 row blocks, each stored once

    plain = read_component(target, "state")
    np.testing.assert_array_equal(plain["w"], full)
    np.testing.assert_array_equal(plain["rows"], full * 2)
    np.testing.assert_array_equal(plain["bias"], full[0])
    assert plain["step"] == 3
    if jax.device_count() >= 8:  # this process's own mesh (conftest.py gives it 8 devices)
        sharding = NamedSharding(jax.make_mesh((2, 4), ("x", "y")), P(None, "x"))
        abstract = {"w": jax.ShapeDtypeStruct((8, 8), np.float32, sharding=sharding),
                    "rows": jax.ShapeDtypeStruct((8, 8), np.float32, sharding=sharding),
                    "bias": np.zeros(8, np.float32), "step": 0}
        restored = Checkpoint(state=abstract).load(target).values["state"]
        assert restored["w"].sharding == sharding
        np.testing.assert_array_equal(np.asarray(restored["rows"]), full * 2)


@pytest.mark.slow(seconds=8)  # jax.distributed processes
def test_a_process_that_dies_means_nothing_is_published(tmp_path: Path) -> None:
    target = tmp_path / "ckpt"
    done = _launch(tmp_path, target, "die", 3)
    assert done[1].returncode == 7
    assert done[0].returncode == 5, done[0].stderr[-2000:]
    assert "CollectiveError" in done[0].stdout
    assert not target.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["worker.py"]  # the staging directory was removed


def test_jax_collective_without_jax_distributed_names_the_fix() -> None:
    from opencheckpoint.adapters.jax_collective import JaxCollective
    from opencheckpoint.sharding import CollectiveError

    with pytest.raises(CollectiveError, match=r"jax\.distributed\.initialize"):
        JaxCollective()
