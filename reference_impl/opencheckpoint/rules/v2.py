"""The rule table of format version 2 (spec ``opencheckpoint-v2.md``): the manifest-level rules it adds.

Format version 2 is format version 1 plus sharded arrays; every rule of
:mod:`.v1` still applies. The rules here concern the component records
(step 7 and step 12 of §15); the rules about a sharded array node itself are
in :mod:`opencheckpoint.rules.sharded`.
"""

from __future__ import annotations

import re
from typing import Any, Final

from ..format.errors import ManifestError, UnsupportedVersion
from ..format.names import MANIFEST_NAME
from . import RuleTable

V2 = RuleTable(version=2, file=MANIFEST_NAME)
rule = V2.rule

#: The files a ``tree`` component of kind_version 2 always has.
TREE_V2_FILES: Final = frozenset({"tree.msgpack", "data.bin"})
#: A shard data file of a ``tree`` component of kind_version 2: the writing rank, 5 or more digits.
SHARD_FILE_PATTERN: Final = r"^shards/rank-[0-9]{5,}\.bin$"
_SHARD_FILE = re.compile(SHARD_FILE_PATTERN.removeprefix("^").removesuffix("$"), re.ASCII)


def is_shard_file(rel: str) -> bool:
    """Whether an inventory key names a shard data file (``shards/rank-00003.bin``)."""
    return _SHARD_FILE.fullmatch(rel) is not None


@rule("R-SHD-2", UnsupportedVersion)
def tree_kind_version_2_needs_format_2(kind: str, kind_version: int, written_version: int) -> str | None:
    """A ``tree`` component of kind_version 2 exists only in a checkpoint of format_version 2 or later."""
    if kind == "tree" and kind_version >= 2 and written_version < 2:
        return (f"tree kind_version {kind_version} is newer than format_version {written_version} allows "
                "(highest tree kind_version of format version 1: 1)")
    return None


@rule("R-SHD-3", ManifestError)
def tree_v2_files(files: dict[str, Any]) -> str | None:
    """A ``tree`` component of kind_version 2 lists tree.msgpack, data.bin and only shard data files."""
    missing = sorted(TREE_V2_FILES - set(files))
    if missing:
        return f"a 'tree' component of kind_version 2 has the files {sorted(TREE_V2_FILES)}; {missing} missing"
    extra = sorted(rel for rel in files if rel not in TREE_V2_FILES and not is_shard_file(rel))
    if extra:
        return (f"a 'tree' component of kind_version 2 has only tree.msgpack, data.bin and files matching "
                f"{SHARD_FILE_PATTERN}; found {extra[:5]}")[:300]
    return None


@rule("R-SHD-12", UnsupportedVersion)
def format_2_has_sharded_components(written_version: int, components: Any) -> str | None:
    """A checkpoint of format_version 2 has a ``tree`` component of kind_version 2 (writers write every other
    checkpoint as format version 1, R-SHD-13), so one content has one version. Checked in step 5, on the raw
    manifest: a ``components`` that is no object has no such component either."""
    if written_version != 2:
        return None
    records = components.values() if isinstance(components, dict) else ()
    if any(isinstance(r, dict) and r.get("kind") == "tree" and type(r.get("kind_version")) is int
           and r["kind_version"] == 2 for r in records):
        return None
    return ("found format_version 2 without a tree component of kind_version 2 (sharded arrays): a checkpoint "
            "without them is format version 1; this reader supports format versions 1 and 2")
