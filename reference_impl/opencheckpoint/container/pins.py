"""How many files an open checkpoint may hold open (R-RDR-14's pinning), leaving the process descriptors.

Each open directory checkpoint holds its files open so that a writer replacing it cannot take them away. Its
share is at most :data:`PIN_MAX_FILES`, at most a quarter of the soft ``RLIMIT_NOFILE``, and never so many that
the process would use more than half of that limit: opening several large checkpoints (comparing runs, a
viewer, an evaluation loop) leaves the application, and the next reader, the other half. Where the process's
open descriptors cannot be counted (no ``/proc/self/fd`` or ``/dev/fd``), the first two bounds apply.
A checkpoint granted fewer files than it has holds the rest lazily.

>>> 0 <= pin_allowance(3) <= 3
True
"""

from __future__ import annotations

import os

#: At most this many files of one checkpoint are held open: enough for every tree and json component of a
#: typical checkpoint.
PIN_MAX_FILES = 4096

_FD_DIRS = ("/proc/self/fd", "/dev/fd")


def _soft_limit() -> int | None:
    """The soft ``RLIMIT_NOFILE`` (None: no limit, or not a Unix)."""
    try:
        import resource
    except ImportError:
        return None
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return None if soft == resource.RLIM_INFINITY else soft


def _open_descriptors() -> int | None:
    """How many descriptors the process has open (None where that cannot be listed)."""
    for folder in _FD_DIRS:
        try:
            return len(os.listdir(folder)) - 1  # the listing's own descriptor
        except OSError:
            continue
    return None


def pin_allowance(wanted: int) -> int:
    """How many of ``wanted`` files one checkpoint may hold open now."""
    allowance = min(wanted, PIN_MAX_FILES)
    soft = _soft_limit()
    if soft is None:
        return max(0, allowance)
    allowance = min(allowance, soft // 4)
    in_use = _open_descriptors()
    if in_use is not None:
        allowance = min(allowance, soft // 2 - in_use)
    return max(0, allowance)
