"""The write side: one save pipeline, plan -> write -> commit, that every save runs.

Owns: the :class:`~.target.Target` storage interface a save writes through
(:class:`~.target.LocalTarget` for the directory and archive forms,
:class:`~.object_store.ObjectStoreTarget` for fsspec object stores); what a
save is asked to do and what it plans to write (:mod:`.plan`, recorded by
:mod:`.recording`); the three stages (:mod:`.stages`) and their orchestration
(:mod:`.pipeline`); the collective save (:mod:`.collective`: every rank plans
and writes, the ranks agree on the plan, the coordinator commits once); async
saves (:mod:`.async_save`: plan and :mod:`.snapshot` now, write and commit in
a thread). ``Checkpoint.save``/``save_async``, ``progress=``, collective saves,
remote saves, archives, ``Rotation`` and ``RunCheckpointer`` all enter here.

May import: the format core (errors, limits, manifest, manifest_builder,
models, producer, options, progress), ``container/`` and ``remote/`` (the
storage the targets wrap), ``tree/`` (planning and writing trees),
``sharding/`` (collectives and tree sinks) and ``adapters/`` (the
``ComponentWriter`` adapters write through). Never the read path's
orchestration, ``checkpoint``, ``run/`` or the CLI: those import this.
"""
