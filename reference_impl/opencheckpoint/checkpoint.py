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

import contextlib
import errno
import functools
import logging
import os
import sys
import uuid
from collections.abc import Collection, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from . import loading
from .adapters import registry
from .adapters.base import Adapter, ComponentWriter, resolve_adapter
from .casting import CastPolicy
from .collectives import DEFAULT_TIMEOUT, resolve_collective
from .container.publish import fault_point
from .container.staged import StagedCheckpoint
from .errors import CheckpointError, ConcurrentModification, UnsupportedValue
from .loading import LoadResult
from .location import local_path
from .manifest import MANIFEST_NAME
from .manifest_builder import manifest_body
from .options import NO_OPTIONS, STRICTNESS, CheckpointOptions, Strictness, check_option_names
from .paths import check_segment
from .probe import is_checkpoint, manifest
from .reader import CheckpointReader
from .restore_plan import Rename, RestorePlan
from .sharding.collective_save import save_collective
from .sharding.sink import LocalSink
from .strict_json import parse_ijson
from .tree.sink import current_sink, installed

if TYPE_CHECKING:
    from .container.archive_writer import ArchiveWriter

logger = logging.getLogger("opencheckpoint")

CheckpointFormat = Literal["directory", "archive"]
_STRICTNESS = STRICTNESS
_FORMATS = ("directory", "archive")
__all__ = ["Checkpoint", "CheckpointFormat", "CheckpointOptions", "LoadResult", "Strictness"]


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

    Per-component options (:class:`~opencheckpoint.CheckpointOptions`: the
    adapter, ``strict``, ``sha256``, ``verify``, arguments for the object's
    own methods) are given to :meth:`register` and, per operation, as
    ``component_options=`` of :meth:`save` and :meth:`load`.

    Examples:
        >>> import numpy as np, tempfile, os
        >>> from opencheckpoint import Checkpoint, CheckpointOptions
        >>> path = os.path.join(tempfile.mkdtemp(), "step-1")
        >>> ckpt = Checkpoint(weights={"w": np.ones(2)})
        >>> _ = ckpt.register("buffer", {"obs": np.zeros(3)}, options=CheckpointOptions(strict="ignore"))
        >>> _ = ckpt.save(path, components=["weights"])
        >>> sorted(ckpt.load(path).missing)  # "buffer" is optional: missing, not an error
        ['buffer']
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
        self._options: dict[str, CheckpointOptions] = {}
        self._adapters: list[tuple[type, Adapter]] = []
        for name, value in components.items():
            self.register(name, value)

    # -- registration --------------------------------------------------------------
    def register(self, name: str, value: Any, adapter: Adapter | None = None, *,
                 options: CheckpointOptions | None = None) -> Checkpoint:
        """Add a component; ``adapter`` overrides the automatic choice. Returns ``self``.

        ``options`` are the component's persistent options; each :meth:`save`
        and :meth:`load` may override them (``component_options=``).
        """
        check_segment(name)
        if name in self._components:
            raise KeyError(f"component {name!r} is already registered")
        if adapter is not None and not isinstance(adapter, Adapter):
            raise TypeError("adapter must be an opencheckpoint.adapters.Adapter")
        if options is not None and not isinstance(options, CheckpointOptions):
            raise TypeError("options must be an opencheckpoint.CheckpointOptions")
        if adapter is not None and options is not None and options.adapter is not None:
            raise ValueError(f"component {name!r}: give the adapter once, as adapter= or in options")
        self._components[name] = (value, adapter)
        self._options[name] = options or NO_OPTIONS
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

    def _adapter(self, name: str, options: CheckpointOptions = NO_OPTIONS) -> Adapter:
        value, adapter = self._components[name]
        chosen = options.adapter or adapter or resolve_adapter(value, self._adapters)
        if options.has_method_args and not chosen.takes_method_args:
            raise TypeError(f"component {name!r}: its adapter {type(chosen).__name__} does not call the object's "
                            "own methods, so save_args/save_kwargs/load_args/load_kwargs would be ignored; "
                            "choose StateDictAdapter() or DumpLoadAdapter() in the options, or drop the arguments")
        return chosen

    def _merged(self, name: str, override: Mapping[str, CheckpointOptions]) -> CheckpointOptions:
        return self._options.get(name, NO_OPTIONS).merged(override.get(name))

    # -- reading without live objects (the seed's classmethods) ----------------------------
    is_checkpoint = staticmethod(is_checkpoint)
    manifest = staticmethod(manifest)

    def _selection(self, names: Collection[str] | None) -> list[str]:
        if names is None:
            return list(self._components)
        unknown = set(names) - set(self._components)
        if unknown:
            raise KeyError(f"not registered: {sorted(unknown)} (registered: {sorted(self._components)})")
        return [n for n in self._components if n in set(names)]

    # -- saving ----------------------------------------------------------------------
    def save(
        self,
        path: str | os.PathLike[str],
        *,
        components: Collection[str] | None = None,
        metadata: Mapping[str, Any] | None = None,
        format: CheckpointFormat | None = None,
        checkpoint_id: str | None = None,
        created_at: str | None = None,
        overwrite: bool = True,
        producer: Mapping[str, Any] | None = None,
        component_options: Mapping[str, CheckpointOptions] | None = None,
        process_group: Any = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> Path:
        """Write the selected components atomically to ``path`` and return it.

        ``component_options``: name -> :class:`~opencheckpoint.CheckpointOptions`
        merged over the registered ones for this save (``adapter``, ``sha256``,
        ``save_args``/``save_kwargs``); a name that is not saved is a ``KeyError``.

        ``producer`` replaces the manifest's producer record (default: this
        implementation, its version and the runtime's package versions).

        The previous checkpoint at ``path`` (if any) stays intact and readable
        until the new one is complete and durable.

        A save replaces only nothing (or an empty directory) or an
        OpenCheckpoint checkpoint, and the latter only with ``overwrite=True``
        (the default). Anything else at ``path`` (a folder of yours, a file,
        a symbolic link) raises :class:`TargetExists` before anything on disk
        changes; no option deletes it. A URL (``s3://...``) raises
        :class:`UnsupportedLocation`.

        In a ``torch.distributed`` job every rank calls ``save`` (docs page
        "Scaling out"; ``process_group``: default the world group, or any
        :class:`opencheckpoint.sharding.Collective`); every rank passes the same
        arguments and saves the same components and tree structure. If a rank
        fails before it has reported, every other raises within ``timeout``
        seconds per step and nothing is published.
        """
        target = local_path(path).absolute()
        output = format or self.format
        if output not in _FORMATS:
            raise ValueError(f"format must be one of {_FORMATS}, got {output!r}")
        names = self._selection(self.save_components if components is None else components)
        overrides = check_option_names(component_options, names, "save")
        options = {name: self._merged(name, overrides) for name in names}
        adapters = {name: self._adapter(name, options[name]) for name in names}  # usage errors before any write
        user_metadata = dict(metadata or {})
        try:
            parse_ijson(_json_bytes(user_metadata), file=MANIFEST_NAME)
        except CheckpointError as exc:
            raise UnsupportedValue(f"metadata must be I-JSON: {exc.message}", field="metadata") from None
        collective = resolve_collective(process_group, timeout)
        body = functools.partial(
            _manifest, checkpoint_id=checkpoint_id or uuid.uuid4().hex, created_at=created_at or utc_timestamp(),
            producer=default_producer() if producer is None else producer, metadata=user_metadata)
        try:
            if collective is not None:
                if output != "directory":
                    raise UnsupportedValue("a collective save writes the directory form only", field="format")
                arguments = _collective_arguments(
                    names, [adapters[n].kind for n in names],
                    [self.sha256 if options[n].sha256 is None else options[n].sha256 for n in names],
                    metadata=user_metadata, format=output, checkpoint_id=checkpoint_id, created_at=created_at,
                    overwrite=overwrite, producer=producer, durable=self.durable)
                save_collective(target, collective,
                                lambda root: self._save_components(names, adapters, options, root, None), body,
                                durable=self.durable, overwrite=overwrite, arguments=arguments)
                return target
            with StagedCheckpoint(target, form=output, durable=self.durable, overwrite=overwrite) as staged:
                staged.commit(body(self._save_components(names, adapters, options, staged.directory, staged)))
        except OSError as exc:
            raced = publication_race(exc, target)
            if raced is None:
                raise
            raise raced from exc
        return target

    def _save_components(self, names: list[str], adapters: Mapping[str, Adapter],
                         options: Mapping[str, CheckpointOptions], root: Path, staged: StagedCheckpoint | None,
                         ) -> dict[str, dict[str, Any]]:
        """Run each component's adapter into ``root/components/NAME``; the component records by name."""
        records: dict[str, dict[str, Any]] = {}
        with installed(LocalSink()) if current_sink() is None else contextlib.nullcontext() as local:
            for name in names:
                records[name] = self._save_component(name, root, None if staged is None else staged.archive,
                                                     adapters[name], options[name])
                if staged is not None:
                    staged.pack({name: records[name]})  # files an adapter wrote itself, in manifest order
                if isinstance(local, LocalSink) and root / "components" / name in local.sharded:
                    records[name]["kind_version"] = 2  # a tree with sharded arrays (format version 2)
        return records

    def _save_component(self, name: str, root: Path, archive: ArchiveWriter | None, adapter: Adapter,
                        options: CheckpointOptions) -> dict[str, Any]:
        value, _ = self._components[name]
        sha256 = self.sha256 if options.sha256 is None else options.sha256
        writer = ComponentWriter(root / "components" / name, durable=self.durable, sha256=sha256,
                                 archive=archive, member_prefix=f"components/{name}",
                                 method_args=options.save_args or (), method_kwargs=dict(options.save_kwargs or {}))
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
        path: str | os.PathLike[str],
        *,
        components: Collection[str] | None = None,
        strict: Strictness | None = None,
        map_location: Any = None,
        verify: bool = True,
        rename: Rename | None = None,
        cast: CastPolicy = None,
        subtree: str | None = None,
        component_options: Mapping[str, CheckpointOptions] | None = None,
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

        ``component_options``: name -> :class:`~opencheckpoint.CheckpointOptions`
        merged over the registered ones for this load; its ``strict``,
        ``verify``, ``map_location``, ``rename``, ``subtree``, ``cast`` and
        ``load_args``/``load_kwargs`` apply to that component only and win over
        the arguments above. A name that is not loaded is a ``KeyError``.

        Format-level problems (corruption, unsafe paths, unsupported versions)
        always raise. ``strict`` governs only missing and incompatible
        components: ``"error"`` raises :class:`IncompatibleComponent` before
        anything is restored, ``"warn"`` and ``"ignore"`` restore the rest.
        An older third-party kind is migrated (:func:`~opencheckpoint.register_migration`).

        The restore is atomic across components: every selected component is
        read and checked first (checksums, structure, shapes, dtypes, what its
        adapter can check), and only when all passed is any live object
        modified. One exception remains, stated in ``docs/guarantees.md``: an
        adapter whose own restore step raises after the checks (an object's
        ``load_state_dict`` rejecting verified state, a one-phase adapter);
        such restores run first, and the error's ``result.loaded`` lists what
        was restored before it.
        """
        requested = self._selection(components)
        overrides = check_option_names(component_options, requested, "load")
        call = CheckpointOptions(strict=strict or self.strict, map_location=map_location, verify=verify,
                                 rename=rename, subtree=subtree, cast=cast)  # a bad strict raises here
        options = {name: call.merged(self._merged(name, overrides)) for name in requested}
        for merged in options.values():  # a bad option raises before anything is read
            RestorePlan(merged.rename, merged.subtree, merged.cast)
        modes = {name: merged.strict or self.strict for name, merged in options.items()}
        with CheckpointReader(path) as reader:
            stored = reader.components
            versions, skew = compare_versions(reader.parsed.manifest.producer.environment)
            result = LoadResult(missing={n for n in requested if n not in stored},
                                unrequested=set(stored) - set(requested), manifest=reader.manifest,
                                versions=versions, version_skew=skew)
            if skew:
                logger.warning("checkpoint %s was written with other versions: %s", path,
                               {k: v for k, v in versions.items() if not v["matches"]})
            live = {name: self._components[name][0] for name in requested}
            plan = loading.plan_loads(stored, live, self._adapter, options, modes, result)
            loading.report(result, modes, path)
            prepared = loading.prepare_all(plan, reader, result, path)
            loading.apply_all(prepared, result, path)
        return result

def _manifest(records: dict[str, dict[str, Any]], **fields: Any) -> dict[str, Any]:
    """The manifest body of a save: format version 2 only when a tree holds a sharded array (R-SHD-13)."""
    sharded = any(r["kind"] == "tree" and r["kind_version"] == 2 for r in records.values())
    return manifest_body(records, format_version=2 if sharded else 1, **fields)


def _collective_arguments(names: list[str], kinds: list[str], sha256: list[bool | None],
                          **given: Any) -> dict[str, Any]:
    """The arguments of a save every rank of a collective save must pass alike, as JSON values.

    The metadata and producer mappings are sent as digests (they may be large);
    each rank compares them with the coordinator's, whose values are stored.
    """
    import hashlib
    import json

    def digest(value: Any) -> str | None:
        if value is None:
            return None
        text = json.dumps(value, sort_keys=True, default=repr, separators=(",", ":"))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    return {**given, "components": names, "adapters": kinds, "sha256": sha256,
            "metadata": digest(given["metadata"]),
            "producer": None if given["producer"] is None else digest(dict(given["producer"]))}


def _json_bytes(value: Any) -> bytes:
    import json

    try:
        return json.dumps(value, allow_nan=False).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise UnsupportedValue(f"metadata must be JSON: {exc}", field="metadata") from None


def _version() -> str:
    from . import __version__

    return __version__
