"""The migration chain mechanism (spec §13), exercised with a test-only chain v1 -> v2 -> v3."""

from __future__ import annotations

import json
from typing import Any

import pytest

from opencheckpoint.format.errors import UnsupportedVersion
from opencheckpoint.format.migrations import DEFAULT_CHAIN, MigrationChainRunner, MigrationStep


def _rename_meta(manifest: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in manifest.items() if k != "meta"}
    out["metadata"] = manifest["meta"]
    return out


def _add_extensions(manifest: dict[str, Any]) -> dict[str, Any]:
    return {**manifest, "extensions": manifest.get("extensions", {})}


def _double_steps(record: Any, payload: Any) -> Any:
    return {**payload, "step": payload["step"] * 2}


CHAIN = MigrationChainRunner(
    current_version=3,
    steps=[
        MigrationStep(1, 2, "rename 'meta' to 'metadata'", _rename_meta, {"tree": _double_steps}),
        MigrationStep(2, 3, "add an empty 'extensions'", _add_extensions),
    ],
)


def test_steps_apply_in_order_and_do_not_mutate_the_input() -> None:
    old = {"format_version": 1, "meta": {"a": 1}}
    assert CHAIN.migrate_manifest(old) == {"format_version": 3, "metadata": {"a": 1}, "extensions": {}}
    assert old == {"format_version": 1, "meta": {"a": 1}}


def test_current_version_needs_no_step() -> None:
    manifest = {"format_version": 3, "metadata": {}, "extensions": {}}
    assert CHAIN.migrate_manifest(manifest) == manifest


def test_payload_steps_apply_per_kind() -> None:
    assert CHAIN.migrate_payload(1, {"kind": "tree"}, {"step": 2}) == {"step": 4}
    assert CHAIN.migrate_payload(2, {"kind": "tree"}, {"step": 2}) == {"step": 2}
    assert CHAIN.migrate_payload(1, {"kind": "json"}, {"step": 2}) == {"step": 2}


@pytest.mark.parametrize("version", [4, 0, "1", True, None])
def test_unknown_versions_name_both_versions(version: object) -> None:
    with pytest.raises(UnsupportedVersion) as info:
        CHAIN.migrate_manifest({"format_version": version})
    assert info.value.field == "$.format_version"
    if version == 4:
        assert "4" in info.value.message and "3" in info.value.message


def test_chain_must_be_contiguous() -> None:
    with pytest.raises(ValueError):
        MigrationChainRunner(current_version=3, steps=[MigrationStep(1, 2, "x", _rename_meta)])
    with pytest.raises(ValueError):
        MigrationStep(1, 3, "skips a version", _rename_meta)


SHIPPED = json.dumps({"current_version": 2, "steps": [{
    "from_version": 1, "to_version": 2, "payload_kinds": [],
    "description": "adds sharded arrays (tree tag 10) and per-rank shard data files in tree components of "
                   "kind_version 2"}]})


def test_declaration_document() -> None:
    declared = CHAIN.declaration().model_dump()
    assert declared["current_version"] == 3
    assert [(s["from_version"], s["to_version"], s["payload_kinds"]) for s in declared["steps"]] == [
        (1, 2, ["tree"]), (2, 3, [])]
    # format version 2 (sharded arrays) is the identity on every v1 manifest and payload
    assert DEFAULT_CHAIN.declaration().model_dump() == json.loads(SHIPPED)


def test_reader_migrates_an_older_manifest_through_the_chain() -> None:
    """A test-only v0 ('meta' instead of 'metadata', no checksum) is read as v1 through parse_manifest."""
    import json

    from opencheckpoint.format.manifest import parse_manifest, serialize_manifest

    def to_v1(manifest: dict[str, Any]) -> dict[str, Any]:
        body = _rename_meta(manifest)
        body["format_version"] = 1
        # A real step would re-derive what v1 adds; here: the checksum the v1 model requires.
        data = serialize_manifest({k: v for k, v in body.items() if k != "manifest_crc32c"})
        return dict(json.loads(data))

    chain = MigrationChainRunner(current_version=1, steps=[MigrationStep(0, 1, "v0 draft -> v1", to_v1)])
    v0 = {"format": "opencheckpoint", "format_version": 0, "checkpoint_id": "old",
          "created_at": "2026-01-01T00:00:00Z", "producer": {"name": "draft", "version": "0"},
          "meta": {"step": 3}, "extensions": {}, "components": {}}
    parsed = parse_manifest(json.dumps(v0).encode(), chain=chain)
    assert parsed.written_version == 0
    assert parsed.manifest.format_version == 1
    assert parsed.manifest.metadata == {"step": 3}
