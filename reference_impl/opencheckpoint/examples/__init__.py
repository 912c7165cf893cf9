"""Small, deterministic training examples used by ``make demo`` and the tests.

* :mod:`.control`: a seeded, vectorized CartPole written in NumPy (no gym needed).
* :mod:`.actor_critic`: a tiny torch actor-critic and one A2C update.
* :mod:`.train`: a resumable training script (``python -m opencheckpoint.examples.train``).
* :mod:`.demo`: ``make demo`` (interrupt a torch run, resume it, open it from Flax).

A layer above the public API: the examples use the package as users do and
may import any layer (torch and Flax too); only ``cli/`` may import them.
"""
