"""Helpers that build valid checkpoints and then break exactly one rule.

Directory checkpoints are written with :class:`opencheckpoint.Checkpoint` and
then mutated; manifests are re-serialized with
:func:`opencheckpoint.manifest.serialize_manifest` so the checksum stays right
and only the intended rule breaks. Archives are built from a directory by
:func:`build_zip`, a small ZIP writer whose every field can be overridden.
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack
import numpy as np

from opencheckpoint import Checkpoint
from opencheckpoint.integrity import crc32c_hex
from opencheckpoint.manifest import serialize_manifest

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


# -- archives ---------------------------------------------------------------------------------
@dataclass
class Member:
    """One archive member; every ZIP field the tests break can be overridden."""

    name: bytes
    data: bytes
    method: int = 0
    flags: int = 0
    local_flags: int | None = None
    stored: bytes | None = None  # bytes written as member data (default: data)
    crc: int | None = None
    local_crc: int | None = None
    local_name: bytes | None = None
    local_size: int | None = None
    csize: int | None = None
    made_by: int = (3 << 8) | 20
    external: int = 0o100644 << 16
    extra_local: bytes = b""
    extra_central: bytes = b""
    misalign: int = 0
    gap_before: int = 0
    disk: int = 0
    offsets: dict[str, int] = field(default_factory=dict)


def members_of(path: Path) -> list[Member]:
    """The files of a directory checkpoint as members (sorted paths), ``manifest.json`` last."""
    names: list[str] = []
    for dirpath, dirnames, files in os.walk(path):
        dirnames.sort()
        for name in sorted(files):
            rel = os.path.relpath(os.path.join(dirpath, name), path)
            if rel != "manifest.json":
                names.append(rel)
    names.append("manifest.json")
    return [Member(n.encode(), (path / n).read_bytes()) for n in names]


def build_zip(members: list[Member], *, prefix: bytes = b"", comment: bytes = b"", trailing: bytes = b"",
              order: list[int] | None = None, cd_gap: int = 0, eocd_total: int | None = None,
              eocd_disk: int = 0) -> bytes:
    """A checkpoint archive laid out as the spec requires, unless an override says otherwise.

    ``order`` gives the central directory order as indices into ``members``
    (default: file order).
    """
    out = bytearray(prefix)
    for member in members:
        out += bytes(member.gap_before)
        header = len(out)
        stored = member.data if member.stored is None else member.stored
        base = header + 30 + len(member.local_name or member.name) + len(member.extra_local)
        pad = -base % 64
        if pad and pad < 4:
            pad += 64
        extra = member.extra_local + (struct.pack("<HH", 0xD935, pad - 4) + bytes(pad - 4) if pad else b"")
        if member.misalign:
            extra += bytes(member.misalign)
        crc = zlib.crc32(member.data) if member.crc is None else member.crc
        member.offsets = {"header": header}
        out += struct.pack("<4sHHHHHIIIHH", b"PK\x03\x04", 20,
                           member.flags if member.local_flags is None else member.local_flags, member.method, 0,
                           33, crc if member.local_crc is None else member.local_crc,
                           len(stored) if member.csize is None else member.csize,
                           len(member.data) if member.local_size is None else member.local_size,
                           len(member.local_name or member.name), len(extra))
        out += (member.local_name or member.name) + extra
        member.offsets["data"] = len(out)
        out += stored
    out += bytes(cd_gap)
    cd_start = len(out)
    for index in order if order is not None else range(len(members)):
        member = members[index]
        stored = member.data if member.stored is None else member.stored
        crc = zlib.crc32(member.data) if member.crc is None else member.crc
        out += struct.pack("<4sHHHHHHIIIHHHHHII", b"PK\x01\x02", member.made_by, 20, member.flags, member.method,
                           0, 33, crc, len(stored) if member.csize is None else member.csize, len(member.data),
                           len(member.name), len(member.extra_central), 0, member.disk, 0, member.external,
                           member.offsets["header"])
        out += member.name + member.extra_central
    cd_size = len(out) - cd_start
    count = len(members) if order is None else len(order)
    total = count if eocd_total is None else eocd_total
    out += struct.pack("<4sHHHHIIH", b"PK\x05\x06", eocd_disk, 0, total, total, cd_size, cd_start, len(comment))
    return bytes(out + comment + trailing)


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
