"""The one compiled module of the package, built when a C compiler is there (everything else: pyproject.toml).

``opencheckpoint.tree._ctree`` is the compiled fast path of the tree codec (decision 0025): decoding in
``_ctree.c``, the save's runs of small arrays in ``_csave.c``, the document's msgpack bytes in ``_cpack.c``. It is
``optional``: without a compiler the install still succeeds and the package uses its pure-Python paths,
which give identical results. ``make`` sets ``OPENCHECKPOINT_REQUIRE_COMPILED=1`` so the test suite fails
instead of silently falling back (tests/perf/test_compiled_tree.py).
"""

from setuptools import Extension, setup

_TREE = "reference_impl/opencheckpoint/tree"
_SOURCES = [f"{_TREE}/_ctree.c", f"{_TREE}/_csave.c", f"{_TREE}/_cpack.c"]
setup(ext_modules=[Extension("opencheckpoint.tree._ctree", _SOURCES, depends=[f"{_TREE}/_ctree.h"], optional=True,
                             extra_compile_args=["-O2", "-std=c11"])])
