"""The schemas are generated from the models, valid Draft 2020-12, and agree with the spec's examples."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from opencheckpoint.tools.schema_export import build_schemas, export_schemas

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "schemas" / "v1"
#: The parts of the format version 1 text (core, archive profile, conformance) and the informative notes on the
#: core, which hold most of the JSON examples (Appendix A's manifest, §6.1, §7.1, §13.2).
SPEC_PARTS = sorted((ROOT / "spec").glob("opencheckpoint-v1*.md"))


def test_committed_schemas_equal_a_fresh_export(tmp_path: Path) -> None:
    export_schemas(tmp_path)
    fresh = {p.name: p.read_text(encoding="utf-8") for p in tmp_path.iterdir()}
    committed = {p.name: p.read_text(encoding="utf-8") for p in SCHEMAS.glob("*.schema.json")}
    assert sorted(fresh) == sorted(committed), "schema files differ: run `make schemas` and commit"
    for name, text in fresh.items():
        assert committed[name] == text, f"{name} drifted from the models: run `make schemas` and commit"


def test_cli_export_into_empty_directory_matches(tmp_path: Path) -> None:
    out = tmp_path / "export"
    done = subprocess.run([sys.executable, "-m", "opencheckpoint", "schema", "export", str(out)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    diff = subprocess.run(["diff", "-r", str(out), str(SCHEMAS)], capture_output=True, text=True, check=False)
    assert diff.returncode == 0, diff.stdout


@pytest.mark.parametrize("name", sorted(build_schemas()))
def test_schema_is_valid_draft_2020_12_with_stable_id(name: str) -> None:
    schema = json.loads((SCHEMAS / f"{name}.schema.json").read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"] == f"https://opencheckpoint.org/schemas/v1/{name}.schema.json"


def _spec_examples() -> list[tuple[str, int, str]]:
    pattern = re.compile(r"<!-- schema: ([a-z-]+) -->\n```json\n(.*?)```", re.S)
    out = []
    for part in SPEC_PARTS:
        text = part.read_text(encoding="utf-8")
        out += [(m.group(1), text[: m.start()].count("\n") + 1, m.group(2))
                for m in pattern.finditer(text)]
    return out


def test_spec_has_schema_tagged_examples() -> None:
    kinds = {kind for kind, _, _ in _spec_examples()}
    assert {"manifest", "component", "extension", "migration-chain"} <= kinds


@pytest.mark.parametrize(("kind", "line", "body"), _spec_examples(), ids=lambda v: str(v)[:30])
def test_spec_json_example_is_valid_against_its_schema(kind: str, line: int, body: str) -> None:
    schema = json.loads((SCHEMAS / f"{kind}.schema.json").read_text(encoding="utf-8"))
    instance = json.loads(body)
    errors = list(jsonschema.Draft202012Validator(schema).iter_errors(instance))
    assert not errors, f"spec line {line}: {[e.message for e in errors]}"


def test_schema_rejects_what_the_models_reject() -> None:
    """The schema is not looser than the model on the rules a schema can state."""
    schema = json.loads((SCHEMAS / "component.schema.json").read_text(encoding="utf-8"))
    validator = jsonschema.Draft202012Validator(schema)
    good = {"kind": "tree", "kind_version": 1, "path": "components/model",
            "files": {"tree.msgpack": {"size": 3, "crc32c": "0a1b2c3d"}}}
    assert validator.is_valid(good)
    for bad in (
        {**good, "extra": 1},
        {**good, "kind_version": 0},
        {**good, "path": "../up"},
        {**good, "kind": "Tree"},
        {**good, "files": {"tree.msgpack": {"size": -1, "crc32c": "0a1b2c3d"}}},
        {**good, "files": {"tree.msgpack": {"size": 3, "crc32c": "0A1B2C3D"}}},
    ):
        assert not validator.is_valid(bad), bad


V2_SCHEMAS = ROOT / "schemas" / "v2"


def test_committed_v2_schemas_equal_a_fresh_export(tmp_path: Path) -> None:
    export_schemas(tmp_path, 2)
    fresh = {p.name: p.read_text(encoding="utf-8") for p in tmp_path.iterdir()}
    committed = {p.name: p.read_text(encoding="utf-8") for p in V2_SCHEMAS.glob("*.schema.json")}
    assert fresh == committed, "schemas/v2 drifted from the models: run `make schemas` and commit"
    assert json.loads(committed["manifest.schema.json"])["$id"].endswith("/schemas/v2/manifest.schema.json")


def test_v2_schemas_accept_a_sharded_manifest_and_reject_a_foreign_tree_file(tmp_path: Path) -> None:
    import numpy as np

    from opencheckpoint.testing.sharded import DataFiles, write_checkpoint

    files = DataFiles()
    node = files.sharded(np.arange(4.0), [("shards/rank-00000.bin", (0,), (2,)), ("shards/rank-00001.bin", (2,), (2,))])
    manifest = json.loads((write_checkpoint(tmp_path / "c", {"m": (node, files)}) / "manifest.json").read_bytes())
    validator = jsonschema.Draft202012Validator(json.loads((V2_SCHEMAS / "manifest.schema.json").read_text("utf-8")))
    validator.validate(manifest)
    manifest["components"]["m"]["files"]["shards/rank-1.bin"] = {"size": 0, "crc32c": "00000000"}
    assert not validator.is_valid(manifest)
    manifest["format_version"] = 1
    v1 = jsonschema.Draft202012Validator(json.loads((SCHEMAS / "manifest.schema.json").read_text("utf-8")))
    assert not validator.is_valid({**manifest, "format_version": 1}) and v1.is_valid(
        {**manifest, "components": {}})


def test_v2_spec_examples_validate_against_schemas_v2() -> None:
    text = (ROOT / "spec" / "opencheckpoint-v2.md").read_text(encoding="utf-8")
    examples = re.findall(r"<!-- schema: ([a-z-]+) -->\n```json\n(.*?)```", text, re.S)
    assert {kind for kind, _ in examples} == {"component", "migration-chain"}
    for kind, body in examples:
        schema = json.loads((V2_SCHEMAS / f"{kind}.schema.json").read_text("utf-8"))
        jsonschema.Draft202012Validator(schema).validate(json.loads(body))
