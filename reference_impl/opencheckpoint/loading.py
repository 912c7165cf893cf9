"""What :meth:`Checkpoint.load <opencheckpoint.Checkpoint.load>` does, component by component, each with its options.

A load is planned (which adapter reads each stored component, whether its
kind and version fit), then run in two phases: every component is read,
verified and checked (:func:`prepare_all`), and only then is any live object
modified (:func:`apply_all`). Each component carries its own merged
:class:`~opencheckpoint.CheckpointOptions`, so ``strict``, ``verify``,
``map_location``, ``rename``/``subtree``/``cast`` and the arguments of the
object's own load method may differ per component.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .adapters.component_io import ComponentReader
from .adapters.protocol import Adapter, PreparedRestore, prepare_restore
from .format.errors import CheckpointError, ConcurrentModification, IncompatibleComponent
from .format.kind_migrations import missing_step
from .format.manifest import KIND_VERSIONS
from .format.producer import runtime_environment
from .options import CheckpointOptions, Strictness
from .progress import advance, files_bytes
from .read.casting import Conversion
from .read.reader import CheckpointReader
from .read.restore_plan import RestorePlan, check_renames


@dataclass
class LoadResult:
    """What :meth:`Checkpoint.load <opencheckpoint.Checkpoint.load>` did.

    Attributes:
        loaded: components restored.
        missing: requested components the checkpoint does not have.
        incompatible: components that could not be restored -> reason.
        unrequested: components in the checkpoint that were not requested.
        values: the loaded value of each restored component.
        manifest: the checkpoint's manifest (plain JSON; ``format_version`` as written in the file).
        versions: producer environment vs this runtime: name -> {checkpoint, runtime, matches}.
        version_skew: True when any recorded version differs from the runtime's.
        conversions: every array converted to another dtype (``cast=``), each marked lossy or not.
        unused: component -> stored key paths not restored (outside ``subtree=``, dropped by ``rename=``).
        partial: component -> what a ``strict="warn"`` or ``"ignore"`` restore left out (entries missing
            from the checkpoint, stored entries the target has no place for, mismatched ones), for the
            components restored in part; such a component is in ``loaded`` too.
    """

    loaded: set[str] = field(default_factory=set)
    missing: set[str] = field(default_factory=set)
    incompatible: dict[str, str] = field(default_factory=dict)
    unrequested: set[str] = field(default_factory=set)
    values: dict[str, Any] = field(default_factory=dict)
    manifest: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, dict[str, Any]] = field(default_factory=dict)
    version_skew: bool = False
    conversions: list[Conversion] = field(default_factory=list)
    unused: dict[str, list[str]] = field(default_factory=dict)
    partial: dict[str, list[str]] = field(default_factory=dict)


logger = logging.getLogger("opencheckpoint")


def compare_versions(recorded: Mapping[str, str] | None) -> tuple[dict[str, dict[str, Any]], bool]:
    """The producer's recorded package versions against this runtime's: the table, and whether any differs.

    The library's own version (``opencheckpoint``) is compared like every other package, as the seed
    compares its own (torchrl's): a checkpoint written by another release reports skew (logged, not fatal).
    """
    runtime = runtime_environment()
    table = {
        name: {"checkpoint": value, "runtime": runtime[name], "matches": value == runtime[name]}
        for name, value in (recorded or {}).items()
        if name in runtime
    }
    return table, any(not row["matches"] for row in table.values())


def new_result(reader: CheckpointReader, requested: list[str], path: Any) -> LoadResult:
    """The result of a load before anything is read: missing and unrequested components, version skew (logged)."""
    stored = reader.components
    versions, skew = compare_versions(reader.parsed.manifest.producer.environment)
    if skew:
        logger.warning("checkpoint %s was written with other versions: %s", path,
                       {k: v for k, v in versions.items() if not v["matches"]})
    return LoadResult(missing={n for n in requested if n not in stored}, unrequested=set(stored) - set(requested),
                      manifest=reader.manifest, versions=versions, version_skew=skew)


@dataclass
class ComponentLoad:
    """One requested component: its live value, the adapter that restores it, its merged options."""

    name: str
    value: Any
    adapter: Adapter
    options: CheckpointOptions
    mode: Strictness


def _readable(adapter: Adapter, kind: str) -> int:
    """The highest kind_version of ``kind`` an adapter can be given.

    A tree of kind_version 2 differs from 1 only by sharded arrays, which the reader assembles
    into whole arrays (or reads by region) before any adapter sees them: every tree adapter reads it.
    """
    return max(adapter.kind_version, KIND_VERSIONS["tree"]) if kind == "tree" else adapter.kind_version


def kind_mismatch(record: Any, adapter: Adapter) -> str | None:
    """Why ``adapter`` cannot read the stored ``record`` (kind, or a version it cannot reach), else None.

    A third-party kind stored at an older ``kind_version`` fits when every
    step up to the adapter's version is registered (:mod:`.kind_migrations`).
    """
    if record.kind != adapter.kind:
        return f"stored as a {record.kind!r} component; its adapter reads {adapter.kind!r}"
    readable = _readable(adapter, record.kind)
    if record.kind_version > readable:
        return f"{record.kind} kind_version {record.kind_version} is newer than supported ({readable})"
    if record.kind not in KIND_VERSIONS and record.kind_version < adapter.kind_version:
        gap = missing_step(record.kind, record.kind_version, adapter.kind_version)
        if gap is not None:
            return (f"{record.kind} kind_version {record.kind_version} is older than its adapter's "
                    f"({adapter.kind_version}) and no migration is registered for kind_version {gap} -> "
                    f"{gap + 1}; register one with opencheckpoint.register_migration")
    return None


def plan_loads(stored: Mapping[str, Any], live: Mapping[str, Any],
               adapter_of: Callable[[str, CheckpointOptions], Adapter], options: Mapping[str, CheckpointOptions],
               modes: Mapping[str, Strictness], result: LoadResult) -> list[ComponentLoad]:
    """The requested components (``live``) the checkpoint has (``stored`` records) whose adapter can read them;
    the others go to ``result.incompatible`` (missing ones are already in ``result.missing``)."""
    plan: list[ComponentLoad] = []
    for name, value in live.items():
        if name not in stored:
            continue
        adapter = adapter_of(name, options[name])
        mismatch = kind_mismatch(stored[name], adapter)
        if mismatch is not None:
            result.incompatible[name] = mismatch
        else:
            plan.append(ComponentLoad(name, value, adapter, options[name], modes[name]))
    return plan


def report(result: LoadResult, modes: Mapping[str, Strictness], path: Any) -> None:
    """Missing and incompatible components found by the plan: raise for those under ``strict="error"``,
    warn for those under ``"warn"`` (each component by its own mode)."""
    stored = sorted(result.unrequested | (set(modes) - result.missing))
    # the stored names, so a typo or a renamed component is fixed without opening the checkpoint
    problems = {n: f"missing from the checkpoint (it has: {', '.join(stored) or 'no component'})"
                for n in result.missing}
    problems.update(result.incompatible)
    errors = [f"{n}: {reason}" for n, reason in sorted(problems.items()) if modes[n] == "error"]
    if errors:
        raise IncompatibleComponent("; ".join(errors), file=str(path), result=result)
    warned = [f"{n}: {reason}" for n, reason in sorted(problems.items()) if modes[n] == "warn"]
    if warned:
        warnings.warn(f"checkpoint {path}: " + "; ".join(warned), stacklevel=3)


def prepare_all(loads: list[ComponentLoad], reader: CheckpointReader, result: LoadResult, path: Any,
                rank: tuple[int, int] = (0, 1)) -> list[tuple[ComponentLoad, PreparedRestore]]:
    """Phase 1: read, verify and check every planned component; no live object is touched.

    Any ``CheckpointError`` (corruption, and under ``strict="error"`` a
    mismatch) propagates from here, before the first byte reaches a live object.
    """
    prepared: list[tuple[ComponentLoad, PreparedRestore]] = []
    plans: list[tuple[str, RestorePlan]] = []
    for load in loads:
        options = load.options
        component_reader = ComponentReader(
            reader, load.name, map_location=options.map_location,
            verify=True if options.verify is None else options.verify,
            plan=RestorePlan(options.rename, options.subtree, options.cast),
            method_args=options.load_args or (), method_kwargs=dict(options.load_kwargs or {}),
            kind_version=load.adapter.kind_version, rank=rank[0], world_size=rank[1])
        plans.append((load.name, component_reader.plan))
        try:
            restore = prepare_restore(load.adapter, load.value, component_reader, strict=load.mode)
        except IncompatibleComponent as exc:
            incompatible(result, load, exc, path)
            continue
        advance(files_bytes([reader.components[load.name]]))
        result.conversions += component_reader.plan.conversions
        if component_reader.plan.unused:
            result.unused[load.name] = list(component_reader.plan.unused)
        if component_reader.not_restored:
            result.partial[load.name] = list(component_reader.not_restored)
        prepared.append((load, restore))
    try:
        check_renames(plans)  # a rename= key that matched nothing anywhere is a mistake, not a no-op
    except IncompatibleComponent as exc:
        raise exc.at(file=str(path)) from None
    return prepared


def apply_all(prepared: list[tuple[ComponentLoad, PreparedRestore]], result: LoadResult, path: Any) -> None:
    """Phase 2: apply every prepared restore.

    Restores that could not be checked in phase 1 (one-phase adapters,
    objects' own ``load_state_dict``) run first, so that when one raises,
    no checked component has been applied yet; ``restore_last`` adapters
    (global RNG state) still run last. If an apply raises, the components
    applied before it stay applied and are listed in ``result.loaded``
    (on the exception's ``result``); the ones after it are untouched.
    """
    prepared.sort(key=lambda item: (item[0].adapter.restore_last, item[1].checked))
    for load, restore in prepared:
        try:
            loaded = restore.apply()
        except IncompatibleComponent as exc:
            incompatible(result, load, exc, path, applied=True)
            continue
        except BaseException as exc:
            exc.add_note(f"opencheckpoint: restoring component {load.name!r} of {path} failed after "
                         f"{sorted(result.loaded) or 'no other component'} had been restored")
            if isinstance(exc, CheckpointError) and exc.result is None:
                exc.result = result
            raise
        result.loaded.add(load.name)
        if loaded is not None:
            result.values[load.name] = loaded


def describe(reader: CheckpointReader, options: Mapping[str, CheckpointOptions],
             modes: Mapping[str, Strictness]) -> dict[str, Any]:
    """What a load restores, for the ranks of a collective load to compare (:mod:`.sharding.agreement`):
    the checkpoint by identity (``checkpoint_id``, manifest CRC-32C: mount points differ between hosts),
    the requested components, and per component the options that change what is restored."""
    manifest = reader.manifest
    checkpoint = {"checkpoint_id": manifest.get("checkpoint_id"), "manifest_crc32c": manifest.get("manifest_crc32c"),
                  "manifest_size": reader.parsed.size}
    description: dict[str, Any] = {"checkpoint": checkpoint, "components": sorted(options)}
    for name, merged in sorted(options.items()):
        description[f"options[{name}]"] = {
            "strict": modes[name], "verify": True if merged.verify is None else bool(merged.verify),
            "cast": merged.cast if merged.cast is None or isinstance(merged.cast, (bool, str)) else repr(merged.cast),
            "subtree": merged.subtree, "rename": merged.rename is not None}
    return description


def check_unchanged(reader: CheckpointReader, result: LoadResult) -> None:
    """After the apply step: :class:`ConcurrentModification` when a data file the load mapped changed since.

    Restores from memory maps (a module's parameters, arrays lent to an
    object's own ``load_state_dict``, each rank's blocks of a sharded load)
    verify the map's bytes in phase 1 and copy them in phase 2; this catches
    a file changed in place in between by its stat (size, inode, times), at
    the cost of one ``fstat`` per mapped file. The live objects may then
    hold some of the new bytes (``docs/guarantees.md``).
    """
    try:
        reader.source.check_mapped()
    except ConcurrentModification as exc:
        exc.result = result
        raise


def incompatible(result: LoadResult, load: ComponentLoad, exc: IncompatibleComponent, path: Any, *,
                 applied: bool = False) -> None:
    """Record a component that does not fit; raise under its ``strict="error"``, else warn or ignore."""
    result.incompatible[load.name] = exc.message
    if load.mode == "error":
        exc.result = result
        if applied:
            done = sorted(result.loaded)
            exc.message += (f" (raised by the adapter while restoring; already restored: {done})" if done
                            else " (raised by the adapter while restoring; no other component was restored)")
        raise exc.at(file=str(path), field=f"components.{load.name}")
    if load.mode == "warn":
        warnings.warn(f"checkpoint component {load.name!r} not restored: {exc.message}", stacklevel=4)
