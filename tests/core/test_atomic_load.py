"""``Checkpoint.load`` is atomic across components: every component is verified before any is applied.

A corrupt or (under ``strict="error"``) mismatched component anywhere in the
selection raises before the first byte reaches any live object; restores
whose apply step cannot be checked beforehand (one-phase adapters) run first,
and when one raises, the error says what was restored before it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from ckpt_helpers import forms

from opencheckpoint import Checkpoint, IncompatibleComponent, IntegrityError
from opencheckpoint.adapters.base import (
    Adapter,
    ComponentReader,
    ComponentWriter,
    PreparedRestore,
    TreeAdapter,
    prepare_restore,
)
from opencheckpoint.testing.adapter_tests import flip_byte

FORMS = ["directory", "archive"]


def state(seed: int) -> dict[str, np.ndarray]:
    return {"w": np.full((4, 3), seed, dtype=np.float32), "b": np.arange(seed, seed + 5, dtype=np.int64)}


def snapshot(live: dict[str, np.ndarray]) -> dict[str, bytes]:
    return {key: value.tobytes() for key, value in live.items()}


@pytest.mark.parametrize("form", FORMS)
def test_corrupt_later_component_leaves_earlier_components_untouched(tmp_path: Path, form: str) -> None:
    path = forms(Checkpoint(first=state(1), second=state(2), durable=False).save(tmp_path / "ckpt"), form)
    flip_byte(path, "second")
    first, second = state(0), state(0)
    before = snapshot(first), snapshot(second)
    with pytest.raises(IntegrityError) as info:
        Checkpoint(first=first, second=second).load(path)
    assert "second" in str(info.value.file)
    assert (snapshot(first), snapshot(second)) == before


def test_corrupt_json_component_leaves_tree_component_untouched(tmp_path: Path) -> None:
    path = Checkpoint(arrays=state(1), config={"lr": 0.5}, durable=False).save(tmp_path / "ckpt")
    value_file = path / "components" / "config" / "value.json"
    value_file.write_bytes(value_file.read_bytes().replace(b"0.5", b"0.7"))
    arrays, config = state(0), {"lr": 0.1}
    before = snapshot(arrays)
    with pytest.raises(IntegrityError):
        Checkpoint(arrays=arrays, config=config).load(path)
    assert snapshot(arrays) == before and config == {"lr": 0.1}


def test_mismatch_in_later_component_leaves_earlier_untouched_under_strict_error(tmp_path: Path) -> None:
    path = Checkpoint(first=state(1), second=np.ones((2, 2)), durable=False).save(tmp_path / "ckpt")
    first, second = state(0), np.zeros((3, 3))
    before = snapshot(first)
    with pytest.raises(IncompatibleComponent) as info:
        Checkpoint(first=first, second=second).load(path)
    assert info.value.field == "components.second"
    assert snapshot(first) == before and not second.any()
    assert info.value.result is not None and info.value.result.loaded == set()


class Recorder:
    """A live object with a one-phase adapter that records calls and can refuse the state."""

    def __init__(self, refuse: bool = False) -> None:
        self.refuse = refuse
        self.loaded: Any = None


class OnePhaseAdapter(Adapter):
    """Defines only ``load`` (the protocol before two-phase restores)."""

    kind = "tree"

    def save(self, value: Recorder, writer: ComponentWriter) -> None:
        writer.write_tree({"x": np.arange(3)})

    def load(self, value: Recorder, reader: ComponentReader, *, strict: str) -> Any:
        if value.refuse:
            raise IncompatibleComponent("this object refuses the stored state")
        value.loaded = reader.tree()
        return None


def one_phase_checkpoint(recorder: Recorder, **others: Any) -> Checkpoint:
    ckpt = Checkpoint(durable=False, **others)
    return ckpt.register("rec", recorder, adapter=OnePhaseAdapter())


def test_one_phase_adapter_is_not_called_when_another_component_is_corrupt(tmp_path: Path) -> None:
    path = one_phase_checkpoint(Recorder()).register("zz", state(1)).save(tmp_path / "ckpt")
    flip_byte(path, "zz")
    recorder = Recorder()
    with pytest.raises(IntegrityError):
        one_phase_checkpoint(recorder).register("zz", state(0)).load(path)
    assert recorder.loaded is None


def test_one_phase_adapter_component_is_verified_before_anything_is_applied(tmp_path: Path) -> None:
    path = one_phase_checkpoint(Recorder(), aa=state(1)).save(tmp_path / "ckpt")
    flip_byte(path, "rec")
    first = state(0)
    before = snapshot(first)
    with pytest.raises(IntegrityError):
        Checkpoint(durable=False, aa=first).register("rec", Recorder(), adapter=OnePhaseAdapter()).load(path)
    assert snapshot(first) == before


def test_unchecked_restores_run_first_so_their_failure_leaves_checked_ones_untouched(tmp_path: Path) -> None:
    """A one-phase adapter's load raising after verification: registered after, yet applied first."""
    path = Checkpoint(aa=state(1), durable=False).register("rec", Recorder(), adapter=OnePhaseAdapter()).save(
        tmp_path / "ckpt")
    first = state(0)
    before = snapshot(first)
    with pytest.raises(IncompatibleComponent, match="no other component was restored") as info:
        Checkpoint(aa=first, durable=False).register("rec", Recorder(refuse=True), adapter=OnePhaseAdapter()).load(
            path)
    assert snapshot(first) == before
    assert info.value.result.loaded == set() and "rec" in info.value.result.incompatible


def test_failure_after_an_unchecked_restore_names_what_was_restored(tmp_path: Path) -> None:
    path = (Checkpoint(durable=False).register("ok", Recorder(), adapter=OnePhaseAdapter())
            .register("bad", Recorder(), adapter=OnePhaseAdapter()).save(tmp_path / "ckpt"))
    good = Recorder()
    ckpt = (Checkpoint(durable=False).register("ok", good, adapter=OnePhaseAdapter())
            .register("bad", Recorder(refuse=True), adapter=OnePhaseAdapter()))
    with pytest.raises(IncompatibleComponent, match=r"already restored: \['ok'\]") as info:
        ckpt.load(path)
    assert info.value.result.loaded == {"ok"} and good.loaded is not None


class LoadOnlySubclass(TreeAdapter):
    """A subclass of a two-phase adapter that redefines only the one-phase ``load``."""

    calls = 0

    def load(self, value: Any, reader: ComponentReader, *, strict: str) -> Any:
        type(self).calls += 1
        return super().load(value, reader, strict=strict)


def test_subclass_overriding_only_load_runs_after_every_component_is_verified(tmp_path: Path) -> None:
    """Its ``load`` is the apply step: not called while another component is corrupt, called otherwise."""
    path = Checkpoint(durable=False).register("t", state(1), adapter=LoadOnlySubclass()).register(
        "zz", state(2)).save(tmp_path / "ckpt")
    clean = Checkpoint(durable=False).register("t", state(1)).register("zz", state(2)).save(tmp_path / "clean")
    flip_byte(path, "zz")
    live = state(0)
    with pytest.raises(IntegrityError):
        Checkpoint(durable=False).register("t", live, adapter=LoadOnlySubclass()).register("zz", state(0)).load(path)
    assert LoadOnlySubclass.calls == 0 and snapshot(live) == snapshot(state(0))
    Checkpoint(durable=False).register("t", live, adapter=LoadOnlySubclass()).register("zz", state(0)).load(clean)
    assert LoadOnlySubclass.calls == 1 and snapshot(live) == snapshot(state(1))


def test_adapter_defining_neither_phase_is_a_type_error(tmp_path: Path) -> None:
    class Incomplete(Adapter):
        def save(self, value: Any, writer: ComponentWriter) -> None:
            writer.write_tree(value)

    path = Checkpoint(t=state(1), durable=False).save(tmp_path / "ckpt")
    with pytest.raises(TypeError, match="prepare"):
        Checkpoint(durable=False).register("t", state(0), adapter=Incomplete()).load(path)


def test_prepare_restore_of_a_two_phase_adapter_does_not_touch_the_target(tmp_path: Path) -> None:
    path = Checkpoint(t=state(1), durable=False).save(tmp_path / "ckpt")
    from opencheckpoint import open_checkpoint

    live = state(0)
    with open_checkpoint(path) as reader:
        restore = prepare_restore(TreeAdapter(), live, ComponentReader(reader, "t"), strict="error")
        assert isinstance(restore, PreparedRestore) and restore.checked
        assert snapshot(live) == snapshot(state(0))
        restore.apply()
    assert snapshot(live) == snapshot(state(1))
