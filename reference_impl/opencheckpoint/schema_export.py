"""Generate ``schemas/v1/*.schema.json`` from the pydantic models (a test fails on drift).

>>> schemas = build_schemas()
>>> schemas["manifest"]["$id"]
'https://opencheckpoint.org/schemas/v1/manifest.schema.json'
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .models import DOCUMENT_MODELS, SCHEMA_BASE_URI

DRAFT_2020_12 = "https://json-schema.org/draft/2020-12/schema"

#: Extra documents (defined outside the pydantic models, e.g. by the conformance suite).
EXTRA_SCHEMAS: dict[str, Any] = {}


def _register_extra() -> None:
    try:
        from .conformance import models as conformance_models
    except ImportError:
        return
    EXTRA_SCHEMAS.update(conformance_models.DOCUMENT_MODELS)


def build_schemas() -> dict[str, dict[str, Any]]:
    """Document name -> JSON Schema (Draft 2020-12) with a stable ``$id``."""
    _register_extra()
    out: dict[str, dict[str, Any]] = {}
    for name, model in {**DOCUMENT_MODELS, **EXTRA_SCHEMAS}.items():
        schema = model.model_json_schema(mode="validation")
        out[name] = {"$schema": DRAFT_2020_12, "$id": f"{SCHEMA_BASE_URI}{name}.schema.json", **schema}
    return out


def export_schemas(directory: str | Path) -> list[Path]:
    """Write every schema as ``<name>.schema.json`` into ``directory``; return the paths."""
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for name, schema in build_schemas().items():
        path = target / f"{name}.schema.json"
        path.write_text(json.dumps(schema, indent=2, ensure_ascii=False, sort_keys=False) + "\n", encoding="utf-8")
        written.append(path)
    return written
