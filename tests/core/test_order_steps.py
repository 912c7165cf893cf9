"""Steps 12-16 of the validation order run step by step over all components (spec §15, R-RDR-11).

Each checkpoint here has two defects in two components, where the defect of
the *later* component belongs to an *earlier* step: the reader must report
that one (all of step 12 for every component, then all of step 13, ...),
both from ``validate`` and from the conformance ``read`` command.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import msgpack
import numpy as np
import pytest
from ckpt_helpers import (
    MARK,
    array_node,
    crc_int,
    edit_body,
    forms,
    load_body,
    make_checkpoint,
    set_file,
    set_tree,
    write_body,
)

from opencheckpoint import validate
from opencheckpoint.conformance.impl import run as protocol
from opencheckpoint.format.integrity import crc32c_hex

FORMS = ["directory", "archive"]
MALFORMED_TREE = b"\x91\xc1"  # an array holding byte c1, which starts no msgpack object (R-TREE-3)


def two_components(tmp_path: Path, a: object, b: object) -> Path:
    return make_checkpoint(tmp_path, a=a, b=b)


def newer_kind_version(component: str) -> Callable[[Path], None]:
    return lambda path: edit_body(path, lambda body: body["components"][component].update(kind_version=2))


def add_files_component(path: Path, name: str, files: dict[str, bytes]) -> None:
    """A ``files`` component (listed last in the manifest) with correct sizes and checksums."""
    folder = path / "components" / name
    folder.mkdir(parents=True)
    for rel, data in files.items():
        (folder / rel).write_bytes(data)
    body = load_body(path)
    body["components"] = {name: {"kind": "files", "kind_version": 1, "path": f"components/{name}",
                                 "files": {rel: {"size": len(data), "crc32c": crc32c_hex(data)}
                                           for rel, data in files.items()}},
                          **body["components"]}
    write_body(path, body)


def reported(path: Path) -> tuple[list[tuple[str, str | None]], str]:
    """(class, requirement) of every validate error, and the class named by the protocol's error line."""
    found = [(issue.error, issue.rule) for issue in validate(path).errors]
    out, err = io.StringIO(), io.StringIO()
    assert protocol("read", [str(path)], stdout=out, stderr=err) == 1
    line = err.getvalue().splitlines()[0]
    assert out.getvalue() == ""
    return found, line.split(": ")[1]


@pytest.mark.parametrize("form", FORMS)
def test_kind_version_of_first_component_beats_malformed_tree_of_second(tmp_path: Path, form: str) -> None:
    # a: json kind_version 2 (step 12); b: tree.msgpack = 91 c1, sealed (step 14)
    path = two_components(tmp_path, {"lr": 0.1}, {"w": np.arange(3.0)})
    set_tree(path, MALFORMED_TREE, component="b")
    newer_kind_version("a")(path)
    found, protocol_class = reported(forms(path, form))
    assert found[0] == ("UnsupportedVersion", "R-CMP-19"), found
    assert ("TreeError", "R-TREE-3") in found  # b is still parsed: its step 14 runs after all of step 12
    assert protocol_class == "UnsupportedVersion"


@pytest.mark.parametrize("form", FORMS)
def test_kind_version_of_second_component_beats_malformed_tree_of_first(tmp_path: Path, form: str) -> None:
    path = two_components(tmp_path, {"w": np.arange(3.0)}, {"lr": 0.1})
    set_tree(path, MALFORMED_TREE, component="a")
    newer_kind_version("b")(path)
    found, protocol_class = reported(forms(path, form))
    assert found[0] == ("UnsupportedVersion", "R-CMP-19"), found
    assert protocol_class == "UnsupportedVersion"


@pytest.mark.parametrize("form", FORMS)
def test_malformed_tree_of_second_component_beats_padding_of_first(tmp_path: Path, form: str) -> None:
    # a: data.bin with a nonzero padding byte, sealed (step 16, R-ARR-12); b: 91 c1, sealed (step 14)
    path = two_components(tmp_path, {"w": np.arange(3.0)}, {"v": np.arange(2.0)})
    first = np.arange(2, dtype=np.float32).tobytes()
    second = np.ones(2, dtype=np.float32).tobytes()
    padding = bytearray(64 - len(first))
    padding[10] = 0x07
    data = first + bytes(padding) + second
    set_tree(path, {"x": array_node("float32", [2], 0, 8, crc_int(first)),
                    "y": array_node("float32", [2], 64, 8, crc_int(second))}, data, component="a")
    set_tree(path, MALFORMED_TREE, component="b")
    found, protocol_class = reported(forms(path, form))
    assert found[0] == ("TreeError", "R-TREE-3"), found
    assert ("ArrayLayoutError", "R-ARR-12") in found  # a's content is still checked, after every step 14
    assert protocol_class == "TreeError"


@pytest.mark.parametrize("form", FORMS)
def test_kind_version_beats_changed_byte_of_files_component(tmp_path: Path, form: str) -> None:
    # a: files component with a changed byte, manifest not updated (step 16, R-CHK-7); b: json kind_version 2
    path = make_checkpoint(tmp_path, b={"lr": 0.1})
    add_files_component(path, "a", {"blob.bin": b"abcdef"})
    (path / "components/a/blob.bin").write_bytes(b"abcdeX")
    newer_kind_version("b")(path)
    assert list(load_body(path)["components"]) == ["a", "b"]
    found, protocol_class = reported(forms(path, form))
    assert found[0] == ("UnsupportedVersion", "R-CMP-19"), found
    assert ("IntegrityError", "R-CHK-7") in found
    assert protocol_class == "UnsupportedVersion"


@pytest.mark.parametrize("form", FORMS)
def test_payload_checksum_of_second_component_beats_malformed_tree_of_first(tmp_path: Path, form: str) -> None:
    # a: 91 c1, sealed (step 14); b: value.json changed, manifest not updated (step 13, R-CHK-7)
    path = two_components(tmp_path, {"w": np.arange(3.0)}, {"lr": 0.125})
    set_tree(path, MALFORMED_TREE, component="a")
    value = path / "components/b/value.json"
    value.write_bytes(value.read_bytes().replace(b"0.125", b"0.126"))
    found, protocol_class = reported(forms(path, form))
    assert found[0] == ("IntegrityError", "R-CHK-7"), found
    assert protocol_class == "IntegrityError"


@pytest.mark.parametrize("form", FORMS)
def test_bad_json_of_second_component_beats_array_layout_of_first(tmp_path: Path, form: str) -> None:
    # a: an array at offset 8 (step 15, R-ARR-5); b: value.json that is not JSON, sealed (step 14)
    path = two_components(tmp_path, {"w": np.arange(3.0)}, {"lr": 0.1})
    payload = np.ones(2, dtype=np.float32).tobytes()
    set_tree(path, {"x": array_node("float32", [2], 8, 8, crc_int(payload))}, bytes(8) + payload, component="a")
    set_file(path, "b", "value.json", b"{not json")
    found, protocol_class = reported(forms(path, form))
    assert found[0][0] == "ManifestError", found
    assert ("ArrayLayoutError", "R-ARR-5") in found
    assert protocol_class == "ManifestError"


@pytest.mark.parametrize("form", FORMS)
def test_array_checksum_of_first_component_beats_file_checksum(tmp_path: Path, form: str) -> None:
    # step 16: all array checks (every tree component) come before R-CHK-7 of any data.bin or other file
    path = two_components(tmp_path, {"w": np.arange(3.0)}, {"v": np.arange(4.0)})
    add_files_component(path, "f", {"blob.bin": b"xyz"})
    (path / "components/f/blob.bin").write_bytes(b"xyZ")
    data = path / "components/b/data.bin"
    raw = bytearray(data.read_bytes())
    raw[0] ^= 1
    data.write_bytes(bytes(raw))
    found, protocol_class = reported(forms(path, form))
    assert found[0] == ("IntegrityError", "R-ARR-14"), found
    assert found[0][0] == protocol_class


def test_manifest_order_decides_within_a_step(tmp_path: Path) -> None:
    # both components fail step 14: the one listed first in the manifest is reported first
    path = two_components(tmp_path, {"w": np.arange(3.0)}, {"lr": 0.1})
    set_file(path, "b", "value.json", b"{not json")
    set_tree(path, msgpack.packb([MARK[6], "float7", [1], 0, 0, 0]), component="a")
    found, _ = reported(path)
    assert [error for error, _ in found[:2]] == ["UnknownDtype", "ManifestError"], found
