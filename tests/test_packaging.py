"""Extras give ranges users can meet; constraints.txt pins what CI and the frozen cases need, and make uses it."""

from __future__ import annotations

import importlib.metadata
import tomllib
from pathlib import Path

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
