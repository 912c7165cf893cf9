"""The format's names, versions and member patterns (spec "manifest.json"), without pydantic.

The readers, the rule tables and the writers use these constants; :mod:`.models` uses the same ones
in the ``Field`` constraints the JSON Schemas are generated from, so the schema and the checks share
one statement of each pattern. This module imports nothing, so a command that only reads pays
nothing for it (``opencheckpoint inspect``, docs/benchmarks.md "Start-up").

>>> import re
>>> bool(re.fullmatch(KIND_PATTERN, "com.example/replay")), bool(re.fullmatch(CRC32C_PATTERN, "0A1B2C3D"))
(True, False)
"""

from __future__ import annotations

from typing import Final

FORMAT_NAME: Final = "opencheckpoint"
#: The root document's file name (spec §5).
MANIFEST_NAME: Final = "manifest.json"
#: The format version writers write when a checkpoint holds no sharded array (R-SHD-13): every
#: single-process checkpoint stays readable by format version 1 readers.
FORMAT_VERSION: Final = 1
#: The newest format version this implementation reads (and writes for a checkpoint with a sharded array).
NEWEST_FORMAT_VERSION: Final = 2
SCHEMA_BASE_URI: Final = "https://opencheckpoint.org/schemas/v1/"
#: ``$id`` base of format version N's schemas (``schemas/vN/``).
SCHEMA_BASE_URIS: Final = {1: SCHEMA_BASE_URI, 2: "https://opencheckpoint.org/schemas/v2/"}
#: Inventory keys of a ``tree`` component of kind_version 2 (format version 2, R-SHD-3).
TREE_V2_FILE_PATTERN: Final = r"^(tree\.msgpack|data\.bin|shards/rank-[0-9]{5,}\.bin)$"

PATH_PATTERN: Final = r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}(/[A-Za-z0-9_][A-Za-z0-9._-]{0,127})*$"
BUILTIN_KINDS: Final = ("tree", "json", "files")
KIND_PATTERN: Final = r"^(tree|json|files|[a-z][a-z0-9-]*(\.[a-z0-9-]+)+/[a-z0-9_.-]+)$"
EXTENSION_NAME_PATTERN: Final = r"^[a-z][a-z0-9-]*(\.[a-z0-9-]+)+$"
TIMESTAMP_PATTERN: Final = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?Z$"
ID_PATTERN: Final = r"^[A-Za-z0-9._:-]{1,128}$"
CRC32C_PATTERN: Final = r"^[0-9a-f]{8}$"
SHA256_PATTERN: Final = r"^[0-9a-f]{64}$"
