"""Issue 25 in one process: rename= that matches nothing, renames on nested trees, source maps with transposes
read inside region reads, shard files opened lazily, collective saves to URLs refused, shard record locations.

The multi-process versions (gloo ranks, FSDP2 and a JAX mesh) are in ``test_issue25_ranks.py``.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
import pytest
from shard_helpers import ThreadRank, ThreadWorld

from opencheckpoint import Checkpoint, IncompatibleComponent, open_checkpoint, read_component
from opencheckpoint.container.directory import DirectorySource
from opencheckpoint.format.errors import ConcurrentModification
from opencheckpoint.read.restore_layout import PermutedHandle, Source, sources
from opencheckpoint.sharding import LocalShard, ShardedValue

FULL = np.arange(96, dtype=np.float32).reshape(8, 12)


def four_rank_checkpoint(path: Path) -> Path:
    """A checkpoint of 4 thread ranks, each writing two rows of ``w`` to its own shard file."""

    def task(group: ThreadRank) -> Path:
        start = 2 * group.rank
        rows = ShardedValue((8, 12), "float32", [LocalShard((start, 0), FULL[start: start + 2])])
        return Checkpoint(model={"enc.w": rows, "enc.b": np.arange(3.0)}).save(path, process_group=group)

    assert ThreadWorld(4).run(task) == [path] * 4
    return path


@pytest.fixture
def opens(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every file a directory source opens (pinned or read), by its path in the checkpoint."""
    seen: list[str] = []
    original = DirectorySource._open_path

    def counting(self: DirectorySource, rel: str, *, pinning: bool = False) -> int:
        seen.append(rel)
        return original(self, rel, pinning=pinning)

    monkeypatch.setattr(DirectorySource, "_open_path", counting)
    return seen


def test_opening_a_sharded_checkpoint_opens_no_shard_file_and_a_region_read_opens_only_the_ones_it_needs(
        tmp_path: Path, opens: list[str]) -> None:
    path = four_rank_checkpoint(tmp_path / "c")
    opens.clear()
    with open_checkpoint(path) as ckpt:
        assert not [rel for rel in opens if "/shards/" in rel]  # opening: manifest, tree, data.bin only
        row = ckpt.tree("model")["enc.w"][5, :]
    np.testing.assert_array_equal(row, FULL[5])
    assert [rel for rel in opens if "/shards/" in rel] == ["components/model/shards/rank-00002.bin"]


def test_a_lazily_opened_shard_file_is_this_checkpoints_or_the_read_raises_concurrent_modification(
        tmp_path: Path) -> None:
    """The pinning guarantee: a shard file opened after a writer replaced the checkpoint is never the new one's."""
    path = four_rank_checkpoint(tmp_path / "c")
    with open_checkpoint(path) as ckpt:
        first = ckpt.tree("model")["enc.w"][0:2, :]  # rank 0's file, opened now
        Checkpoint(model={"enc.w": FULL * 2, "enc.b": np.arange(3.0)}).save(path)  # replaces it (old one deleted)
        np.testing.assert_array_equal(ckpt.tree("model")["enc.w"][0:2, :], first)  # the descriptor held is kept
        with pytest.raises(ConcurrentModification):
            ckpt.tree("model")["enc.w"][6:8, :]  # rank 3's file was never opened: gone, not the new checkpoint's


def test_a_shard_file_of_the_wrong_size_is_refused_when_first_read(tmp_path: Path) -> None:
    path = four_rank_checkpoint(tmp_path / "c")
    with open(path / "components/model/shards/rank-00001.bin", "ab") as handle:
        handle.write(b"\0" * 8)
    with open_checkpoint(path) as ckpt:
        np.testing.assert_array_equal(ckpt.tree("model")["enc.w"][0:2, :], FULL[0:2])
        with pytest.raises(Exception, match="R-CHK-6"):
            ckpt.tree("model")["enc.w"][2:4, :]


def test_a_rename_key_that_matches_nothing_is_an_error_naming_it(tmp_path: Path) -> None:
    path = Checkpoint(model={"module.w": np.arange(3.0)}).save(tmp_path / "c")
    live = {"w": np.zeros(3)}
    with pytest.raises(IncompatibleComponent, match=r"rename= key 'inner\.' matches no stored key path") as caught:
        Checkpoint(model=live).load(path, rename={"module.": "", "inner.": ""})
    assert "'model'" in str(caught.value) and live["w"].tolist() == [0.0, 0.0, 0.0]
    with pytest.raises(IncompatibleComponent, match=r"'inner\.'"):
        read_component(path, "model", rename={"inner.": ""})
    # A key that matches in one of the components loaded together is fine.
    Checkpoint(model=live, other={"x": np.zeros(1)}).load(path, components=["model"], rename={"module.": ""})
    assert live["w"].tolist() == [0.0, 1.0, 2.0]


def test_a_flat_torch_named_tree_renamed_with_dots_fills_a_nested_sharded_jax_target(tmp_path: Path) -> None:
    jax = pytest.importorskip("jax")
    from jax.sharding import NamedSharding, PartitionSpec

    path = four_rank_checkpoint(tmp_path / "c")
    mesh = jax.make_mesh((len(jax.devices()),), ("x",))
    rows = NamedSharding(mesh, PartitionSpec("x"))
    target = {"encoder": {"kernel": jax.ShapeDtypeStruct((8, 12), np.float32, sharding=rows),
                          "bias": jax.ShapeDtypeStruct((3,), np.float64)}}
    with jax.enable_x64(True):
        restored = Checkpoint(model=target).load(path, rename={"enc.w": "encoder.kernel", "enc.b": "encoder.bias"})
    values = restored.values["model"]
    np.testing.assert_array_equal(np.asarray(values["encoder"]["kernel"]), FULL)
    np.testing.assert_array_equal(np.asarray(values["encoder"]["bias"]), np.arange(3.0))


def test_a_source_map_transposes_inside_region_reads_reading_only_the_shards_a_block_needs(tmp_path: Path) -> None:
    path = four_rank_checkpoint(tmp_path / "c")
    rename = sources({"dense.kernel": Source("enc.w", (1, 0)), "dense.bias": "enc.b"})
    with open_checkpoint(path) as ckpt:
        from opencheckpoint.read.restore_plan import RestorePlan

        tree = RestorePlan(rename=rename).apply(ckpt.tree("model"), "model")
        kernel = tree["dense"]["kernel"] if "dense" in tree else tree["dense.kernel"]
        assert isinstance(kernel, PermutedHandle) and kernel.shape == (12, 8)
        used: list[str] = []
        original = kernel.base._reads.shard

        def shard(record: object, *, verify: bool) -> np.ndarray:
            used.append(record.file)  # type: ignore[attr-defined]
            return original(record, verify=verify)  # type: ignore[arg-type]

        kernel.base._reads.shard = shard
        block = kernel.read_region((0, 4), (12, 2))  # columns 4-5 of the kernel: rows 4-5 of the stored weight
    np.testing.assert_array_equal(block, FULL[4:6].T)
    assert used == ["shards/rank-00002.bin"]
    whole = read_component(path, "model", rename=rename)
    np.testing.assert_array_equal(whole["dense.kernel"], FULL.T)


def test_a_collective_save_to_a_url_is_published_and_leaves_no_scratch_behind(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Collective saves to object stores landed (decision 0018; they were refused before): thread ranks
    sharing one process's ``memory://`` publish one checkpoint that reads back whole, and no scratch
    directory of the library is left in the temporary directory once every rank returned. That directory is
    this test's own: in the shared one, another process's save (the other pytest-xdist worker's) came and went."""
    pytest.importorskip("fsspec")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # where tempfile.mkdtemp() puts what the library makes
    url = f"memory://issue25-{tmp_path.name}/ckpt"
    ThreadWorld(2).run(lambda group: Checkpoint(state={"b": np.arange(3)}).save(url, process_group=group))
    np.testing.assert_array_equal(read_component(url, "state")["b"], np.arange(3))
    assert os.listdir(scratch) == []


def test_an_error_at_a_shard_record_says_it_is_a_shard_record(tmp_path: Path) -> None:
    path = four_rank_checkpoint(tmp_path / "c")
    shard = path / "components/model/shards/rank-00001.bin"
    data = bytearray(shard.read_bytes())
    data[0] ^= 0xFF
    shard.write_bytes(bytes(data))
    with pytest.raises(Exception, match=r"\$\['enc.w'\]\[3\]\[1\] \(shard record 1 of the sharded array "
                                        r"\$\['enc.w'\]\)") as caught:
        read_component(path, "model")
    assert caught.value.rule == "R-ARR-14"


def test_a_renamed_flat_state_fills_a_nested_numpy_target_and_a_nested_state_a_flat_one(tmp_path: Path) -> None:
    """The tree adapter's side of renames on nested trees: the renamed key paths take the live target's form."""
    path = four_rank_checkpoint(tmp_path / "c")
    live = {"encoder": {"kernel": np.zeros((8, 12), np.float32), "bias": np.zeros(3)}}
    kernel = live["encoder"]["kernel"]
    Checkpoint(model=live).load(path, rename={"enc.w": "encoder.kernel", "enc.b": "encoder.bias"})
    assert live["encoder"]["kernel"] is kernel  # filled in place, not replaced by a flat key
    np.testing.assert_array_equal(kernel, FULL)
    nested = Checkpoint(model={"dense": {"w": FULL}}).save(tmp_path / "nested")
    flat = {"0.weight": np.zeros((8, 12), np.float32)}
    Checkpoint(model=flat).load(nested, rename={"dense.w": "0.weight"})
    np.testing.assert_array_equal(flat["0.weight"], FULL)
