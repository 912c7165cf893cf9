"""Extras give ranges users can meet; constraints.txt pins what CI and the frozen cases need, and make uses it."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]


def constraints() -> dict[str, Version]:
    pins: dict[str, Version] = {}
    for line in (ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, version = line.split("==")
            pins[name.strip().lower()] = Version(version.strip())
    return pins


def extras() -> dict[str, Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    requirements = [Requirement(r) for group in project["optional-dependencies"].values() for r in group]
    return {r.name.lower(): r for r in requirements}


def test_extras_use_ranges_and_pins_live_in_constraints() -> None:
    declared = extras()
    for name in ("torch", "jax", "jaxlib", "flax", "optax"):
        specifiers = {s.operator for s in declared[name].specifier}
        assert "==" not in specifiers and ">=" in specifiers, (name, str(declared[name].specifier))


def test_every_pin_satisfies_its_extra() -> None:
    declared = extras()
    pins = constraints()
    assert pins["torch"] == Version("2.13.0")  # the CPU build on disk
    assert {"jax", "jaxlib", "flax", "optax", "ruff", "mypy"} <= set(pins)
    for name, version in pins.items():
        assert name in declared, f"{name} is pinned but no extra asks for it"
        assert declared[name].specifier.contains(version, prereleases=True), (name, version)


def test_make_installs_with_the_constraints() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert "-c constraints.txt" in makefile and "constraints.txt" in makefile.split("$(STAMP):")[1].splitlines()[0]


def test_installed_versions_match_the_pins() -> None:
    for name, version in constraints().items():
        try:
            installed = Version(importlib.metadata.version(name))
        except importlib.metadata.PackageNotFoundError:
            continue  # an extra this environment did not install
        assert installed.public == version.public, (name, installed, version)


def _build(tmp_path: Path) -> tuple[Path, Path]:
    """A wheel and an sdist built from a copy of the tracked sources (the checkout stays untouched)."""
    pytest.importorskip("setuptools")
    files = ["pyproject.toml", "README.md", "MANIFEST.in", "reference_impl", "conformance/cases"]
    tracked = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", *files], cwd=ROOT,
                             capture_output=True, text=True, check=True)
    src = tmp_path / "src"
    for rel in tracked.stdout.splitlines():
        target = src / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, target, follow_symlinks=False)  # cases hold symlinks on purpose
    out = tmp_path / "dist"
    for command in (["-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out), "."],
                    ["-c", "from setuptools import setup; setup()", "-q", "sdist", "-d", str(out)]):
        done = subprocess.run([sys.executable, *command], cwd=src, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr[-2000:]
    return next(out.glob("*.whl")), next(out.glob("*.tar.gz"))


@pytest.mark.slow(seconds=8)
def test_an_installed_wheel_says_where_the_cases_are_and_the_sdist_has_them(tmp_path: Path) -> None:
    wheel, sdist = _build(tmp_path)
    with zipfile.ZipFile(wheel) as archive:
        tops = {name.split("/")[0] for name in archive.namelist()}
    assert tops == {"opencheckpoint", "opencheckpoint-0.1.0.dist-info"}, tops
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "OPENCHECKPOINT_CONFORMANCE_CASES"}
    done = subprocess.run([sys.executable, "-m", "opencheckpoint", "conformance", "run", "--reader", "x"],
                          cwd=elsewhere, env={**env, "PYTHONPATH": str(site)}, capture_output=True, text=True,
                          check=False)
    assert done.returncode == 2 and "the sdist of this version" in done.stderr, done.stderr
    with tarfile.open(sdist) as archive:
        archive.extractall(tmp_path / "unpacked", filter="data")
    (root,) = (tmp_path / "unpacked").iterdir()
    case_files = sorted((ROOT / "conformance/cases/v1").glob("*/case.json"))
    assert case_files and all((root / p.relative_to(ROOT)).is_file() for p in case_files)
