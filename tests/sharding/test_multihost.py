"""Multi-host, simulated honestly: ranks that share no local file system, only an S3 server (moto, loopback).

Three bounded launches, in order, share one bucket (a module fixture):

1. 2 "hosts" x 2 torch ranks (gloo): each host pair has its own ``TMPDIR`` and no local path is passed to any
   rank; an FSDP2 model and its Adam state are saved collectively to ``s3://``, then a save whose last rank's
   upload fails (``multihost_worker.py save``);
2. 2 ``jax.distributed`` CPU processes, each its own ``TMPDIR``: a collective save to ``s3://`` restored in another
   layout; the torch checkpoint restored onto a ``NamedSharding`` (each process reading only its rows' shards);
   processes loading different checkpoints (``jax_multihost_worker.py``);
3. 3 torch ranks on 2 hosts: the 4-rank torch checkpoint restored bit-exact (another world size), and the JAX
   processes' checkpoint restored into DTensors (``multihost_worker.py restore``).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch.distributed.tensor")
pytest.importorskip("jax")
pytest.importorskip("s3fs")
moto_server = pytest.importorskip("moto.server")

import torch  # noqa: E402

if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

pytestmark = pytest.mark.slow  # each launch starts 2 to 4 Python processes importing torch or JAX

HERE = Path(__file__).parent
#: Seconds a whole launch may take (process start and imports included) on 2 busy cores.
LAUNCH_BOUND = 150


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class Cluster:
    """The shared S3 server and bucket, the hosts' scratch directories, and each launch's output per process."""

    def __init__(self, root: Path) -> None:
        self.server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.server.start()
        host, port = self.server.get_host_and_port()
        self.env = {key: value for key, value in os.environ.items()
                    if not key.startswith("AWS_") and key not in ("XLA_FLAGS", "TMPDIR")}
        self.env.update({"AWS_ENDPOINT_URL": f"http://{host}:{port}", "AWS_ACCESS_KEY_ID": "testing",
                         "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "eu-west-1",
                         "AWS_CONFIG_FILE": "/dev/null", "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
                         "OMP_NUM_THREADS": "1", "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(HERE)})
        self.bucket = f"oc-{uuid.uuid4().hex[:12]}"
        self.hosts = [root / "host-a", root / "host-b"]
        for host_dir in self.hosts:
            host_dir.mkdir()
        self.s3 = self.filesystem()
        self.s3.mkdir(self.bucket)
        self.outputs: dict[str, list[str]] = {}

    def filesystem(self) -> Any:
        import s3fs

        return s3fs.S3FileSystem(skip_instance_cache=True, key="testing", secret="testing",
                                 client_kwargs={"endpoint_url": self.env["AWS_ENDPOINT_URL"],
                                                "region_name": "eu-west-1"})

    def launch(self, name: str, commands: list[list[str]], hosts: list[int]) -> list[str]:
        """Run one process per command, each with its host's ``TMPDIR``; every output (exit codes checked)."""
        procs = [subprocess.Popen([sys.executable, *command], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, env={**self.env, "TMPDIR": str(self.hosts[host])})
                 for command, host in zip(commands, hosts, strict=True)]
        outputs = []
        try:
            for proc in procs:
                stdout, stderr = proc.communicate(timeout=LAUNCH_BOUND)
                assert proc.returncode == 0, f"{name}: {stdout}{stderr[-3000:]}"
                outputs.append(stdout)
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        self.outputs[name] = outputs
        return outputs

    def torch_ranks(self, scenario: str, hosts: list[int]) -> list[str]:
        port, world = str(_free_port()), len(hosts)
        return self.launch(scenario, [[str(HERE / "multihost_worker.py"), scenario, str(rank), str(world), port,
                                       self.bucket] for rank in range(world)], hosts)

    def jax_processes(self) -> list[str]:
        port = str(_free_port())
        return self.launch("jax", [[str(HERE / "jax_multihost_worker.py"), str(pid), port, self.bucket]
                                   for pid in range(2)], [0, 1])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    cluster = Cluster(tmp_path_factory.mktemp("multihost"))
    try:
        cluster.torch_ranks("save", [0, 0, 1, 1])  # 2 hosts x 2 ranks
        cluster.jax_processes()
        cluster.torch_ranks("restore", [0, 0, 1])  # another world size, on 2 hosts
        for name, outputs in cluster.outputs.items():  # shown with -s: what each process found
            print("".join(f"[{name}] {line}\n" for out in outputs for line in out.splitlines()))
        yield cluster
    finally:
        cluster.server.stop()


def _lines(output: str, marker: str) -> list[str]:
    return [line.split(marker, 1)[1] for line in output.splitlines() if marker in line]


def test_four_ranks_on_two_hosts_save_to_s3_each_uploading_its_own_shards(cluster: Cluster) -> None:
    for rank, out in enumerate(cluster.outputs["save"]):
        assert f"rank {rank}: saved" in out, out
        assert _lines(out, f"rank {rank}: scratch ") == [str(cluster.hosts[rank // 2])]  # its host's own
        uploads = _lines(out, f"rank {rank}: uploads ")
        if rank == 0:
            assert uploads == [], out  # the coordinator's objects go with its commit, manifest last
        else:  # each other rank's own shard objects, straight to the store, in both saves
            assert [json.loads(line.split(" to ")[0]) for line in uploads] == [
                [f"components/{name}/shards/rank-0000{rank}.bin" for name in ("model", "optim")]] * 2, out
    found = sorted(cluster.s3.find(f"{cluster.bucket}/torch"))
    assert [f"{cluster.bucket}/torch/components/model/shards/rank-0000{r}.bin" in found for r in range(4)] == [True] * 4
    assert found[-1] == f"{cluster.bucket}/torch/manifest.json"
    for host_dir in cluster.hosts:  # no scratch of ours left on either host (torch keeps caches of its own there)
        assert [p.name for p in host_dir.iterdir() if p.name.startswith("opencheckpoint")] == []


def test_a_rank_whose_upload_fails_leaves_no_manifest_and_no_object_and_every_rank_raises(cluster: Cluster) -> None:
    from opencheckpoint import validate

    for rank, out in enumerate(cluster.outputs["save"]):
        raised = _lines(out, f"rank {rank}: failed save raised ")
        assert len(raised) == 1 and "the store went away under rank 3" in raised[0], out
        assert rank == 3 or ": rank 3: " in raised[0], raised
    assert not cluster.s3.exists(f"{cluster.bucket}/failed/manifest.json")
    assert cluster.s3.find(f"{cluster.bucket}/failed") == []  # every rank withdrew its objects
    assert [n for n in cluster.s3.ls(cluster.bucket) if ".oc-" in n] == []  # and its writer marker
    cluster.s3.invalidate_cache()
    from opencheckpoint.remote import FsPath

    assert validate(FsPath(cluster.filesystem(), f"{cluster.bucket}/torch")).ok  # the earlier checkpoint


def test_the_four_rank_torch_checkpoint_restores_bit_exact_on_three_ranks_from_s3(cluster: Cluster) -> None:
    for rank, out in enumerate(cluster.outputs["restore"]):
        assert f"rank {rank}: torch bit-exact True (12 arrays)" in out, out


def test_two_jax_processes_save_to_s3_and_restore_in_another_layout(cluster: Cluster) -> None:
    for pid, out in enumerate(cluster.outputs["jax"]):
        assert _lines(out, f"process {pid}: scratch ") == [str(cluster.hosts[pid])]
        assert f"process {pid}: jax bit-exact True" in out, out
        expected = [] if pid == 0 else [["components/params/shards/rank-00001.bin"]] * 2
        assert [json.loads(line) for line in _lines(out, f"process {pid}: uploads ")] == expected, out


def test_jax_processes_loading_different_checkpoints_all_raise_naming_the_difference(cluster: Cluster) -> None:
    for pid, out in enumerate(cluster.outputs["jax"]):
        raised = _lines(out, f"process {pid}: disagree raised ")
        assert len(raised) == 1 and raised[0].startswith("CollectiveError: "), out
        assert "every rank must load the same checkpoint" in raised[0] and "checkpoint (" in raised[0], raised


def test_fsdp2_checkpoint_restores_onto_a_jax_mesh_each_process_reading_only_its_rows(cluster: Cluster) -> None:
    for pid, out in enumerate(cluster.outputs["jax"]):
        assert f"process {pid}: torch->jax bit-exact True (4 arrays)" in out, out
        read = json.loads(_lines(out, f"process {pid}: torch->jax read ")[0])
        total = int(_lines(out, f"process {pid}: torch->jax stored bytes ")[0])
        # P('x') over a 4x2 mesh: process p holds rows of x = 2p, 2p+1, which FSDP2 ranks 2p, 2p+1 saved
        assert read["files"] == [f"shards/rank-0000{2 * pid + r}.bin" for r in range(2)], read
        assert read["shards"] == 8 and read["bytes"] == total // 2, (read, total)


def test_fsdp2_checkpoint_restores_into_an_nnx_model_sharded_over_both_processes(cluster: Cluster) -> None:
    for pid, out in enumerate(cluster.outputs["jax"]):
        assert f"process {pid}: torch->nnx bit-exact True" in out, out


def test_the_jax_checkpoint_restores_into_dtensors_on_three_torch_ranks(cluster: Cluster) -> None:
    for rank, out in enumerate(cluster.outputs["restore"]):
        assert f"rank {rank}: jax->dtensor bit-exact True" in out, out
        assert f"rank {rank}: jax->dtensor local [{[3, 3, 2][rank]}, 8] of 3 ranks" in out, out
