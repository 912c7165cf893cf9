"""The :class:`Checkpoint` coordinator: named components saved atomically, restored selectively.

>>> import numpy as np, tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "step-10")
>>> weights = {"w": np.ones(3, dtype=np.float32)}
>>> ckpt = Checkpoint(weights=weights, config={"lr": 0.001})
>>> _ = ckpt.save(path, metadata={"step": 10})
>>> weights["w"][:] = 0
>>> result = ckpt.load(path)
>>> sorted(result.loaded), weights["w"].tolist()
(['config', 'weights'], [1.0, 1.0, 1.0])
>>> Checkpoint(archive=np.zeros(2), format="archive").save(path + ".ocp").is_file()
True
"""

from __future__ import annotations

import copy
import errno
import logging
import os
import sys
import uuid
import warnings
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, overload

from .adapters import registry
from .adapters.base import Adapter, ComponentReader, ComponentWriter, PreparedRestore, prepare_restore, resolve_adapter
from .casting import CastPolicy, Conversion
from .container.publish import fault_point
from .container.staged import StagedCheckpoint
from .errors import (
    CheckpointError,
    ConcurrentModification,
    IncompatibleComponent,
    UnsupportedLocation,
    UnsupportedValue,
)
from .location import PathArg, resolve_location
from .manifest import KIND_VERSIONS, MANIFEST_NAME
from .manifest_builder import manifest_body
from .paths import check_segment
from .reader import CheckpointReader
from .remote.fspath import FsPath
from .restore_plan import Rename, RestorePlan
from .strict_json import parse_ijson

logger = logging.getLogger("opencheckpoint")

CheckpointFormat = Literal["directory", "archive"]
Strictness = Literal["error", "warn", "ignore"]
_STRICTNESS = ("error", "warn", "ignore")
_FORMATS = ("directory", "archive")


@dataclass
class LoadResult:
    """What :meth:`Checkpoint.load` did.

    Attributes:
        loaded: components restored.
        missing: requested components the checkpoint does not have.
        incompatible: components that could not be restored -> reason.
        unrequested: components in the checkpoint that were not requested.
        values: the loaded value of each restored component.
        manifest: the checkpoint's manifest (plain JSON).
        versions: producer environment vs this runtime: name -> {checkpoint, runtime, matches}.
        version_skew: True when any recorded version differs from the runtime's.
        conversions: every array converted to another dtype (``cast=``), each marked lossy or not.
        unused: component -> stored key paths not restored (outside ``subtree=``, dropped by ``rename=``).
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


def runtime_environment() -> dict[str, str]:
    """Versions of the runtime, without importing any framework that is not already loaded."""
    import numpy

    from . import __version__

    env = {"python": sys.version.split()[0], "numpy": numpy.__version__, "opencheckpoint": __version__}
    for name in registry.environment_packages():
        module = sys.modules.get(name)
        version = getattr(module, "__version__", None)
        if isinstance(version, str):
            env[name] = version
    return env


def default_producer() -> dict[str, Any]:
    """The producer record of this implementation (spec §5.3), with the runtime's package versions."""
    return {"name": "opencheckpoint-python", "version": _version(), "environment": runtime_environment()}


def compare_versions(recorded: Mapping[str, str] | None) -> tuple[dict[str, dict[str, Any]], bool]:
    runtime = runtime_environment()
    table = {
        name: {"checkpoint": value, "runtime": runtime[name], "matches": value == runtime[name]}
        for name, value in (recorded or {}).items()
        if name in runtime and name != "opencheckpoint"
    }
    return table, any(not row["matches"] for row in table.values())


def utc_timestamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


#: What rename(2) reports when another writer published at the target between our check and our rename.
_RACE_ERRNOS = frozenset({errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR})


def publication_race(exc: OSError, target: Path) -> ConcurrentModification | None:
    """The error to raise when a save lost a race with another writer of ``target``, else None.

    Two saves to a missing target both see it missing; the second rename then meets the first
    one's checkpoint (``Directory not empty``). Or, without an atomic exchange, another writer
    renamed the target aside just before this one could (``No such file or directory`` for the
    target). Nothing of the losing save was published; the other writer's work is left alone.
    """
    moved_away = exc.errno == errno.ENOENT and exc.filename is not None and Path(exc.filename) == target
    if not moved_away and (exc.errno not in _RACE_ERRNOS or not os.path.lexists(target)):
        return None
    return ConcurrentModification(
        "another process published or is publishing a checkpoint at this path while this save was writing "
        f"it; this save published nothing ({exc.strerror}); save again to replace it", file=str(target))


class Checkpoint:
    """Named components of a training run, saved together and restored selectively.

    Args:
        format: ``"directory"`` (default) or ``"archive"`` (one ZIP file).
        strict: what :meth:`load` does about missing or incompatible components:
            ``"error"`` raises, ``"warn"`` warns and loads the rest, ``"ignore"`` loads the rest.
        save_components: default selection for :meth:`save` (e.g. to skip a replay buffer).
        sha256: also record SHA-256 of every file (content addressing; slower).
        durable: fsync files and directories before publishing (default True).
        **components: name -> live object or value.
    """

    def __init__(
        self,
        *,
        format: CheckpointFormat = "directory",
        strict: Strictness = "error",
        save_components: Collection[str] | None = None,
        sha256: bool = False,
        durable: bool = True,
        **components: Any,
    ) -> None:
        if format not in _FORMATS:
            raise ValueError(f"format must be one of {_FORMATS}, got {format!r}")
        if strict not in _STRICTNESS:
            raise ValueError(f"strict must be one of {_STRICTNESS}, got {strict!r}")
        self.format: CheckpointFormat = format
        self.strict: Strictness = strict
        self.save_components = None if save_components is None else frozenset(save_components)
        self.sha256 = sha256
        self.durable = durable
        self._components: dict[str, tuple[Any, Adapter | None]] = {}
        self._adapters: list[tuple[type, Adapter]] = []
        for name, value in components.items():
            self.register(name, value)

    # -- registration --------------------------------------------------------------
    def register(self, name: str, value: Any, adapter: Adapter | None = None) -> Checkpoint:
        """Add a component; ``adapter`` overrides the automatic choice. Returns ``self``."""
        check_segment(name)
        if name in self._components:
            raise KeyError(f"component {name!r} is already registered")
        if adapter is not None and not isinstance(adapter, Adapter):
            raise TypeError("adapter must be an opencheckpoint.adapters.Adapter")
        self._components[name] = (value, adapter)
        return self

    def register_adapter(self, component_type: type, adapter: Adapter) -> Checkpoint:
        """Use ``adapter`` for values of ``component_type`` in this checkpoint only."""
        self._adapters.insert(0, (component_type, adapter))
        return self

    @property
    def components(self) -> dict[str, Any]:
        return {name: value for name, (value, _) in self._components.items()}

    def __contains__(self, name: str) -> bool:
        return name in self._components

    def _adapter(self, name: str) -> Adapter:
        value, adapter = self._components[name]
        return adapter or resolve_adapter(value, self._adapters)

    def _selection(self, names: Collection[str] | None) -> list[str]:
        if names is None:
            return list(self._components)
        unknown = set(names) - set(self._components)
        if unknown:
            raise KeyError(f"not registered: {sorted(unknown)} (registered: {sorted(self._components)})")
        return [n for n in self._components if n in set(names)]

    # -- saving ----------------------------------------------------------------------
    @overload
    def save(self, path: os.PathLike[str], *, components: Collection[str] | None = None,
             metadata: Mapping[str, Any] | None = None, format: CheckpointFormat | None = None,
             checkpoint_id: str | None = None, created_at: str | None = None, overwrite: bool = True,
             producer: Mapping[str, Any] | None = None) -> Path: ...

    @overload
    def save(self, path: str | FsPath, *, components: Collection[str] | None = None,
             metadata: Mapping[str, Any] | None = None, format: CheckpointFormat | None = None,
             checkpoint_id: str | None = None, created_at: str | None = None, overwrite: bool = True,
             producer: Mapping[str, Any] | None = None) -> Path | FsPath: ...

    def save(
        self,
        path: PathArg,
        *,
        components: Collection[str] | None = None,
        metadata: Mapping[str, Any] | None = None,
        format: CheckpointFormat | None = None,
        checkpoint_id: str | None = None,
        created_at: str | None = None,
        overwrite: bool = True,
        producer: Mapping[str, Any] | None = None,
    ) -> Path | FsPath:
        """Write the selected components atomically to ``path`` and return it.

        ``producer`` replaces the manifest's producer record (default: this
        implementation, its version and the runtime's package versions).

        The previous checkpoint at ``path`` (if any) stays intact and readable
        until the new one is complete and durable.

        A save replaces only nothing (or an empty directory) or an
        OpenCheckpoint checkpoint, and the latter only with ``overwrite=True``
        (the default). Anything else at ``path`` (a folder of yours, a file,
        a symbolic link) raises :class:`TargetExists` before anything on disk
        changes; no option deletes it.

        ``path`` may also be a URL (``s3://bucket/run/ckpt``, ``memory://x``) or an
        :class:`~opencheckpoint.remote.fspath.FsPath` (an fsspec filesystem and a path on it;
        needs ``opencheckpoint[remote]``): the checkpoint is then written in directory form as
        objects, ``manifest.json`` last (the commit point, spec §12.7), and the path returned is
        that ``FsPath``. A checkpoint on an object store is never overwritten in place: a save to a
        prefix that holds one raises :class:`TargetExists`, whatever ``overwrite`` says. A URL
        that no installed fsspec implementation serves raises :class:`UnsupportedLocation`.
        """
        location = resolve_location(path)
        output = format or self.format
        if output not in _FORMATS:
            raise ValueError(f"format must be one of {_FORMATS}, got {output!r}")
        if isinstance(location, FsPath):
            return self._save_remote(location, output, components=components, metadata=metadata,
                                     checkpoint_id=checkpoint_id, created_at=created_at, producer=producer)
        target = location.absolute()
        names = self._selection(self.save_components if components is None else components)
        user_metadata = dict(metadata or {})
        try:
            parse_ijson(_json_bytes(user_metadata), file=MANIFEST_NAME)
        except CheckpointError as exc:
            raise UnsupportedValue(f"metadata must be I-JSON: {exc.message}", field="metadata") from None
        try:
            with StagedCheckpoint(target, form=output, durable=self.durable, overwrite=overwrite) as staged:
                records: dict[str, dict[str, Any]] = {}
                for name in names:
                    records[name] = self._save_component(name, staged)
                    staged.pack({name: records[name]})  # files an adapter wrote itself, in manifest order
                staged.commit(manifest_body(
                    records, checkpoint_id=checkpoint_id or uuid.uuid4().hex, created_at=created_at or utc_timestamp(),
                    producer=default_producer() if producer is None else producer, metadata=user_metadata))
        except OSError as exc:
            raced = publication_race(exc, target)
            if raced is None:
                raise
            raise raced from exc
        return target

    def _save_remote(self, target: FsPath, output: CheckpointFormat, **options: Any) -> FsPath:
        """Save to an fsspec location: written locally with :meth:`save` (no fsync: it is a scratch copy),
        uploaded data objects first, ``manifest.json`` last (:mod:`opencheckpoint.remote.publish`)."""
        if output != "directory":
            raise UnsupportedLocation("the archive form is written to local paths only; on a remote filesystem a "
                                      "checkpoint is stored in directory form (format='directory')",
                                      file=str(target))
        from .remote.publish import publish_remote  # the remote writer loads only when a remote path is used

        scratch = copy.copy(self)
        scratch.durable = False
        return publish_remote(lambda local: scratch.save(local, format="directory", **options), target)

    def _save_component(self, name: str, staged: StagedCheckpoint) -> dict[str, Any]:
        value, _ = self._components[name]
        adapter = self._adapter(name)
        writer = ComponentWriter(staged.directory / "components" / name, durable=self.durable, sha256=self.sha256,
                                 archive=staged.archive, member_prefix=f"components/{name}")
        fault_point(f"write-component:{name}")
        try:
            adapter.save(value, writer)
        except CheckpointError as exc:
            # The component being written is the "file" a save error is about; the field stays the
            # location inside its value (e.g. ``$.layer1.w``).
            raise exc.at(file=f"component {name!r}") from None
        return writer.record(adapter.kind, adapter.kind_version, f"components/{name}")

    # -- loading -------------------------------------------------------------------------
    def load(
        self,
        path: PathArg,
        *,
        components: Collection[str] | None = None,
        strict: Strictness | None = None,
        map_location: Any = None,
        verify: bool = True,
        rename: Rename | None = None,
        cast: CastPolicy = None,
        subtree: str | None = None,
    ) -> LoadResult:
        """Restore the selected registered components from ``path``.

        Restoring into a model that changed (see the docs page "Restoring into
        a changed model"): ``rename`` maps stored key paths to the target's
        (``{"module.": ""}`` or a callable; ``None`` from it drops an entry),
        ``subtree`` restores only the stored entries under a key path
        (``"encoder"``), ``cast`` allows dtype conversions (``True``,
        ``"widening"``, ``"lossless"``; default none). They apply to every
        selected component, in phase 1, so the restore stays atomic; the
        result lists the conversions made and the entries left unused.

        Format-level problems (corruption, unsafe paths, unsupported versions)
        always raise. ``strict`` governs only missing and incompatible
        components: ``"error"`` raises :class:`IncompatibleComponent` before
        anything is restored, ``"warn"`` and ``"ignore"`` restore the rest.

        The restore is atomic across components: every selected component is
        read and checked first (checksums, structure, shapes, dtypes, what its
        adapter can check), and only when all passed is any live object
        modified. One exception remains, stated in ``docs/guarantees.md``: an
        adapter whose own restore step raises after the checks (an object's
        ``load_state_dict`` rejecting verified state, a one-phase adapter);
        such restores run first, and the error's ``result.loaded`` lists what
        was restored before it.
        """
        mode = strict or self.strict
        if mode not in _STRICTNESS:
            raise ValueError(f"strict must be one of {_STRICTNESS}, got {mode!r}")
        requested = self._selection(components)
        RestorePlan(rename, subtree, cast)  # a bad option raises before anything is read
        options = {"rename": rename, "subtree": subtree, "cast": cast}
        with CheckpointReader(path) as reader:
            stored = reader.components
            versions, skew = compare_versions(reader.parsed.manifest.producer.environment)
            result = LoadResult(
                missing={n for n in requested if n not in stored},
                unrequested=set(stored) - set(requested),
                manifest=reader.manifest,
                versions=versions,
                version_skew=skew,
            )
            if skew:
                logger.warning("checkpoint %s was written with other versions: %s", path,
                               {k: v for k, v in versions.items() if not v["matches"]})
            plan: list[tuple[str, Adapter]] = []
            for name in requested:
                if name not in stored:
                    continue
                adapter = self._adapter(name)
                record = stored[name]
                if record.kind != adapter.kind:
                    result.incompatible[name] = (f"stored as a {record.kind!r} component; its adapter reads "
                                                 f"{adapter.kind!r}")
                elif record.kind in KIND_VERSIONS and record.kind_version > adapter.kind_version:
                    result.incompatible[name] = (f"{record.kind} kind_version {record.kind_version} is newer "
                                                 f"than supported ({adapter.kind_version})")
                else:
                    plan.append((name, adapter))
            self._report(result, mode, path)
            prepared = self._prepare_all(plan, reader, result, mode, path, map_location, verify, options)
            self._apply_all(prepared, result, mode, path)
        return result

    def _prepare_all(self, plan: list[tuple[str, Adapter]], reader: CheckpointReader, result: LoadResult,
                     mode: Strictness, path: Any, map_location: Any, verify: bool,
                     options: Mapping[str, Any] | None = None) -> list[tuple[str, Adapter, PreparedRestore]]:
        """Phase 1: read, verify and check every planned component; no live object is touched.

        Any ``CheckpointError`` (corruption, and under ``strict="error"`` a
        mismatch) propagates from here, before the first byte reaches a live object.
        """
        prepared: list[tuple[str, Adapter, PreparedRestore]] = []
        for name, adapter in plan:
            value, _ = self._components[name]
            component_reader = ComponentReader(reader, name, map_location=map_location, verify=verify,
                                               plan=RestorePlan(**(options or {})))
            try:
                restore = prepare_restore(adapter, value, component_reader, strict=mode)
            except IncompatibleComponent as exc:
                self._incompatible(result, name, exc, mode, path)
                continue
            result.conversions += component_reader.plan.conversions
            if component_reader.plan.unused:
                result.unused[name] = list(component_reader.plan.unused)
            prepared.append((name, adapter, restore))
        return prepared

    def _apply_all(self, prepared: list[tuple[str, Adapter, PreparedRestore]], result: LoadResult,
                   mode: Strictness, path: Any) -> None:
        """Phase 2: apply every prepared restore.

        Restores that could not be checked in phase 1 (one-phase adapters,
        objects' own ``load_state_dict``) run first, so that when one raises,
        no checked component has been applied yet; ``restore_last`` adapters
        (global RNG state) still run last. If an apply raises, the components
        applied before it stay applied and are listed in ``result.loaded``
        (on the exception's ``result``); the ones after it are untouched.
        """
        prepared.sort(key=lambda item: (item[1].restore_last, item[2].checked))
        for name, _, restore in prepared:
            try:
                loaded = restore.apply()
            except IncompatibleComponent as exc:
                self._incompatible(result, name, exc, mode, path, applied=True)
                continue
            except BaseException as exc:
                exc.add_note(f"opencheckpoint: restoring component {name!r} of {path} failed after "
                             f"{sorted(result.loaded) or 'no other component'} had been restored")
                if isinstance(exc, CheckpointError) and exc.result is None:
                    exc.result = result
                raise
            result.loaded.add(name)
            if loaded is not None:
                result.values[name] = loaded

    def _incompatible(self, result: LoadResult, name: str, exc: IncompatibleComponent, mode: Strictness,
                      path: Any, *, applied: bool = False) -> None:
        """Record a component that does not fit; raise under ``strict="error"``, else warn or ignore."""
        result.incompatible[name] = exc.message
        if mode == "error":
            exc.result = result
            if applied:
                done = sorted(result.loaded)
                exc.message += (f" (raised by the adapter while restoring; already restored: {done})" if done
                                else " (raised by the adapter while restoring; no other component was restored)")
            raise exc.at(file=str(path), field=f"components.{name}")
        self._report_one(name, exc.message, mode, stacklevel=5)

    @staticmethod
    def _report_one(name: str, reason: str, mode: str, stacklevel: int = 3) -> None:
        if mode == "warn":
            warnings.warn(f"checkpoint component {name!r} not restored: {reason}", stacklevel=stacklevel)

    def _report(self, result: LoadResult, mode: str, path: Any) -> None:
        problems = [f"{n}: missing from the checkpoint" for n in sorted(result.missing)]
        problems += [f"{n}: {reason}" for n, reason in sorted(result.incompatible.items())]
        if not problems:
            return
        if mode == "error":
            raise IncompatibleComponent("; ".join(problems), file=str(path), result=result)
        if mode == "warn":
            warnings.warn(f"checkpoint {path}: " + "; ".join(problems), stacklevel=3)


def _json_bytes(value: Any) -> bytes:
    import json

    try:
        return json.dumps(value, allow_nan=False).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise UnsupportedValue(f"metadata must be JSON: {exc}", field="metadata") from None


def _version() -> str:
    from . import __version__

    return __version__
