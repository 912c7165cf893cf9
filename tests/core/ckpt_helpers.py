"""Helpers that build valid checkpoints and then break exactly one rule.

Directory checkpoints are written with :class:`opencheckpoint.Checkpoint` and
then mutated; manifests are re-serialized with
:func:`opencheckpoint.format.manifest.serialize_manifest` so the checksum stays right
and only the intended rule breaks. Archives are built from a directory by
:func:`~opencheckpoint.testing.hostile_zip.build_zip` (the public test kit), whose every field can be
overridden.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import numpy as np

from opencheckpoint import Checkpoint
from opencheckpoint.format.integrity import crc32c_hex
from opencheckpoint.format.manifest import serialize_manifest
from opencheckpoint.testing.hostile_zip import Member, build_zip, members_of

MARK = {tag: msgpack.ExtType(tag, b"") for tag in range(1, 128)}


def default_tree() -> dict[str, Any]:
    return {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "mask": np.array([True, False, True]), "step": 7}


def make_checkpoint(root: Path, name: str = "ckpt", **components: Any) -> Path:
    """A valid directory checkpoint with a tree component ``model`` and a json component ``cfg``."""
    if not components:
        components = {"model": default_tree(), "cfg": {"lr": 0.001, "name": "run"}}
    return Checkpoint(**components, durable=False).save(root / name, checkpoint_id="test-1",
                                                       created_at="2026-01-01T00:00:00Z")


def load_body(path: Path) -> dict[str, Any]:
    body = json.loads((path / "manifest.json").read_bytes())
    del body["manifest_crc32c"]
    return body


def write_body(path: Path, body: dict[str, Any]) -> None:
    (path / "manifest.json").write_bytes(serialize_manifest(body))


def edit_body(path: Path, edit: Callable[[dict[str, Any]], Any]) -> None:
    body = load_body(path)
    edit(body)
    write_body(path, body)


def resuffix(head: bytes) -> bytes:
    """Append the checksum suffix to manifest bytes that end with ``,`` + whitespace."""
    return head + f'"manifest_crc32c": "{crc32c_hex(head)}"\n}}\n'.encode()


def edit_text(path: Path, old: bytes, new: bytes) -> None:
    """Replace text in the manifest before its suffix and recompute the checksum."""
    data = (path / "manifest.json").read_bytes()
    head = data[:-32]
    assert old in head, old
    (path / "manifest.json").write_bytes(resuffix(head.replace(old, new, 1)))


def set_file(path: Path, component: str, rel: str, data: bytes) -> None:
    """Replace one component file and update its manifest entry (size, crc32c) to match."""
    body = load_body(path)
    record = body["components"][component]
    (path / record["path"] / rel).write_bytes(data)
    record["files"][rel] = {"size": len(data), "crc32c": crc32c_hex(data)}
    write_body(path, body)


def set_tree(path: Path, root: Any, data: bytes | None = None, component: str = "model") -> None:
    """Replace a tree component's document (msgpack of ``root``, or raw bytes) and optionally data.bin."""
    document = root if isinstance(root, bytes) else msgpack.packb(root, use_bin_type=True)
    set_file(path, component, "tree.msgpack", document)
    if data is not None:
        set_file(path, component, "data.bin", data)


def array_node(dtype: str, shape: list[int], offset: int, nbytes: int, crc: int) -> list[Any]:
    return [MARK[6], dtype, shape, offset, nbytes, crc]


def crc_int(data: bytes) -> int:
    return int(crc32c_hex(data), 16)


def flip(file: Path, position: int) -> None:
    data = bytearray(file.read_bytes())
    data[position] ^= 0x01
    file.write_bytes(bytes(data))


# -- archives: the public hostile-ZIP kit builds them ---------------------------------------------
def to_archive(path: Path, mutate: Callable[[list[Member]], Any] | None = None, **options: Any) -> Path:
    """Pack a directory checkpoint into ``<path>.ocz`` with :func:`build_zip`."""
    members = members_of(path)
    if mutate is not None:
        mutate(members)
    target = path.parent / (path.name + ".ocz")
    target.write_bytes(build_zip(members, **options))
    return target


def expect_rejected(path: Path, error: type, section: str, *, component: str = "model",
                    validate_first: bool = True, read: bool = True) -> Exception | None:
    """``read_component`` raises ``error`` with ``section``; ``validate`` reports it (first by default)."""
    import pytest

    from opencheckpoint import read_component, validate

    raised = None
    if read:
        with pytest.raises(error) as info:
            read_component(path, component)
        assert info.value.rule == section, (info.value.rule, str(info.value))
        assert type(info.value) is error
        raised = info.value
    report = validate(path)
    assert not report.ok
    found = [(issue.error, issue.rule) for issue in report.errors]
    wanted = (error.error_class, section)
    if validate_first:
        assert found[0] == wanted, found
    else:
        assert wanted in found, found
    for issue in report.errors:
        assert issue.file, issue
    return raised


def forms(path: Path, form: str) -> Path:
    """The checkpoint at ``path`` in the requested form (archives are packed from the directory)."""
    return path if form == "directory" else to_archive(path)
