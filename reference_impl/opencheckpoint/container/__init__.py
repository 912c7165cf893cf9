"""Containers: the directory form and the single-file ZIP archive form hold the same file tree.

Readers get a :class:`~.base.Source` for either form and use one code path.
"""

from .base import Source
from .opener import open_source

__all__ = ["Source", "open_source"]
