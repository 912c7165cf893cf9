"""The one table of framework adapters: a new framework is one module plus one row here.

Every place that needs to know which frameworks exist (which adapter module
converts an object, which module reads arrays into a framework, which
versions ``producer.environment`` records, the install hint of a missing
framework) reads :data:`FRAMEWORKS`. The table imports nothing, so any
module may consult it without loading a framework.

An adapter module named in a row provides ``to_tree_value(value)`` (write
hook for leaves), ``FRAMEWORK`` (read side: arrays and keys, see
:class:`~opencheckpoint.adapters.frameworks.Framework`) and optionally
``adapter_for(value)`` (whole-object adapters).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FrameworkEntry:
    """One framework: its name, adapter module, the packages its objects come from, how to install it."""

    #: The name users pass as ``framework=`` and hints record.
    name: str
    #: Import path of the adapter module (imported only when an object of the framework is met).
    module: str
    #: Top-level module names whose types belong to the framework; the first is the framework package itself.
    packages: tuple[str, ...]
    #: What to run when the framework is missing.
    install_hint: str
    #: Packages whose ``__version__`` ``producer.environment`` records when they are already imported.
    versioned: tuple[str, ...]


#: Every framework with an adapter module; NumPy is the built-in default and has no row.
FRAMEWORKS: tuple[FrameworkEntry, ...] = (
    FrameworkEntry("torch", "opencheckpoint.adapters.torch", ("torch",), "pip install 'opencheckpoint[torch]'",
                   versioned=("torch",)),
    FrameworkEntry("jax", "opencheckpoint.adapters.jax", ("jax", "jaxlib", "flax", "optax"),
                   "pip install 'opencheckpoint[jax]'", versioned=("jax", "flax", "optax")),
)

#: The framework every reader supports without an adapter module.
DEFAULT = "numpy"


def names() -> tuple[str, ...]:
    """Every framework name a reader accepts, the default first."""
    return (DEFAULT, *(entry.name for entry in FRAMEWORKS))


# Lookups scan the (short) table on every call rather than caching an index of it, so the table stays the
# only thing to edit, also for a test that adds a row.
def by_name(name: str) -> FrameworkEntry | None:
    """The row of framework ``name`` (None for the default or an unknown name)."""
    return next((entry for entry in FRAMEWORKS if entry.name == name), None)


def for_module(module_name: str) -> FrameworkEntry | None:
    """The row whose packages include the top-level package of ``module_name`` (a type's ``__module__``)."""
    root = module_name.split(".", 1)[0]
    return next((entry for entry in FRAMEWORKS if root in entry.packages), None)


def for_type(kind: type) -> FrameworkEntry | None:
    """The framework of a type, through its MRO (user classes subclass ``torch.nn.Module``, ``nnx.Module``)."""
    for cls in kind.__mro__:
        entry = for_module(cls.__module__)
        if entry is not None:
            return entry
    return None


def environment_packages() -> tuple[str, ...]:
    """Packages whose versions ``producer.environment`` records when they are loaded."""
    return tuple(package for entry in FRAMEWORKS for package in entry.versioned)
