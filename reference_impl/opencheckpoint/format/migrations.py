"""The migration chain (spec "Versioning"): pure steps that bring an older manifest to the current version.

A step is data (versions, description, which payload kinds it touches) plus
pure functions. The reader applies the steps in order; a version with no
path to the current one is an :class:`~opencheckpoint.format.errors.UnsupportedVersion`.

The shipped chain has one step, 1 -> 2 (sharded arrays), the identity on
every manifest and payload (:data:`SHARDING_STEP`); tests exercise the
mechanism with test-only chains:

>>> chain = MigrationChainRunner(current_version=2, steps=[MigrationStep(
...     from_version=1, to_version=2, description="rename 'meta' to 'metadata'",
...     manifest_step=lambda m: {**{k: v for k, v in m.items() if k != "meta"}, "metadata": m["meta"]})])
>>> chain.migrate_manifest({"format_version": 1, "meta": {}})
{'format_version': 2, 'metadata': {}}
>>> chain.migrate_manifest({"format_version": 3})
Traceback (most recent call last):
...
opencheckpoint.format.errors.UnsupportedVersion: UnsupportedVersion: manifest.json: $.format_version: checkpoint format_version 3 is newer than the highest this reader supports (2; it reads format versions 1 to 2); upgrade opencheckpoint [R-VER-3]
"""  # noqa: E501  (doctest: an error message is shown whole, as users see it)

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..rules.v1 import V1
from .names import NEWEST_FORMAT_VERSION

if TYPE_CHECKING:
    from .models import MigrationChain

ManifestStep = Callable[[dict[str, Any]], dict[str, Any]]
#: (component record, payload) -> payload; payload is the decoded tree / JSON value.
PayloadStep = Callable[[Mapping[str, Any], Any], Any]


@dataclass(frozen=True)
class MigrationStep:
    """One pure step ``from_version -> to_version`` (always ``to_version == from_version + 1``)."""

    from_version: int
    to_version: int
    description: str
    manifest_step: ManifestStep
    payload_steps: Mapping[str, PayloadStep] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.to_version != self.from_version + 1:
            raise ValueError(f"a step goes from k to k+1, got {self.from_version} -> {self.to_version}")


@dataclass(frozen=True)
class MigrationChainRunner:
    """Applies declared steps in order; the declaration is exported as a JSON document."""

    current_version: int
    steps: list[MigrationStep]

    def __post_init__(self) -> None:
        expected = self.current_version - len(self.steps)
        for step in self.steps:
            if step.from_version != expected:
                raise ValueError(f"chain has a gap: expected a step from {expected}, got {step.from_version}")
            expected = step.to_version

    @property
    def oldest_version(self) -> int:
        return self.current_version - len(self.steps)

    def declaration(self) -> MigrationChain:
        """The chain as the ``migration-chain`` JSON document (a pydantic model: imported here, as a reader
        never declares the chain)."""
        from .models import MigrationChain, MigrationStepDeclaration

        return MigrationChain(
            current_version=self.current_version,
            steps=[
                MigrationStepDeclaration(
                    from_version=s.from_version,
                    to_version=s.to_version,
                    description=s.description,
                    payload_kinds=sorted(s.payload_steps),
                )
                for s in self.steps
            ],
        )

    def steps_from(self, version: object) -> list[MigrationStep]:
        """The steps that bring ``version`` to the current version (empty when current)."""
        if not isinstance(version, int) or isinstance(version, bool):
            raise V1.error("R-VER-2",
                f"format_version {version!r} is not an integer", file="manifest.json",
                field="$.format_version",
            )
        if version > self.current_version:
            raise V1.error("R-VER-3",
                f"checkpoint format_version {version} is newer than the highest this reader supports "
                f"({self.current_version}; it reads format versions {self.oldest_version} to "
                f"{self.current_version}); upgrade opencheckpoint",
                file="manifest.json", field="$.format_version",
            )
        if version < self.oldest_version:
            raise V1.error("R-VER-4",
                f"checkpoint format_version {version} is older than the oldest this reader migrates "
                f"({self.oldest_version}; highest supported {self.current_version})",
                file="manifest.json", field="$.format_version",
            )
        return self.steps[version - self.oldest_version :]

    def migrate_manifest(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """Apply every needed manifest step to a copy; the input is left untouched.

        A manifest of the current version needs no step and is returned as it is: copying a
        manifest of a million file entries costs more than parsing it.
        """
        steps = self.steps_from(manifest.get("format_version"))
        if not steps:
            return manifest
        if all(step.manifest_step is identity for step in steps):
            # Nothing changes but the version: a shallow copy, not a deep one of a million file entries.
            return {**manifest, "format_version": self.current_version}
        result = copy.deepcopy(manifest)
        for step in steps:
            result = step.manifest_step(result)
            result["format_version"] = step.to_version
        return result

    def rewrites_payload(self, from_version: int, kind: str) -> bool:
        """Whether some step from ``from_version`` on rewrites payloads of ``kind`` (1 -> 2 rewrites none,
        so a version 1 tree is read, and filled in place, exactly like a current one)."""
        return any(kind in step.payload_steps for step in self.steps_from(from_version))

    def migrate_payload(self, from_version: int, record: Mapping[str, Any], payload: Any) -> Any:
        """Apply the payload steps for the record's kind, from ``from_version`` on."""
        for step in self.steps_from(from_version):
            payload_step = step.payload_steps.get(record.get("kind", ""))
            if payload_step is not None:
                payload = payload_step(record, payload)
        return payload


def identity(manifest: dict[str, Any]) -> dict[str, Any]:
    """A manifest step that changes nothing but the version (the runner sets ``format_version``)."""
    return manifest


#: 1 -> 2 adds sharded arrays; every format version 1 checkpoint means exactly what it meant.
SHARDING_STEP = MigrationStep(
    from_version=1, to_version=2,
    description="adds sharded arrays (tree tag 10) and per-rank shard data files in tree components of "
                "kind_version 2",
    manifest_step=identity)

#: The chain this implementation ships.
DEFAULT_CHAIN = MigrationChainRunner(current_version=NEWEST_FORMAT_VERSION, steps=[SHARDING_STEP])


def migrate_component(
    written_version: int,
    record: Mapping[str, Any],
    payload: Any,
    chain: MigrationChainRunner = DEFAULT_CHAIN,
) -> Any:
    """The hook of the component read path: a decoded payload, brought to the current format version.

    The reader calls it once per component read, after step 14 (the payload
    is decoded and checked: a tree with NumPy leaves, a JSON value, or the
    files' bytes) and before converting to a framework, with the version the
    manifest was written in (``ParsedManifest.written_version``) and the
    component's (migrated) manifest record. A checkpoint of the current
    version costs one comparison: the payload comes back as it is.

    >>> chain = MigrationChainRunner(current_version=2, steps=[MigrationStep(
    ...     from_version=1, to_version=2, description="json values are wrapped", manifest_step=dict,
    ...     payload_steps={"json": lambda record, value: {"value": value}})])
    >>> migrate_component(1, {"kind": "json"}, [1, 2], chain)
    {'value': [1, 2]}
    >>> migrate_component(2, {"kind": "json"}, [1, 2], chain)
    [1, 2]
    """
    if written_version == chain.current_version:
        return payload
    return chain.migrate_payload(written_version, record, payload)
