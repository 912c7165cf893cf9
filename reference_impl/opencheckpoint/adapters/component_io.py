"""Where an adapter writes one component (:class:`ComponentWriter`) and reads it back (:class:`ComponentReader`).

Split from :mod:`.base` so that the adapter protocol, the built-in adapters
and the component I/O each have one module; :mod:`.base` re-exports both
classes.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..format.errors import CheckpointError, IncompatibleComponent, UnsupportedValue
from ..format.integrity import crc32c_of, file_entry, new_sha256
from ..format.strict_json import dump_json, encode_utf8
from ..manifest_builder import component_record
from ..read.restore_plan import RestorePlan
from ..rules import restated
from ..tree.encode import small_file_entry, write_small_file, write_tree
from .frameworks import convert_leaf

if TYPE_CHECKING:
    from ..container.archive_writer import ArchiveWriter
    from ..read.reader import CheckpointReader


@dataclass
class ComponentWriter:
    """Where an adapter writes one component, and what it wrote."""

    directory: Path
    durable: bool = True
    sha256: bool = False
    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    hints: dict[str, str] = field(default_factory=dict)
    metadata: dict[str, Any] | None = None
    #: Archive form: files written through :meth:`write_tree`/:meth:`write_json` go straight into the
    #: archive as ``<member_prefix>/<file>``; only files an adapter writes itself use :attr:`directory`.
    archive: ArchiveWriter | None = None
    member_prefix: str = ""
    #: arguments for the object's own save method (``CheckpointOptions.save_args``/``save_kwargs``),
    #: forwarded by the adapters whose ``takes_method_args`` is True
    method_args: tuple[Any, ...] = ()
    method_kwargs: dict[str, Any] = field(default_factory=dict)

    def write_tree(self, value: Any) -> None:
        if self.archive is None:
            self.directory.mkdir(parents=True, exist_ok=True)
        self.files.update(write_tree(value, self.directory, converter=convert_leaf, durable=self.durable,
                                     sha256=self.sha256, archive=self.archive, member_prefix=self.member_prefix))

    def write_json(self, value: Any) -> None:
        self.write_encoded_json(encode_json(value))

    def write_encoded_json(self, data: bytes) -> None:
        """Store ``value.json`` from the bytes :func:`encode_json` made."""
        if self.archive is not None:
            self.archive.add_bytes(f"{self.member_prefix}/value.json", data)
            self.files["value.json"] = small_file_entry(data, sha256=self.sha256)
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        self.files["value.json"] = write_small_file(self.directory / "value.json", data, durable=self.durable,
                                                    sha256=self.sha256)

    def write_file(self, rel: str, data: bytes, *, sha256: bool | None = None) -> None:
        """Store ``data`` as the component file ``rel`` (``sha256`` overrides the writer's setting for it)."""
        target = self.directory / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        self.files[rel] = write_small_file(target, data, durable=self.durable,
                                           sha256=self.sha256 if sha256 is None else sha256)

    def record(self, kind: str, kind_version: int, path: str) -> dict[str, Any]:
        """The manifest record of what was written (hints and metadata only when set)."""
        return component_record(kind=kind, kind_version=kind_version, path=path, files=self.files,
                                hints=self.hints or None, metadata=self.metadata)

    def inventory_directory(self) -> None:
        """Record every file an adapter wrote into :attr:`directory` by itself."""
        for root, _, names in os.walk(self.directory):
            for file_name in sorted(names):
                full = Path(root) / file_name
                rel = full.relative_to(self.directory).as_posix()
                if full.is_symlink():
                    raise IncompatibleComponent("dump() created a symlink; checkpoints hold regular files only",
                                                file=rel)
                self.files[rel] = _file_entry(full, durable=self.durable, sha256=self.sha256)


def encode_json(value: Any) -> bytes:
    """The bytes of a json component's ``value.json`` (refused unless every string is valid Unicode)."""
    try:
        return encode_utf8(dump_json(value) + "\n")
    except CheckpointError as exc:  # a lone surrogate: no UTF-8 file can hold it (the rule a reader checks)
        raise restated(exc, UnsupportedValue, f"a string is not valid Unicode ({exc.message}): a json component "
                       "holds Unicode text only; fix the string, or store bytes in a tree component") from None


def _file_entry(path: Path, *, durable: bool, sha256: bool) -> dict[str, Any]:
    crc = 0
    digest = new_sha256() if sha256 else None
    size = 0
    with open(path, "rb", buffering=0) as handle:
        while chunk := handle.read(1 << 20):
            crc = crc32c_of(chunk, crc)
            size += len(chunk)
            if digest is not None:
                digest.update(chunk)
        if durable:
            os.fsync(handle.fileno())
    return file_entry(size, crc, digest)


@dataclass
class ComponentReader:
    """What an adapter reads one component through."""

    reader: CheckpointReader
    name: str
    map_location: Any = None
    verify: bool = True
    #: ``rename=`` / ``subtree=`` / ``cast=`` of the load (:mod:`opencheckpoint.read.restore_plan`); empty by default
    plan: RestorePlan = field(default_factory=RestorePlan)
    #: arguments for the object's own load method (``CheckpointOptions.load_args``/``load_kwargs``)
    method_args: tuple[Any, ...] = ()
    method_kwargs: dict[str, Any] = field(default_factory=dict)
    #: the kind version the adapter reads: a third-party kind stored at an older version is brought to
    #: it by the migrations registered with :func:`opencheckpoint.register_migration` (:meth:`files`)
    kind_version: int | None = None
    #: this process's rank and the number of ranks of the load (:mod:`opencheckpoint.read.per_rank`)
    rank: int = 0
    world_size: int = 1
    #: what a ``strict="warn"``/``"ignore"`` restore left out (missing, unexpected, mismatched entries), one
    #: line per kind of problem; the load reports it in ``LoadResult.partial``
    not_restored: list[str] = field(default_factory=list)

    @property
    def record(self) -> Any:
        return self.reader.record(self.name)

    def per_rank(self, tree: Any, live: Any) -> Any:
        """``tree`` with each per-rank value resolved for this rank (``live``'s ``PerRank`` gives the policy);
        raises :class:`IncompatibleComponent` (in phase 1) where a value cannot be."""
        from ..read.per_rank import holds_per_rank, resolve

        if not holds_per_rank(tree):
            return tree
        try:
            return resolve(tree, live, rank=self.rank, world_size=self.world_size)
        except IncompatibleComponent as exc:
            raise exc.at(file=f"component {self.name!r}") from None

    def tree(self, framework: str = "numpy", *, embedded: bool = False) -> Any:
        """The stored tree, its key paths selected and renamed by :attr:`plan` (``embedded``: optimizer
        states, whose parameter trees lie below their own fields; see
        :class:`~opencheckpoint.read.restore_plan.Renamer`)."""
        value = self.reader.read(self.name, framework=framework, verify=self.verify, map_location=self.map_location)
        return self.plan.apply(value, self.name, embedded=embedded)

    def tree_into(self, target: Any) -> Any:
        """The tree (NumPy), with arrays that fit ``target``'s arrays read into them in place.

        Verify-first unless ``verify`` is False: see :meth:`CheckpointReader.read_into`.
        """
        return self.reader.read_into(self.name, target, verify=self.verify)

    def prepare_into(self, target: Any) -> Callable[[], Any]:
        """Phase 1 of :meth:`tree_into`: every array verified now, ``target`` untouched; the returned
        callable fills ``target``'s arrays and returns the tree."""
        return self.reader.prepare_into(self.name, target, verify=self.verify)

    def json(self) -> Any:
        # a config, not model state: rename=/subtree= leave it as stored; the format's payload hook applies
        return self.reader.migrated(self.name, self.reader.json(self.name))

    def verify_bytes(self) -> None:
        """Check every byte of the component against its checksums, holding nothing in memory.

        Tree components: the document (step 13-15) and every array (CRC-32C,
        bool bytes) through one small scratch buffer; other kinds: every file
        (CRC-32C). A no-op when the caller opted out (``verify=False``).
        """
        if not self.verify:
            return
        from ..read.arrays import ScratchVerifier

        record = self.record
        if record.kind == "tree":
            decoded, data_file, size = self.reader.decoded_layout(self.name)
            if any(ref.nbytes for ref in decoded.arrays):
                # The adapter's own load reads these bytes again (phase 2): a remote source keeps them.
                with self.reader.open_region(data_file, size, again=True) as region:
                    verifier = ScratchVerifier(region, data_file)
                    for ref in decoded.arrays:
                        if ref.nbytes:
                            verifier.verify(ref)
            return
        for rel in record.files:
            self.reader.read_small(self.name, rel)

    def files(self) -> dict[str, bytes]:
        """The component's files, ``{relative name: bytes}``, each verified (size and CRC-32C).

        The payload of a third-party kind (spec §6.4: its owner defines its
        files). Stored at a ``kind_version`` older than :attr:`kind_version`,
        it comes back migrated by the steps registered with
        :func:`opencheckpoint.register_migration`, in order; the checkpoint is
        never rewritten.
        """
        from ..format.kind_migrations import migrate_files

        record = self.record
        stored = {rel: self.reader.read_small(self.name, rel) for rel in record.files}
        target = record.kind_version if self.kind_version is None else self.kind_version
        return migrate_files(record.kind, self.name, record.kind_version, target, stored)

    @contextlib.contextmanager
    def directory(self) -> Iterator[Path]:
        """A local directory holding the component's verified files (a copy for archives)."""
        with tempfile.TemporaryDirectory(prefix="opencheckpoint-") as tmp:
            root = Path(tmp)
            files: dict[str, bytes] = self.reader.read(self.name)  # verified, through the payload hook
            for rel, data in files.items():
                target = root / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
            yield root
