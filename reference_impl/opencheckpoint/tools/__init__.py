"""Tools around checkpoints: conversion from and export to other formats, diff, listing, inspection.

Owns ``converters/`` (``convert`` and ``export``: torch.save, safetensors, torchrl and orbax
files), ``interchange`` (PyTorch state dicts to Flax NNX state and back), ``diffing`` (``diff``),
``listing`` (``ls`` of a rotation directory), ``inspect`` (structure without array bytes) and
``schema_export`` (the JSON Schemas from the models). Tools use the library as a user would: they
may import every layer below them (format core, storage, tree, read, adapters, the public API,
``run/``, ``conformance/``'s models); only ``cli/`` and the package root import ``tools/``.
"""
