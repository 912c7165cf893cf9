"""The one compiled module of the package, built when a C compiler is there (everything else: pyproject.toml).

``opencheckpoint.tree._ctree`` is the compiled fast path of tree decoding (decision 0025). It is
``optional``: without a compiler the install still succeeds and the package uses its pure-Python paths,
which give identical results. ``make`` sets ``OPENCHECKPOINT_REQUIRE_COMPILED=1`` so the test suite fails
instead of silently falling back (tests/perf/test_compiled_tree.py).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("opencheckpoint.tree._ctree", ["reference_impl/opencheckpoint/tree/_ctree.c"],
                             optional=True, extra_compile_args=["-O2", "-std=c11"])])
