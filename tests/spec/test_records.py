"""The reader's plain records (format/records.py) and the pydantic models (format/models.py) agree.

The models are the JSON Schemas' source; the records are what a verified manifest is read into without
pydantic (start-up, decision 0024). A member added to a model and not to its record (or the other way
round) would be read into nothing, or fail every read, so each pair must name the same members, the same
ones required, and the parser must fill every member a file can hold.
"""

from __future__ import annotations

import dataclasses

import pytest

from opencheckpoint.format import models, records
from opencheckpoint.format.manifest import parse_manifest, serialize_manifest

PAIRS = [(records.FileEntry, models.FileEntry), (records.ComponentRecord, models.ComponentRecord),
         (records.ComponentRecord, models.ComponentRecordV2), (records.Extension, models.Extension),
         (records.Producer, models.Producer), (records.Manifest, models.Manifest),
         (records.Manifest, models.ManifestV2)]


@pytest.mark.parametrize(("record", "model"), PAIRS, ids=[m.__name__ for _, m in PAIRS])
def test_record_has_the_members_of_its_model(record: type, model: type[models.BaseModel]) -> None:
    fields = {f.name: f for f in dataclasses.fields(record)}
    assert list(fields) == list(model.model_fields)
    required = {name for name, f in fields.items()
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
    assert required == {name for name, info in model.model_fields.items() if info.is_required()}


def test_a_manifest_with_every_optional_member_reads_into_records() -> None:
    body = {"format": "opencheckpoint", "format_version": 1, "checkpoint_id": "x",
            "created_at": "2026-01-01T00:00:00Z",
            "producer": {"name": "t", "version": "1", "environment": {"python": "3.11"}},
            "metadata": {"step": 1},
            "extensions": {"com.example.x": {"version": 1, "must_understand": False, "data": None}},
            "components": {"c": {"kind": "files", "kind_version": 1, "path": "components/c",
                                 "hints": {"class": "C"}, "metadata": {"a": 1},
                                 "files": {"f": {"size": 1, "crc32c": "00000000", "sha256": "0" * 64}}}}}
    manifest = parse_manifest(serialize_manifest(body)).manifest
    assert isinstance(manifest, records.Manifest)
    record = manifest.components["c"]
    assert (record.hints, record.metadata, record.files["f"].sha256) == ({"class": "C"}, {"a": 1}, "0" * 64)
    assert manifest.producer.environment == {"python": "3.11"}
    assert manifest.extensions["com.example.x"] == records.Extension(version=1, must_understand=False, data=None)
