"""The fast read and write paths give exactly what the mapped, per-array paths give.

``read_component`` reads copies with ``preadv`` (small arrays in batches, big
ones chunk by chunk), ``read_into`` fills existing arrays, and the writer
folds small arrays into the file CRC per buffer: each is compared here with
the lazy mapped view, the bytes on disk, and the error the reader must raise.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from opencheckpoint import Checkpoint, IntegrityError, open_checkpoint, read_component, validate
from opencheckpoint.format.integrity import crc32c_hex

MIB = 1 << 20


def mixed_state() -> dict[str, Any]:
    rng = np.random.default_rng(7)
    state: dict[str, Any] = {f"tiny{i}": rng.standard_normal(i % 40).astype(np.float32) for i in range(300)}
    state["mid"] = rng.integers(0, 255, 70_000, dtype=np.uint8)  # just over the batch threshold
    state["big"] = rng.standard_normal((3 * MIB + 17) // 8)  # several 1 MiB chunks, odd tail
    state["flags"] = rng.integers(0, 2, 33).astype(bool)
    state["empty"] = np.zeros((0, 3), np.float32)
    state["nested"] = {"t": (np.arange(5, dtype=np.int16), [np.ones((2, 2), np.complex64)])}
    state["tied_a"] = state["tied_b"] = state["tiny7"]
    return state


def assert_same(actual: Any, expected: Any) -> None:
    if isinstance(expected, dict):
        assert list(actual) == list(expected)
        for key in expected:
            assert_same(actual[key], expected[key])
    elif isinstance(expected, (list, tuple)):
        assert type(actual) is type(expected) and len(actual) == len(expected)
        for a, e in zip(actual, expected, strict=True):
            assert_same(a, e)
    else:
        assert actual.dtype == expected.dtype and actual.shape == expected.shape
        assert actual.tobytes() == expected.tobytes()


@pytest.mark.parametrize("form", ["directory", "archive"])
def test_read_component_matches_the_saved_arrays_and_the_lazy_views(tmp_path: Path, form: str) -> None:
    state = mixed_state()
    path = Checkpoint(s=state, format=form).save(tmp_path / "c")
    loaded = read_component(path, "s")
    assert_same(loaded, state)
    assert loaded["tied_a"] is loaded["tied_b"]  # one extent: one object
    assert loaded["tiny1"] is not loaded["tiny2"]
    assert all(array.flags.writeable for array in (loaded["tiny5"], loaded["big"]))
    with open_checkpoint(path) as reader:
        lazy = reader.tree("s")
        assert lazy["big"].read().tobytes() == loaded["big"].tobytes()
    assert_same(read_component(path, "s", verify=False), state)


def test_data_file_crc_covers_every_byte_written(tmp_path: Path) -> None:
    state = mixed_state()
    state["view"] = state["big"][:1000]  # a view aliasing the start of an owned array: a distinct extent
    state["same"] = state["big"][:]  # a view with the owner's extent: stored once
    path = Checkpoint(s=state).save(tmp_path / "c")
    data = (path / "components" / "s" / "data.bin").read_bytes()
    with open_checkpoint(path) as reader:
        entry = reader.record("s").files["data.bin"]
        refs = reader.decoded_layout("s")[0].arrays
    assert entry.crc32c == crc32c_hex(data)
    big = [ref for ref in refs if ref.path in ("$.big", "$.same")]
    assert len({(ref.offset, ref.nbytes) for ref in big}) == 1
    assert validate(path).ok


@pytest.mark.parametrize("victim", ["tiny5", "big", "flags"])
def test_corruption_in_a_batched_or_chunked_array_names_that_array(tmp_path: Path, victim: str) -> None:
    state = mixed_state()
    path = Checkpoint(s=state).save(tmp_path / "c")
    with open_checkpoint(path) as reader:
        ref = next(r for r in reader.decoded_layout("s")[0].arrays if r.path == f"$.{victim}")
    data_file = path / "components" / "s" / "data.bin"
    raw = bytearray(data_file.read_bytes())
    raw[ref.offset + ref.nbytes - 1] ^= 0x01
    data_file.write_bytes(bytes(raw))
    with pytest.raises(IntegrityError) as info:
        read_component(path, "s")
    assert (info.value.field, info.value.rule) == (f"$.{victim}", "R-ARR-14")


def test_read_into_fills_fitting_arrays_in_place_and_replaces_the_rest(tmp_path: Path) -> None:
    state = mixed_state()
    path = Checkpoint(s=state).save(tmp_path / "c")
    live: dict[str, Any] = {key: (np.zeros_like(v) if isinstance(v, np.ndarray) else v) for key, v in state.items()}
    live["big"] = np.zeros_like(state["big"])
    live["mid"] = np.zeros(5, np.uint8)  # wrong shape: replaced
    live["tiny3"] = np.zeros(3, np.float64)  # wrong dtype: replaced
    live["tiny4"] = np.zeros(4, np.float32)
    live["tiny4"].flags.writeable = False  # read-only: replaced
    live["tiny12"] = np.zeros(24, np.float32)[::2]  # right shape and dtype, not contiguous: replaced
    keep = {key: live[key] for key in ("big", "tiny5", "flags", "mid", "tiny3", "tiny4", "tiny12")}
    with open_checkpoint(path) as reader:
        tree = reader.read_into("s", live)
    assert_same(tree, state)
    assert tree["big"] is keep["big"] and tree["tiny5"] is keep["tiny5"] and tree["flags"] is keep["flags"]
    assert tree["mid"] is not keep["mid"] and tree["tiny3"] is not keep["tiny3"] and tree["tiny4"] is not keep["tiny4"]
    assert tree["tiny12"] is not keep["tiny12"]
    assert not keep["tiny4"].any()  # the read-only array was not written


def test_tree_component_restores_into_the_existing_arrays(tmp_path: Path) -> None:
    state = {"w": np.arange(300_000, dtype=np.float32), "b": np.ones(3), "n": 4}
    path = Checkpoint(p=state).save(tmp_path / "c")
    target = {"w": np.zeros(300_000, np.float32), "b": np.zeros(2), "n": 0}
    w = target["w"]
    result = Checkpoint(p=target).load(path)
    assert "p" in result.loaded
    assert target["w"] is w and np.array_equal(w, state["w"])  # filled in place
    assert target["b"].shape == (3,) and target["n"] == 4  # replaced where it did not fit
    single = np.zeros(300_000, np.float32)
    Checkpoint(p=single).load(Checkpoint(p=state["w"]).save(tmp_path / "one"))
    assert np.array_equal(single, state["w"])
