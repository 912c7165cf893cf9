"""What a save fixes in the manifest besides the components: the producer record (spec §5.3), the
creation time, and the user's metadata (checked to be I-JSON, copied).

Shared by :meth:`Checkpoint.save <opencheckpoint.Checkpoint.save>` and the async save, which fixes
them when its snapshot is taken.

>>> checked_metadata({"step": 3}), default_producer()["name"]
({'step': 3}, 'opencheckpoint-python')
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from . import frameworks as registry
from .errors import CheckpointError, UnsupportedValue
from .manifest import MANIFEST_NAME
from .strict_json import parse_ijson


def runtime_environment() -> dict[str, str]:
    """Versions of the runtime, without importing any framework that is not already loaded."""
    import numpy

    from .. import __version__

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


def utc_timestamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def checked_metadata(metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    """A copy of the manifest's user metadata, refused unless it is I-JSON."""
    user_metadata = copy.deepcopy(dict(metadata or {}))
    try:
        parse_ijson(_json_bytes(user_metadata), file=MANIFEST_NAME)
    except CheckpointError as exc:
        raise UnsupportedValue(f"metadata must be I-JSON: {exc.message}", field="metadata") from None
    return user_metadata


def _json_bytes(value: Any) -> bytes:
    import json

    try:
        return json.dumps(value, allow_nan=False).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise UnsupportedValue(f"metadata must be JSON: {exc}", field="metadata") from None


def _version() -> str:
    from .. import __version__

    return __version__


__all__ = ["checked_metadata", "default_producer", "runtime_environment", "utc_timestamp"]
