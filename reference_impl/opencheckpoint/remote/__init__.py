"""Checkpoints on any fsspec filesystem and on object stores (spec §12.7); needs ``opencheckpoint[remote]``."""

from .fspath import FsPath

__all__ = ["FsPath"]
