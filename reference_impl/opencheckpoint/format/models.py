"""Pydantic models of every JSON document the format defines (spec "manifest.json").

They are the source of ``schemas/v1/*.schema.json`` (``opencheckpoint schema
export``; a test fails on any drift). The ``Field`` constraints here are the
schema's statement of the member rules; at run time each rule is checked once,
by its check function in :mod:`opencheckpoint.format.manifest`, which raises its
own error class with its rule ID and the exact location, and the reader's typed
view of a verified manifest is the plain records of :mod:`.records` (same
members; reading a checkpoint does not import pydantic). An optional member is absent or of
its type, never ``null`` (the schema says so: ``SkipJsonSchema[None]``), and
member names of ``components``, ``extensions`` and ``files`` are constrained
by ``propertyNames``, as the text requires.

>>> entry = FileEntry(size=3, crc32c="0a1b2c3d")
>>> entry.model_dump(exclude_none=True)
{'size': 3, 'crc32c': '0a1b2c3d'}
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.json_schema import SkipJsonSchema

from .limits import JSON_MAX_SAFE_INT

# The names and patterns are stated once, in .names (the readers use them without pydantic); re-exported here.
from .names import BUILTIN_KINDS as BUILTIN_KINDS
from .names import CRC32C_PATTERN as CRC32C_PATTERN
from .names import EXTENSION_NAME_PATTERN as EXTENSION_NAME_PATTERN
from .names import FORMAT_NAME as FORMAT_NAME
from .names import FORMAT_VERSION as FORMAT_VERSION
from .names import ID_PATTERN as ID_PATTERN
from .names import KIND_PATTERN as KIND_PATTERN
from .names import MANIFEST_NAME as MANIFEST_NAME
from .names import NEWEST_FORMAT_VERSION as NEWEST_FORMAT_VERSION
from .names import PATH_PATTERN as PATH_PATTERN
from .names import SCHEMA_BASE_URI as SCHEMA_BASE_URI
from .names import SCHEMA_BASE_URIS as SCHEMA_BASE_URIS
from .names import SHA256_PATTERN as SHA256_PATTERN
from .names import TIMESTAMP_PATTERN as TIMESTAMP_PATTERN
from .names import TREE_V2_FILE_PATTERN as TREE_V2_FILE_PATTERN
from .paths import NAME_PATTERN

Size = Annotated[int, Field(ge=0, le=JSON_MAX_SAFE_INT)]
Name = Annotated[str, Field(pattern=NAME_PATTERN)]
RelPath = Annotated[str, Field(pattern=PATH_PATTERN, max_length=1024)]
JsonObject = dict[str, Any]


def _drop_default(schema: dict[str, Any]) -> None:
    schema.pop("default", None)


def _optional(description: str) -> Any:
    """An optional member: absent or of its type in the file (never ``null``), None in the typed view.

    The schema shows neither ``null`` nor a ``null`` default, so it rejects what the text rejects.
    """
    return Field(default=None, description=description, json_schema_extra=_drop_default)


class _Document(BaseModel):
    """Base: closed member sets, strict types (no "1" -> 1 coercion), frozen values.

    ``defer_build``: pydantic builds a model's validator when it first validates, not when the class is
    defined (a schema export or the migration chain's declaration builds what it uses, no more).
    """

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, defer_build=True)  # inherited


class FileEntry(_Document):
    """Size and checksums of one file; the checksums cover every byte of it."""

    model_config = ConfigDict(title="OpenCheckpoint file entry", extra="forbid", strict=True, frozen=True)

    size: Size = Field(description="File size in bytes.")
    crc32c: str = Field(pattern=CRC32C_PATTERN, description="CRC-32C of the file, 8 lowercase hex digits.")
    sha256: Annotated[str, Field(pattern=SHA256_PATTERN)] | SkipJsonSchema[None] = _optional(
        "Optional SHA-256 of the file, 64 lowercase hex digits."
    )


class ComponentRecord(_Document):
    """One named component: its kind, where its files are, and their inventory."""

    model_config = ConfigDict(title="OpenCheckpoint component record", extra="forbid", strict=True, frozen=True)

    kind: str = Field(
        pattern=KIND_PATTERN,
        description="'tree', 'json', 'files', or a namespaced third-party kind such as 'com.example/replay'.",
    )
    kind_version: int = Field(ge=1, le=JSON_MAX_SAFE_INT, description="Version of the kind's payload layout.")
    path: RelPath = Field(description="Directory of the component's files, relative to the checkpoint root.")
    files: dict[RelPath, FileEntry] = Field(
        description="File name relative to 'path' -> size and checksums.",
        json_schema_extra={"propertyNames": {"pattern": PATH_PATTERN, "maxLength": 1024}},
    )
    hints: dict[str, str] | SkipJsonSchema[None] = _optional(
        "Informational strings (class name, framework). Never interpreted."
    )
    metadata: JsonObject | SkipJsonSchema[None] = _optional("Free JSON metadata of the component.")


class Extension(_Document):
    """A declared extension; readers that do not understand a must_understand one reject the file."""

    model_config = ConfigDict(title="OpenCheckpoint extension record", extra="forbid", strict=True, frozen=True)

    version: int = Field(ge=1, le=JSON_MAX_SAFE_INT, description="Version of the extension.")
    must_understand: bool = Field(description="True: a reader that does not implement it must reject the checkpoint.")
    data: Any = Field(description="Extension-defined JSON value (required, may be null).")


class Producer(_Document):
    """Which software wrote the checkpoint (informational)."""

    model_config = ConfigDict(title="OpenCheckpoint producer", extra="forbid", strict=True, frozen=True)

    name: str = Field(min_length=1, max_length=128)
    version: str = Field(min_length=1, max_length=128)
    environment: dict[str, str] | SkipJsonSchema[None] = _optional(
        "Versions of the runtime (python, numpy, torch, jax...)."
    )


class Manifest(_Document):
    """The root document ``manifest.json``; written last, it makes a directory a checkpoint."""

    model_config = ConfigDict(title="OpenCheckpoint manifest", extra="forbid", strict=True, frozen=True)

    format: Literal["opencheckpoint"] = Field(description="Always 'opencheckpoint'.")
    format_version: Literal[1] = Field(description="Format version of this document.")
    checkpoint_id: str = Field(pattern=ID_PATTERN, description="Identifier chosen by the writer.")
    created_at: str = Field(pattern=TIMESTAMP_PATTERN, description="RFC 3339 UTC creation time.")
    producer: Producer
    metadata: JsonObject = Field(description="Free JSON metadata of the checkpoint.")
    extensions: dict[Annotated[str, Field(pattern=EXTENSION_NAME_PATTERN)], Extension] = Field(
        json_schema_extra={"propertyNames": {"pattern": EXTENSION_NAME_PATTERN}}
    )
    components: dict[Name, ComponentRecord] = Field(json_schema_extra={"propertyNames": {"pattern": NAME_PATTERN}})
    manifest_crc32c: str = Field(
        pattern=CRC32C_PATTERN,
        description="CRC-32C of the manifest bytes before its fixed 32-byte suffix; must be the last member.",
    )


class MigrationStepDeclaration(_Document):
    """One declared step of the migration chain (the function itself lives in code)."""

    model_config = ConfigDict(title="OpenCheckpoint migration step", extra="forbid", strict=True, frozen=True)

    from_version: int = Field(ge=1, description="Entry i goes from version i + 1 (R-VER-12).")
    to_version: int = Field(ge=2, description="Entry i goes to version i + 2 (R-VER-12).")
    description: str = Field(min_length=1, description="What the step changes (R-VER-13).")
    payload_kinds: list[Annotated[str, Field(pattern=KIND_PATTERN)]] = Field(
        description="Distinct component kinds whose payload this step also rewrites (R-VER-14)."
    )

    @model_validator(mode="after")
    def _distinct_kinds(self) -> MigrationStepDeclaration:
        if len(set(self.payload_kinds)) != len(self.payload_kinds):
            raise ValueError("payload_kinds must be distinct (R-VER-14)")
        return self


class MigrationChain(_Document):
    """The declared chain: steps k -> k+1 that bring every older version 1..N-1 to ``current_version`` N.

    >>> MigrationChain(current_version=1, steps=[]).current_version
    1
    >>> from pydantic import ValidationError
    >>> try:
    ...     MigrationChain(current_version=2, steps=[])
    ... except ValidationError as exc:
    ...     print(exc.errors()[0]["msg"])
    Value error, steps has 0 entries, current_version - 1 = 1 (R-VER-10)
    """

    model_config = ConfigDict(title="OpenCheckpoint migration chain", extra="forbid", strict=True, frozen=True)

    current_version: int = Field(ge=1, description="The highest format version supported (R-VER-9).")
    steps: list[MigrationStepDeclaration] = Field(description="Exactly current_version - 1 steps, in order.")

    @model_validator(mode="after")
    def _contiguous(self) -> MigrationChain:
        if len(self.steps) != self.current_version - 1:
            raise ValueError(f"steps has {len(self.steps)} entries, current_version - 1 = "
                             f"{self.current_version - 1} (R-VER-10)")
        for index, step in enumerate(self.steps):
            if (step.from_version, step.to_version) != (index + 1, index + 2):
                raise ValueError(f"steps[{index}] goes {step.from_version} -> {step.to_version}, expected "
                                 f"{index + 1} -> {index + 2} (R-VER-12)")
        return self


_TREE_V2_FILES: dict[str, Any] = {
    # R-SHD-3: a tree of kind_version 2 lists tree.msgpack, data.bin and shard data files only.
    "allOf": [{
        "if": {"properties": {"kind": {"const": "tree"}, "kind_version": {"const": 2}},
               "required": ["kind", "kind_version"]},
        "then": {"properties": {"files": {"propertyNames": {"pattern": TREE_V2_FILE_PATTERN},
                                          "required": ["tree.msgpack", "data.bin"]}}},
    }]
}


class ComponentRecordV2(ComponentRecord):
    """A component record of format version 2: a ``tree`` may have kind_version 2 (sharded arrays)."""

    model_config = ConfigDict(title="OpenCheckpoint component record (format version 2)", extra="forbid",
                              strict=True, frozen=True, json_schema_extra=_TREE_V2_FILES)


class ManifestV2(Manifest):
    """The root document of format version 2: a checkpoint that holds sharded arrays (tree tag 10)."""

    model_config = ConfigDict(title="OpenCheckpoint manifest (format version 2)", extra="forbid", strict=True,
                              frozen=True)

    format_version: Literal[2] = Field(description="Format version of this document.")  # type: ignore[assignment]
    components: dict[Name, ComponentRecordV2] = Field(  # type: ignore[assignment]  # the v2 record
        json_schema_extra={"propertyNames": {"pattern": NAME_PATTERN}})


#: Document name -> model; the schema file is ``<name>.schema.json``.
DOCUMENT_MODELS: Final[dict[str, type[BaseModel]]] = {
    "manifest": Manifest,
    "component": ComponentRecord,
    "file-entry": FileEntry,
    "extension": Extension,
    "producer": Producer,
    "migration-chain": MigrationChain,
}

#: The documents of format version 2 (``schemas/v2/``): version 1's with the manifest and record of version 2.
DOCUMENT_MODELS_V2: Final[dict[str, type[BaseModel]]] = {
    **DOCUMENT_MODELS, "manifest": ManifestV2, "component": ComponentRecordV2}
