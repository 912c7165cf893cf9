"""``AdapterTests``: the behaviour tests every OpenCheckpoint adapter must pass, as a pytest base class.

Subclass it in your test suite as ``TestMyThing`` (the base class has no
``Test`` prefix, so pytest collects only your subclass), say how to build
your live object, and inherit about a dozen tests: round trips in both
forms, restoring into a fresh object, idempotent re-saving, validation,
reading without the live object, strictness on mismatches, corruption
detection that leaves the target untouched, restores that are atomic across
components (a corrupt or mismatched component anywhere in the load leaves
every target untouched), spec-defined files only, and no import of anything
a checkpoint names.

A subclass provides:

* ``make_value(seed)`` — a live object whose state depends on ``seed``
  (``make_value(0)`` and ``make_value(1)`` must differ);
* ``make_empty()`` — a live object to restore into (freshly constructed);
* ``assert_restored(original, restored)`` — raise ``AssertionError`` unless
  ``restored`` holds ``original``'s state;
* optionally ``make_value_with(leaf)`` — a live object holding ``leaf`` (a torch
  tensor, JAX array or NumPy array of the tensor-kinds matrix,
  :mod:`opencheckpoint.testing.tensor_kinds`) that reads back with it at
  :attr:`leaf_key` (``read_component(...)[leaf_key]``): every kind must then be stored
  exactly or refused at save with nothing written; ``None`` (the default) skips it;
* optionally ``adapter`` (an :class:`~opencheckpoint.adapters.base.Adapter`
  instance; ``None`` means automatic resolution), ``make_mismatched()`` (a
  live object the saved state does not fit; ``None`` skips the strictness
  tests) and ``declared_files`` (for ``files`` components: the file names
  the adapter may write).

>>> import numpy as np
>>> class TestArray(AdapterTests):
...     def make_value(self, seed): return np.full(3, seed, dtype=np.float32)
...     def make_empty(self): return np.zeros(3, dtype=np.float32)
...     def assert_restored(self, original, restored): assert (original == restored).all()
>>> for name in sorted(name for name in dir(TestArray) if name.startswith("test_"))[:3]:
...     print(name)
test_assert_restored_detects_a_difference
test_corrupt_component_leaves_other_components_untouched
test_corrupt_other_component_leaves_target_untouched
"""

from __future__ import annotations

import builtins
import dataclasses
import functools
import importlib
import importlib.abc
import importlib.util
import json
import struct
import sys
import warnings
import zipfile
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
import pytest

from ..adapters.base import Adapter
from ..checkpoint import Checkpoint, LoadResult
from ..format.errors import IncompatibleComponent, IntegrityError
from ..format.manifest import KIND_FILES, MANIFEST_NAME, serialize_manifest
from ..read.reader import CheckpointReader, open_checkpoint, read_component
from ..read.validate import validate
from .compare import assert_tree_equal
from .tensor_kinds import KINDS, check_kind

__all__ = ["AdapterTests", "ImportRecorder", "component_files", "flip_byte"]

Form = Literal["directory", "archive"]
_FORMS: tuple[Form, Form] = ("directory", "archive")
#: Fixed identity so two saves of the same state give identical manifests.
_CHECKPOINT_ID = "0123456789abcdef0123456789abcdef"
_CREATED_AT = "2026-01-01T00:00:00Z"
#: The root of the canary package the hint test plants (importing it leaves a marker file).
CANARY = "oc_testkit_canary"


class AdapterTests:
    """Behaviour tests for one adapter; subclass as ``TestSomething`` (see the module docstring)."""

    #: The adapter under test; ``None``: the one :func:`~opencheckpoint.adapters.base.resolve_adapter` picks.
    adapter: ClassVar[Adapter | None] = None
    #: The component name the tests use.
    component: ClassVar[str] = "state"
    #: For ``files`` components: every file name (relative to the component) the adapter may write.
    declared_files: ClassVar[Collection[str] | None] = None

    # -- what a subclass provides ------------------------------------------------------------
    def make_value(self, seed: int) -> Any:
        """A live object whose state depends on ``seed``."""
        raise NotImplementedError(f"{type(self).__name__} must define make_value(seed)")

    def make_empty(self) -> Any:
        """A live object to restore into."""
        raise NotImplementedError(f"{type(self).__name__} must define make_empty()")

    def assert_restored(self, original: Any, restored: Any) -> None:
        """Raise ``AssertionError`` unless ``restored`` holds the state of ``original``."""
        raise NotImplementedError(f"{type(self).__name__} must define assert_restored(original, restored)")

    def make_mismatched(self) -> Any:
        """A live object the saved state does not fit (other shapes or names), or ``None`` to skip."""
        return None

    #: Where :meth:`make_value_with`'s leaf is in the stored component (dotted keys of ``read_component``).
    leaf_key: ClassVar[str] = "leaf"

    def make_value_with(self, leaf: Any) -> Any:
        """A live object holding ``leaf`` at :attr:`leaf_key`, or ``None`` to skip the tensor-kinds matrix."""
        return None

    # -- helpers a subclass may use or override ------------------------------------------------
    def new_checkpoint(self, value: Any, *, format: Form = "directory", strict: str = "error",
                       first: Mapping[str, Any] | None = None, **others: Any) -> Checkpoint:
        """A checkpoint holding ``value`` as :attr:`component` and ``others`` (automatic adapters);
        the components in ``first`` are registered (so saved and restored) before :attr:`component`."""
        ckpt = Checkpoint(format=format, strict=strict, durable=False)  # type: ignore[arg-type]  # Checkpoint checks it
        for name, other in (first or {}).items():
            ckpt.register(name, other)
        ckpt.register(self.component, value, adapter=self.adapter)
        for name, other in others.items():
            ckpt.register(name, other)
        return ckpt

    def save(self, value: Any, path: Path, *, format: Form = "directory", first: Mapping[str, Any] | None = None,
             **others: Any) -> Path:
        """Save with a fixed checkpoint id and time, so equal states give equal bytes."""
        return self.new_checkpoint(value, format=format, first=first, **others).save(
            path, checkpoint_id=_CHECKPOINT_ID, created_at=_CREATED_AT)

    def restore(self, path: Path, target: Any, *, strict: str = "error", first: Mapping[str, Any] | None = None,
                **others: Any) -> tuple[Any, LoadResult]:
        """Load ``path`` into ``target``; return the restored object and the load result."""
        result = self.new_checkpoint(target, strict=strict, first=first, **others).load(path)
        return self.restored_value(target, result.values.get(self.component)), result

    def restored_value(self, target: Any, loaded: Any) -> Any:
        """The restored object: what the adapter returned, or the target it restored in place."""
        return target if loaded is None else loaded

    def _record(self, path: Path) -> Any:
        with CheckpointReader(path) as reader:
            return reader.record(self.component)

    # -- the tests -------------------------------------------------------------------------------
    def test_assert_restored_detects_a_difference(self) -> None:
        """The other tests mean something only if ``assert_restored`` can fail and the seeds differ."""
        original = self.make_value(0)
        self.assert_restored(original, self.make_value(0))
        with pytest.raises(AssertionError):
            self.assert_restored(original, self.make_value(1))

    @pytest.mark.parametrize("form", _FORMS)
    def test_round_trip_into_a_used_object(self, tmp_path: Path, form: Form) -> None:
        original = self.make_value(0)
        path = self.save(original, tmp_path / f"ckpt-{form}", format=form)
        restored, result = self.restore(path, self.make_value(1))
        assert result.loaded == {self.component}
        self.assert_restored(original, restored)

    @pytest.mark.parametrize("form", _FORMS)
    def test_restore_into_empty(self, tmp_path: Path, form: Form) -> None:
        original = self.make_value(0)
        path = self.save(original, tmp_path / f"ckpt-{form}", format=form)
        restored, result = self.restore(path, self.make_empty())
        assert result.loaded == {self.component}
        self.assert_restored(original, restored)

    def test_idempotent_second_save(self, tmp_path: Path) -> None:
        """Saving the restored object again writes the same component record and the same bytes."""
        first = self.save(self.make_value(0), tmp_path / "first")
        restored, _ = self.restore(first, self.make_empty())
        second = self.save(restored, tmp_path / "second")
        assert _manifest(second)["components"] == _manifest(first)["components"]
        assert component_files(second, self.component) == component_files(first, self.component)

    @pytest.mark.parametrize("form", _FORMS)
    def test_validate_accepts_the_result(self, tmp_path: Path, form: Form) -> None:
        path = self.save(self.make_value(0), tmp_path / f"ckpt-{form}", format=form)
        report = validate(path)
        assert report.ok, "\n".join(str(issue) for issue in report.errors)

    def test_read_component_without_live_object(self, tmp_path: Path) -> None:
        """The stored value reads back with no live object, the same from both forms and both APIs."""
        value = self.make_value(0)
        directory = self.save(value, tmp_path / "ckpt")
        archive = self.save(value, tmp_path / "ckpt.ocp", format="archive")
        from_directory = read_component(directory, self.component)
        with open_checkpoint(archive) as reader:
            from_archive = reader.read(self.component)
        assert_tree_equal(from_directory, from_archive)

    def test_strict_error_raises_on_mismatch(self, tmp_path: Path) -> None:
        mismatched = self._mismatched()
        path = self.save(self.make_value(0), tmp_path / "ckpt")
        with pytest.raises(IncompatibleComponent):
            self.restore(path, mismatched, strict="error")

    def test_strict_warn_restores_the_rest(self, tmp_path: Path) -> None:
        """Under ``strict="warn"`` the mismatch is reported as a warning and other components load."""
        mismatched = self._mismatched()
        path = self.save(self.make_value(0), tmp_path / "ckpt", sentinel=np.arange(5, dtype=np.int64))
        sentinel = np.zeros(5, dtype=np.int64)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            _, result = self.restore(path, mismatched, strict="warn", sentinel=sentinel)
        assert "sentinel" in result.loaded
        assert sentinel.tolist() == [0, 1, 2, 3, 4]
        messages = [str(w.message) for w in caught]
        assert any(self.component in m for m in messages), f"no warning names {self.component!r}: {messages}"

    @pytest.mark.parametrize("form", _FORMS)
    def test_corrupted_data_raises_and_leaves_target_untouched(self, tmp_path: Path, form: Form) -> None:
        """One flipped byte in the component's payload: IntegrityError, and the target is as it was."""
        path = self.save(self.make_value(0), tmp_path / f"ckpt-{form}", format=form)
        flip_byte(path, self.component)
        target = self.make_value(1)
        before = component_files(self.save(target, tmp_path / "before"), self.component)
        with pytest.raises(IntegrityError):
            self.restore(path, target)
        after = component_files(self.save(target, tmp_path / "after"), self.component)
        assert after == before, "a failed load modified the target"
        with pytest.raises(IntegrityError):
            read_component(path, self.component)

    # -- atomic across components: Checkpoint.load verifies everything before it applies anything --
    @pytest.mark.parametrize("form", _FORMS)
    def test_corrupt_other_component_leaves_target_untouched(self, tmp_path: Path, form: Form) -> None:
        """Another component of the same load is corrupt: IntegrityError, and this target is as it was.

        The other component is registered after this one, so an adapter that
        modifies its target before every component is verified fails here.
        """
        path = self.save(self.make_value(0), tmp_path / f"ckpt-{form}", format=form,
                         zz_other=_sentinel_value(0))
        flip_byte(path, "zz_other")
        target = self.make_value(1)
        before = component_files(self.save(target, tmp_path / "before"), self.component)
        other = _sentinel_value(1)
        with pytest.raises(IntegrityError):
            self.restore(path, target, zz_other=other)
        after = component_files(self.save(target, tmp_path / "after"), self.component)
        assert after == before, "the adapter modified its target although another component failed verification"
        assert_tree_equal(other, _sentinel_value(1))

    @pytest.mark.parametrize("form", _FORMS)
    def test_corrupt_component_leaves_other_components_untouched(self, tmp_path: Path, form: Form) -> None:
        """This component is corrupt: IntegrityError, and a component registered before it is unchanged."""
        path = self.save(self.make_value(0), tmp_path / f"ckpt-{form}", format=form,
                         first={"aa_other": _sentinel_value(0)})
        flip_byte(path, self.component)
        other = _sentinel_value(1)
        with pytest.raises(IntegrityError):
            self.restore(path, self.make_value(1), first={"aa_other": other})
        assert_tree_equal(other, _sentinel_value(1))

    def test_mismatch_leaves_other_components_untouched(self, tmp_path: Path) -> None:
        """``strict="error"`` and a target this state does not fit: nothing at all is restored."""
        mismatched = self._mismatched()
        path = self.save(self.make_value(0), tmp_path / "ckpt", first={"aa_other": _sentinel_value(0)},
                         zz_other=_sentinel_value(2))
        first, last = _sentinel_value(1), _sentinel_value(3)
        with pytest.raises(IncompatibleComponent):
            self.restore(path, mismatched, strict="error", first={"aa_other": first}, zz_other=last)
        assert_tree_equal(first, _sentinel_value(1))
        assert_tree_equal(last, _sentinel_value(3))

    def test_writes_only_spec_defined_files(self, tmp_path: Path) -> None:
        """Every file is one the spec defines for the kind (or one the subclass declares): no pickles."""
        path = self.save(self.make_value(0), tmp_path / "ckpt")
        record = self._record(path)
        listed = set(record.files)
        on_disk = {p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file()}
        assert on_disk == {MANIFEST_NAME} | {f"{record.path}/{rel}" for rel in listed}
        expected = KIND_FILES.get(record.kind)
        if expected is not None:
            assert listed == set(expected), f"a {record.kind} component has {sorted(listed)}"
        else:
            assert self.declared_files is not None, (
                f"{type(self).__name__} writes a {record.kind!r} component: set declared_files to the file "
                f"names it may write (it wrote {sorted(listed)})")
            assert listed <= set(self.declared_files), f"undeclared files: {sorted(listed - set(self.declared_files))}"

    def test_load_imports_nothing_named_in_hints(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """R-CMP-12: hints naming importable modules (with an import side effect) are never imported."""
        marker = tmp_path / "imported"
        package = tmp_path / "site" / CANARY
        package.mkdir(parents=True)
        effect = f"open({str(marker)!r}, 'w').close()\n"
        (package / "__init__.py").write_text(effect)
        (package / "payload.py").write_text(effect + "class Model:\n    pass\nrun = Model\n")
        monkeypatch.syspath_prepend(str(tmp_path / "site"))
        path = self.save(self.make_value(0), tmp_path / "ckpt")
        hints = {"class": f"{CANARY}.payload.Model", "framework": CANARY, "loader": f"{CANARY}.payload:run",
                 "factory": "os.system"}
        _rewrite_manifest(path, lambda raw: raw["components"][self.component].update(hints=hints))
        with ImportRecorder() as recorder:
            self.restore(path, self.make_empty())
            read_component(path, self.component)
            with open_checkpoint(path) as reader:
                reader.read(self.component)
            assert validate(path).ok
        named = [n for n in recorder.names if n == CANARY or n.startswith(CANARY + ".")]
        assert not named, f"loading imported names from the checkpoint's hints: {named}"
        assert not marker.exists() and CANARY not in sys.modules

    def test_tensor_kinds_are_stored_exactly_or_refused(self, tmp_path: Path) -> None:
        """Issue 20: no kind of tensor or array gives a checkpoint whose values differ from the value's own:
        each row of :data:`~.tensor_kinds.KINDS` (of an installed framework) that :meth:`make_value_with`
        holds reads back equal, bit for bit, or its save raises a ``CheckpointError`` writing nothing."""
        if type(self).make_value_with is AdapterTests.make_value_with:
            pytest.skip(f"{type(self).__name__} defines no make_value_with(leaf)")
        failures = []
        for kind in KINDS:
            if kind.framework != "numpy" and importlib.util.find_spec(kind.framework) is None:
                continue
            leaf = kind.build()
            holder = self.make_value_with(leaf)
            if holder is None:
                continue
            directory = tmp_path / kind.name
            directory.mkdir()
            try:
                check_kind(dataclasses.replace(kind, build=functools.partial(_same, leaf)), directory,
                           functools.partial(self._save_holder, holder), self._stored_leaf)
            except (AssertionError, pytest.fail.Exception) as exc:
                failures.append(f"{kind.name}: {str(exc).splitlines()[0]}")
        assert not failures, "kinds stored with other values, or not refused:\n" + "\n".join(failures)

    def _save_holder(self, holder: Any, leaf: Any, target: Path) -> Path:
        return self.new_checkpoint(holder).save(target)

    def _stored_leaf(self, path: Path) -> Any:
        value = read_component(path, self.component)
        for key in self.leaf_key.split("."):
            value = value[int(key) if isinstance(value, (list, tuple)) else key]
        return value

    def _mismatched(self) -> Any:
        mismatched = self.make_mismatched()
        if mismatched is None:
            pytest.skip(f"{type(self).__name__} defines no make_mismatched()")
        return mismatched


def _same(value: Any) -> Any:
    return value


# -- helpers usable on their own ------------------------------------------------------------------------
def _sentinel_value(seed: int) -> dict[str, Any]:
    """The other component of the cross-component tests: NumPy arrays restored in place."""
    return {"a": np.arange(seed, seed + 6, dtype=np.int64), "b": np.full((2, 3), seed, dtype=np.float32)}


def _manifest(path: Path) -> dict[str, Any]:
    with CheckpointReader(path) as reader:
        return reader.manifest


def component_files(path: Path, name: str) -> dict[str, bytes]:
    """Relative name -> bytes of every file of one component (either form)."""
    with CheckpointReader(path) as reader:
        record = reader.record(name)
        return {rel: reader.source.read_file(f"{record.path}/{rel}", entry.size)
                for rel, entry in record.files.items()}


def _payload_target(path: Path, name: str) -> tuple[str, int]:
    """The file and offset to corrupt: a byte of the first non-empty array of a tree component
    (so the per-array CRC-32C must catch it), else the middle of the first non-empty file."""
    with CheckpointReader(path) as reader:
        record = reader.record(name)
        if record.kind == "tree":
            decoded, data_file, _ = reader.decoded_layout(name)
            for ref in decoded.arrays:
                if ref.nbytes:
                    return data_file, ref.offset + ref.nbytes // 2
            return f"{record.path}/tree.msgpack", record.files["tree.msgpack"].size // 2
        for rel, entry in record.files.items():
            if entry.size:
                return f"{record.path}/{rel}", entry.size // 2
    raise AssertionError(f"component {name!r} has no non-empty file to corrupt")


def flip_byte(path: Path, name: str) -> str:
    """Invert one byte of component ``name``'s payload in place (directory or archive); return the file."""
    member, offset = _payload_target(path, name)
    if path.is_dir():
        position, target = offset, path / member
    else:
        position, target = _member_data_offset(path, member) + offset, path
    with open(target, "r+b") as handle:
        handle.seek(position)
        byte = handle.read(1)
        handle.seek(position)
        handle.write(bytes([byte[0] ^ 0xFF]))
    return member


def _member_data_offset(archive: Path, member: str) -> int:
    """Where a STORED member's bytes start: after its local header, name and extra field."""
    with zipfile.ZipFile(archive) as zf:
        header = zf.getinfo(member).header_offset
    with open(archive, "rb") as handle:
        handle.seek(header)
        local = handle.read(30)
    name_length, extra_length = struct.unpack("<HH", local[26:30])
    offset: int = header + 30 + name_length + extra_length
    return offset


def _rewrite_manifest(path: Path, edit: Any) -> None:
    """Apply ``edit`` to a directory checkpoint's manifest JSON and write it back with a valid checksum."""
    manifest = path / MANIFEST_NAME
    raw = json.loads(manifest.read_bytes())
    raw.pop("manifest_crc32c")
    edit(raw)
    manifest.write_bytes(serialize_manifest(raw))


class ImportRecorder(importlib.abc.MetaPathFinder):
    """Records every module name imported while active, by every route.

    ``import x`` statements go through ``builtins.__import__``,
    :func:`importlib.import_module` does not, and a module not yet loaded is
    always looked up on ``sys.meta_path``: all three are watched.
    """

    def __init__(self) -> None:
        self.names: list[str] = []
        self._saved: tuple[Any, Any] | None = None

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: Any = None) -> None:
        self.names.append(fullname)
        return None  # let the real finders load it

    def __enter__(self) -> ImportRecorder:
        real_import, real_import_module = builtins.__import__, importlib.import_module

        def recording_import(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (),
                             level: int = 0) -> Any:
            if level == 0:
                self.names.append(name)
                self.names.extend(f"{name}.{item}" for item in fromlist or () if isinstance(item, str))
            return real_import(name, globals, locals, fromlist, level)

        def recording_import_module(name: str, package: str | None = None) -> Any:
            self.names.append(name)
            return real_import_module(name, package)

        self._saved = (real_import, real_import_module)
        builtins.__import__ = recording_import
        importlib.import_module = recording_import_module
        sys.meta_path.insert(0, self)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._saved is not None
        builtins.__import__, importlib.import_module = self._saved
        sys.meta_path.remove(self)

