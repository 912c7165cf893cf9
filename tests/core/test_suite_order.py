"""The suite's own scheduling rule (conftest.py): the costliest work starts first, groups move as one, nothing
else changes. ``make test`` relies on it to keep a long test from running alone at the end (decision 0023)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _root_conftest() -> ModuleType:
    spec = importlib.util.spec_from_file_location("root_conftest_under_test", ROOT / "conftest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Item:
    """What the rule reads of a pytest item: its node id and its markers."""

    def __init__(self, nodeid: str, *marks: pytest.MarkDecorator) -> None:
        self.nodeid = nodeid
        self.marks = [mark.mark for mark in marks]

    def get_closest_marker(self, name: str) -> pytest.Mark | None:
        return next((mark for mark in self.marks if mark.name == name), None)

    def iter_markers(self, name: str) -> list[pytest.Mark]:
        return [mark for mark in self.marks if mark.name == name]


def test_the_costliest_tests_and_groups_start_first_and_equal_costs_keep_their_order() -> None:
    group = pytest.mark.xdist_group("tests/x.py")
    items = [
        _Item("a"),
        _Item("x1", group, pytest.mark.slow(seconds=1)),
        _Item("b", pytest.mark.slow),  # slow without seconds: cost 0, stays in place
        _Item("c", pytest.mark.slow(seconds=10)),
        _Item("d"),
        _Item("x2", group, pytest.mark.slow(seconds=30)),  # the group's cost: the sum of its tests', 31
        _Item("e", pytest.mark.slow(seconds=80)),
        _Item("f", pytest.mark.slow(seconds=10)),
        _Item("g", pytest.mark.slow(seconds=30.5)),  # below the group's 31, above the others
    ]
    _root_conftest()._costliest_first(items)  # stand-ins for pytest items (the module is untyped to mypy here)
    assert [item.nodeid for item in items] == ["e", "x1", "x2", "g", "c", "f", "a", "b", "d"]


def test_tests_sharing_a_module_fixture_run_on_one_worker_and_build_it_once(tmp_path: Path) -> None:
    """``make test``'s scheduling (pytest-xdist ``--dist loadgroup`` and the groups conftest.py gives): four tests
    sharing a module fixture on two workers. With pytest 9.2 and pytest-xdist 3.8 the groups were silently
    ignored (pytest-dev/pytest-xdist#1386): the fixture was built on both workers, the multi-host launches twice."""
    record = tmp_path / "record.txt"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup",
         "--no-loadscope-reorder", "-o", "addopts=", str(Path(__file__).with_name("xdist_group_probe.py"))],
        cwd=ROOT, env={**os.environ, "OC_GROUP_PROBE_RECORD": str(record)}, capture_output=True, text=True,
        timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    events = [line.split() for line in record.read_text().splitlines()]
    assert [what for what, _ in events] == ["built", "ran", "ran", "ran", "ran"], events
    assert len({worker for _, worker in events}) == 1, events  # all on the worker that built it
