"""The OpenCheckpoint conformance suite: canonical rendering, protocol command and runner.

* :mod:`.canonical` — the canonical content rendering of spec Appendix B.
* :mod:`.writer` — build a checkpoint from a rendering (writer mode, case generation).
* :mod:`.impl` — the reference implementation's protocol command (spec §17.2).
* :mod:`.runner` — run the cases of ``conformance/cases`` against any command.
* :mod:`.models` — pydantic models of ``case.json``, ``expected.json`` and capabilities.

The conformance layer may import every layer up to ``run/`` (the format
core, the read path, adapters, the writers); ``tools/`` (schema export) and
``cli/`` import it, the package root does not.
"""
