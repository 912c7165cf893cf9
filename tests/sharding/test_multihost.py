"""Multi-host, simulated honestly: ranks that share no local file system, only an S3 server (moto, loopback).

Two bounded launches share one bucket (a module fixture); every process has its "host"'s own ``TMPDIR``, no
local path is passed to any, and every location is an ``s3://`` URL:

1. 2 "hosts" x 2 torch ranks (gloo): an FSDP2 model and its Adam state saved collectively, then a save whose
   last rank's upload fails (``multihost_worker.py save``);
2. at the same time, 2 torch ranks on the 2 hosts (``multihost_worker.py resume``) and 2 ``jax.distributed``
   CPU processes (``jax_multihost_worker.py``), handing checkpoints to each other through the store only:

   * the torch ranks restore the 4-rank checkpoint (another world size), train a step and save it on 2 ranks;
   * the JAX processes save their own checkpoint (and restore it in another layout), then, once the torch ranks'
     manifest is there, restore that 2-rank FSDP2 checkpoint onto a ``NamedSharding`` (each process reading only
     its rows) and into NNX, then load different checkpoints (both raise);
   * the torch ranks, once the JAX manifest is there, restore the JAX checkpoint into DTensors on 2 ranks.

The figures printed at the end (with ``-s``) are what docs/scaling-out.md quotes.
"""

from __future__ import annotations

import importlib.util
import json
import os
import resource
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("s3fs")
moto_server = pytest.importorskip("moto.server")
# Only the workers use JAX and DTensors: looked up, not imported here (seconds of CPU each)
for _name in ("jax", "torch.distributed.tensor"):
    if importlib.util.find_spec(_name) is None:
        pytest.skip(f"{_name} is not installed", allow_module_level=True)
if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

pytestmark = pytest.mark.slow(seconds=9)  # 10 tests, 90 s: each launch starts 4 processes importing torch or JAX

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
#: Seconds a whole launch may take (process start and imports included) on 2 busy cores: every process of a
#: launch is killed then, and the launch fails naming those still running.
LAUNCH_BOUND = 240


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class Cluster:
    """The shared S3 server and bucket, the hosts' scratch directories, and each job's output per process."""

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
        self.logs = root / "logs"  # not on a host: the launcher's own
        self.hosts = [root / "host-a", root / "host-b"]
        for folder in (self.logs, *self.hosts):
            folder.mkdir()
        self.s3 = self.filesystem()
        self.s3.mkdir(self.bucket)
        self.outputs: dict[str, list[str]] = {}
        self.figures: list[str] = []

    def filesystem(self) -> Any:
        import s3fs

        return s3fs.S3FileSystem(skip_instance_cache=True, key="testing", secret="testing",
                                 client_kwargs={"endpoint_url": self.env["AWS_ENDPOINT_URL"],
                                                "region_name": "eu-west-1"})

    def torch_ranks(self, job: str, hosts: list[int]) -> list[tuple[list[str], int]]:
        port, world = str(_free_port()), len(hosts)
        return [([str(HERE / "multihost_worker.py"), job, str(rank), str(world), port, self.bucket], host)
                for rank, host in enumerate(hosts)]

    def jax_processes(self) -> list[tuple[list[str], int]]:
        port = str(_free_port())
        return [([str(HERE / "jax_multihost_worker.py"), str(pid), port, self.bucket], pid) for pid in range(2)]

    def launch(self, jobs: dict[str, list[tuple[list[str], int]]]) -> None:
        """Start every process of every job at once, each with its host's ``TMPDIR``; wait for all of them.

        The first process to fail (or the bound) kills the others at once: a job waiting for a checkpoint the
        failed one would have saved does not wait out its own timeout. Each job's outputs go to ``outputs``."""
        started, before = time.monotonic(), resource.getrusage(resource.RUSAGE_CHILDREN)
        procs = {}
        for job, commands in jobs.items():
            for index, (command, host) in enumerate(commands):
                log = self.logs / f"{job}-{index}"
                with open(f"{log}.out", "w") as out, open(f"{log}.err", "w") as err:
                    procs[log] = subprocess.Popen([sys.executable, *command], stdout=out, stderr=err,
                                                  env={**self.env, "TMPDIR": str(self.hosts[host])})
        try:
            self._wait(procs, started)
        finally:
            for proc in procs.values():
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        for job, commands in jobs.items():
            self.outputs[job] = [(self.logs / f"{job}-{index}.out").read_text() for index in range(len(commands))]
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
        self.figures.append(f"launch {' + '.join(jobs)}: {len(procs)} processes, "
                            f"{time.monotonic() - started:.1f} s wall, {cpu:.1f} s CPU (user+sys)")

    @staticmethod
    def _wait(procs: dict[Path, subprocess.Popen[bytes]], started: float) -> None:
        """Until every process has ended with 0; an assertion with the failed one's output, or after the bound."""
        while True:
            codes = {log: proc.poll() for log, proc in procs.items()}
            for log, code in codes.items():
                assert code in (None, 0), f"{log.name} failed: {Path(f'{log}.out').read_text()}" + Path(
                    f"{log}.err").read_text()[-3000:]
            if None not in codes.values():
                return
            running = [log.name for log, code in codes.items() if code is None]
            assert time.monotonic() - started < LAUNCH_BOUND, f"still running after {LAUNCH_BOUND} s: {running}"
            time.sleep(0.2)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    cluster = Cluster(tmp_path_factory.mktemp("multihost"))
    try:
        cluster.launch({"save": cluster.torch_ranks("save", [0, 0, 1, 1])})  # 2 hosts x 2 ranks
        # 2 ranks (another world size, one per host) and 2 JAX processes, at once, handing over through the store
        cluster.launch({"resume": cluster.torch_ranks("resume", [0, 1]), "jax": cluster.jax_processes()})
        for name, outputs in cluster.outputs.items():  # shown with -s: what each process found
            print("".join(f"[{name}] {line}\n" for out in outputs for line in out.splitlines()))
        print("".join(f"[figures] {line}\n" for line in cluster.figures))
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
    found = sorted(cluster.s3.find(f"{cluster.bucket}/torch/"))
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


def test_the_four_rank_torch_checkpoint_restores_bit_exact_on_two_ranks_from_s3(cluster: Cluster) -> None:
    for rank, out in enumerate(cluster.outputs["resume"]):
        assert _lines(out, f"rank {rank}: scratch ") == [str(cluster.hosts[rank])]  # one rank per host
        assert f"rank {rank}: torch bit-exact True (12 arrays) on 2 ranks" in out, out


def test_two_torch_ranks_save_the_checkpoint_the_jax_processes_restore(cluster: Cluster) -> None:
    for rank, out in enumerate(cluster.outputs["resume"]):
        assert f"rank {rank}: saved torch2" in out, out
    found = cluster.s3.find(f"{cluster.bucket}/torch2/components/model/shards/")
    assert sorted(path.rsplit("/", 1)[1] for path in found) == ["rank-00000.bin", "rank-00001.bin"]  # 2 ranks saved


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


def test_two_rank_fsdp2_checkpoint_restores_onto_a_jax_mesh_each_process_reading_only_its_rows(
        cluster: Cluster) -> None:
    for pid, out in enumerate(cluster.outputs["jax"]):
        assert f"process {pid}: torch->jax bit-exact True (4 arrays)" in out, out
        read = json.loads(_lines(out, f"process {pid}: torch->jax read ")[0])
        total = int(_lines(out, f"process {pid}: torch->jax stored bytes ")[0])
        # P('x') over a 4x2 mesh: process p holds rows of x = 2p, 2p+1: the half FSDP2 rank p saved
        assert read == {"files": [f"shards/rank-0000{pid}.bin"], "shards": 4, "bytes": total // 2}, (read, total)


def test_two_rank_fsdp2_checkpoint_restores_into_an_nnx_model_sharded_over_both_processes(cluster: Cluster) -> None:
    for pid, out in enumerate(cluster.outputs["jax"]):
        assert f"process {pid}: torch->nnx bit-exact True" in out, out


def test_the_jax_checkpoint_restores_into_dtensors_on_two_torch_ranks_each_reading_only_its_rows(
        cluster: Cluster) -> None:
    for rank, out in enumerate(cluster.outputs["resume"]):
        assert f"rank {rank}: jax->dtensor bit-exact True" in out, out
        assert f"rank {rank}: jax->dtensor local [4, 8] of 2 ranks" in out, out
        # rows 4r..4r+3 of both arrays: what JAX process r's devices held, in its own shard file; half the bytes
        read = json.loads(_lines(out, f"rank {rank}: jax->dtensor read ")[0])
        # (w: 2 row blocks x 2 column blocks, rows: 2 row blocks; 2 arrays of 8x8 float32, 512 bytes stored)
        assert read == {"files": [f"shards/rank-0000{rank}.bin"], "shards": 6, "bytes": 512 // 2}, read


def test_the_scaling_out_page_shows_the_lines_the_processes_run() -> None:
    """The cross-framework snippets of docs/scaling-out.md are the workers' lines, verbatim and in one piece once
    the workers' own checks (``assert`` lines) are left out; each is at most 5 lines."""
    page = (ROOT / "docs" / "scaling-out.md").read_text()
    section = page.split("### Across frameworks and processes", 1)[1].split("\n## ", 1)[0]
    snippets = [block.split("\n", 1)[1].split("```", 1)[0] for block in section.split("```text")[1:]]
    assert len(snippets) == 2, snippets  # torch -> JAX, then JAX -> torch
    for snippet, worker in zip(snippets, ("jax_multihost_worker.py", "multihost_worker.py"), strict=True):
        lines = (HERE / worker).read_text().splitlines(keepends=True)
        run = "".join(line for line in lines if not line.lstrip().startswith("assert "))
        assert len(snippet.splitlines()) <= 5, snippet
        assert textwrap.indent(snippet, "    ") in run, (worker, snippet)
