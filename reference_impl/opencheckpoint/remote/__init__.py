"""Checkpoints on any fsspec filesystem and on object stores (spec §12.7); needs ``opencheckpoint[remote]``.

The storage layer's remote half: ``FsPath``, the reader's view of a prefix
(``source``, ``spill``), storage failures as ``CheckpointError``s and
publication on object stores. Like ``container/`` it may import only the format
core, ``location`` and ``container/``; opening a remote checkpoint (steps 1-11)
is ``read/remote_opening``; a rotation on a prefix is ``run/remote_store``."""

from .fspath import FsPath

__all__ = ["FsPath"]
