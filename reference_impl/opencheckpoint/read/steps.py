"""The validation steps 12-15 of one component, shared by loading and ``validate`` (spec §15).

:class:`CheckpointSteps` is an opened checkpoint (steps 1-11 passed,
:mod:`.opened`) that runs, per component, step 12 (kind), step 13 (the
payload file's size limit and CRC-32C), step 14 (parse the payload) and
step 15 (array layout). ``load`` runs them for the components it reads;
``validate`` and ``inspect`` run each step over every component. The file
checksum rule R-CHK-7 is written once, in :func:`check_file_crc32c`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..container.base import FileRegion
from ..format.errors import (
    CheckpointError,
    IncompatibleComponent,
)
from ..format.integrity import crc32c_of, format_crc32c
from ..format.limits import TREE_MAX_BYTES, VALUE_JSON_MAX_BYTES
from ..format.manifest import KIND_VERSIONS, MANIFEST_NAME, field_of
from ..format.records import ComponentRecord, FileEntry
from ..format.strict_json import parse_ijson
from ..rules.container import CON
from ..rules.v1 import V1
from ..rules.v2 import V2
from ..sharding.layout import check_sharded_layout
from ..tree.decode import DecodedTree, decode_tree
from ..tree.layout import check_layout
from .opened import OpenedCheckpoint
from .sharded import ComponentFiles

#: The payload file of each kind that has one (step 13).
PAYLOADS = {"tree": "tree.msgpack", "json": "value.json"}
#: Size limit of each payload file, and its rule (step 13).
_PAYLOAD_LIMITS = {"tree.msgpack": (TREE_MAX_BYTES, "R-LIM-9"), "value.json": (VALUE_JSON_MAX_BYTES, "R-LIM-2")}


def check_file_crc32c(crc: int, entry: FileEntry, file: str, where: str) -> None:
    """R-CHK-7: the CRC-32C of a listed file's bytes equals its entry's ``crc32c``."""
    computed = format_crc32c(crc)
    if computed != entry.crc32c:
        raise CON.error("R-CHK-7", f"file crc32c mismatch: stored {entry.crc32c}, computed {computed}", file=file,
                        field=where + ".crc32c")


class CheckpointSteps(OpenedCheckpoint):
    """An open checkpoint (steps 1-11 passed) whose components are checked step by step on demand.

    Opening, and the options ``issues`` and ``check_files``, are :class:`~.opened.OpenedCheckpoint`'s;
    this class adds steps 12-15 (kinds, payload files, payload parsing, array layout).
    """

    # -- step 12 --------------------------------------------------------------
    def check_kind(self, name: str, kind: str | None = None) -> ComponentRecord:
        """Step 12: R-CMP-21 (kind not implemented), R-CMP-19 (kind_version too new), R-SHD-2 (a tree
        kind_version 2 in a checkpoint of format version 1)."""
        record = self.record(name)
        where = field_of("components", name)
        if record.kind not in KIND_VERSIONS:
            raise V1.error("R-CMP-21", f"component {name!r} has kind {record.kind!r}, which this reader does not "
                           "implement", file=MANIFEST_NAME, field=where + ".kind")
        if record.kind_version > KIND_VERSIONS[record.kind]:
            raise V1.error("R-CMP-19",
                f"{record.kind} kind_version {record.kind_version} is newer than the highest this reader "
                f"supports ({KIND_VERSIONS[record.kind]})",
                file=MANIFEST_NAME, field=where + ".kind_version")
        error = V2.check("R-SHD-2", where + ".kind_version", record.kind, record.kind_version,
                         self.parsed.written_version)
        if error is not None:
            raise error
        if kind is not None and record.kind != kind:
            raise IncompatibleComponent(f"component {name!r} is a {record.kind!r} component, not {kind!r}",
                                        file=MANIFEST_NAME, field=where + ".kind")
        return record

    _check_kind = check_kind

    # -- step 13 --------------------------------------------------------------
    def read_small(self, name: str, rel: str) -> bytes:
        """Step 13: read one whole file of a component, checking its size limit and CRC-32C."""
        record = self.record(name)
        entry = record.files[rel]
        full = self._file(record, rel)
        where = field_of("components", name, "files", rel)
        limit = _PAYLOAD_LIMITS.get(rel) if record.kind in PAYLOADS else None
        if limit is not None and entry.size > limit[0]:
            raise CON.error(limit[1], f"{rel} is {entry.size} bytes, limit {limit[0]}", file=full,
                            field=where + ".size")
        data = self.source.read_file(full, entry.size)
        check_file_crc32c(crc32c_of(data), entry, full, where)
        return data

    # -- step 14 --------------------------------------------------------------
    def parse_tree(self, name: str, data: bytes) -> DecodedTree:
        """Step 14 for a ``tree`` component: its verified ``tree.msgpack`` bytes, decoded."""
        try:
            return decode_tree(data, format_version=self.parsed.written_version,
                               kind_version=self.record(name).kind_version)
        except CheckpointError as exc:
            raise exc.at(file=self._file(self.record(name), "tree.msgpack")) from None

    def parse_json(self, name: str, data: bytes) -> Any:
        """Step 14 for a ``json`` component: its verified ``value.json`` bytes, strictly parsed."""
        return parse_ijson(data, file=self._file(self.record(name), "value.json"), document="value")

    # -- step 15 --------------------------------------------------------------
    def check_tree_layout(self, name: str, decoded: DecodedTree) -> tuple[str, int]:
        """Step 15 for a ``tree`` component; returns the data file's path and size."""
        record = self.record(name)
        size = record.files["data.bin"].size
        try:
            if record.kind_version >= 2:
                check_sharded_layout(decoded, {rel: entry.size for rel, entry in record.files.items()}, record.path)
            else:
                check_layout(decoded.arrays, size, columns=decoded.columns)
        except CheckpointError as exc:
            raise exc.at(file=self._file(record, "tree.msgpack")) from None
        return self._file(record, "data.bin"), size

    # -- steps 12-15 together -------------------------------------------------
    def decoded_layout(self, name: str) -> tuple[DecodedTree, str, int]:
        """Steps 12-15 without touching data.bin: the document, the data file's path and size."""
        self.check_kind(name, "tree")
        decoded = self.parse_tree(name, self.read_small(name, "tree.msgpack"))
        data_file, size = self.check_tree_layout(name, decoded)
        return decoded, data_file, size

    def decoded_tree(self, name: str) -> tuple[DecodedTree, memoryview, str]:
        """Steps 12-15: the verified tree document, the data file map, and the data file's path."""
        decoded, data_file, size = self.decoded_layout(name)
        data_map = self.source.map_file(data_file, size)
        return decoded, data_map, data_file

    def component_files(self, name: str) -> ComponentFiles:
        """The data files of a tree component, each mapped when a sharded array first needs it."""
        record = self.record(name)
        return ComponentFiles(self.source.map_file, record.path, {rel: e.size for rel, e in record.files.items()},
                              fetch=self.source.private_range)

    def open_region(self, data_file: str, size: int, *, again: bool = False) -> FileRegion:
        """Positioned reads of a data file (:meth:`Source.open_region`); ``again``: its bytes will be read
        a second time while the checkpoint is open (:meth:`Source.open_region_kept`)."""
        return self.source.open_region_kept(data_file, size) if again else self.source.open_region(data_file, size)

    # -- json and files components ----------------------------------------------
    def json(self, name: str) -> Any:
        """Steps 12-14 for a ``json`` component: its verified, strictly parsed value."""
        self.check_kind(name, "json")
        return self.parse_json(name, self.read_small(name, "value.json"))

    def iter_files(self, name: str, *, verify: bool = True) -> Iterator[tuple[str, bytes]]:
        """(relative name, ``bytes``) of every file of a ``files`` component, each verified (R-CHK-12).

        The data is immutable ``bytes`` in both forms (:meth:`Source.read_file`).
        """
        record = self.check_kind(name, "files")
        for rel, entry in record.files.items():
            if verify:
                yield rel, self.read_small(name, rel)
            else:
                yield rel, self.source.read_file(self._file(record, rel), entry.size)
