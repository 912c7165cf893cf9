"""What every container form delivers the same way: ``bytes`` for files, positioned reads for arrays."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from ckpt_helpers import forms

from opencheckpoint import Checkpoint, open_checkpoint
from opencheckpoint.container.base import FileRegion, Source

FORMS = ["directory", "archive"]


class Blob:
    """An object saved as a ``files`` component (dump/load)."""

    def dump(self, path: Path) -> None:
        (path / "x.bin").write_bytes(b"\x00abc")
        (path / "sub").mkdir()
        (path / "sub" / "empty.bin").write_bytes(b"")

    def load(self, path: Path) -> None:
        self.seen = (path / "x.bin").read_bytes()


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("verify", [True, False])
def test_files_component_is_bytes_in_both_forms(tmp_path: Path, form: str, verify: bool) -> None:
    path = forms(Checkpoint(blob=Blob(), durable=False).save(tmp_path / "ckpt"), form)
    with open_checkpoint(path) as ckpt:
        files = dict(ckpt.iter_files("blob", verify=verify))
        read = ckpt.read("blob", verify=verify)
    for value in (files, read):
        assert value == {"x.bin": b"\x00abc", "sub/empty.bin": b""}
        assert all(type(data) is bytes for data in value.values())


@pytest.mark.parametrize("form", FORMS)
def test_every_source_opens_regions(tmp_path: Path, form: str) -> None:
    path = forms(Checkpoint(w=np.arange(4, dtype=np.uint8), durable=False).save(tmp_path / "ckpt"), form)
    with open_checkpoint(path) as ckpt:
        record = ckpt.record("w")
        with ckpt.source.open_region(f"{record.path}/data.bin", record.files["data.bin"].size) as region:
            assert isinstance(region, FileRegion)
            out = bytearray(4)
            region.readinto(out, 0)
    assert bytes(out) == bytes([0, 1, 2, 3])


def test_open_region_is_part_of_the_source_interface() -> None:
    assert "open_region" in Source.__abstractmethods__

    class NoRegions(Source):
        form = "test"

        def read_manifest(self) -> bytes:
            return b""

        def inventory(self) -> tuple[dict[str, int], list, list[str]]:  # type: ignore[type-arg]
            return {}, [], []

        def read_file(self, rel: str, size: int) -> bytes:
            return b""

        def map_file(self, rel: str, size: int) -> memoryview:
            return memoryview(b"")

    with pytest.raises(TypeError, match="open_region"):
        NoRegions(Path("."))  # type: ignore[abstract]
