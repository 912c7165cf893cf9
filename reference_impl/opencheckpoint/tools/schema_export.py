"""Generate ``schemas/v1/*.schema.json`` and ``schemas/v2/*.schema.json`` from the pydantic models (a test fails
on drift). The conformance documents (``conformance-*``) are the suite's, exported with format version 1.

>>> schemas = build_schemas()
>>> schemas["manifest"]["$id"]
'https://opencheckpoint.org/schemas/v1/manifest.schema.json'
>>> build_schemas(2)["manifest"]["properties"]["format_version"]["const"]
2
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from ..container.output_file import check_output_file, write_output_file
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


def export_schemas(directory: str | Path, format_version: int = 1, *, overwrite: bool = True) -> list[Path]:
    """Write every schema of ``format_version`` as ``<name>.schema.json`` into ``directory``; return the paths.

    An existing schema file is replaced only with ``overwrite``; a file there that is not a JSON Schema,
    a folder or a link is never replaced (:class:`~opencheckpoint.errors.TargetExists`, raised before any
    file is written).
    """
    target = Path(directory)
    schemas = {target / f"{name}.schema.json": schema for name, schema in build_schemas(format_version).items()}
    for path in schemas:
        check_output_file(path, kind="JSON Schema", overwrite=overwrite, recognised=_is_json_schema)
    target.mkdir(parents=True, exist_ok=True)
    for path, schema in schemas.items():
        text = json.dumps(schema, indent=2, ensure_ascii=False, sort_keys=False) + "\n"
        write_output_file(path, functools.partial(Path.write_text, data=text, encoding="utf-8"))
    return list(schemas)


def _is_json_schema(path: Path) -> bool:
    """A JSON object naming a JSON Schema dialect (``$schema``): what :func:`export_schemas` writes."""
    if path.stat().st_size > 16 << 20:
        return False
    value = json.loads(path.read_text(encoding="utf-8"))
    return isinstance(value, dict) and str(value.get("$schema", "")).startswith("https://json-schema.org/")
