"""Reading checkpoints: :func:`open_checkpoint` (lazy) and :func:`read_component` (eager).

The read path, one module per stage, imports running one way:
:mod:`.opening` (steps 1-11 of spec §15: locate, container, manifest,
paths, inventory, sizes) -> :mod:`.steps` (steps 12-15 of one component,
shared with ``validate``) -> :mod:`.arrays` (the array read engine: each
array verified, CRC-32C then bool bytes, one 1 MiB chunk at a time while
it is hot in cache) -> :mod:`.convert` (NumPy arrays to the caller's
framework). This module strings them together behind
:class:`CheckpointReader`.

>>> import numpy as np, tempfile, os
>>> from opencheckpoint import Checkpoint
>>> path = os.path.join(tempfile.mkdtemp(), "ckpt")
>>> _ = Checkpoint(weights={"w": np.arange(4.0)}).save(path)
>>> read_component(path, "weights")["w"]
array([0., 1., 2., 3.])
>>> with open_checkpoint(path) as ckpt:
...     lazy = ckpt.tree("weights")["w"]
...     lazy.shape, lazy.read()[3]
((4,), np.float64(3.0))
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

import numpy as np

from ..format import migrations
from ..format.dtypes import numpy_dtype
from ..format.errors import CheckpointError, ConcurrentModification
from ..format.kind_migrations import has_migrations, migrate_files, newest_version
from ..format.manifest import KIND_VERSIONS
from ..location import PathArg
from ..progress import ProgressArg, files_bytes, reporting
from ..tree.decode import DecodedTree, materialize
from ..tree.nodes import ArrayRef, PRNGKeyValue, ShardedArrayRef
from .arrays import LazyArray, array_view, fill_targets, match_targets, read_arrays, unique_views, verify_views
from .lent_views import LentTree, lend_tree
from .sharded import LazyShardedArray, assemble
from .steps import CheckpointSteps
from .to_framework import Framework, materialize_read, materialize_views, numpy_framework, resolve, to_framework


class CheckpointReader(CheckpointSteps):
    """An open checkpoint: the verified manifest, and components read on demand.

    Opening (steps 1-11) and the per-component steps 12-15 are those of
    :class:`~opencheckpoint.read.steps.CheckpointSteps`; this class adds reading
    array bytes and handing them to a framework. The shard data files of
    sharded arrays are opened (and their size checked) when a read first needs
    one: a rank of a sharded load opens the few it reads, not every rank's.
    """

    defer_shard_files = True

    def tree(self, name: str) -> Any:
        """The component's tree with :class:`LazyArray` leaves (sharded arrays: :class:`LazyShardedArray`),
        nothing read yet. Both support ``handle[key]`` and ``read_region(start, size)``."""
        decoded, data_file, size = self.decoded_layout(name)
        data_map = self.source.lazy_data(data_file, size)  # remote: byte-range reads, nothing fetched yet
        cache: dict[ArrayRef, LazyArray] = {}
        files = self.component_files(name) if decoded.sharded else None

        def leaf(node: Any) -> Any:
            if isinstance(node, ArrayRef):
                return cache.setdefault(node, LazyArray(node, data_map, data_file))
            if isinstance(node, ShardedArrayRef):
                return LazyShardedArray(node, files)  # type: ignore[arg-type]  # set when decoded.sharded
            if isinstance(node, PRNGKeyValue):
                return PRNGKeyValue(node.impl, leaf(node.data))
            return numpy_dtype(node.name).newbyteorder("=")

        return materialize(decoded.root, leaf) if decoded.has_placeholders else decoded.root

    def entry_names(self, name: str) -> list[str] | None:
        """The top-level keys of a tree component whose root is a mapping (None otherwise), read from its tree
        document only: nothing of its data file is read."""
        root = self.decoded_layout(name)[0].root
        return list(root) if type(root) is dict else None

    def read_entries(self, name: str, keys: Collection[str], *, framework: str | Framework = "numpy",
                     verify: bool = True, map_location: Any = None) -> dict[str, Any]:
        """The entries ``keys`` of a tree component whose root is a mapping (keys it lacks are left out), each
        array read on its own and verified as it is read: on an object store only their bytes are fetched, so a
        partial load of a big component fetches what it restores. Arrays are fresh and writeable.

        >>> import tempfile, numpy as np
        >>> from opencheckpoint import Checkpoint
        >>> path = Checkpoint(model={"a": np.ones(2), "b": np.zeros(9)}).save(tempfile.mkdtemp() + "/c")
        >>> with open_checkpoint(path) as reader:
        ...     reader.entry_names("model"), reader.read_entries("model", ["a", "z"])
        (['a', 'b'], {'a': array([1., 1.])})
        """
        decoded, data_file, size = self.decoded_layout(name)
        if type(decoded.root) is not dict:
            raise CheckpointError(f"component {name!r} is not a mapping: it has no entries to pick",
                                  file=self._file(self.record(name), "tree.msgpack"))
        if decoded.sharded or migrations.DEFAULT_CHAIN.rewrites_payload(self.parsed.written_version, "tree"):
            whole = self.read(name, framework=framework, verify=verify, map_location=map_location)
            return {key: whole[key] for key in keys if key in whole}  # assembled or migrated as a whole
        data = self.source.lazy_data(data_file, size)

        def leaf(node: Any) -> Any:
            if isinstance(node, ArrayRef):
                return LazyArray(node, data, data_file).read(verify=verify)
            if isinstance(node, PRNGKeyValue):
                return PRNGKeyValue(node.impl, leaf(node.data))
            return numpy_dtype(node.name).newbyteorder("=")

        picked = materialize({key: decoded.root[key] for key in keys if key in decoded.root}, leaf)
        return to_framework(picked, resolve(framework), map_location)  # type: ignore[no-any-return]

    def read(
        self,
        name: str,
        *,
        framework: str | Framework = "numpy",
        verify: bool = True,
        copy: bool = True,
        map_location: Any = None,
    ) -> Any:
        """Decode a component fully into ``framework`` objects.

        ``tree`` components give their tree, ``json`` components their JSON
        value, ``files`` components a dict of relative name -> verified bytes.
        ``copy=False`` returns read-only views into the map (NumPy only);
        ``verify=False`` skips the per-array CRC-32C (an explicit opt-out).
        """
        record = self.record(name)
        if record.kind not in KIND_VERSIONS and has_migrations(record.kind):
            return self.user_kind_files(name)
        record = self.check_kind(name)
        if record.kind == "json":
            return self.migrated(name, self.json(name))
        if record.kind == "files":
            return self.migrated(name, dict(self.iter_files(name, verify=verify)))
        fw = resolve(framework)
        if migrations.DEFAULT_CHAIN.rewrites_payload(self.parsed.written_version, "tree"):
            # Payload steps work on the decoded tree with NumPy leaves (migrations.migrate_component):
            # read that, migrate it, then hand its arrays to the framework.
            tree = self.migrated(name, self._read_tree(name, numpy_framework(), verify, True, None))
            return tree if fw.name == "numpy" else to_framework(tree, fw, map_location)
        return self._read_tree(name, fw, verify, copy, map_location)

    def _read_tree(self, name: str, fw: Framework, verify: bool, copy: bool, map_location: Any) -> Any:
        if copy:
            decoded, data_file, size = self.decoded_layout(name)
            fresh: dict[int, np.ndarray] = {}
            if decoded.arrays:
                with self.open_region(data_file, size) as region:
                    fresh = read_arrays(region, decoded.arrays, data_file, verify=verify, columns=decoded.columns)
            self._assemble_sharded(name, decoded, fresh, verify)
            return materialize_read(decoded, fresh, fw, map_location)
        decoded, data_map, data_file = self.decoded_tree(name)
        files = self.component_files(name)
        checked: set[int] = set()
        if verify:  # every view checked before any is handed out, in one pass on several cores
            verify_views(unique_views(data_map, decoded.arrays), data_file)
            checked = {id(ref) for ref in decoded.arrays}

        def view(ref: ArrayRef) -> np.ndarray:
            array = array_view(data_map, ref)
            if verify and id(ref) not in checked:  # a node the pass did not cover (none today): on its own
                verify_views([(array, ref)], data_file)
            return array

        return materialize_views(decoded, view, fw, map_location,
                                 lambda ref: assemble(ref, files, verify=verify))

    def _assemble_sharded(self, name: str, decoded: DecodedTree, fresh: dict[int, np.ndarray], verify: bool) -> None:
        """Add every sharded array of ``decoded`` to ``fresh``, assembled from its (verified) shards."""
        if decoded.sharded:
            files = self.component_files(name)
            for ref in decoded.sharded:
                fresh[id(ref)] = assemble(ref, files, verify=verify)

    def read_into(self, name: str, target: Any, *, verify: bool = True) -> Any:
        """Decode a tree component (NumPy), reading array bytes straight into ``target``'s arrays.

        Every array node whose place in ``target`` (same dict keys, same list
        positions) holds a writeable, C-contiguous NumPy array of its exact
        shape and dtype is read into that array; other nodes get fresh arrays.
        Returns the tree, holding the filled arrays themselves.

        The restore is verify-first, all or nothing: every array of the
        component is checked (CRC-32C, bool bytes) before the first byte of
        any target is written, the targets' bytes through one small scratch
        buffer (nothing is mapped, memory does not grow). If a check fails,
        the error is raised and every array of ``target`` is unchanged. This
        reads the targets' bytes twice; ``verify=False`` (an explicit opt-out
        of the checks, R-CHK-11) fills them in one pass without checking.

        >>> import numpy as np, tempfile, os
        >>> from opencheckpoint import Checkpoint
        >>> path = Checkpoint(w={"a": np.arange(3.0)}).save(os.path.join(tempfile.mkdtemp(), "c"))
        >>> live = {"a": np.zeros(3)}
        >>> with open_checkpoint(path) as ckpt:
        ...     tree = ckpt.read_into("w", live)
        >>> tree["a"] is live["a"], live["a"].tolist()
        (True, [0.0, 1.0, 2.0])
        """
        return self.prepare_into(name, target, verify=verify)()

    def prepare_into(self, name: str, target: Any, *, verify: bool = True) -> Callable[[], Any]:
        """:meth:`read_into` in two phases: everything is read and verified now, ``target`` untouched;
        the returned callable fills ``target``'s arrays (without checking again) and returns the tree.

        A restore of several components prepares every one before it fills any
        (:meth:`Checkpoint.load <opencheckpoint.Checkpoint.load>`).
        """
        if migrations.DEFAULT_CHAIN.rewrites_payload(self.parsed.written_version, "tree"):
            # A migrated tree is a new value: read (verified) and migrated now; the caller copies it
            # into ``target``'s arrays (nothing here is filled in place).
            tree = self.read(name, verify=verify)
            return lambda: tree
        decoded, data_file, size = self.decoded_layout(name)
        targets: dict[int, np.ndarray] = {}
        match_targets(decoded.root, target, targets)
        fresh: dict[int, np.ndarray] = {}
        deferred: list[tuple[ArrayRef, np.ndarray]] = []
        if decoded.arrays:
            # The targets' bytes are read again by fill(): a remote source keeps what it fetches now.
            with self.open_region(data_file, size, again=bool(targets)) as region:
                fresh = read_arrays(region, decoded.arrays, data_file, verify=verify, targets=targets,
                                    deferred=deferred)
        self._assemble_sharded(name, decoded, fresh, verify)  # fresh arrays, verified now, before any fill

        def fill() -> Any:
            if deferred:
                with self.open_region(data_file, size) as region:
                    fill_targets(region, deferred, data_file, verify=verify)
            return materialize_read(decoded, fresh, numpy_framework(), None)

        return fill

    def lend(self, name: str, *, verify: bool = True) -> LentTree | None:
        """A tree component's arrays as verified, writeable views of a private map of its data file, to lend
        to an object's own load method, or None where none can be lent (:mod:`opencheckpoint.read.lent_views`)."""
        return lend_tree(self, name, verify=verify)

    def user_kind_files(self, name: str) -> dict[str, bytes]:
        """The verified files of a third-party kind whose steps were registered with
        :func:`~opencheckpoint.register_migration`, brought to the newest version those steps reach."""
        record = self.record(name)
        files = {rel: self.read_small(name, rel) for rel in record.files}
        target = newest_version(record.kind, record.kind_version)
        try:
            return migrate_files(record.kind, name, record.kind_version, target, files)
        except CheckpointError as exc:
            raise exc.at(file=str(self.path)) from None

    def migrated(self, name: str, payload: Any) -> Any:
        """The format's payload migration hook (R-VER-5): one comparison for a current-version checkpoint."""
        return migrations.migrate_component(self.parsed.written_version, self.manifest["components"][name],
                                            payload, migrations.DEFAULT_CHAIN)


class _NoDefault:
    """The marker of "no ``default=`` given" (``None`` is a valid default)."""

    def __repr__(self) -> str:
        return "NO_DEFAULT"


#: ``read_component``'s ``default`` when none is given: a missing component raises.
NO_DEFAULT: Any = _NoDefault()


def open_checkpoint(path: PathArg) -> CheckpointReader:
    """Open a checkpoint lazily: the manifest is verified now, arrays are read when asked for."""
    return CheckpointReader(path)


def read_component(
    path: PathArg,
    name: str,
    *,
    framework: str = "numpy",
    verify: bool = True,
    map_location: Any = None,
    rename: Any = None,
    subtree: str | None = None,
    default: Any = NO_DEFAULT,
    progress: ProgressArg = None,
) -> Any:
    """Read one component's stored value (no live object needed), as ``framework`` objects.

    ``default``: returned instead of raising when the checkpoint has no
    component ``name`` (any other problem still raises). A component of a
    third-party kind comes back as its verified files (``{name: bytes}``)
    when migrations are registered for the kind
    (:func:`~opencheckpoint.register_migration`), migrated to the newest
    version they reach; any other third-party kind raises
    :class:`~opencheckpoint.format.errors.UnknownComponentKind` (R-CMP-21).

    Examples:
        >>> import tempfile, os
        >>> from opencheckpoint import Checkpoint, read_component
        >>> path = Checkpoint(config={"lr": 0.1}).save(os.path.join(tempfile.mkdtemp(), "c"))
        >>> read_component(path, "config"), read_component(path, "logger", default=None)
        ({'lr': 0.1}, None)

    If another process replaces the checkpoint while it is read and the reader loses a file it
    could not hold open, the read starts over once on the new checkpoint (R-RDR-13).
    ``rename`` and ``subtree`` select and rename its key paths as in :meth:`Checkpoint.load
    <opencheckpoint.Checkpoint.load>` (:mod:`opencheckpoint.read.restore_plan`). ``progress``: ``True`` (a bar
    on a terminal) or ``f(done_bytes, total_bytes)`` (:mod:`opencheckpoint.progress`), per component.
    """
    from .restore_plan import RestorePlan, check_renames  # restore-side option: kept out of the reader's imports

    plan = RestorePlan(rename, subtree)
    value: Any = None
    for attempt in range(2):
        try:
            with CheckpointReader(path) as reader:
                if default is not NO_DEFAULT and name not in reader.components:
                    return default
                record = reader.components.get(name)
                with reporting(progress, 0 if record is None else files_bytes([record]), f"reading {name}"):
                    value = reader.read(name, framework=framework, verify=verify, map_location=map_location)
            break
        except ConcurrentModification:
            if attempt:
                raise
    try:
        out = plan.apply(value, name)
        check_renames([(name, plan)])
        return out
    except CheckpointError as exc:
        raise exc.at(file=str(path), field=f"components.{name}") from None
