"""The rule table of the archive (ZIP) profile (spec ``opencheckpoint-v1-archive.md``, §3.3): one check per ID.

The ZIP rules whose check several records share: each function below is the
only place its rule is checked, and returns why the values break it (or
None). :mod:`opencheckpoint.container.zip_records` reads each record and
dispatches to these checks with :meth:`RuleTable.check <opencheckpoint.rules.RuleTable.check>`,
which adds the file (the archive path or the member name), the ZIP field
and the rule ID. Rules that one record alone concerns stay beside that
record's reader.
"""

from __future__ import annotations

from typing import Final

from ..format.errors import ArchiveError, IntegrityError, LimitExceeded, NotACheckpoint, UnsafePath
from . import RuleTable

ZIP = RuleTable(version=1, file=None)
rule = ZIP.rule

# Rules that one record alone concerns: declared with their class; the record's reader
# (container/zip_records.py, container/archive.py) reports them with ZIP.error.
ZIP.declare("R-ZIP-1", NotACheckpoint)
ZIP.declare("R-ZIP-5", ArchiveError)
ZIP.declare("R-ZIP-6", ArchiveError)
ZIP.declare("R-ZIP-7", ArchiveError)
ZIP.declare("R-ZIP-8", ArchiveError)
ZIP.declare("R-ZIP-9", ArchiveError)
ZIP.declare("R-ZIP-10", ArchiveError)
ZIP.declare("R-ZIP-11", ArchiveError)
ZIP.declare("R-ZIP-12", ArchiveError)
ZIP.declare("R-ZIP-13", ArchiveError)
ZIP.declare("R-ZIP-14", ArchiveError)
ZIP.declare("R-ZIP-16", ArchiveError)
ZIP.declare("R-ZIP-18", ArchiveError)
ZIP.declare("R-ZIP-20", ArchiveError)
ZIP.declare("R-ZIP-21", ArchiveError)
ZIP.declare("R-ZIP-24", ArchiveError)
ZIP.declare("R-ZIP-25", ArchiveError)
ZIP.declare("R-ZIP-17", UnsafePath)
ZIP.declare("R-ZIP-22", IntegrityError)
ZIP.declare("R-LIM-17", LimitExceeded)

_EOCD_SIGNATURE: Final = b"PK\x05\x06"
_EOCD_SIZE: Final = 22
_LOCAL_SIGNATURE: Final = b"PK\x03\x04"

#: The records with disk number fields (R-ZIP-3) -> how a nonzero one is reported.
_DISK_FIELDS: Final = {
    "end of central directory record": "disk numbers {0}/{1}; a checkpoint archive is one disk (0)",
    "ZIP64 end of central directory locator": "ZIP64 locator names disk {0}",
    "ZIP64 end of central directory record": "ZIP64 end of central directory names a disk other than 0",
    "central directory entry": "member starts on disk {0}",
}


@rule("R-ZIP-2", ArchiveError)
def end_record_last(record: bytes, failure: str | None = None) -> str | None:
    """The last 22 bytes are an end of central directory record with an empty comment.

    ``failure``: the archive's records could not be read at all (an I/O error, a record cut short):
    then no end of central directory record was found where this rule puts it.
    """
    if failure is not None:
        return f"unreadable archive: {failure}"
    if len(record) == _EOCD_SIZE and record[:4] == _EOCD_SIGNATURE and record[20:22] == b"\0\0":
        return None
    return ("the last 22 bytes are not an end of central directory record with an empty comment "
            "(comment or trailing bytes?)")


@rule("R-ZIP-3", ArchiveError)
def one_disk(record: str, *disks: int) -> str | None:
    """Every disk number field of ``record`` (a key of the table above) is 0: the archive is one disk."""
    if not any(disks):
        return None
    return _DISK_FIELDS[record].format(*disks)


@rule("R-ZIP-4", ArchiveError)
def entry_count(count_disk: int, count_total: int, found: int, complete: bool, *, entry: int = -1,
                header_fits: bool = True, entry_fits: bool = True) -> str | None:
    """The end record's per-disk and total entry counts are equal and count the central directory's entries.

    ``found``: entries the central directory holds so far; ``complete``: it has been read to its end
    (before that, only holding more than ``count_total`` breaks the rule). ``entry`` (its index) with
    ``header_fits``/``entry_fits``: whether the next entry's fixed header (with its signature) and its
    variable fields lie inside the central directory; if not, the directory does not hold the entries
    its bytes are counted for.
    """
    if not header_fits:
        return f"unreadable central directory entry {entry}"
    if not entry_fits:
        return f"central directory entry {entry} runs past the central directory"
    if count_disk != count_total:
        return f"entries on this disk ({count_disk}) differ from total entries ({count_total})"
    if found > count_total:
        return f"the central directory holds more than the {count_total} entries the end record counts"
    if complete and found != count_total:
        return f"the end record counts {count_total} entries, the central directory has {found}"
    return None


@rule("R-ZIP-15", ArchiveError)
def zip64_supplies(field: str, saturated: bool, supplied: bool) -> str | None:
    """A saturated field (``0xffffffff``, ``0xffff``) is supplied by the ZIP64 structure that must be present.

    ``field`` names the saturated field (an end of central directory record field, or a member's), or
    the ZIP64 locator whose end record is missing.
    """
    if not saturated or supplied:
        return None
    if field == "end of central directory record":
        return ("the end of central directory record holds ZIP64 markers but there is no ZIP64 end of central "
                "directory record and locator")
    if field == "ZIP64 end of central directory locator":
        return "the ZIP64 locator does not point to a ZIP64 end of central directory record"
    return f"{field} holds the ZIP64 marker but no ZIP64 extra field supplies it"


@rule("R-ZIP-19", ArchiveError)
def local_header_in_order(at: int, *, signature: bytes = _LOCAL_SIGNATURE, whole: bool = True,
                          data_end: int = 0, cd_offset: int | None = None, expected: int | None = None) -> str | None:
    """Local headers follow central directory order, the first at 0, each right after the previous data.

    Each fact is checked when the reader has it: ``signature`` (the first 4 bytes at ``at``; fewer:
    the header runs past the file), ``whole`` (its name and extra field fit in the file), ``data_end``
    against ``cd_offset`` (the member's data ends before the central directory), ``expected`` (where
    the previous member's data ended).
    """
    if signature != _LOCAL_SIGNATURE:
        return f"no local file header at offset {at}"
    if not whole:
        return "local header runs past the end of the file"
    if cd_offset is not None and data_end > cd_offset:
        return "member data runs into the central directory"
    if expected is not None and at != expected:
        return (f"local header at {at}, expected {expected} (local headers follow the central directory "
                "order without gaps)")
    return None
