"""Reading and restoring: a checkpoint's bytes to verified NumPy arrays and framework objects.

Owns the validation order of spec §15 (``opening``: steps 1-11, ``steps``: 12-15 shared with
``validate``), the array read engine (``arrays``, ``array_runs``, ``parallel_crc``, ``file_scan``,
``sharded``), the lazy and eager readers (``reader``), ``probe``, verified views lent to a
``load_state_dict`` (``lent_views``), restoring into a changed model (``restore_plan``,
``casting``, ``restore_hints``) and framework conversion (``to_framework``, which finds a
framework's module through ``format.frameworks`` by name). It may import the format core
(``format/``, ``rules/``), storage (``container/``, ``remote/``, ``location``), ``tree/`` and
``sharding/``; never ``adapters/``, the write path, ``run/``, tools or the command line.
"""
