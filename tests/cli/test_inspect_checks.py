"""``opencheckpoint inspect`` runs every structural check that needs no array byte and exits 1 on failure.

Each unsafe or malformed checkpoint below exited 0 before; the human output
also clips long values, so a multi-megabyte metadata string prints a short line.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import msgpack
import numpy as np
import pytest
from cli_in_process import run_cli

from opencheckpoint import Checkpoint
from opencheckpoint.format.integrity import crc32c_hex
from opencheckpoint.format.manifest import serialize_manifest
from opencheckpoint.tools.inspect import describe


def _checkpoint(root: Path, **metadata: object) -> Path:
    return Checkpoint(model={"w": np.arange(6, dtype=np.float32)}, config={"lr": 0.1},
                      durable=False).save(root / "ckpt", metadata=metadata)


def _reseal_tree(path: Path, document: bytes) -> None:
    """Replace ``model``'s tree.msgpack and update its manifest entry, so only the document is wrong."""
    (path / "components/model/tree.msgpack").write_bytes(document)
    body = json.loads((path / "manifest.json").read_bytes())
    del body["manifest_crc32c"]
    body["components"]["model"]["files"]["tree.msgpack"] = {"size": len(document), "crc32c": crc32c_hex(document)}
    (path / "manifest.json").write_bytes(serialize_manifest(body))


def _symlinked_components(path: Path) -> None:
    outside = path.parent / "outside"
    os.rename(path / "components", outside)
    os.symlink(outside, path / "components")


def _fifo_data(path: Path) -> None:
    (path / "components/model/data.bin").unlink()
    os.mkfifo(path / "components/model/data.bin")


def _trailing_bytes(path: Path) -> None:
    _reseal_tree(path, (path / "components/model/tree.msgpack").read_bytes() + b"\xc0")


def _marker_as_value(path: Path) -> None:
    _reseal_tree(path, msgpack.packb({"w": msgpack.ExtType(1, b"")}, use_bin_type=True))


@pytest.mark.parametrize(("damage", "error", "section"), [
    (_symlinked_components, "UnsafePath", "R-CON-4"),
    (_fifo_data, "UnsafePath", "R-CON-4"),
    (_trailing_bytes, "TreeError", "R-TREE-2"),
    (_marker_as_value, "TreeError", "R-TREE-15"),
], ids=["symlinked-components", "fifo-data-bin", "trailing-bytes", "tag-marker-as-value"])
def test_inspect_exits_1_on_a_structural_defect(tmp_path: Path, damage: Callable[[Path], None], error: str,
                                               section: str) -> None:
    path = _checkpoint(tmp_path)
    damage(path)
    summary = describe(path)
    assert not summary["ok"]
    assert (summary["errors"][0]["error"], summary["errors"][0]["rule"]) == (error, section)
    done = run_cli("inspect", str(path))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "invalid" in done.stdout and error in done.stdout and section in done.stdout
    as_json = run_cli("inspect", "--json", str(path))
    assert as_json.returncode == 1
    assert json.loads(as_json.stdout)["errors"][0]["error"] == error


def test_inspect_clips_long_values_for_display(tmp_path: Path) -> None:
    big = "x" * (4 << 20)
    path = _checkpoint(tmp_path, note=big)
    done = run_cli("inspect", str(path))
    assert done.returncode == 0, done.stderr
    assert len(done.stdout) < 20_000
    assert "more characters" in done.stdout
    # --json is for programs: every character is there.
    full = run_cli("inspect", "--json", str(path))
    assert json.loads(full.stdout)["metadata"]["note"] == big


#: Step 16 of the validation order: the only checks ``inspect`` leaves to ``validate``.
_CONTENT_RULES = {"R-ARR-12", "R-ARR-13", "R-ARR-14", "R-CHK-7", "R-CHK-8", "R-ZIP-22"}
_CASES = Path(__file__).resolve().parents[2] / "conformance" / "cases" / "v1"


def test_inspect_rejects_every_must_reject_case_but_content_defects() -> None:
    """Over the whole conformance suite: every valid case passes; a defect inspect accepts is one that
    only array or file bytes show."""
    from opencheckpoint import validate
    from opencheckpoint.format.errors import CheckpointError

    accepted = []
    for case in sorted(_CASES.iterdir()):
        meta = json.loads((case / "case.json").read_text())
        target = case / (meta.get("read_path") or ("checkpoint" if meta["form"] == "directory" else "checkpoint.zip"))
        if meta["valid"]:
            assert describe(target)["ok"], case.name
            continue
        try:
            if not describe(target)["ok"]:
                continue
        except CheckpointError:
            continue
        first = validate(target).errors[0]
        accepted.append(case.name)
        assert first.rule in _CONTENT_RULES, (case.name, first)
        # A payload document's own checksum is checked (step 13): only data and files components' bytes pass.
        assert first.rule != "R-CHK-7" or not (first.file or "").endswith(("tree.msgpack", "value.json"))
    assert accepted, "the suite has content defects; inspect must leave them to validate"


@pytest.mark.parametrize("content", ["[" * 100_000 + "]" * 100_000, "bigint"], ids=["deep-json", "5000-digit-int"])
def test_conformance_impl_write_reports_a_bad_rendering_as_a_checkpoint_error(tmp_path: Path, content: str) -> None:
    if content == "bigint":
        document = json.loads((Path(__file__).resolve().parents[2] / "conformance/cases/v1/tree-big-int/expected.json")
                              .read_text())
        document["components"]["t"]["content"]["root"]["items"][0]["value"] = "9" * 5000
        content = json.dumps(document)
    (tmp_path / "expected.json").write_text(content)
    done = run_cli("conformance", "impl", "write", str(tmp_path / "expected.json"), str(tmp_path / "out"))
    assert done.returncode == 1
    assert done.stderr.startswith("error: ManifestError: ") and "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()
