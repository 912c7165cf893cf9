"""Pydantic models of the conformance documents (spec §17 and Appendix B).

``case.json`` describes one case, ``expected.json`` is the canonical rendering
of a valid case's contents, and the capabilities object is what
``CMD capabilities`` prints. The JSON Schemas ``schemas/v1/conformance-*.schema.json``
are generated from these models by ``opencheckpoint schema export``.

>>> CaseModel.model_validate({"id": "tree-none", "description": "a None root", "spec_sections": ["8.1"],
...     "valid": True, "form": "directory"}).requires
[]
>>> CapabilitiesModel.model_validate({"implementation": "x", "version": "1", "modes": ["read"], "skip": {}}).modes
['read']
>>> CapabilitiesModel.model_validate({"implementation": "x", "version": "2", "modes": ["read"], "skip": {},
...     "implements": ["sharding"]}).implements
['sharding']
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..format.models import EXTENSION_NAME_PATTERN, ID_PATTERN, KIND_PATTERN, PATH_PATTERN, TIMESTAMP_PATTERN

#: Error classes of spec Table 16-1 (what a must-reject case may expect).
ERROR_CLASS_NAMES = (
    "NotACheckpoint", "UnsupportedVersion", "UnsupportedExtension", "ManifestError", "IntegrityError",
    "UnsafePath", "MissingFile", "ExtraFile", "LimitExceeded", "TreeError", "ArrayLayoutError",
    "UnknownDtype", "ArchiveError", "UnknownComponentKind", "IncompatibleComponent",
)
#: Optional capabilities of spec Table 17-1 (``sharding``: format version 2, §S.8), plus what a checkout may lack.
CAPABILITIES = ("archive", "old-fallback", "sharding", "symlinks")
#: Capabilities whose cases only readers run: writers do not produce them from a rendering (format v2, §S.8).
READER_ONLY = frozenset({"sharding"})
#: Capabilities added after the format version 1 text 1.0 (§S.8): opt-in, implemented only where ``CMD
#: capabilities`` names them in ``implements``, so a version 1 reader that declares nothing stays conforming.
OPT_IN = ("sharding",)

#: A requirement ID, a section number, an Appendix B section or a section S.n of the format version 2 text.
SECTION_PATTERN = r"^(R-[A-Z]+-[0-9]+|[0-9]+(\.[0-9]+)*|[BS](\.[0-9]+)?)$"
Hex = Annotated[str, Field(pattern=r"^([0-9a-f]{2})*$")]
Bits = Annotated[str, Field(pattern=r"^[0-9a-f]{16}$")]
DecimalInt = Annotated[str, Field(pattern=r"^(0|-?[1-9][0-9]*)$")]
Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
Head = Annotated[str, Field(pattern=r"^[0-9a-f]{128}$")]
NonNegative = Annotated[int, Field(ge=0)]


class _Doc(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class CaseModel(_Doc):
    """``case.json``: what one conformance case is and what a reader must do with it."""

    model_config = ConfigDict(title="OpenCheckpoint conformance case", extra="forbid", strict=True)

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{0,99}$", description="Case id; equals the case directory name.")
    description: str = Field(min_length=1, description="What the case checks, in one or two sentences.")
    spec_sections: list[Annotated[str, Field(pattern=SECTION_PATTERN)]] = Field(
        min_length=1, description="Requirement IDs (R-ARR-4) and/or section numbers the case exercises (S.n: "
                                  "sections of the format version 2 document).")
    valid: bool = Field(description="true: a reader must accept it and print expected.json; false: must reject.")
    error_class: Literal[ERROR_CLASS_NAMES] | None = Field(  # type: ignore[valid-type]  # Literal[*tuple]: pydantic reads it
        default=None, description="For invalid cases: the class of spec Table 16-1 the reader must report.")
    form: Literal["directory", "archive"] = Field(description="checkpoint/ (directory) or checkpoint.zip (archive).")
    requires: list[Literal[CAPABILITIES]] = Field(  # type: ignore[valid-type]  # Literal[*tuple]: pydantic reads it
        default_factory=list, description="Capabilities the case needs; skipped where the reader skips one.")
    message_contains: list[Annotated[str, Field(min_length=1)]] = Field(
        default_factory=list, description="For invalid cases: texts the error message must contain (for example "
                                          "the versions named by R-VER-15).")
    read_path: str | None = Field(
        default=None, pattern=r"^[A-Za-z0-9_.][A-Za-z0-9._-]*(/[A-Za-z0-9_.][A-Za-z0-9._-]*)*$",
        description="Path, relative to the case directory, given to CMD read instead of the checkpoint itself "
                    "(for example a target name that does not exist, to exercise the old-fallback lookup).")

    @model_validator(mode="after")
    def _error_class_iff_invalid(self) -> CaseModel:
        if self.valid == (self.error_class is not None):
            raise ValueError("error_class is required for invalid cases and forbidden for valid ones")
        return self


class CapabilitiesModel(_Doc):
    """The object ``CMD capabilities`` prints (spec R-RDR-9)."""

    model_config = ConfigDict(title="OpenCheckpoint conformance capabilities", extra="forbid", strict=True)

    implementation: str = Field(min_length=1, description="Name of the implementation.")
    version: str = Field(min_length=1, description="Version of the implementation.")
    modes: list[Literal["read", "write"]] = Field(min_length=1, description="Protocol modes implemented.")
    skip: dict[Literal["archive", "old-fallback", "sharding"], Annotated[str, Field(min_length=1)]] = Field(
        description="Skipped optional capability (spec Table 17-1) -> reason.")
    implements: list[Literal[OPT_IN]] = Field(  # type: ignore[valid-type]  # Literal[*tuple]: pydantic reads it
        default_factory=list, description="Opt-in capabilities (added after format version 1, spec §S.8) the "
                                          "implementation implements; one not named here is skipped.")

    @model_validator(mode="after")
    def _implemented_or_skipped(self) -> CapabilitiesModel:
        both = sorted(set(self.implements) & set(self.skip))
        if both:
            raise ValueError(f"capabilities {both} are both implemented and skipped")
        if len(set(self.implements)) != len(self.implements):
            raise ValueError("implements names a capability twice")
        return self


# -- expected.json (Appendix B) --------------------------------------------------------------


class _Blob(_Doc):
    """Appendix B.6: ``hex`` (≤ 4096 bytes) or ``sha256`` + ``head`` + ``tail``."""

    hex: Hex | None = None
    sha256: Sha256 | None = None
    head: Head | None = None
    tail: Head | None = None

    @model_validator(mode="after")
    def _one_form(self) -> _Blob:
        full = self.hex is not None
        digest = (self.sha256, self.head, self.tail)
        if full == any(x is not None for x in digest) or (not full and None in digest):
            raise ValueError("a blob has either hex, or all of sha256, head and tail")
        return self


class NoneNode(_Doc):
    type: Literal["none"]


class BoolNode(_Doc):
    type: Literal["bool"]
    value: bool


class IntNode(_Doc):
    type: Literal["int"]
    value: DecimalInt


class FloatNode(_Doc):
    type: Literal["float"]
    bits: Bits = Field(description="binary64 bit pattern, 16 lowercase hex digits, most significant first.")
    value: str | None = Field(default=None, description="Informative text; ignored by comparison.")


class ComplexNode(_Doc):
    type: Literal["complex"]
    real_bits: Bits
    imag_bits: Bits
    value: str | None = Field(default=None, description="Informative text; ignored by comparison.")


class StrNode(_Doc):
    type: Literal["str"]
    value: str


class BytesNode(_Blob):
    type: Literal["bytes"]
    nbytes: NonNegative


class ListNode(_Doc):
    type: Literal["list"]
    items: list[Node]


class TupleNode(_Doc):
    type: Literal["tuple"]
    items: list[Node]


class StrKey(_Doc):
    str: str


class IntKey(_Doc):
    int: DecimalInt


class DictNode(_Doc):
    type: Literal["dict"]
    items: list[tuple[StrKey | IntKey, Node]]


class NamedTupleNode(_Doc):
    type: Literal["named_tuple"]
    type_name: str
    fields: list[tuple[str, Node]]


class ScalarNode(_Doc):
    type: Literal["scalar"]
    dtype: str
    hex: Hex


class ArrayNode(_Blob):
    type: Literal["array"]
    dtype: str
    shape: list[NonNegative]
    nbytes: NonNegative


class PRNGKeyNode(_Doc):
    type: Literal["prng_key"]
    impl: str
    data: ArrayNode


class DtypeNode(_Doc):
    type: Literal["dtype"]
    dtype: str


Node = Annotated[
    NoneNode | BoolNode | IntNode | FloatNode | ComplexNode | StrNode | BytesNode | ListNode | TupleNode | DictNode
    | NamedTupleNode | ScalarNode | ArrayNode | PRNGKeyNode | DtypeNode,
    Field(discriminator="type"),
]


class TreeContent(_Doc):
    type: Literal["tree"]
    root: Node


class JsonContent(_Doc):
    type: Literal["json"]
    value: Any


class FileContent(_Blob):
    size: NonNegative


class FilesContent(_Doc):
    type: Literal["files", "opaque"]
    files: dict[Annotated[str, Field(pattern=PATH_PATTERN)], FileContent]


class FileEntryModel(_Doc):
    size: NonNegative
    crc32c: Annotated[str, Field(pattern=r"^[0-9a-f]{8}$")]
    sha256: Sha256 | None = None


class ComponentRendering(_Doc):
    kind: Annotated[str, Field(pattern=KIND_PATTERN)]
    kind_version: Annotated[int, Field(ge=1)]
    path: Annotated[str, Field(pattern=PATH_PATTERN)]
    hints: dict[str, str] | None = None
    metadata: dict[str, Any] | None = None
    files: dict[Annotated[str, Field(pattern=PATH_PATTERN)], FileEntryModel]
    content: Annotated[TreeContent | JsonContent | FilesContent, Field(discriminator="type")]


class ProducerRendering(_Doc):
    name: str
    version: str
    environment: dict[str, str] | None = None


class ExtensionRendering(_Doc):
    version: Annotated[int, Field(ge=1)]
    must_understand: bool
    data: Any


class ExpectedModel(_Doc):
    """``expected.json``: the canonical content rendering of spec Appendix B."""

    model_config = ConfigDict(title="OpenCheckpoint canonical content rendering", extra="forbid", strict=True)

    rendering: Literal[1] = Field(description="Version of the rendering (spec Appendix B).")
    form: Literal["directory", "archive"]
    format_version: Annotated[int, Field(ge=1)]
    checkpoint_id: Annotated[str, Field(pattern=ID_PATTERN)]
    created_at: Annotated[str, Field(pattern=TIMESTAMP_PATTERN)]
    producer: ProducerRendering
    metadata: dict[str, Any]
    extensions: dict[Annotated[str, Field(pattern=EXTENSION_NAME_PATTERN)], ExtensionRendering]
    components: dict[str, ComponentRendering]


ListNode.model_rebuild()
TupleNode.model_rebuild()
DictNode.model_rebuild()
NamedTupleNode.model_rebuild()
TreeContent.model_rebuild()

#: Documents exported to ``schemas/v1/<name>.schema.json``.
DOCUMENT_MODELS: dict[str, type[BaseModel]] = {
    "conformance-case": CaseModel,
    "conformance-expected": ExpectedModel,
    "conformance-capabilities": CapabilitiesModel,
}
