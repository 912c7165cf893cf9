"""Bad paths (step 8), container entries and inventory (steps 1, 2, 10, 11), truncation and byte flips."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from ckpt_helpers import edit_body, expect_rejected, flip, forms, make_checkpoint

from opencheckpoint import (
    ExtraFile,
    IntegrityError,
    LimitExceeded,
    ManifestError,
    MissingFile,
    NotACheckpoint,
    UnsafePath,
    read_component,
    validate,
)

FORMS = ["directory", "archive"]


def files_component(*keys: str) -> Callable[[dict[str, Any]], None]:
    def edit(body: dict[str, Any]) -> None:
        body["components"]["blob"] = {"kind": "files", "kind_version": 1, "path": "components/blob",
                                      "files": {k: {"size": 0, "crc32c": "00000000"} for k in keys}}
    return edit


def component_path(value: str, name: str = "cfg") -> Callable[[dict[str, Any]], None]:
    return lambda b: b["components"][name].update(path=value)


PATH_CASES = [
    ("absolute", component_path("/etc"), UnsafePath, "R-PATH-1"),
    ("dotdot-path", component_path("components/../cfg"), UnsafePath, "R-PATH-1"),
    ("backslash", component_path("components\\cfg"), UnsafePath, "R-PATH-1"),
    ("hidden-segment", component_path("components/.cfg"), UnsafePath, "R-PATH-1"),
    ("empty-segment", component_path("components//cfg"), UnsafePath, "R-PATH-1"),
    ("non-ascii", component_path("components/caf\u00e9"), UnsafePath, "R-PATH-1"),
    # A type error of the record (Table 6-1, R-CMP-2, step 7), not a path error (spec 1.0.1, §6.1).
    ("path-not-string", lambda b: b["components"]["cfg"].update(path=3), ManifestError, "R-CMP-2"),
    ("dotdot-key", files_component("../x"), UnsafePath, "R-PATH-2"),
    ("absolute-key", files_component("/x"), UnsafePath, "R-PATH-2"),
    ("case-fold-keys", files_component("x.bin", "X.bin"), UnsafePath, "R-PATH-3"),
    ("file-and-directory", files_component("a", "a/b"), UnsafePath, "R-PATH-4"),
    ("file-and-directory-case", files_component("a/B", "a/b/c"), UnsafePath, "R-PATH-4"),
    ("component-paths-case-fold", component_path("components/MODEL"), UnsafePath, "R-CMP-6"),
    ("component-path-prefix", component_path("components/model/sub"), UnsafePath, "R-CMP-7"),
    ("component-path-manifest", component_path("Manifest.JSON"), UnsafePath, "R-CMP-8"),
    ("segment-129", component_path("components/" + "c" * 129), LimitExceeded, "R-LIM-8"),
    ("segment-129-and-bad-grammar", component_path("components/." + "c" * 128), LimitExceeded, "R-LIM-8"),
    ("path-1025", component_path("/".join(["c" * 100] * 11)), LimitExceeded, "R-LIM-7"),
    ("full-path-1025", lambda b: (files_component("v" * 30)(b),
                                  b["components"]["blob"].update(path="/".join(["c" * 100] * 10))),
     LimitExceeded, "R-LIM-7"),
]


@pytest.mark.parametrize(("edit", "error", "section"), [c[1:] for c in PATH_CASES], ids=[c[0] for c in PATH_CASES])
def test_bad_path(tmp_path: Path, edit: Callable[[dict[str, Any]], None], error: type, section: str) -> None:
    path = make_checkpoint(tmp_path)
    edit_body(path, edit)
    expect_rejected(path, error, section)


def test_segment_of_128_bytes_is_a_path(tmp_path: Path) -> None:
    path = make_checkpoint(tmp_path)
    (path / "components" / "cfg").rename(path / "components" / ("c" * 128))
    edit_body(path, component_path("components/" + "c" * 128))
    assert validate(path).ok


# -- inventory, sizes -------------------------------------------------------------------------
def remove(rel: str) -> Callable[[Path], None]:
    return lambda path: (path / rel).unlink()


def add(rel: str, data: bytes = b"x") -> Callable[[Path], None]:
    def mutate(path: Path) -> None:
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_bytes(data)
    return mutate


def resize(rel: str, delta: int) -> Callable[[Path], None]:
    def mutate(path: Path) -> None:
        data = (path / rel).read_bytes()
        (path / rel).write_bytes(data[:delta] if delta < 0 else data + bytes(delta))
    return mutate


INVENTORY_CASES = [
    ("missing-data", remove("components/model/data.bin"), MissingFile, "R-CON-3"),
    ("missing-tree", remove("components/model/tree.msgpack"), MissingFile, "R-CON-3"),
    ("missing-value", remove("components/cfg/value.json"), MissingFile, "R-CON-3"),
    ("extra-file", add("components/model/extra.bin"), ExtraFile, "R-CON-2"),
    ("extra-file-root", add("README"), ExtraFile, "R-CON-2"),
    ("truncated-data", resize("components/model/data.bin", -1), IntegrityError, "R-CHK-6"),
    ("extended-data", resize("components/model/data.bin", 64), IntegrityError, "R-CHK-6"),
    ("truncated-tree", resize("components/model/tree.msgpack", -3), IntegrityError, "R-CHK-6"),
    ("extended-tree", resize("components/model/tree.msgpack", 1), IntegrityError, "R-CHK-6"),
    ("truncated-value", resize("components/cfg/value.json", -2), IntegrityError, "R-CHK-6"),
    ("extended-value", resize("components/cfg/value.json", 1), IntegrityError, "R-CHK-6"),
    ("truncated-manifest", resize("manifest.json", -40), ManifestError, "R-MAN-3"),
    ("extended-manifest", lambda p: (p / "manifest.json").write_bytes((p / "manifest.json").read_bytes() + b"x"),
     ManifestError, "R-MAN-3"),
]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize(("mutate", "error", "section"), [c[1:] for c in INVENTORY_CASES],
                         ids=[c[0] for c in INVENTORY_CASES])
def test_bad_inventory(tmp_path: Path, form: str, mutate: Callable[[Path], None], error: type,
                       section: str) -> None:
    path = make_checkpoint(tmp_path)
    mutate(path)
    expect_rejected(forms(path, form), error, section)


@pytest.mark.parametrize(("form", "error", "section"), [("directory", ExtraFile, "R-CON-2"),
                                                       ("archive", UnsafePath, "R-PATH-5")])
def test_unlisted_hidden_file(tmp_path: Path, form: str, error: type, section: str) -> None:
    # Directory form: any unlisted file is ExtraFile; archive form: a bad member name is UnsafePath (§4).
    path = make_checkpoint(tmp_path)
    add(".DS_Store")(path)
    expect_rejected(forms(path, form), error, section)


def test_empty_directory_is_ignored(tmp_path: Path) -> None:
    path = make_checkpoint(tmp_path)
    (path / "components" / "empty" / "deeper").mkdir(parents=True)
    assert validate(path).ok


def test_validate_lists_every_inventory_error(tmp_path: Path) -> None:
    path = make_checkpoint(tmp_path)
    (path / "components/model/data.bin").unlink()
    (path / "components/cfg/value.json").write_bytes(b"{}")
    (path / "stray").write_bytes(b"")
    report = validate(path)
    found = {(i.error, i.rule, i.file) for i in report.errors}
    assert ("MissingFile", "R-CON-3", "components/model/data.bin") in found
    assert ("ExtraFile", "R-CON-2", "stray") in found


# -- flips --------------------------------------------------------------------------------------
def _positions(path: Path, rel: str, count: int = 4) -> list[int]:
    size = (path / rel).stat().st_size
    return sorted({0, size // 3, size // 2, size - 1})[:count]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("which", [0, 1, 2, 3])
def test_flip_in_data_bin(tmp_path: Path, form: str, which: int) -> None:
    path = make_checkpoint(tmp_path)
    rel = "components/model/data.bin"
    # data.bin: w (24 bytes at 0), mask (3 bytes at 64); flip inside an extent.
    flip(path / rel, [0, 11, 23, 64][which])
    expect_rejected(forms(path, form), IntegrityError, "R-ARR-14")


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("which", [0, 1, 2, 3])
@pytest.mark.parametrize("rel", ["components/model/tree.msgpack", "components/cfg/value.json"])
def test_flip_in_payload(tmp_path: Path, form: str, which: int, rel: str) -> None:
    path = make_checkpoint(tmp_path)
    flip(path / rel, _positions(path, rel)[which])
    expect_rejected(forms(path, form), IntegrityError, "R-CHK-7", component=rel.split("/")[1])


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("needle", [b'"test-1"', b'"opencheckpoint-python"', b'"2026-01-01', b'"lr"'])
def test_flip_in_manifest_string(tmp_path: Path, form: str, needle: bytes) -> None:
    path = make_checkpoint(tmp_path)
    data = (path / "manifest.json").read_bytes()
    position = data.index(needle) + 2 if needle != b'"lr"' else data.index(b'"components"') + 3
    flip(path / "manifest.json", position)
    expect_rejected(forms(path, form), IntegrityError, "R-CHK-3")


def test_flip_in_padding_is_found_by_validate(tmp_path: Path) -> None:
    path = make_checkpoint(tmp_path)
    flip(path / "components/model/data.bin", 30)  # between w [0, 24) and mask [64, 67)
    assert read_component(path, "model")["step"] == 7  # reading does not check padding
    report = validate(path)
    assert [(i.error, i.rule) for i in report.errors] == [("ArrayLayoutError", "R-ARR-12"),
                                                               ("IntegrityError", "R-CHK-7")]


# -- symlinks and special files (directory form) ----------------------------------------------
def _record_opens(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    opened: list[str] = []
    real_open = os.open

    def recording_open(*args: Any, **kwargs: Any) -> int:
        fd = real_open(*args, **kwargs)
        opened.append(os.readlink(f"/proc/self/fd/{fd}"))
        return fd

    monkeypatch.setattr(os, "open", recording_open)
    return opened


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc to resolve descriptors")
@pytest.mark.parametrize("what", ["component-dir", "file", "manifest"])
def test_symlink_out_of_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, what: str) -> None:
    path = make_checkpoint(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    if what == "component-dir":
        shutil.move(str(path / "components/model"), str(outside / "model"))
        (path / "components/model").symlink_to(outside / "model")
    elif what == "file":
        shutil.move(str(path / "components/model/data.bin"), str(outside / "data.bin"))
        (path / "components/model/data.bin").symlink_to(outside / "data.bin")
    else:
        shutil.move(str(path / "manifest.json"), str(outside / "manifest.json"))
        (path / "manifest.json").symlink_to(outside / "manifest.json")
    opened = _record_opens(monkeypatch)
    expect_rejected(path, UnsafePath, "R-CON-4")
    assert not [p for p in opened if p.startswith(str(outside))]


def test_fifo_is_rejected(tmp_path: Path) -> None:
    path = make_checkpoint(tmp_path)
    os.mkfifo(path / "components/model/pipe")
    expect_rejected(path, UnsafePath, "R-CON-4")


def test_listed_file_that_is_a_directory_is_missing(tmp_path: Path) -> None:
    path = make_checkpoint(tmp_path)
    (path / "components/cfg/value.json").unlink()
    (path / "components/cfg/value.json").mkdir()
    expect_rejected(path, MissingFile, "R-CON-3", component="cfg")


def test_root_reached_through_symlink_is_fine(tmp_path: Path) -> None:
    path = make_checkpoint(tmp_path)
    (tmp_path / "latest").symlink_to(path)
    assert validate(tmp_path / "latest").ok


# -- locating (step 1) -------------------------------------------------------------------------
def test_nonexistent_path(tmp_path: Path) -> None:
    with pytest.raises(NotACheckpoint) as info:
        read_component(tmp_path / "nothing", "model")
    assert info.value.rule == "R-PUB-10"
    assert [(i.error, i.rule) for i in validate(tmp_path / "nothing").errors] == [("NotACheckpoint", "R-PUB-10")]


def test_directory_without_manifest(tmp_path: Path) -> None:
    path = make_checkpoint(tmp_path)
    (path / "manifest.json").unlink()
    expect_rejected(path, NotACheckpoint, "R-CON-1")


def test_manifest_that_is_a_directory(tmp_path: Path) -> None:
    path = make_checkpoint(tmp_path)
    (path / "manifest.json").unlink()
    (path / "manifest.json").mkdir()
    expect_rejected(path, NotACheckpoint, "R-CON-1")


@pytest.mark.parametrize("content", [b"", b"PK", b"not a zip at all", b"PK\x05\x06" + bytes(18)])
def test_regular_file_that_is_not_an_archive(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "file.ocz").write_bytes(content)
    expect_rejected(tmp_path / "file.ocz", NotACheckpoint, "R-ZIP-1")


def test_fifo_path_is_not_a_checkpoint(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    expect_rejected(tmp_path / "pipe", NotACheckpoint, "R-PUB-11")


@pytest.mark.parametrize("form", FORMS)
def test_staging_name_is_never_a_checkpoint(tmp_path: Path, form: str) -> None:
    path = forms(make_checkpoint(tmp_path), form)
    staging = tmp_path / f".ckpt.oc-staging-{os.getpid()}-abcdefgh"
    path.rename(staging)
    expect_rejected(staging, NotACheckpoint, "R-PUB-12")


@pytest.mark.parametrize("form", FORMS)
def test_old_fallback_with_one_good_candidate(tmp_path: Path, form: str) -> None:
    path = forms(make_checkpoint(tmp_path), form)
    path.rename(tmp_path / ".ckpt.oc-old-abc123")
    (tmp_path / ".ckpt.oc-old-broken").mkdir()
    (tmp_path / ".ckpt.oc-old-").mkdir()  # empty suffix: not a candidate
    assert read_component(tmp_path / "ckpt", "cfg") == {"lr": 0.001, "name": "run"}
    assert validate(tmp_path / "ckpt").ok


@pytest.mark.parametrize("good", [0, 2])
def test_old_fallback_needs_exactly_one_clean_candidate(tmp_path: Path, good: int) -> None:
    for index in range(good):
        make_checkpoint(tmp_path, f".ckpt.oc-old-{index}")
    (tmp_path / ".ckpt.oc-old-x").mkdir()
    expect_rejected(tmp_path / "ckpt", NotACheckpoint, "R-PUB-14")
