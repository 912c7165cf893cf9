"""The tensor kinds of several processes (issue 20), on two real gloo ranks in one bounded launch.

The issue's scenario exactly (``p.data = distribute_tensor(...)`` for every parameter of
``Sequential(Linear(64, 32), Linear(32, 8))``, the same seed on both ranks, then
``Checkpoint(model=m).save(path)`` on every rank) must raise a ``CheckpointError`` on every
rank with nothing written, never publish the uninitialized memory such a parameter points
at. DTensor parameters set the way that keeps the DTensor (``nn.Parameter(distribute_tensor(...))``),
``distribute_module`` and ``fully_shard`` are stored as sharded arrays (format version 2)
that read back equal, bit for bit, to ``full_tensor()``. Each rank saving alone
(``process_group=LocalCollective()``) to the one path, and a collective save to one process's memory
(``memory://``), are refused on every rank.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch.distributed.tensor")
if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

import rank_launch  # noqa: E402  (tests/sharding, on pytest's pythonpath: imports torch)

from opencheckpoint import Checkpoint, read_component, validate  # noqa: E402

pytestmark = pytest.mark.slow(seconds=2)  # 7 tests, 14 s: one launch of 2 ranks (forked from a preloaded interpreter)

WORKER = Path(__file__).with_name("kinds_worker.py")
#: Seconds the launch may take (process start, torch import and eight saves) on 2 busy cores.
LAUNCH_BOUND = 180
WORLD = 2


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, list[dict[str, Any]]]]:
    """Run every case of ``kinds_worker.CASES`` on 2 ranks; case -> each rank's report, and the root."""
    root = tmp_path_factory.mktemp("kinds")
    # A checkpoint already at the issue scenario's path: a refused save must leave it exactly as it was.
    Checkpoint(state={"b": np.arange(3)}).save(root / "issue-scenario")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    ranks = rank_launch.launch(WORKER, [[str(rank), str(WORLD), str(port), str(root)] for rank in range(WORLD)],
                               LAUNCH_BOUND, {**os.environ, "OMP_NUM_THREADS": "1"})
    found: dict[str, list[dict[str, Any]]] = {}
    for rank in ranks:
        assert rank.returncode == 0, rank.stderr[-3000:]
        for line in rank.stdout.splitlines():
            if line.startswith("{"):
                report = json.loads(line)
                found.setdefault(report["case"], []).append(report)
    return root, found


def _refused_everywhere(found: dict[str, list[dict[str, Any]]], case: str) -> list[str]:
    assert [report["rank"] for report in found[case]] == list(range(WORLD)), found.get(case)
    assert all(report["outcome"] == "refused" for report in found[case]), found[case]
    return [report["message"] for report in found[case]]


def test_the_issue_scenario_is_refused_on_every_rank_and_leaves_the_old_checkpoint(
        reports: tuple[Path, dict[str, list[dict[str, Any]]]]) -> None:
    root, found = reports
    for message in _refused_everywhere(found, "issue-scenario"):
        assert "storage holds no data" in message and "p.data = distribute_tensor" in message, message
        assert "collective form" in message and "$.0.weight" in message, message
    np.testing.assert_array_equal(read_component(root / "issue-scenario", "state")["b"], np.arange(3))
    assert validate(root / "issue-scenario").ok
    assert sorted(p.name for p in root.iterdir() if p.name.startswith(".")) == []  # no staging debris


def test_each_rank_saving_alone_to_one_path_is_refused_on_every_rank_naming_the_collective_form(
        reports: tuple[Path, dict[str, list[dict[str, Any]]]]) -> None:
    root, found = reports
    for message in _refused_everywhere(found, "issue-scenario-each-rank-alone"):
        assert "collective form" in message, message
    for message in _refused_everywhere(found, "dtensor-parameters-each-rank-alone"):
        assert "held by the 2 ranks of its mesh in a save by 1 process" in message, message
        assert "collective form" in message, message
    assert not (root / "issue-scenario-each-rank-alone").exists()
    assert not (root / "dtensor-parameters-each-rank-alone").exists()


@pytest.mark.parametrize("case", ["dtensor-parameters", "distribute-module", "fully-shard"])
def test_dtensor_kinds_are_stored_as_sharded_arrays_equal_to_their_full_tensors(
        reports: tuple[Path, dict[str, list[dict[str, Any]]]], case: str) -> None:
    root, found = reports
    assert [report["outcome"] for report in found[case]] == ["saved"] * WORLD, found[case]
    path = root / case
    assert json.loads((path / "manifest.json").read_bytes())["format_version"] == 2
    expected = np.load(root / f"{case}.expected.npz")
    stored = read_component(path, "model")
    assert sorted(stored) == sorted(expected.files)
    for key in expected.files:
        assert stored[key].dtype == expected[key].dtype and stored[key].shape == expected[key].shape
        assert stored[key].tobytes() == expected[key].tobytes(), key
    assert validate(path).ok


@pytest.mark.parametrize("case", ["dtensor-parameters-remote", "issue-scenario-remote"])
def test_a_collective_save_to_one_process_memory_is_refused_on_every_rank(
        reports: tuple[Path, dict[str, list[dict[str, Any]]]], case: str) -> None:
    """``memory://`` is each process's own: a collective save of several processes to it cannot be whole
    (the issue scenario is refused earlier, for its values). Object stores: ``test_multihost.py``."""
    _, found = reports
    messages = _refused_everywhere(found, case)
    assert len(messages) == WORLD
    if case == "dtensor-parameters-remote":
        assert all("memory of one process" in message for message in messages), messages
