"""A pytest plugin: one test per conformance case, for any implementation's protocol command.

Enable it with ``-p opencheckpoint.conformance.pytest_plugin`` (or
``pytest_plugins = ["opencheckpoint.conformance.pytest_plugin"]`` in the
rootdir ``conftest.py``; a plugin named in a test module loads too late for its
command-line options) and write two tiny tests::

    # test_conformance.py
    def test_reader(conformance_reader_case):
        conformance_reader_case.check()

    def test_writer(conformance_writer_case):
        conformance_writer_case.check()

and run ``pytest -p opencheckpoint.conformance.pytest_plugin --oc-reader "mytool conformance"
--oc-writer "mytool conformance"``
(or set ``OC_READER`` / ``OC_WRITER``). ``--oc-cases DIR`` picks another case
directory, ``--oc-timeout`` the per-command timeout. Without a reader (writer)
command the corresponding tests are skipped. Each case becomes its own test
id (``test_reader[reject-zip-compressed]``), skipped capabilities are pytest
skips, and failures carry the runner's explanation.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from .runner import Case, Command, capabilities_of, default_cases_dir, load_cases, run_reader_case, run_writer_case


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("opencheckpoint-conformance")
    group.addoption("--oc-reader", default=os.environ.get("OC_READER"), help="reader protocol command")
    group.addoption("--oc-writer", default=os.environ.get("OC_WRITER"), help="writer protocol command")
    group.addoption("--oc-cases", default=os.environ.get("OC_CASES"), help="conformance cases directory")
    group.addoption("--oc-timeout", type=float, default=60.0, help="per-command timeout in seconds")


@cache
def _capabilities(argv: tuple[str, ...], timeout: float) -> tuple[dict[str, str], frozenset[str]]:
    """The command's skipped capabilities and the opt-in ones it implements (spec §S.8)."""
    caps = capabilities_of(Command(list(argv), timeout=timeout))
    return dict(caps.skip.items()), frozenset(caps.implements)


@dataclass
class ConformanceCase:
    """One case bound to a command; :meth:`check` runs it and turns the outcome into pytest's."""

    case: Case
    mode: str
    command: str | None
    timeout: float

    def check(self) -> None:
        if not self.command:
            pytest.skip(f"no {self.mode} command (--oc-{self.mode} or OC_{self.mode.upper()})")
        command = Command(self.command, timeout=self.timeout)
        skip, implements = _capabilities(tuple(command.argv), self.timeout)
        if self.mode == "reader":
            outcome = run_reader_case(self.case, command, skip, implements)
        else:
            with tempfile.TemporaryDirectory(prefix="oc-conformance-") as tmp:
                outcome = run_writer_case(self.case, command, skip, Path(tmp))
        if outcome.status == "skip":
            pytest.skip(outcome.detail)
        if outcome.status == "fail":
            pytest.fail(f"{self.case.id} ({self.mode}): {outcome.detail}", pytrace=False)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    config = metafunc.config
    directory = config.getoption("--oc-cases") or default_cases_dir()
    for mode in ("reader", "writer"):
        fixture = f"conformance_{mode}_case"
        if fixture not in metafunc.fixturenames:
            continue
        cases = load_cases(directory)
        if mode == "writer":
            cases = [c for c in cases if c.meta.valid and not c.meta.read_path]
        command = config.getoption(f"--oc-{mode}")
        params: list[Any] = [ConformanceCase(c, mode, command, config.getoption("--oc-timeout")) for c in cases]
        metafunc.parametrize(fixture, params, ids=[c.id for c in cases])
