"""Which :class:`~opencheckpoint.sharding.Collective` a save runs on: none, the caller's, or torch's.

``Checkpoint.save(process_group=...)`` accepts a ``Collective`` as is, or a
``torch.distributed`` process group. Without one, a save in a process of an
initialized ``torch.distributed`` job of more than one process is collective
over the world group (every rank must call it), as with
``torch.distributed.checkpoint``; so is a save in a ``jax.distributed`` job of
more than one process (over every JAX process, as orbax does); otherwise it is
a single-process save. Neither torch nor JAX is imported here: a job that uses
one has imported it already.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any, Final

from ..sharding.collective import Collective

__all__ = ["DEFAULT_TIMEOUT", "load_collective", "resolve_collective"]

#: Seconds each collective step of a save may take before the ranks give up (rank died or hung).
DEFAULT_TIMEOUT: Final = 300.0


def resolve_collective(process_group: Any, timeout: float) -> Collective | None:
    """The collective of a save, or None for a single-process save."""
    if isinstance(process_group, Collective):
        return process_group
    if process_group is None:
        dist = sys.modules.get("torch.distributed")
        if dist is None or not dist.is_available() or not dist.is_initialized() or dist.get_world_size() < 2:
            return _jax_collective(timeout)
    from .torch_collective import TorchCollective

    return TorchCollective(process_group, timeout=timeout)


def _jax_collective(timeout: float) -> Collective | None:
    """All processes of a ``jax.distributed`` job of more than one process, else None (a single-process save)."""
    jax = sys.modules.get("jax")
    if jax is None or not jax.distributed.is_initialized() or jax.process_count() < 2:
        return None
    from .jax_collective import JaxCollective

    return JaxCollective(timeout=timeout)


def load_collective(process_group: Any, timeout: float, live: Iterable[Any]) -> Collective | None:
    """The collective a load agrees on (:mod:`opencheckpoint.sharding.agreement`), or None.

    A load is collective when given a ``process_group``, or when it restores
    torch DTensors (an FSDP2 or tensor-parallel module, an optimizer of such
    parameters) in a job of more than one process, or JAX arrays sharded over
    devices of several processes (live or abstract ``NamedSharding`` targets) in
    a ``jax.distributed`` job: every rank of such a model loads it together, as
    with ``torch.distributed.checkpoint``. Any other load (a plain model on one
    rank of a DDP job, say) stays local to its process.
    """
    if process_group is not None:
        return resolve_collective(process_group, timeout)
    values = list(live)
    if not (_holds_dtensors(values) or _spans_jax_processes(values)):
        return None
    collective = resolve_collective(None, timeout)
    return collective if collective is not None and collective.world_size > 1 else None


def _holds_dtensors(values: list[Any]) -> bool:
    if "torch.distributed.tensor" not in sys.modules:  # no DTensor exists in this process
        return False
    from .torch_dtensor import holds_dtensors_anywhere

    return any(holds_dtensors_anywhere(value) for value in values)


def _spans_jax_processes(values: list[Any]) -> bool:
    jax = sys.modules.get("jax")
    if jax is None or not jax.distributed.is_initialized() or jax.process_count() < 2:
        return False
    from .jax_sharding import spans_processes

    return any(spans_processes(value) for value in values)
