"""The manifest schema rejects what the spec text rejects: ``null`` for optional members, bad member names.

Issue 9 §4 ("schemas vs text"): the schemas allowed ``null`` for ``hints``, component
``metadata``, ``sha256`` and ``producer.environment`` and let any extension or component
name through, while R-CMP-10, R-CMP-11, R-CHK-5, R-MAN-19, R-EXT-1 and R-CMP-1 reject them.
Each case here is also rejected by the reader, with the rule the schema now states.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from opencheckpoint.format.errors import ManifestError
from opencheckpoint.format.manifest import parse_manifest, serialize_manifest

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "schemas/v1/manifest.schema.json").read_text("utf-8"))

BODY: dict[str, Any] = {
    "format": "opencheckpoint", "format_version": 1, "checkpoint_id": "x", "created_at": "2026-01-01T00:00:00Z",
    "producer": {"name": "t", "version": "1", "environment": {"python": "3.11"}}, "metadata": {},
    "extensions": {"com.example.ext": {"version": 1, "must_understand": False, "data": None}},
    "components": {"c": {"kind": "files", "kind_version": 1, "path": "components/c", "hints": {"a": "b"},
                         "metadata": {}, "files": {"f": {"size": 0, "crc32c": "00000000", "sha256": "0" * 64}}}},
}


def _edit(path: tuple[str, ...], value: Any, *, rename: str | None = None) -> dict[str, Any]:
    body = copy.deepcopy(BODY)
    parent = body
    for key in path[:-1]:
        parent = parent[key]
    if rename is not None:
        parent[rename] = parent.pop(path[-1])
    else:
        parent[path[-1]] = value
    return body


CASES = {
    "null hints": (_edit(("components", "c", "hints"), None), "R-CMP-10"),
    "null component metadata": (_edit(("components", "c", "metadata"), None), "R-CMP-11"),
    "null sha256": (_edit(("components", "c", "files", "f", "sha256"), None), "R-CHK-5"),
    "null producer.environment": (_edit(("producer", "environment"), None), "R-MAN-19"),
    "bad extension name": (_edit(("extensions", "com.example.ext"), None, rename="Not_DNS"), "R-EXT-1"),
    "bad component name": (_edit(("components", "c"), None, rename=".hidden"), "R-CMP-1"),
}


def test_the_valid_body_passes_both() -> None:
    jsonschema.Draft202012Validator(SCHEMA).validate({**BODY, "manifest_crc32c": "00000000"})
    assert parse_manifest(serialize_manifest(BODY)).manifest.checkpoint_id == "x"


@pytest.mark.parametrize("case", sorted(CASES))
def test_schema_and_reader_both_reject(case: str) -> None:
    body, rule = CASES[case]
    errors = list(jsonschema.Draft202012Validator(SCHEMA).iter_errors({**body, "manifest_crc32c": "00000000"}))
    assert errors, f"the schema accepts {case}"
    with pytest.raises(ManifestError) as caught:
        parse_manifest(serialize_manifest(body))
    assert caught.value.rule == rule
