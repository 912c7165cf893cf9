"""Containers: the directory form and the single-file ZIP archive form hold the same file tree.

Readers get a :class:`~.base.Source` for either form and use one code path.

The storage layer (with ``remote/`` and ``location``) owns the forms, their
ZIP records, publication, staging, save targets, debris, durable writeback
and what a tool's plain output file (an export, a schema, a conformance
report) may replace (``output_file``). It may import the format core
(``format/``, ``rules/``) and ``location``; never ``tree/``, ``read/``,
adapters or anything above them.
"""

from .base import Source
from .opener import open_source

__all__ = ["Source", "open_source"]
