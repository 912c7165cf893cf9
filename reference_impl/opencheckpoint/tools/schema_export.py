"""Generate ``schemas/v1/*.schema.json`` and ``schemas/v2/*.schema.json`` from the pydantic models (a test fails
on drift). The conformance documents (``conformance-*``) are the suite's, exported with format version 1.

>>> schemas = build_schemas()
>>> schemas["manifest"]["$id"]
'https://opencheckpoint.org/schemas/v1/manifest.schema.json'
>>> build_schemas(2)["manifest"]["properties"]["format_version"]["const"]
2
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..format.models import DOCUMENT_MODELS, DOCUMENT_MODELS_V2, SCHEMA_BASE_URIS

DRAFT_2020_12 = "https://json-schema.org/draft/2020-12/schema"

#: Extra documents (defined outside the pydantic models, e.g. by the conformance suite).
EXTRA_SCHEMAS: dict[str, Any] = {}


def _register_extra() -> None:
    try:
        from ..conformance import models as conformance_models
    except ImportError:
        return
    EXTRA_SCHEMAS.update(conformance_models.DOCUMENT_MODELS)


def build_schemas(format_version: int = 1) -> dict[str, dict[str, Any]]:
    """Document name -> JSON Schema (Draft 2020-12) with a stable ``$id``, for one format version."""
    _register_extra()
    models = {**DOCUMENT_MODELS, **EXTRA_SCHEMAS} if format_version == 1 else DOCUMENT_MODELS_V2
    base = SCHEMA_BASE_URIS[format_version]
    out: dict[str, dict[str, Any]] = {}
    for name, model in models.items():
        schema = model.model_json_schema(mode="validation")
        out[name] = {"$schema": DRAFT_2020_12, "$id": f"{base}{name}.schema.json", **schema}
    return out


def export_schemas(directory: str | Path, format_version: int = 1) -> list[Path]:
    """Write every schema of ``format_version`` as ``<name>.schema.json`` into ``directory``; return the paths."""
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for name, schema in build_schemas(format_version).items():
        path = target / f"{name}.schema.json"
        path.write_text(json.dumps(schema, indent=2, ensure_ascii=False, sort_keys=False) + "\n", encoding="utf-8")
        written.append(path)
    return written
