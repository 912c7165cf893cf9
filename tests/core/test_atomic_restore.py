"""In-place restores are verify-first: a corrupt checkpoint leaves the live arrays untouched.

``CheckpointReader.read_into`` (and so ``TreeAdapter.load`` / ``Checkpoint.load``
of NumPy dicts, lists and arrays) checks every array of the component before
it writes the first byte of any existing array; ``verify=False`` fills in one
pass without checks. The targets' bytes are checked through a small scratch
buffer, never through a memory map.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from ckpt_helpers import array_node, crc_int, forms, set_tree

from opencheckpoint import ArrayLayoutError, Checkpoint, IntegrityError, open_checkpoint
from opencheckpoint.container.archive import ArchiveSource
from opencheckpoint.container.base import FileRegion
from opencheckpoint.container.directory import DirectorySource
from opencheckpoint.read.arrays import ScratchVerifier
from opencheckpoint.tree.nodes import ArrayRef

FORMS = ["directory", "archive"]


def stored_tree() -> dict[str, Any]:
    """Arrays in document order: small ones (read in batches), one bigger than the scratch buffer, a bool."""
    return {
        "a": np.arange(10, dtype=np.float32),
        "big": np.arange(3 * (1 << 20) // 8 + 5, dtype=np.float64),  # ~3 MiB: several scratch buffers
        "mask": np.array([True, False, True]),
        "z": np.arange(7, dtype=np.int64),
    }


def live_like(tree: dict[str, Any]) -> dict[str, Any]:
    return {key: np.zeros_like(value) for key, value in tree.items()}


def save(tmp_path: Path, tree: dict[str, Any], form: str) -> Path:
    path = Checkpoint(state=tree, durable=False).save(tmp_path / "ckpt")
    return forms(path, form)


def data_offset(path: Path, key: str) -> int:
    """Byte offset in data.bin of the array at ``key`` (read from the tree document)."""
    with open_checkpoint(path) as ckpt:
        return int(next(ref.offset for ref in ckpt.decoded_layout("state")[0].arrays if ref.path == f"$.{key}"))


def corrupt(path: Path, position: int, value: int | None = None) -> None:
    """Change one byte of components/state/data.bin without updating any checksum."""
    file = path / "components" / "state" / "data.bin"
    data = bytearray(file.read_bytes())
    data[position] = data[position] ^ 0x01 if value is None else value
    file.write_bytes(bytes(data))


def snapshot(live: dict[str, np.ndarray]) -> dict[str, bytes]:
    return {key: value.tobytes() for key, value in live.items()}


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("victim", ["a", "big", "z"])
def test_corrupt_array_leaves_every_target_unchanged(tmp_path: Path, form: str, victim: str) -> None:
    tree = stored_tree()
    directory = Checkpoint(state=tree, durable=False).save(tmp_path / "ckpt")
    corrupt(directory, data_offset(directory, victim) + 5)
    path = forms(directory, form)
    live = live_like(tree)
    before = snapshot(live)
    with open_checkpoint(path) as ckpt, pytest.raises(IntegrityError) as info:
        ckpt.read_into("state", live)
    assert info.value.rule == "R-ARR-14" and info.value.field == f"$.{victim}"
    assert snapshot(live) == before  # arrays before the bad one in document order too


@pytest.mark.parametrize("form", FORMS)
def test_bad_bool_byte_leaves_every_target_unchanged(tmp_path: Path, form: str) -> None:
    # checksums all match (sealed); the bool array holds a 02 byte (R-ARR-13), the array before it is fine
    directory = Checkpoint(state={"x": np.ones(2, np.float32), "m": np.ones(3, bool)}, durable=False).save(
        tmp_path / "ckpt")
    floats, mask = np.arange(2, dtype=np.float32).tobytes(), bytes([1, 2, 0])
    set_tree(directory, {"x": array_node("float32", [2], 0, 8, crc_int(floats)),
                         "m": array_node("bool", [3], 64, 3, crc_int(mask))},
             floats + bytes(56) + mask, component="state")
    live = {"x": np.full(2, 9, np.float32), "m": np.zeros(3, bool)}
    before = snapshot(live)
    with open_checkpoint(forms(directory, form)) as ckpt, pytest.raises(ArrayLayoutError) as info:
        ckpt.read_into("state", live)
    assert info.value.rule == "R-ARR-13"
    assert snapshot(live) == before


def test_corrupt_array_without_a_target_protects_the_targets(tmp_path: Path) -> None:
    # "z" has no fitting live array (wrong dtype): it is read fresh, and its failure still comes first
    tree = stored_tree()
    path = Checkpoint(state=tree, durable=False).save(tmp_path / "ckpt")
    corrupt(path, data_offset(path, "z"))
    live = live_like(tree)
    live["z"] = np.zeros(7, dtype=np.int32)
    before = snapshot(live)
    with open_checkpoint(path) as ckpt, pytest.raises(IntegrityError):
        ckpt.read_into("state", live)
    assert snapshot(live) == before


@pytest.mark.parametrize("form", FORMS)
def test_checkpoint_load_of_a_corrupt_component_keeps_the_live_dict(tmp_path: Path, form: str) -> None:
    tree = stored_tree()
    directory = Checkpoint(state=tree, durable=False).save(tmp_path / "ckpt")
    corrupt(directory, data_offset(directory, "z"))
    live = live_like(tree)
    objects = dict(live)
    before = snapshot(live)
    with pytest.raises(IntegrityError):
        Checkpoint(state=live).load(forms(directory, form))
    assert snapshot(live) == before
    assert all(live[key] is objects[key] for key in objects)


@pytest.mark.parametrize("form", FORMS)
def test_verified_restore_fills_the_existing_arrays(tmp_path: Path, form: str) -> None:
    tree = stored_tree()
    tree["alias"] = tree["a"]  # stored once; both live arrays are filled
    path = save(tmp_path, tree, form)
    live = live_like(tree)
    objects = dict(live)
    with open_checkpoint(path) as ckpt:
        restored = ckpt.read_into("state", live)
    for key, value in tree.items():
        assert restored[key] is objects[key]
        np.testing.assert_array_equal(objects[key], value)
    again = live_like(tree)
    Checkpoint(state=again).load(path)
    for key, value in tree.items():
        np.testing.assert_array_equal(again[key], value)


@pytest.mark.parametrize("verify", [True, False])
@pytest.mark.parametrize("size", [4, 300_000])  # a small array and one read chunk by chunk
def test_ml_dtypes_arrays_are_filled_in_place(tmp_path: Path, verify: bool, size: int) -> None:
    """A bfloat16 / float8 buffer has no struct format (memoryview.cast refuses it): filled through uint8 bytes."""
    tree = {"a": np.arange(size, dtype=np.float32), "bf": np.arange(size).astype(ml_dtypes.bfloat16),
            "f8": (np.arange(size) % 16).astype(ml_dtypes.float8_e4m3fn), "c": np.arange(size, dtype=np.float32)}
    path = save(tmp_path, tree, "directory")
    live = {key: np.zeros_like(value) for key, value in tree.items()}
    objects = dict(live)
    Checkpoint(state=live).load(path, verify=verify)
    for key, value in tree.items():
        assert live[key] is objects[key]
        assert live[key].tobytes() == value.tobytes(), key


@pytest.mark.parametrize("form", FORMS)
def test_verify_false_fills_in_one_pass_without_checks(tmp_path: Path, form: str) -> None:
    tree = stored_tree()
    directory = Checkpoint(state=tree, durable=False).save(tmp_path / "ckpt")
    corrupt(directory, data_offset(directory, "z"), 0x7F)
    live = live_like(tree)
    with open_checkpoint(forms(directory, form)) as ckpt:
        ckpt.read_into("state", live, verify=False)  # the explicit opt-out: no error, the stored bytes
    assert live["z"].view(np.uint8)[0] == 0x7F
    np.testing.assert_array_equal(live["big"], tree["big"])


@pytest.mark.parametrize("form", FORMS)
def test_restore_into_existing_arrays_maps_nothing(tmp_path: Path, form: str, monkeypatch: pytest.MonkeyPatch) -> None:
    tree = stored_tree()
    path = save(tmp_path, tree, form)

    def refuse(*args: object) -> memoryview:
        raise AssertionError("map_file called during an in-place restore")

    monkeypatch.setattr(DirectorySource, "map_file", refuse)
    monkeypatch.setattr(ArchiveSource, "map_file", refuse)
    live = live_like(tree)
    with open_checkpoint(path) as ckpt:
        ckpt.read_into("state", live)
    np.testing.assert_array_equal(live["big"], tree["big"])


def crc(data: bytes) -> int:
    return crc_int(data)


@pytest.mark.parametrize("scratch", [1, 7, 64, 1 << 20])
def test_scratch_verifier_across_buffer_boundaries(scratch: int) -> None:
    # arrays in any order and at any offset relative to the buffer's window
    data = bytes((i * 37) & 0xFF for i in range(300))
    extents = [(0, 100), (100, 150), (250, 50), (10, 5), (0, 300)]
    with tempfile.TemporaryFile() as handle:
        handle.write(data)
        handle.flush()
        region = FileRegion(handle.fileno(), 0, len(data), "data.bin", owns_fd=False)
        checker = ScratchVerifier(region, "data.bin", scratch)
        for offset, size in extents:
            checker.verify(ArrayRef("uint8", (size,), offset, size, crc(data[offset : offset + size]), "$.ok"))
        for offset, size in extents:  # one changed byte anywhere in an extent is found
            fresh = ScratchVerifier(region, "data.bin", scratch)
            stored = crc(data[offset : offset + size - 1] + bytes([data[offset + size - 1] ^ 1]))
            with pytest.raises(IntegrityError):
                fresh.verify(ArrayRef("uint8", (size,), offset, size, stored, "$.bad"))


def test_scratch_verifier_checks_bool_bytes_after_the_checksum() -> None:
    data = bytes([1, 0, 2, 1])
    with tempfile.TemporaryFile() as handle:
        handle.write(data)
        handle.flush()
        region = FileRegion(handle.fileno(), 0, len(data), "data.bin", owns_fd=False)
        with pytest.raises(ArrayLayoutError) as info:
            ScratchVerifier(region, "data.bin", 3).verify(ArrayRef("bool", (4,), 0, 4, crc(data), "$.m"))
        assert info.value.rule == "R-ARR-13"
