"""The format core: what a checkpoint is, independent of where it is stored or which framework reads it.

Owns the error classes, limits, path rules, strict I-JSON, checksums (CRC-32C, SHA-256 and
CRC combination), the dtype vocabulary, the pydantic models of every JSON document (the
schemas' source), reading and writing ``manifest.json``, the migration chains (format versions
and third-party kinds), the producer record, and the table of frameworks (``frameworks``: names,
adapter module names and packages, data only). Together with its sibling ``rules/`` (one check per
requirement ID) it is the lowest layer: it may import only ``rules/``, the standard library and
third-party packages, never containers, the tree codec, the read or write paths, adapters or tools.
"""
