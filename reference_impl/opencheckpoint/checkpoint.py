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
import os
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any, Literal, overload

from . import loading
from .adapters.base import Adapter, DumpLoadAdapter, resolve_adapter, stored_kind_adapter
from .adapters.collectives import DEFAULT_TIMEOUT, load_collective, resolve_collective
from .format.errors import UnsupportedValue
from .format.paths import check_segment
from .format.producer import checked_metadata
from .loading import LoadResult
from .location import PathArg, resolve_location
from .options import NO_OPTIONS, STRICTNESS, CheckpointOptions, Strictness, check_option_names
from .progress import ProgressArg, files_bytes, reporting
from .read.casting import CastPolicy
from .read.per_rank import process_rank
from .read.probe import is_checkpoint, manifest
from .read.reader import CheckpointReader
from .read.restore_plan import Rename, RestorePlan
from .remote.fspath import FsPath
from .sharding.agreement import agreement
from .sharding.collective import Collective
from .write import pipeline
from .write.async_save import SaveHandle, refuse_when_finalizing, save_in_background, wait_for_target
from .write.plan import ComponentSpec, SaveRequest

CheckpointFormat = Literal["directory", "archive"]
_STRICTNESS = STRICTNESS
_FORMATS = ("directory", "archive")
__all__ = ["Checkpoint", "CheckpointFormat", "CheckpointOptions", "LoadResult", "Strictness"]


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

    def _adapter(self, name: str, options: CheckpointOptions = NO_OPTIONS, stored_kind: str | None = None) -> Adapter:
        value, adapter = self._components[name]
        chosen = options.adapter or adapter or resolve_adapter(value, self._adapters)
        if chosen is not options.adapter and chosen is not adapter and stored_kind is not None:
            # A plain dict or list picks json or tree by what it holds now (an empty one: json); what was
            # stored decides on load, so a dict saved holding a tensor loads into {} (seed API).
            chosen = stored_kind_adapter(value, chosen, stored_kind)
            if (stored_kind == "files" and chosen.kind != "files"
                    and callable(getattr(value, "dump", None)) and callable(getattr(value, "load", None))):
                # Stored by dump/load (a torchrl replay buffer, converted): an object that has both state_dict
                # and dump/load is saved as a tree here, but reads such a component back through its own load().
                chosen = DumpLoadAdapter()
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
    @overload
    def save(self, path: os.PathLike[str], *, components: Collection[str] | None = None,
             metadata: Mapping[str, Any] | None = None, format: CheckpointFormat | None = None,
             checkpoint_id: str | None = None, created_at: str | None = None, overwrite: bool = True,
             producer: Mapping[str, Any] | None = None,
             component_options: Mapping[str, CheckpointOptions] | None = None, process_group: Any = None,
             timeout: float = DEFAULT_TIMEOUT, progress: ProgressArg = None) -> Path: ...

    @overload
    def save(self, path: str | FsPath, *, components: Collection[str] | None = None,
             metadata: Mapping[str, Any] | None = None, format: CheckpointFormat | None = None,
             checkpoint_id: str | None = None, created_at: str | None = None, overwrite: bool = True,
             producer: Mapping[str, Any] | None = None,
             component_options: Mapping[str, CheckpointOptions] | None = None, process_group: Any = None,
             timeout: float = DEFAULT_TIMEOUT, progress: ProgressArg = None) -> Path | FsPath: ...

    def save(self, path: PathArg, *, components: Collection[str] | None = None,
             metadata: Mapping[str, Any] | None = None, format: CheckpointFormat | None = None,
             checkpoint_id: str | None = None, created_at: str | None = None, overwrite: bool = True,
             producer: Mapping[str, Any] | None = None,
             component_options: Mapping[str, CheckpointOptions] | None = None, process_group: Any = None,
             timeout: float = DEFAULT_TIMEOUT, progress: ProgressArg = None) -> Path | FsPath:
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
        changes; no option deletes it.

        ``path`` may also be a URL (``s3://bucket/run/ckpt``, ``memory://x``) or an
        :class:`~opencheckpoint.remote.fspath.FsPath` (an fsspec filesystem and a path on it;
        needs ``opencheckpoint[remote]``): the checkpoint is then written in directory form as
        objects, ``manifest.json`` last (the commit point, spec §12.7), and the path returned is
        that ``FsPath``. A checkpoint on an object store is never overwritten in place: a save to a
        prefix that holds one raises :class:`TargetExists`, whatever ``overwrite`` says. A URL
        that no installed fsspec implementation serves raises :class:`UnsupportedLocation`.

        In a ``torch.distributed`` job every rank calls ``save`` (docs page
        "Scaling out"; ``process_group``: default the world group, or any
        :class:`opencheckpoint.sharding.Collective`); every rank passes the same
        arguments and saves the same components and tree structure. If a rank
        fails before it has reported, every other raises within ``timeout``
        seconds per step and nothing is published. To a URL (``s3://``) each rank
        uploads its own shard objects and the coordinator writes ``manifest.json``
        once every rank's are there: no file system need be shared.
        ``progress``: ``True`` (a bar on a terminal) or ``f(done_bytes, total_bytes)`` (:mod:`.progress`).
        An async save to ``path`` still in flight (:meth:`save_async`) finishes first.
        """
        location = resolve_location(path)
        request = self._request(components=components, metadata=metadata, format=format,
                                checkpoint_id=checkpoint_id, created_at=created_at, overwrite=overwrite,
                                producer=producer, component_options=component_options)
        collective = resolve_collective(process_group, timeout)
        wait_for_target(location)
        return pipeline.save(location, request, collective=collective, progress=progress)

    def _request(self, *, components: Collection[str] | None, metadata: Mapping[str, Any] | None,
                 format: CheckpointFormat | None, checkpoint_id: str | None, created_at: str | None,
                 overwrite: bool, producer: Mapping[str, Any] | None,
                 component_options: Mapping[str, CheckpointOptions] | None) -> SaveRequest:
        """A save's arguments resolved: the components, each with its adapter and merged options (usage errors
        raise here, before anything is written), and the manifest fields (the metadata checked and copied)."""
        refuse_when_finalizing(self)
        output = self._output(format)
        names = self._selection(self.save_components if components is None else components)
        options = self._save_options(names, component_options)
        specs = []
        for name in names:
            chosen = options[name]
            specs.append(ComponentSpec(name, self._components[name][0], self._adapter(name, chosen), chosen,
                                       sha256=self.sha256 if chosen.sha256 is None else chosen.sha256))
        given = {"metadata": checked_metadata(metadata), "checkpoint_id": checkpoint_id, "created_at": created_at,
                 "producer": None if producer is None else copy.deepcopy(dict(producer))}
        return SaveRequest(specs, given, form=output, durable=self.durable, overwrite=overwrite)

    def save_async(self, path: PathArg, *, components: Collection[str] | None = None,
                   metadata: Mapping[str, Any] | None = None, format: CheckpointFormat | None = None,
                   checkpoint_id: str | None = None, created_at: str | None = None, overwrite: bool = True,
                   producer: Mapping[str, Any] | None = None,
                   component_options: Mapping[str, CheckpointOptions] | None = None,
                   progress: ProgressArg = None, max_pending_bytes: int | None = None) -> SaveHandle:
        """Snapshot the selected components now and :meth:`save` them in a background thread.

        Takes :meth:`save`'s arguments; returns a :class:`~opencheckpoint.async_save.SaveHandle`
        (``done()``, ``wait()``, ``result()``: the published path; errors are raised again there).
        On return every array is copied to host memory (torch, CUDA included, NumPy, JAX;
        ``state_dict()``/``dump()`` ran now): the live state may change. The copy holds the
        state's array bytes until the save ends; ``max_pending_bytes`` caps what unfinished saves
        hold (over it a save waits; one larger than the cap raises :class:`~.errors.LimitExceeded`). One
        save in flight per target: a save to that path waits for it. Publication is
        :meth:`save`'s; a normal exit finishes it first. See the docs page "Async save".

        Examples:
            >>> import numpy as np, tempfile, os
            >>> from opencheckpoint import read_component
            >>> weights = {"w": np.ones(3, dtype=np.float32)}
            >>> handle = Checkpoint(weights=weights).save_async(os.path.join(tempfile.mkdtemp(), "step-1"))
            >>> weights["w"][:] = 7  # the snapshot was taken: the save still writes ones
            >>> read_component(handle.result(), "weights")["w"].tolist(), handle.done()
            ([1.0, 1.0, 1.0], True)
        """
        refuse_when_finalizing(path)
        if resolve_collective(None, DEFAULT_TIMEOUT) is not None:
            # Collectives from a background thread would race the training loop's own on the same group.
            raise UnsupportedValue("save_async is not supported in a multi-process job (torch.distributed or "
                                   "jax.distributed); call save on every rank", field="save_async")
        request = self._request(components=components, metadata=metadata, format=format,
                                checkpoint_id=checkpoint_id, created_at=created_at, overwrite=overwrite,
                                producer=producer, component_options=component_options)
        return save_in_background(resolve_location(path), request, progress=progress,
                                  max_pending_bytes=max_pending_bytes)

    def _output(self, format: CheckpointFormat | None) -> CheckpointFormat:
        output = format or self.format
        if output not in _FORMATS:
            raise ValueError(f"format must be one of {_FORMATS}, got {output!r}")
        return output

    def _save_options(self, names: list[str],
                      component_options: Mapping[str, CheckpointOptions] | None) -> dict[str, CheckpointOptions]:
        """Each saved component's options: the registered ones with this save's ``component_options`` merged."""
        overrides = check_option_names(component_options, names, "save")
        return {name: self._merged(name, overrides) for name in names}

    # -- loading -------------------------------------------------------------------------
    def load(self, path: PathArg, *, components: Collection[str] | None = None, strict: Strictness | None = None,
             map_location: Any = None, verify: bool = True, rename: Rename | None = None, cast: CastPolicy = None,
             subtree: str | None = None, component_options: Mapping[str, CheckpointOptions] | None = None,
             progress: ProgressArg = None, process_group: Any = None, timeout: float = DEFAULT_TIMEOUT) -> LoadResult:
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
        was restored before it. ``progress``: as in :meth:`save` (per component read).

        On several ranks (a module or optimizer holding torch DTensors in a job of
        more than one process, or any load given ``process_group``), every rank
        must call ``load``: each reads only its own blocks, and the ranks agree
        once between the two phases, so that when any rank's checks fail every
        rank raises and none changes anything (within ``timeout`` seconds when a
        rank dies; docs page "Scaling out"). Every rank must load the same
        checkpoint and components with the same options, or every rank raises
        ``CollectiveError``. A mapped data file changed in place during the load
        raises ``ConcurrentModification`` after the apply step: load again.
        """
        requested = self._selection(components)
        call = CheckpointOptions(strict=strict or self.strict, map_location=map_location, verify=verify,
                                 rename=rename, subtree=subtree, cast=cast)  # a bad strict raises here
        options = self._load_options(requested, call, component_options)
        modes = {name: merged.strict or self.strict for name, merged in options.items()}
        # Every registered object decides whether the load is collective: a rank that requests
        # nothing still joins the agreement (which compares what the ranks load).
        collective = load_collective(process_group, timeout, (value for value, _ in self._components.values()))
        return self._load_two_phases(path, requested, options, modes, collective, progress)

    def _load_two_phases(self, path: PathArg, requested: list[str], options: dict[str, CheckpointOptions],
                         modes: dict[str, Strictness], collective: Collective | None,
                         progress: ProgressArg) -> LoadResult:
        """:meth:`load` once its options are merged: plan, prepare, agree (several ranks), apply, re-check maps."""
        live = {name: self._components[name][0] for name in requested}
        with agreement(collective) as passed, CheckpointReader(path) as reader:
            result = loading.new_result(reader, requested, path)
            stored = reader.components
            plan = loading.plan_loads(stored, live, lambda n, o: self._adapter(n, o, stored[n].kind), options,
                                      modes, result)
            loading.report(result, modes, path)
            with reporting(progress, files_bytes(reader.components[load.name] for load in plan), f"loading {path}"):
                ranks = (collective.rank, collective.world_size) if collective is not None else process_rank()
                prepared = loading.prepare_all(plan, reader, result, path, ranks)
            # Every rank of a sharded load checked its part, and loads what the others do: only now does any apply.
            passed(loading.describe(reader, options, modes))
            loading.apply_all(prepared, result, path)
            loading.check_unchanged(reader, result)  # the maps phase 2 copied from still hold what was verified
        return result

    def _load_options(self, requested: list[str], call: CheckpointOptions,
                      component_options: Mapping[str, CheckpointOptions] | None) -> dict[str, CheckpointOptions]:
        """Each loaded component's options: this call's, merged over the registered and per-call ones.

        A bad option (``rename``, ``subtree``, ``cast``) raises here, before anything is read.
        """
        overrides = check_option_names(component_options, requested, "load")
        options = {name: call.merged(self._merged(name, overrides)) for name in requested}
        for merged in options.values():
            RestorePlan(merged.rename, merged.subtree, merged.cast)
        return options
