"""Per-component options: :class:`CheckpointOptions`, given at registration and per save or load.

The torchrl checkpoint module this project generalises forwards
registration-time arguments (``save_args``/``save_kwargs``/``load_args``/
``load_kwargs``) to a component's own methods and lets each save or load
override them per component (``component_options=``). Here the same object
also carries the per-component form of this library's own options: the
adapter, ``strict``, ``sha256``, ``verify``, ``map_location`` and the
restore-into-a-changed-model options (``rename``, ``subtree``, ``cast``).
``None`` (or an empty mapping) means "not set": the checkpoint-wide value
applies.

>>> base = CheckpointOptions(load_kwargs={"strict": False}, sha256=True)
>>> merged = base.merged(CheckpointOptions(load_kwargs={"assign": True}, strict="warn"))
>>> dict(merged.load_kwargs), merged.sha256, merged.strict
({'strict': False, 'assign': True}, True, 'warn')
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from .adapters.protocol import Adapter
    from .read.casting import CastPolicy
    from .read.restore_plan import Rename

Strictness = Literal["error", "warn", "ignore"]
STRICTNESS = ("error", "warn", "ignore")


@dataclass(frozen=True)
class CheckpointOptions:
    """Options of one component; operation-level options are merged over registration-time ones.

    ``save_kwargs``/``load_kwargs`` are shallow-merged; every other member of
    an override replaces the registered value when it is set (not ``None``).

    Args:
        adapter: the adapter of the component (overrides the automatic choice).
        strict: ``"error"``, ``"warn"`` or ``"ignore"`` for this component's
            missing or incompatible state (overrides ``Checkpoint(strict=)``
            and ``load(strict=)``).
        sha256: also record SHA-256 of this component's files.
        verify: ``False`` skips this component's per-array checksums on load.
        map_location: where this component's tensors go (torch device).
        rename, subtree, cast: as in :meth:`Checkpoint.load
            <opencheckpoint.Checkpoint.load>`, for this component only.
        save_args, save_kwargs: forwarded to the object's ``state_dict(...)``
            or ``dump(path, ...)`` (built-in protocol adapters only).
        load_args, load_kwargs: forwarded to the object's
            ``load_state_dict(state, ...)`` or ``load(path, ...)``, for
            example ``load_kwargs={"strict": False}`` for a torch module
            registered with :class:`~opencheckpoint.adapters.StateDictAdapter`.

    Examples:
        >>> import numpy as np, tempfile, os
        >>> from opencheckpoint import Checkpoint, CheckpointOptions
        >>> path = os.path.join(tempfile.mkdtemp(), "ckpt")
        >>> ckpt = Checkpoint(weights={"w": np.ones(2)}, stats={"seen": 3})
        >>> _ = ckpt.save(path, component_options={"weights": CheckpointOptions(sha256=True)})
        >>> from opencheckpoint import manifest
        >>> sorted(manifest(path)["components"]["weights"]["files"]["data.bin"])
        ['crc32c', 'sha256', 'size']
    """

    adapter: Adapter | None = None
    strict: Strictness | None = None
    sha256: bool | None = None
    verify: bool | None = None
    map_location: Any = None
    rename: Rename | None = None
    subtree: str | None = None
    cast: CastPolicy = None
    save_args: tuple[Any, ...] | None = None
    save_kwargs: Mapping[str, Any] | None = None
    load_args: tuple[Any, ...] | None = None
    load_kwargs: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.strict is not None and self.strict not in STRICTNESS:
            raise ValueError(f"strict must be one of {STRICTNESS}, got {self.strict!r}")
        from .adapters.protocol import Adapter

        if self.adapter is not None and not isinstance(self.adapter, Adapter):
            raise TypeError("adapter must be an opencheckpoint.adapters.Adapter")
        for name in ("save_args", "load_args"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, tuple):
                raise TypeError(f"{name} must be a tuple, got {type(value).__name__}")

    def merged(self, override: CheckpointOptions | None) -> CheckpointOptions:
        """These options with ``override`` applied (kwargs merged, every other set member replacing)."""
        if override is None:
            return self
        changes: dict[str, Any] = {}
        for item in dataclasses.fields(self):
            value = getattr(override, item.name)
            if item.name in ("save_kwargs", "load_kwargs"):
                if value:
                    changes[item.name] = {**(getattr(self, item.name) or {}), **value}
            elif value is not None:
                changes[item.name] = value
        return dataclasses.replace(self, **changes)

    @property
    def has_method_args(self) -> bool:
        """Whether arguments for the object's own methods were given (only some adapters take them)."""
        return bool(self.save_args or self.save_kwargs or self.load_args or self.load_kwargs)


NO_OPTIONS = CheckpointOptions()


def check_option_names(options: Mapping[str, CheckpointOptions] | None, selected: Collection[str],
                       operation: str) -> dict[str, CheckpointOptions]:
    """``component_options`` of one save or load: every key a selected component, every value options.

    A key naming a component that is not part of the operation is a mistake
    (a typo would otherwise silently apply nothing): ``KeyError``.
    """
    given = dict(options or {})
    unknown = set(given) - set(selected)
    if unknown:
        raise KeyError(f"component_options name components this {operation} does not include: {sorted(unknown)} "
                       f"(included: {sorted(selected)})")
    for name, value in given.items():
        if not isinstance(value, CheckpointOptions):
            raise TypeError(f"component_options[{name!r}] must be a CheckpointOptions, got {type(value).__name__}")
    return given
