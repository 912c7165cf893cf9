"""Migrations of third-party component kinds: :func:`register_migration` and the steps applied on read.

The format's own migration chain (:mod:`.migrations`) brings an older
*format* version to the current one. A third-party kind (spec §6.4,
``com.example/replay-buffer``) versions its payload with ``kind_version``,
which its owner defines; when the owner's code moves from ``kind_version``
k to k+1 it registers one pure step per version, and components written at
an older version are read as the current one: by :meth:`Checkpoint.load
<opencheckpoint.Checkpoint.load>` (through the adapter's
``ComponentReader.files()``) and by :func:`opencheckpoint.read_component`.
Steps run in order k -> k+1 -> ... on a copy of the component's verified
files (``{relative name: bytes}``); nothing is written back to the
checkpoint (the rule of R-VER-7 for format migrations, kept for kinds too).

Built-in kinds (``tree``, ``json``, ``files``) are versioned by the spec and
migrated by the format's chain: registering a step for one is refused.

>>> register_migration("com.example/counter", 1,
...                     lambda files: {"count.txt": files["n.txt"]})
>>> migrate_files("com.example/counter", "c", 1, 2, {"n.txt": b"7"})
{'count.txt': b'7'}
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Mapping

from .errors import CheckpointError, IncompatibleComponent
from .names import KIND_PATTERN
from .paths import check_relative_path

#: One step ``k -> k+1`` of a kind: the component's files at version k -> its files at version k+1.
KindStep = Callable[[dict[str, bytes]], Mapping[str, bytes]]

#: R-CMP-4's pattern of a kind (the built-in names or ``<reverse-DNS namespace>/<name>``).
_KIND = re.compile(KIND_PATTERN)
_BUILT_IN = frozenset({"tree", "json", "files"})

_STEPS: dict[tuple[str, int], KindStep] = {}
_LOCK = threading.Lock()


def register_migration(kind: str, from_version: int, step: KindStep) -> None:
    """Register the pure step that brings ``kind``'s payload from ``from_version`` to ``from_version + 1``.

    ``step`` receives a fresh ``dict`` of the component's verified files
    (relative name -> ``bytes``) as written at ``from_version`` and returns
    the files as ``from_version + 1`` has them. It must be a pure function
    (R-VER-6 applies to kind steps as to format steps): it may be called
    once per read, and its result is never written back. Registering a step
    for a ``(kind, from_version)`` that has one replaces it.

    Args:
        kind: a third-party kind, ``<reverse-DNS namespace>/<name>``.
        from_version: the ``kind_version`` the step reads (>= 1).
        step: ``files -> files``.

    Raises:
        ValueError: ``kind`` is built in or not a third-party kind name, or
            ``from_version`` is not an integer >= 1.
        TypeError: ``step`` is not callable.

    Examples:
        >>> import json
        >>> from opencheckpoint import register_migration
        >>> def v1_to_v2(files):
        ...     state = json.loads(files["state.json"])
        ...     return {"state.json": json.dumps({"items": state["list"]}).encode()}
        >>> register_migration("com.example/queue", 1, v1_to_v2)
    """
    if kind in _BUILT_IN:
        raise ValueError(f"{kind!r} is a built-in kind: its versions belong to the spec and migrate with the "
                         "format's chain (opencheckpoint.format.migrations)")
    if not isinstance(kind, str) or not _KIND.fullmatch(kind):
        raise ValueError(f"kind must be a third-party kind '<reverse-DNS namespace>/<name>', got {kind!r}")
    if isinstance(from_version, bool) or not isinstance(from_version, int) or from_version < 1:
        raise ValueError(f"from_version must be an integer >= 1, got {from_version!r}")
    if not callable(step):
        raise TypeError("step must be callable: files -> files")
    with _LOCK:
        _STEPS[(kind, from_version)] = step


def has_migrations(kind: str) -> bool:
    """Whether any step is registered for ``kind`` (the process knows the kind's versions)."""
    return any(registered == kind for registered, _ in _STEPS)


def newest_version(kind: str, stored: int) -> int:
    """The version ``kind`` reaches from ``stored`` by registered steps (``stored`` when none applies)."""
    version = stored
    while (kind, version) in _STEPS:
        version += 1
    return version


def missing_step(kind: str, stored: int, target: int) -> int | None:
    """The first version in ``stored .. target-1`` with no registered step, or None when the path is whole."""
    return next((version for version in range(stored, target) if (kind, version) not in _STEPS), None)


def migrate_files(kind: str, name: str, stored: int, target: int, files: Mapping[str, bytes]) -> dict[str, bytes]:
    """``files`` of component ``name`` brought from ``kind_version`` ``stored`` to ``target``, step by step.

    Raises :class:`~opencheckpoint.format.errors.IncompatibleComponent` naming the
    kind and both versions when a step is missing, raises, or returns
    something that is not ``{relative name: bytes}``; a stored version newer
    than ``target`` is incompatible too (the reader's code is older than the
    writer's).
    """
    if stored > target:
        raise IncompatibleComponent(f"component {name!r}: {kind} kind_version {stored} is newer than the version "
                                    f"this program reads ({target})", field=f"components.{name}.kind_version")
    result = dict(files)
    for version in range(stored, target):
        step = _STEPS.get((kind, version))
        where = f"{kind} kind_version {version} -> {version + 1} (stored {stored}, wanted {target})"
        if step is None:
            raise IncompatibleComponent(f"component {name!r}: no migration registered for {where}; register one "
                                        "with opencheckpoint.register_migration", field=f"components.{name}")
        try:
            migrated = step(dict(result))  # a fresh dict: a step that mutates its input changes nothing here
        except CheckpointError:
            raise
        except Exception as exc:
            raise IncompatibleComponent(f"component {name!r}: the migration {where} raised "
                                        f"{type(exc).__name__}: {exc}", field=f"components.{name}") from exc
        result = _checked(migrated, name, where)
    return result


def _checked(migrated: object, name: str, where: str) -> dict[str, bytes]:
    if not isinstance(migrated, Mapping):
        raise IncompatibleComponent(f"component {name!r}: the migration {where} returned a "
                                    f"{type(migrated).__name__}, not a mapping of file name to bytes",
                                    field=f"components.{name}")
    out: dict[str, bytes] = {}
    for rel, data in migrated.items():
        if not isinstance(rel, str) or not isinstance(data, bytes):
            raise IncompatibleComponent(f"component {name!r}: the migration {where} returned an entry "
                                        f"{rel!r}: {type(data).__name__}; file names are str, contents bytes",
                                        field=f"components.{name}")
        try:
            check_relative_path(rel)
        except CheckpointError as exc:
            raise IncompatibleComponent(f"component {name!r}: the migration {where} returned an unsafe file "
                                        f"name {rel!r}: {exc.message}", field=f"components.{name}") from None
        out[rel] = data
    return out
