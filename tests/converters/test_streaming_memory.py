"""``convert`` of a large safetensors file and ``diff`` of two large checkpoints stream array by array: the peak
memory of the command grows by at most 64 MiB + the largest array, whatever the file's size (~200 MiB here).

Each command runs through the CLI in a child interpreter, which first runs it on tiny inputs (imports, thread
pools), then on the large ones, and reports its ``VmHWM`` (peak resident memory, the counter behind
``ru_maxrss`` but of this process's own address space) before and after. A memory bound, not a timing one.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from safetensors.numpy import save_file

from opencheckpoint import diff, open_checkpoint, validate
from opencheckpoint.tools.converters import convert

MIB = 1 << 20
BIG_ARRAYS = 48
BIG_ELEMENTS = 1 << 20  # float32: 4 MiB each, 192 MiB in all
LARGEST = BIG_ELEMENTS * 4
ALLOWANCE = 64 * MIB

CHILD = r"""
import json, sys
from opencheckpoint.cli.main import main

def peak():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM:"))

command, small, big = sys.argv[1], sys.argv[2:4], sys.argv[4:6]
main([command, *small])
base = peak()
code = main([command, *big])
print(json.dumps({"code": code, "base": base, "peak": peak()}))
"""


def write_safetensors(path: Path, changed: int | None = None) -> None:
    """A safetensors file of ~200 MiB written array by array: BIG_ARRAYS float32 arrays of 4 MiB, 256 small
    ones, a bool array with a byte 02 (stored as 01). ``changed``: the big array whose element 5 gets +0.5."""
    entries: list[tuple[str, str, list[int], Any]] = []
    for i in range(BIG_ARRAYS):
        entries.append((f"layer{i:02d}.weight", "F32", [1024, 1024], i))
    for i in range(256):
        entries.append((f"small.{i:03d}", "I32", [16, 16], -i))
    entries.append(("mask", "BOOL", [4], "bool"))
    header: dict[str, Any] = {"__metadata__": {"source": "test"}}
    offset = 0
    for name, code, shape, _ in entries:
        size = int(np.prod(shape)) * (1 if code == "BOOL" else 4)
        header[name] = {"dtype": code, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as out:
        out.write(len(text).to_bytes(8, "little") + text)
        for name, code, shape, fill in entries:
            if fill == "bool":
                out.write(bytes([0, 1, 2, 0]))
                continue
            array = np.arange(int(np.prod(shape)), dtype=np.float32 if code == "F32" else np.int32) + fill
            if changed is not None and name == f"layer{changed:02d}.weight":
                array[5] += 0.5
            out.write(array.tobytes())


def run_child(tmp_path: Path, command: str, small: list[Path], big: list[Path]) -> dict[str, Any]:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    completed = subprocess.run([sys.executable, str(script), command, *map(str, small), *map(str, big)],
                               capture_output=True, text=True, timeout=300, check=False)
    assert completed.returncode == 0, completed.stderr
    report: dict[str, Any] = json.loads(completed.stdout.strip().splitlines()[-1])
    return report


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("stream")
    small = folder / "small.safetensors"
    save_file({"w": np.ones(4, np.float32)}, str(small))
    big, other = folder / "big.safetensors", folder / "other.safetensors"
    write_safetensors(big)
    write_safetensors(other, changed=7)
    return {"folder": folder, "small": small, "big": big, "other": other}


def test_convert_of_a_large_safetensors_file_streams(sources: dict[str, Path]) -> None:
    folder = sources["folder"]
    report = run_child(folder, "convert", [sources["small"], folder / "small-ckpt"],
                       [sources["big"], folder / "big-ckpt"])
    assert report["code"] == 0
    assert report["peak"] - report["base"] <= ALLOWANCE + LARGEST, report
    assert validate(folder / "big-ckpt").ok
    with open_checkpoint(folder / "big-ckpt") as reader:
        tree = reader.tree("model")
        assert len(tree) == BIG_ARRAYS + 256 + 1
        assert np.array_equal(tree["layer31.weight"].read(), np.arange(BIG_ELEMENTS, dtype=np.float32).reshape(
            1024, 1024) + 31)
        assert tree["mask"].read().tolist() == [False, True, True, False]
        assert tree["small.007"].read()[0, 3] == 3 - 7
    assert reader.manifest["metadata"]["safetensors_metadata"] == {"source": "test"}


def test_diff_of_two_large_checkpoints_streams(sources: dict[str, Path]) -> None:
    folder = sources["folder"]
    convert(sources["small"], folder / "a-small")
    convert(sources["small"], folder / "b-small")
    convert(sources["big"], folder / "a")
    convert(sources["other"], folder / "b")
    report = run_child(folder, "diff", [folder / "a-small", folder / "b-small"], [folder / "a", folder / "b"])
    assert report["code"] == 1  # they differ
    assert report["peak"] - report["base"] <= ALLOWANCE + LARGEST, report
    changes = [(c.path, c.detail, c.max_abs_diff, c.max_rel_diff) for c in diff(folder / "a", folder / "b").changes]
    assert changes == [("metadata.converted_from", "{'format': 'safetensors', 'name': 'big.safetensors'} -> "
                        "{'format': 'safetensors', 'name': 'other.safetensors'}", None, None),
                       ("model/$['layer07.weight']", "float32[1024, 1024]: values differ", 0.5, 0.5 / 12.5)]


def test_a_source_file_that_shrinks_during_the_save_is_an_error(tmp_path: Path) -> None:
    from opencheckpoint import Checkpoint
    from opencheckpoint.format.errors import ConcurrentModification
    from opencheckpoint.tree.file_array import FileArray

    source = tmp_path / "raw.bin"
    source.write_bytes(np.arange(1 << 18, dtype=np.float32).tobytes())
    array = FileArray(source, 0, "float32", (1 << 18,))
    source.write_bytes(source.read_bytes()[: 1 << 19])  # half of it gone before the save reads it
    with pytest.raises(ConcurrentModification, match="the file ended"):
        Checkpoint(m={"w": array}).save(tmp_path / "ckpt")
    assert not (tmp_path / "ckpt").exists()
