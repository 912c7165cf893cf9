"""Every converter turns a malformed foreign file into ConversionError naming the file (issue 8, item 7)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from opencheckpoint import Checkpoint, read_component, validate
from opencheckpoint.tools.converters import ConversionError, convert, export
from opencheckpoint.tools.converters.exporting import EXPORT_MAX_NAME_BYTES

pytest.importorskip("safetensors")
torch = pytest.importorskip("torch")


def _safetensors(header: bytes | dict[str, object], data: bytes = b"", declared: int | None = None) -> bytes:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(raw) if declared is None else declared) + raw + data


MALFORMED = {
    "header_too_large": _safetensors(b"{}", declared=2**63),
    "truncated_json": _safetensors(b'{"a":'),
    "json_array": _safetensors(b"[1,2]"),
    "offsets_out_of_range": _safetensors({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 1000]}}, b"\0" * 8),
    "negative_dim": _safetensors({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}, b"\0" * 4),
    "unknown_dtype": _safetensors({"a": {"dtype": "Q99", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4),
    "overlapping": _safetensors({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
                                 "b": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}}, b"\0" * 4),
    "empty_file": b"",
    "garbage": b"\x80\x02garbage" * 10,
}


@pytest.mark.parametrize("source", [None, "torch", "safetensors", "torchrl"])
@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_file_raises_conversion_error_naming_it(tmp_path: Path, case: str, source: str | None) -> None:
    src = tmp_path / f"{case}.safetensors"  # torch.load hands such a name to the safetensors binding
    src.write_bytes(MALFORMED[case])
    with pytest.raises(ConversionError) as caught:
        convert(src, tmp_path / "out", source=source)  # type: ignore[arg-type]  # the table's names are valid
    assert caught.value.file == str(src)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("source", [None, "torch", "safetensors"])
def test_bool_bytes_02_03_convert_to_true_stored_as_01(tmp_path: Path, source: str | None) -> None:
    """torch and NumPy read any nonzero bool byte as True: the conversion keeps True, stored as 01 (R-ARR-13)."""
    src = tmp_path / "bools.safetensors"
    src.write_bytes(_safetensors({"a": {"dtype": "BOOL", "shape": [3], "data_offsets": [0, 3]}}, b"\x02\x03\x00"))
    out = convert(src, tmp_path / "out", source=source)  # type: ignore[arg-type]  # the names are valid
    report = validate(out)
    assert report.ok, report.errors
    value = read_component(out, "model")["a"]
    assert value.dtype == np.bool_ and value.tolist() == [True, True, False]
    assert value.view(np.uint8).tolist() == [1, 1, 0]


def test_orbax_on_a_file_raises_conversion_error(tmp_path: Path) -> None:
    src = tmp_path / "garbage.bin"
    src.write_bytes(MALFORMED["garbage"])
    with pytest.raises(ConversionError):
        convert(src, tmp_path / "out", source="orbax")


def test_an_empty_safetensors_tensor_of_a_huge_shape_converts(tmp_path: Path) -> None:
    """NumPy refuses ``reshape`` to ``[2**62, 0]`` ("array is too big"); the tensor holds no byte."""
    src = tmp_path / "zero.safetensors"
    src.write_bytes(_safetensors({"a": {"dtype": "F32", "shape": [2**62, 0], "data_offsets": [0, 0]}}))
    value = read_component(convert(src, tmp_path / "out"), "model")["a"]
    assert value.shape == (2**62, 0) and value.dtype == np.float32


def test_export_refuses_names_beyond_the_limit_before_building_them(tmp_path: Path) -> None:
    """125 levels of 1,000-character keys would name each array with 125 KB; export refuses at the first."""
    tree: object = [np.zeros(0, bool)] * 200
    for level in reversed(range(125)):
        tree = {chr(97 + level % 26) * 1000: tree}
    path = Checkpoint(model=tree, durable=False).save(tmp_path / "ckpt")
    for to in ("safetensors", "torch"):
        with pytest.raises(ConversionError, match=f"at most {EXPORT_MAX_NAME_BYTES} bytes") as caught:
            export(path, tmp_path / f"out.{to}", to=to)  # type: ignore[arg-type]  # a valid format name
        assert caught.value.file == str(path) and caught.value.field == "components.model"
        assert not (tmp_path / f"out.{to}").exists()
