"""The archive form is written in one pass (no staging directory) and its bytes are the packed directory form's."""

from __future__ import annotations

import io
import os
import struct
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from opencheckpoint import Checkpoint, read_component, validate
from opencheckpoint.container import publish
from opencheckpoint.container.archive_writer import ArchiveWriter


def _old_pack(directory: Path) -> bytes:
    """What the earlier writer did: copy the staged directory through zipfile, manifest last."""
    import json

    body = json.loads((directory / "manifest.json").read_bytes())
    names = [f"{rec['path']}/{rel}" for rec in body["components"].values() for rel in rec["files"]]
    stream = io.BytesIO()
    with zipfile.ZipFile(stream, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
        for name in [*names, "manifest.json"]:
            data = (directory / name).read_bytes()
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.file_size = len(data)
            info.external_attr = 0o644 << 16
            base = stream.tell() + 30 + len(name)
            pad = -base % 64
            if pad and pad < 4:
                pad += 64
            info.extra = struct.pack("<HH", 0xD935, pad - 4) + bytes(pad - 4) if pad else b""
            with archive.open(info, "w") as member:
                member.write(data)
    return stream.getvalue()


class _Dump:
    """An adapter-written ``files`` component (dump/load): goes through the staging directory."""

    def dump(self, path: Path) -> None:
        (path / "notes.txt").write_text("hello")
        (path / "sub").mkdir()
        (path / "sub" / "blob.bin").write_bytes(bytes(range(200)))

    def load(self, path: Path) -> None:
        pass


def _state() -> dict[str, Any]:
    rng = np.random.default_rng(7)
    # "big" makes data.bin larger than 1 MiB: its ZIP CRC-32 runs in the writer's helper thread
    return {"w": rng.standard_normal((300, 70)).astype(np.float32), "b": np.arange(5, dtype=np.int64),
            "big": rng.standard_normal(600_000).astype(np.float32),
            "nested": {"x": np.ones((3, 3)), "step": 4, "name": "run"}}


def test_archive_save_equals_packed_directory_save(tmp_path: Path) -> None:
    state = _state()
    fixed = {"checkpoint_id": "same", "created_at": "2026-01-01T00:00:00Z"}
    parts = {"model": state, "config": {"lr": 0.1}, "files": _Dump()}
    directory = Checkpoint(**parts, durable=False).save(tmp_path / "d", **fixed)
    archive = Checkpoint(**parts, durable=False).save(tmp_path / "a.ocp", format="archive", **fixed)
    assert archive.read_bytes() == _old_pack(directory)
    assert validate(archive).ok
    assert np.array_equal(read_component(archive, "model")["w"], state["w"])


def test_archive_save_stages_no_directory(tmp_path: Path) -> None:
    """While an archive save writes, the only working entry beside the target is one staging file."""
    seen: list[list[str]] = []

    def look(operation: str) -> None:
        if operation == "write-manifest":
            seen.append(sorted(os.listdir(tmp_path)))

    publish.FAULT_HOOK = look
    try:
        Checkpoint(model=_state(), durable=False).save(tmp_path / "a.ocp", format="archive")
    finally:
        publish.FAULT_HOOK = None
    assert len(seen) == 1 and len(seen[0]) == 1 and ".a.ocp.oc-staging-" in seen[0][0]
    assert sorted(os.listdir(tmp_path)) == ["a.ocp"]


def _direct(members: list[tuple[str, bytes]]) -> bytes:
    stream = io.BytesIO()
    writer = ArchiveWriter(stream)
    for name, data in members:
        writer.add_bytes(name, data)
    writer.close()
    return stream.getvalue()


@pytest.mark.parametrize("shorter_by", [0, 1, 3, 4, 17, 60, 63, 64, 65, 130])
@pytest.mark.parametrize("first_size", [0, 5, 58, 59, 60, 61, 200])
def test_reserved_member_filled_shorter_gives_the_bytes_of_a_direct_write(first_size: int, shorter_by: int) -> None:
    """The member after a reservation keeps its place when the padding can absorb the difference, and is
    moved back a slot when the padding rule wants it earlier: either way, the bytes of a direct write."""
    first = bytes(range(256))[:first_size]
    second = np.random.default_rng(first_size).integers(0, 256, 3000, dtype=np.uint8).tobytes()
    stream = io.BytesIO()
    writer = ArchiveWriter(stream)
    slot = writer.reserve("c/tree.msgpack", first_size + shorter_by)
    with writer.stream("c/data.bin", len(second)) as member:
        member.write(second[:1000])
        member.write(memoryview(second)[1000:])
    writer.fill(slot, first)
    writer.add_bytes("manifest.json", b"{}")
    writer.close()
    assert stream.getvalue() == _direct([("c/tree.msgpack", first), ("c/data.bin", second), ("manifest.json", b"{}")])


def test_member_stream_refuses_other_sizes_and_duplicate_names(tmp_path: Path) -> None:
    writer = ArchiveWriter(io.BytesIO())
    with pytest.raises(OSError, match="declared"), writer.stream("a", 3) as member:
        member.write(b"abcd")
    with pytest.raises(OSError, match="2 bytes written, 3 declared"), writer.stream("b", 3) as member:
        member.write(b"ab")
    with pytest.raises(ValueError, match="already a member"):
        writer.add_bytes("b", b"")
