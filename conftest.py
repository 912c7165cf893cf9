"""Session-wide test set-up that must happen before any test module is imported.

Eight host CPU devices for JAX, so the sharded ``jax.Array`` tests (meshes of
4x2, 2x4, 8) run in the test process itself rather than in one subprocess
each. XLA reads ``XLA_FLAGS`` once, when the first JAX backend starts, so the
flag is set here, when pytest loads this file at start-up, before it imports
any test module. (At the repository root, outside the test paths: a second
``conftest.py`` under ``tests/`` would clash with ``tests/conformance/conftest.py``,
which is importable as ``conftest`` from pytest's ``pythonpath``, when
``--doctest-modules`` imports it.) A single device (what users get by default) stays the
default device: ``jax.device_put`` without a sharding still uses device 0.
An ``XLA_FLAGS`` the caller set is kept, with the flag added.

It also loads the fixtures the remote tests share: ``memory://`` (``tests/remote/memory_fixtures.py``) and the
moto S3 server (``tests/remote/s3_fixtures.py``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

pytest_plugins = ["memory_fixtures", "s3_fixtures"]

_DEVICES = "--xla_force_host_platform_device_count=8"

if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {_DEVICES}".strip()

# One JAX compilation cache for the whole run (JAX's own persistent cache, in a directory of this run's): the
# same training steps are compiled in process after process (a killed run and its resumed run, the orbax and
# multi-host processes, both xdist workers), about 3 s of CPU each time for a small NNX model. Every process
# of the run inherits the variables (xdist's workers too: this file is read before they start); a cache the
# caller set up is used as it is. The run that made the directory removes it (pytest_unconfigure).
_JAX_CACHE_OWNED = ""
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    _JAX_CACHE_OWNED = os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="opencheckpoint-tests-jax-")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")  # small steps are the common case


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--long", action="store_true", default=False,
                     help="also run the long campaigns (tests marked `long`); `make test-long` passes it")


def pytest_collection_finish(session: pytest.Session) -> None:
    """Collection imports every module of the test paths (``--doctest-modules``): one that set ``XLA_FLAGS`` at
    import (a worker script's device count) would leave this process's JAX with other devices than above, and
    the tests needing 8 would skip silently, depending on what was collected first."""
    if _DEVICES not in os.environ.get("XLA_FLAGS", ""):
        raise pytest.UsageError(f"a module imported during collection changed XLA_FLAGS to "
                                f"{os.environ.get('XLA_FLAGS')!r}: set it under `if __name__ == '__main__':`")


def pytest_unconfigure(config: pytest.Config) -> None:
    if _JAX_CACHE_OWNED:
        shutil.rmtree(_JAX_CACHE_OWNED, ignore_errors=True)


def pytest_configure(config: pytest.Config) -> None:
    """``--long`` also gives the property tests their full example counts (``tests/core/budget.py``); the
    helper is on pytest's ``pythonpath``, which is in place by now, before any test module is imported."""
    import budget

    budget.LONG = bool(config.getoption("--long"))


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own, which reads the groups given here (see below)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``long`` (the long form of a campaign whose bounded sample stays in ``make test``) are skipped,
    with the reason named, unless ``--long`` is given."""
    _keep_shared_fixtures_on_one_worker(items)
    _costliest_first(items)
    if config.getoption("--long"):
        return
    skip = pytest.mark.skip(reason="long campaign: run by `make test-long` (pytest --long)")
    for item in items:
        if item.get_closest_marker("long") is not None:
            item.add_marker(skip)


def _keep_shared_fixtures_on_one_worker(items: list[pytest.Item]) -> None:
    """``make test`` hands tests to the workers one by one (pytest-xdist ``--dist loadgroup``); a test that uses
    one of our module- or session-scoped fixtures (four ranks set up once, a conformance run, an S3 server)
    joins the group of that fixture, so the fixture is built once, on one worker, not once per worker.
    pytest-xdist's worker turns the ``xdist_group`` markers into the groups it schedules by in its own
    ``pytest_collection_modifyitems``; ours runs first (``tryfirst``), or the markers came too late and every
    such fixture was built on both workers (the multi-host launches twice: 2 x 43 s)."""
    root = str(Path(__file__).resolve().parent)
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        if info is None:
            continue
        for name in info.names_closure:
            for fixture in info.name2fixturedefs.get(name, ()):
                code = getattr(fixture.func, "__code__", None)
                if (fixture.scope in ("module", "session") and code is not None and code.co_filename.startswith(root)
                        and "site-packages" not in code.co_filename):
                    group = item.nodeid.split("::")[0] if fixture.scope == "module" else f"session-{name}"
                    item.add_marker(pytest.mark.xdist_group(group))
                    break
            else:
                continue
            break


def _costliest_first(items: list[pytest.Item]) -> None:
    """Order the work so that the costliest tests start first and the cheap ones fill the gaps at the end.

    pytest-xdist hands each worker the next unit of work (a test, or a whole group: see above) in this order
    (``make test`` passes ``--no-loadscope-reorder``, which would otherwise put the groups with the most tests
    first). A test's cost is the ``seconds`` of its ``slow`` marker (a measured CPU estimate; unmarked tests
    cost nothing), a group's the sum of its tests'; the sort is stable, so tests of equal cost keep their
    collection order. Left in collection order, a single test of 80 s (mypy on a fresh clone) or a group of
    90 s (the multi-host launches) met late kept one worker busy for minutes after the other had finished.
    Only the order changes: which tests run, and the group each joins, do not.
    """
    def group(item: pytest.Item) -> str:
        marker = item.get_closest_marker("xdist_group")
        return str(marker.args[0]) if marker is not None and marker.args else item.nodeid

    def cost(item: pytest.Item) -> float:
        return max((float(m.kwargs.get("seconds", 0)) for m in item.iter_markers("slow")), default=0.0)

    costs: dict[str, float] = {}
    for item in items:
        costs[group(item)] = costs.get(group(item), 0.0) + cost(item)
    items.sort(key=lambda item: -costs[group(item)])
