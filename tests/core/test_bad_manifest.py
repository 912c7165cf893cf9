"""Bad manifests (spec §5-§7, steps 3-9 of §15): one broken rule per row, directory and archive form."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from ckpt_helpers import edit_body, edit_text, expect_rejected, forms, make_checkpoint

from opencheckpoint import (
    IntegrityError,
    LimitExceeded,
    ManifestError,
    NotACheckpoint,
    UnsupportedExtension,
    UnsupportedVersion,
    read_component,
    validate,
)

FORMS = ["directory", "archive"]


def raw(data: bytes) -> Callable[[Path], None]:
    def mutate(path: Path) -> None:
        (path / "manifest.json").write_bytes(data)
    return mutate


def bytes_edit(edit: Callable[[bytes], bytes]) -> Callable[[Path], None]:
    def mutate(path: Path) -> None:
        manifest = path / "manifest.json"
        manifest.write_bytes(edit(manifest.read_bytes()))
    return mutate


def text(old: str, new: str) -> Callable[[Path], None]:
    return lambda path: edit_text(path, old.encode(), new.encode())


def body(edit: Callable[[dict[str, Any]], Any]) -> Callable[[Path], None]:
    return lambda path: edit_body(path, edit)


def nested(depth: int) -> Any:
    value: Any = {}
    for _ in range(depth - 1):
        value = {"x": value}
    return value


def _drop(key: str) -> Callable[[dict[str, Any]], None]:
    return lambda b: b.pop(key)


def _ext(record: dict[str, Any], name: str = "com.example.telemetry") -> Callable[[dict[str, Any]], None]:
    return lambda b: b["extensions"].update({name: record})


CASES: list[tuple[str, Callable[[Path], None], type, str]] = [
    # step 4: parse
    ("not-json", raw(b"{not json"), ManifestError, "R-MAN-3"),
    ("empty", raw(b""), ManifestError, "R-MAN-3"),
    ("not-utf8", bytes_edit(lambda d: d.replace(b'"test-1"', b'"test-\xff"')), ManifestError, "R-MAN-1"),
    ("encoded-surrogate", bytes_edit(lambda d: d.replace(b'"test-1"', b'"\xed\xa0\x80"')), ManifestError,
     "R-MAN-1"),
    ("bom", bytes_edit(lambda d: b"\xef\xbb\xbf" + d), ManifestError, "R-MAN-2"),
    ("trailing-comma", text('"metadata": {}', '"metadata": {"a": 1,}'), ManifestError, "R-MAN-3"),
    ("duplicate-top", text('"metadata": {}', '"metadata": {}, "metadata": {}'), ManifestError, "R-MAN-4"),
    ("duplicate-nested", text('"metadata": {}', '"metadata": {"a": {"b": 1, "b": 1}}'), ManifestError,
     "R-MAN-4"),
    ("nan", text('"metadata": {}', '"metadata": {"x": NaN}'), ManifestError, "R-MAN-3"),
    ("infinity", text('"metadata": {}', '"metadata": {"x": -Infinity}'), ManifestError, "R-MAN-3"),
    ("lone-surrogate", text('"metadata": {}', '"metadata": {"x": "\\ud800"}'), ManifestError, "R-MAN-5"),
    ("lone-low-surrogate-key", text('"metadata": {}', '"metadata": {"\\udc00": 1}'), ManifestError, "R-MAN-5"),
    ("float-overflow", text('"metadata": {}', '"metadata": {"x": 1e400}'), ManifestError, "R-MAN-6"),
    ("too-deep", body(lambda b: b.update(metadata=nested(64))), LimitExceeded, "R-LIM-3"),
    ("too-deep-arrays", text('"metadata": {}', '"metadata": {"x": ' + "[" * 3000 + "]" * 3000 + "}"),
     LimitExceeded, "R-LIM-3"),
    ("int-too-big", body(lambda b: b["metadata"].update(x=2**53)), LimitExceeded, "R-LIM-4"),
    ("int-too-small", body(lambda b: b["metadata"].update(x=-(2**53))), LimitExceeded, "R-LIM-4"),
    ("int-huge-token", text('"metadata": {}', '"metadata": {"x": 1' + "0" * 5000 + "}"), LimitExceeded,
     "R-LIM-4"),
    # step 5: identify
    ("top-level-array", raw(b"[1]\n"), NotACheckpoint, "R-MAN-8"),
    ("top-level-string", raw(b'"opencheckpoint"'), NotACheckpoint, "R-MAN-8"),
    ("format-wrong", body(lambda b: b.update(format="safetensors")), NotACheckpoint, "R-MAN-9"),
    ("format-missing", body(_drop("format")), NotACheckpoint, "R-MAN-9"),
    ("format-version-missing", body(_drop("format_version")), ManifestError, "R-MAN-10"),
    ("format-version-zero", body(lambda b: b.update(format_version=0)), ManifestError, "R-MAN-10"),
    ("format-version-string", body(lambda b: b.update(format_version="1")), ManifestError, "R-MAN-10"),
    ("format-version-newer", body(lambda b: b.update(format_version=3)), UnsupportedVersion, "R-VER-3"),
    # step 6: checksum
    ("crc-wrong", bytes_edit(lambda d: d[:-12] + (b"0" if d[-12:-11] != b"0" else b"1") + d[-11:]),
     IntegrityError, "R-CHK-3"),
    ("crc-uppercase", bytes_edit(lambda d: d[:-32] + d[-32:].upper().replace(b"MANIFEST_CRC32C",
                                                                              b"manifest_crc32c")),
     ManifestError, "R-CHK-1"),
    ("suffix-no-newline", bytes_edit(lambda d: d[:-1]), ManifestError, "R-CHK-1"),
    ("suffix-extended", bytes_edit(lambda d: d + b"\n"), ManifestError, "R-CHK-1"),
    # step 7: members
    ("unknown-member", body(lambda b: b.update(comment="hi")), ManifestError, "R-MAN-12"),
    ("checkpoint-id-bad", body(lambda b: b.update(checkpoint_id="a b")), ManifestError, "R-MAN-13"),
    ("checkpoint-id-long", body(lambda b: b.update(checkpoint_id="a" * 129)), ManifestError, "R-MAN-13"),
    ("created-at-shape", body(lambda b: b.update(created_at="2026-01-01 00:00:00Z")), ManifestError, "R-MAN-14"),
    ("created-at-unicode-digit", body(lambda b: b.update(created_at="202\u0661-01-01T00:00:00Z")),
     ManifestError, "R-MAN-14"),
    ("created-at-second-60", body(lambda b: b.update(created_at="2016-12-31T23:59:60Z")), ManifestError,
     "R-MAN-15"),
    ("created-at-feb-29", body(lambda b: b.update(created_at="2023-02-29T00:00:00Z")), ManifestError, "R-MAN-15"),
    ("created-at-month-13", body(lambda b: b.update(created_at="2023-13-01T00:00:00Z")), ManifestError,
     "R-MAN-15"),
    ("created-at-hour-24", body(lambda b: b.update(created_at="2023-01-01T24:00:00Z")), ManifestError,
     "R-MAN-15"),
    ("producer-not-object", body(lambda b: b.update(producer="me")), ManifestError, "R-MAN-16"),
    ("producer-name-empty", body(lambda b: b["producer"].update(name="")), ManifestError, "R-MAN-17"),
    ("producer-version-missing", body(lambda b: b["producer"].pop("version")), ManifestError, "R-MAN-18"),
    ("producer-environment-int", body(lambda b: b["producer"].update(environment={"python": 3})),
     ManifestError, "R-MAN-19"),
    ("producer-extra", body(lambda b: b["producer"].update(url="x")), ManifestError, "R-MAN-20"),
    ("metadata-array", body(lambda b: b.update(metadata=[])), ManifestError, "R-MAN-21"),
    ("extensions-array", body(lambda b: b.update(extensions=[])), ManifestError, "R-MAN-22"),
    ("components-array", body(lambda b: b.update(components=[])), ManifestError, "R-MAN-23"),
    ("component-name-bad", body(lambda b: b["components"].update({".hidden": b["components"].pop("cfg")})),
     ManifestError, "R-CMP-1"),
    ("component-not-object", body(lambda b: b["components"].update(cfg=[])), ManifestError, "R-CMP-2"),
    ("component-missing-kind", body(lambda b: b["components"]["cfg"].pop("kind")), ManifestError, "R-CMP-2"),
    ("component-extra", body(lambda b: b["components"]["cfg"].update(owner="x")), ManifestError, "R-CMP-3"),
    ("kind-bad", body(lambda b: b["components"]["cfg"].update(kind="Example/X")), ManifestError, "R-CMP-4"),
    ("kind-version-zero", body(lambda b: b["components"]["cfg"].update(kind_version=0)), ManifestError, "R-CMP-5"),
    ("kind-version-bool", body(lambda b: b["components"]["cfg"].update(kind_version=True)), ManifestError,
     "R-CMP-5"),
    ("kind-version-float", text('"kind_version": 1', '"kind_version": 1.0'), ManifestError, "R-MAN-7"),
    ("kind-version-exponent", text('"kind_version": 1', '"kind_version": 1e0'), ManifestError, "R-MAN-7"),
    ("files-array", body(lambda b: b["components"]["cfg"].update(files=[])), ManifestError, "R-CMP-9"),
    ("hints-int", body(lambda b: b["components"]["cfg"].update(hints={"class": 1})), ManifestError, "R-CMP-10"),
    ("component-metadata-array", body(lambda b: b["components"]["cfg"].update(metadata=[])), ManifestError,
     "R-CMP-11"),
    ("entry-missing-crc", body(lambda b: b["components"]["cfg"]["files"]["value.json"].pop("crc32c")),
     ManifestError, "R-CMP-13"),
    ("entry-extra", body(lambda b: b["components"]["cfg"]["files"]["value.json"].update(md5="x")),
     ManifestError, "R-CMP-14"),
    ("entry-size-negative", body(lambda b: b["components"]["cfg"]["files"]["value.json"].update(size=-1)),
     ManifestError, "R-CMP-15"),
    ("entry-size-string", body(lambda b: b["components"]["cfg"]["files"]["value.json"].update(size="3")),
     ManifestError, "R-CMP-15"),
    ("tree-files-set", body(lambda b: b["components"]["model"]["files"].pop("data.bin")), ManifestError,
     "R-CMP-16"),
    ("json-files-set", body(lambda b: b["components"]["cfg"]["files"].update(
        {"other.json": {"size": 0, "crc32c": "00000000"}})), ManifestError, "R-CMP-17"),
    ("crc32c-uppercase", body(lambda b: b["components"]["cfg"]["files"]["value.json"].update(crc32c="ABCDEF01")),
     ManifestError, "R-CHK-4"),
    ("sha256-short", body(lambda b: b["components"]["cfg"]["files"]["value.json"].update(sha256="ab")),
     ManifestError, "R-CHK-5"),
    ("extension-name-bad", body(_ext({"version": 1, "must_understand": False, "data": None}, "Telemetry")),
     ManifestError, "R-EXT-1"),
    ("extension-not-object", body(_ext([])), ManifestError, "R-EXT-2"),
    ("extension-data-missing", body(_ext({"version": 1, "must_understand": False})), ManifestError, "R-EXT-2"),
    ("extension-extra", body(_ext({"version": 1, "must_understand": False, "data": 1, "x": 1})), ManifestError,
     "R-EXT-3"),
    ("extension-version-zero", body(_ext({"version": 0, "must_understand": False, "data": 1})), ManifestError,
     "R-EXT-4"),
    ("extension-must-understand-int", body(_ext({"version": 1, "must_understand": 1, "data": 1})),
     ManifestError, "R-EXT-5"),
    # step 9: extensions
    ("extension-must-understand", body(_ext({"version": 1, "must_understand": True, "data": {}})),
     UnsupportedExtension, "R-EXT-7"),
    ("extension-reserved", body(_ext({"version": 1, "must_understand": True, "data": {}},
                                     "org.opencheckpoint.sharding")), UnsupportedExtension, "R-EXT-7"),
]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize(("mutate", "error", "section"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_manifest(tmp_path: Path, form: str, mutate: Callable[[Path], None], error: type,
                      section: str) -> None:
    path = make_checkpoint(tmp_path)
    mutate(path)
    expect_rejected(forms(path, form), error, section)


REQUIRED = ["checkpoint_id", "created_at", "producer", "metadata", "extensions", "components"]


@pytest.mark.parametrize("member", REQUIRED)
def test_missing_member_is_named(tmp_path: Path, member: str) -> None:
    path = make_checkpoint(tmp_path)
    edit_body(path, _drop(member))
    error = expect_rejected(path, ManifestError, "R-MAN-11")
    assert error is not None and error.field == f"$.{member}" and member in error.message


def test_newer_version_names_both_versions(tmp_path: Path) -> None:
    path = make_checkpoint(tmp_path)
    edit_body(path, lambda b: b.update(format_version=7))
    error = expect_rejected(path, UnsupportedVersion, "R-VER-3")
    assert error is not None and "7" in error.message and "(2;" in error.message


@pytest.mark.parametrize("form", FORMS)
def test_must_understand_false_is_ignored(tmp_path: Path, form: str) -> None:
    path = make_checkpoint(tmp_path)
    edit_body(path, _ext({"version": 3, "must_understand": False, "data": {"x": [1, 2]}}))
    edit_body(path, _ext({"version": 1, "must_understand": False, "data": None}, "org.opencheckpoint.sharding"))
    target = forms(path, form)
    assert validate(target).ok
    assert read_component(target, "cfg") == {"lr": 0.001, "name": "run"}


@pytest.mark.parametrize("value", [2**53 - 1, -(2**53 - 1)])
def test_largest_safe_integer_is_accepted(tmp_path: Path, value: int) -> None:
    path = make_checkpoint(tmp_path)
    edit_body(path, lambda b: b["metadata"].update(x=value))
    assert validate(path).ok


def test_depth_exactly_at_limit_is_accepted(tmp_path: Path) -> None:
    path = make_checkpoint(tmp_path)
    edit_body(path, lambda b: b.update(metadata=nested(63)))  # top level (1) + 63 nested objects = 64
    assert validate(path).ok
    assert json.loads((path / "manifest.json").read_bytes())["metadata"]


def test_leap_day_and_fraction_accepted(tmp_path: Path) -> None:
    path = make_checkpoint(tmp_path)
    edit_body(path, lambda b: b.update(created_at="2024-02-29T23:59:59.123456789Z"))
    assert validate(path).ok


def test_validate_lists_every_member_error(tmp_path: Path) -> None:
    path = make_checkpoint(tmp_path)
    edit_body(path, lambda b: (b.update(checkpoint_id="a b", created_at="x"), b["producer"].update(name="")))
    report = validate(path)
    found = {(i.error, i.rule, i.field) for i in report.errors}
    assert found == {("ManifestError", "R-MAN-13", "$.checkpoint_id"), ("ManifestError", "R-MAN-14", "$.created_at"),
                     ("ManifestError", "R-MAN-17", "$.producer.name")}
    assert all(i.file == "manifest.json" for i in report.errors)
