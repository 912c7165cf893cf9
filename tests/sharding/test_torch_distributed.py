"""Collective saves on real gloo process groups (CPU): FSDP2 and DTensors on 4 ranks, a rank killed mid-save.

Each rank is a process of its own running ``dist_worker.py`` (forked from a preloaded interpreter:
``rank_launch.py``); every launch is bounded by
a timeout, so a hang fails the test instead of blocking the suite. Scenarios that leave the group healthy
share a launch (the 4-rank save and the spied save; the loads into FSDP2 on 2 ranks): starting the ranks,
each importing torch, is most of a launch's CPU. Killed and stalled ranks get a launch each.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
from pathlib import Path

import numpy as np
import pytest
from shard_helpers import read_raw

torch = pytest.importorskip("torch")
pytest.importorskip("torch.distributed.tensor")
if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

import rank_launch  # noqa: E402  (tests/sharding, on pytest's pythonpath: imports torch)

from opencheckpoint import Checkpoint, validate  # noqa: E402

pytestmark = pytest.mark.slow(seconds=3)  # 9 tests, 27 s: each launch starts 2-4 processes importing torch

WORKER = Path(__file__).with_name("dist_worker.py")
#: Seconds a whole launch may take (process start and torch import included) on 2 busy cores.
LAUNCH_BOUND = 150


def launch(scenario: str, world: int, *paths: Path | str) -> list[subprocess.CompletedProcess[str]]:
    """Run ``world`` ranks of ``scenario`` (``A+B``: several, one path each) against ``paths``; their exit codes
    and output."""
    path = os.pathsep.join(map(str, paths))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return rank_launch.launch(WORKER, [[scenario, str(rank), str(world), str(port), path] for rank in range(world)],
                              LAUNCH_BOUND, {**os.environ, "OMP_NUM_THREADS": "1"})


def section(output: str, scenario: str) -> str:
    """What a rank printed for one scenario of a launch of several."""
    return output.split(f"== {scenario}\n", 1)[1].split("\n== ", 1)[0]


@pytest.fixture(scope="module")
def four_rank_saves(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[str]]:
    """One launch of 4 ranks: the FSDP2 checkpoint the load tests read, then a save with its stages spied on
    (the checkpoint, the spied one, each rank's output)."""
    base = tmp_path_factory.mktemp("fsdp")
    results = launch("save+save-spied", 4, base / "ckpt", base / "spied")
    for result in results:
        assert result.returncode == 0, result.stderr[-3000:]
    return base / "ckpt", base / "spied", [result.stdout for result in results]


@pytest.fixture(scope="module")
def four_rank_checkpoint(four_rank_saves: tuple[Path, Path, list[str]]) -> Path:
    return four_rank_saves[0]


def test_four_ranks_save_fsdp2_parameters_optimizer_state_and_dtensors_as_sharded_arrays(
        four_rank_checkpoint: Path) -> None:
    path = four_rank_checkpoint
    body = json.loads((path / "manifest.json").read_bytes())
    assert body["format_version"] == 2
    expected = np.load(str(path) + ".expected.npz")
    model = read_raw(path, "model")
    for key in ("0.weight", "0.bias", "2.weight", "2.bias"):
        np.testing.assert_array_equal(model[key], expected[f"model.{key}"])
    optim = read_raw(path, "optim")
    for index in range(4):
        np.testing.assert_array_equal(optim["state"][index]["exp_avg"], expected[f"optim.{index}.exp_avg"])
    extra = read_raw(path, "extra")
    full = np.arange(48, dtype=np.float32).reshape(6, 8)
    for key, factor in (("rows", 1), ("copy", 2), ("grid", 3), ("half", 4), ("strided", 5), ("strided_grid", 6)):
        np.testing.assert_array_equal(extra[key], full * factor)
    np.testing.assert_array_equal(extra["plain"], np.arange(5))
    files = body["components"]["extra"]["files"]
    # 7 rows over 4 ranks is 2+2+2+1: every rank writes model shards; a replicated tensor is written once.
    assert [f for f in body["components"]["model"]["files"] if f.startswith("shards/")] == [
        f"shards/rank-0000{r}.bin" for r in range(4)]
    tree = (path / "components/extra/tree.msgpack").read_bytes()
    # rows: 6 rows in chunks of 2 leave rank 3 none (3 records); copy: replicated, written once; grid: a 2x2
    # block each; half: replicated over the first mesh dimension, two column halves written once each;
    # strided (rows 0+3, 1+4, 2+5, none) and strided_grid (rows 0+2, 1, 3+5, 4): one record per scattered row run.
    assert tree.count(b"shards/rank-") == 3 + 1 + 4 + 2 + 6 + 6
    assert "shards/rank-00003.bin" in files


def test_a_four_rank_checkpoint_restores_into_a_plain_model_in_one_process(four_rank_checkpoint: Path) -> None:
    from dist_worker import model

    net = model()
    optimizer = torch.optim.Adam(net.parameters(), lr=0.01)
    Checkpoint(model=net, optim=optimizer).load(four_rank_checkpoint)
    expected = np.load(str(four_rank_checkpoint) + ".expected.npz")
    for key, value in net.state_dict().items():
        np.testing.assert_array_equal(value.numpy(), expected[f"model.{key}"])
    for index, state in optimizer.state_dict()["state"].items():
        np.testing.assert_array_equal(state["exp_avg"].numpy(), expected[f"optim.{index}.exp_avg"])
    assert validate(four_rank_checkpoint).ok


def test_a_gloo_collective_save_runs_the_pipeline_plan_and_write_on_every_rank_commit_once(
        four_rank_saves: tuple[Path, Path, list[str]]) -> None:
    _, path, outputs = four_rank_saves
    stages = [json.loads(section(out, "save-spied").strip().rsplit("stages ", 1)[1]) for out in outputs]
    assert stages == [["plan", "write", "commit"]] + [["plan", "write"]] * 3  # the coordinator alone commits
    assert validate(path).ok


def test_a_rank_killed_mid_save_publishes_nothing_and_the_survivor_raises(tmp_path: Path) -> None:
    path = Checkpoint(state={"b": np.arange(3)}).save(tmp_path / "ckpt")
    before = (path / "manifest.json").read_bytes()
    survivor, killed = launch("die", 2, path)
    assert killed.returncode == -signal.SIGKILL
    assert survivor.returncode == 0, survivor.stderr[-3000:]
    assert "rank 0: raised CollectiveError" in survivor.stdout, survivor.stdout + survivor.stderr[-2000:]
    assert (path / "manifest.json").read_bytes() == before
    assert validate(path).ok
    assert sorted(os.listdir(tmp_path)) == ["ckpt"]  # the coordinator removed the staging directory


@pytest.fixture(scope="module")
def two_rank_loads(four_rank_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> list[
        subprocess.CompletedProcess[str]]:
    """One launch of 2 ranks loading into FSDP2 (each rank's output): ``load``, the 4-rank checkpoint then one
    of a single process; ``load-corrupt``, a copy of the 4-rank checkpoint with saving rank 3's shard file
    damaged; ``load-misuse``, loads the ranks get wrong (it ends with ranks that disagree, so it runs last)."""
    from dist_worker import model, train_step, write_expected

    net = model()
    optimizer = torch.optim.Adam(net.parameters(), lr=0.01)
    train_step(net, optimizer)
    plain = Checkpoint(model=net, optim=optimizer).save(tmp_path_factory.mktemp("plain") / "ckpt")
    write_expected(0, net, optimizer, str(plain))
    corrupt = tmp_path_factory.mktemp("corrupt") / "ckpt"
    shutil.copytree(four_rank_checkpoint, corrupt)
    shutil.copy(str(four_rank_checkpoint) + ".expected.npz", str(corrupt) + ".expected.npz")
    shard = corrupt / "components/model/shards/rank-00003.bin"
    data = bytearray(shard.read_bytes())
    data[0] ^= 0xFF
    shard.write_bytes(bytes(data))
    return launch("load+load-corrupt+load-misuse", 2, f"{four_rank_checkpoint},{plain}", corrupt,
                  tmp_path_factory.mktemp("misuse"))


def test_checkpoints_of_four_ranks_and_of_one_process_restore_into_fsdp2_on_two_ranks(
        two_rank_loads: list[subprocess.CompletedProcess[str]]) -> None:
    """Resharding 4 -> 2 (sharded arrays) and 1 -> 2 (whole arrays): each rank restores its own rows, trains on."""
    for result in two_rank_loads:
        assert result.returncode == 0, result.stderr[-3000:]
        assert section(result.stdout, "load").count("loaded") == 2, result.stdout


def test_each_rank_reads_only_the_shard_files_of_its_own_rows_for_parameters_and_optimizer_state(
        two_rank_loads: list[subprocess.CompletedProcess[str]]) -> None:
    """7 rows saved as 2+2+2+1 by 4 ranks, loaded as 4+3 on 2: rank 0 needs the files of saving ranks 0 and 1,
    rank 1 those of 2 and 3, for the model and for the Adam moments alike (not the whole optimizer state)."""
    for rank, result in enumerate(two_rank_loads):
        assert result.returncode == 0, result.stderr[-3000:]
        line = next(line for line in section(result.stdout, "load").splitlines()
                    if line.startswith(f"rank {rank}: read "))
        touched = json.loads(line.split(": read ", 1)[1])
        own = [f"shards/rank-0000{saver}.bin" for saver in ((0, 1) if rank == 0 else (2, 3))]
        assert touched == {"components/model": own, "components/optim": own}, touched


def test_a_corrupt_shard_read_by_one_rank_makes_every_rank_raise_with_its_model_unchanged(
        two_rank_loads: list[subprocess.CompletedProcess[str]]) -> None:
    """Only rank 1 reads saving rank 3's file: its checksum error reaches rank 0 before rank 0 applies anything."""
    outputs = [section(result.stdout, "load-corrupt") for result in two_rank_loads]
    for rank, (result, out) in enumerate(zip(two_rank_loads, outputs, strict=True)):
        assert result.returncode == 0, result.stderr[-3000:]
        assert f"rank {rank}: raised IntegrityError" in out, out + result.stderr[-2000:]
        assert f"rank {rank}: unchanged" in out, out
    assert "rank 1: " in outputs[0].split("raised IntegrityError", 1)[1]  # rank 0 raises rank 1's error


def test_a_rank_that_stalls_makes_the_coordinator_give_up_after_the_timeout(tmp_path: Path) -> None:
    """timeout=2: rank 0 raises CollectiveError naming the timeout instead of waiting for the stalled rank."""
    path = Checkpoint(state={"b": np.arange(3)}).save(tmp_path / "ckpt")
    before = (path / "manifest.json").read_bytes()
    coordinator, stalled = launch("hang", 2, path)
    assert "rank 0: raised CollectiveError" in coordinator.stdout, coordinator.stdout + coordinator.stderr[-2000:]
    assert "within 2 s" in coordinator.stdout
    assert "rank 1: raised" in stalled.stdout, stalled.stdout + stalled.stderr[-2000:]
    assert (path / "manifest.json").read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["ckpt"]


def test_ranks_that_load_different_things_all_raise_and_a_file_changed_in_place_is_caught(
        two_rank_loads: list[subprocess.CompletedProcess[str]]) -> None:
    """Issue 10, on 2 gloo ranks in one launch: another checkpoint, other components, no components or another
    ``verify`` on one rank make every rank raise CollectiveError naming the field, with nothing changed; a shard
    file changed in place by a pre-hook (after the checks) makes its rank raise ConcurrentModification."""
    outputs = [section(result.stdout, "load-misuse") for result in two_rank_loads]
    for rank, result in enumerate(two_rank_loads):
        out = outputs[rank] + result.stderr[-2000:]
        assert result.returncode == 0, out
        assert f"rank {rank}: same: loaded" in out
        for case, field in (("paths", "checkpoint"), ("components", "components"), ("nothing", "components"),
                            ("verify", "options[model]")):
            assert f"rank {rank}: {case}: raised CollectiveError field={field}: " in out, (case, out)
            assert f"rank {rank}: {case}: unchanged" in out, (case, out)
        assert "loads other things than rank 0" in out
    assert "rank 0: changed: raised ConcurrentModification field=None: " in outputs[0], outputs[0]
    assert "shards/rank-00000.bin: the file changed in place" in outputs[0]
    assert "rank 1: changed: loaded" in outputs[1], outputs[1]  # each rank checks its own files
