"""Key-path renaming and subtree selection on restore (opencheckpoint.read.restore_plan), framework-free."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import numpy as np
import pytest

from opencheckpoint import Checkpoint, IncompatibleComponent, NamedTupleValue, read_component
from opencheckpoint.read.restore_hints import suggest
from opencheckpoint.read.restore_plan import Renamer, RestorePlan, flatten, unflatten


@pytest.mark.parametrize(("rename", "path", "expected"), [
    ({"module.": ""}, "module.weight", "weight"),
    ({"module": ""}, "module.weight", "weight"),          # the trailing dot is optional
    ({"module.": ""}, "modules.weight", "modules.weight"),  # whole segments only
    ({"module.": ""}, "encoder.module.weight", "encoder.module.weight"),  # anchored at the start
    ({"a.": "x.", "a.b.": "y."}, "a.b.c", "y.c"),          # the longest prefix wins
    ({"a.": "x."}, "b.c", "b.c"),                          # no rule: kept as it is
    ({"": "module."}, "weight", "module.weight"),          # add a prefix
    ({"_orig_mod.": ""}, "_orig_mod.enc.weight", "enc.weight"),
])
def test_prefix_rules_match_whole_segments_at_the_start(rename: dict[str, str], path: str, expected: str) -> None:
    assert Renamer(rename)(path) == expected


def test_embedded_rules_also_match_below_an_optimizers_own_fields() -> None:
    assert Renamer({"module.": ""})("opt_state.0.mu.module.kernel") == "opt_state.0.mu.module.kernel"
    assert Renamer({"module.": ""}, embedded=True)("opt_state.0.mu.module.kernel") == "opt_state.0.mu.kernel"
    assert Renamer({"module.": ""}, embedded=True)("module.kernel") == "kernel"


def test_bad_rename_arguments_raise_before_anything_is_read() -> None:
    with pytest.raises(TypeError, match="str -> str"):
        RestorePlan(rename={"module.": 1})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match="mapping of key-path prefixes or a callable"):
        RestorePlan(rename=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="expected str or None"):
        RestorePlan(rename=lambda p: 1).apply({"a.b": 1}, "c")  # type: ignore[arg-type, return-value]
    with pytest.raises(TypeError, match="subtree"):
        RestorePlan(subtree="")


def test_an_empty_plan_returns_the_stored_tree_itself() -> None:
    tree = {"module.w": np.ones(2)}
    assert RestorePlan().apply(tree, "c") is tree
    assert RestorePlan(cast=True).apply(tree, "c") is tree  # casting alone renames nothing


def test_a_callable_returning_none_drops_the_entry_and_reports_it() -> None:
    plan = RestorePlan(rename=lambda p: None if p.startswith("head.") else p)
    out = plan.apply({"body.w": 1, "head.w": 2, "head.b": 3}, "model")
    assert out == {"body.w": 1}
    assert plan.unused == ["head.w", "head.b"]


def test_two_entries_renamed_to_one_key_path_are_refused() -> None:
    with pytest.raises(IncompatibleComponent, match=r"maps both 'a\.w' and 'b\.w' to 'w'"):
        RestorePlan(rename=lambda p: p.split(".")[-1]).apply({"a.w": 1, "b.w": 2}, "model")
    with pytest.raises(IncompatibleComponent, match="not a key path"):
        RestorePlan(rename={"a": ""}).apply({"a": 1, "b.c": 2}, "model")


def test_nested_rename_keeps_int_keys_lists_named_tuples_and_ordered_dicts() -> None:
    state = NamedTupleValue("optax.ScaleByAdamState", {
        "count": np.int32(3),
        "mu": {"module": OrderedDict(layers={0: {"kernel": 1}, 1: {"kernel": 2}}), "extra": [4, 5]},
    })
    tree = {"opt_state": (state,), "step": 7}
    out = RestorePlan(rename={"module.": ""}).apply(tree, "opt", embedded=True)
    mu = out["opt_state"][0].mu
    assert isinstance(out["opt_state"], tuple) and isinstance(out["opt_state"][0], NamedTupleValue)
    assert out["opt_state"][0]._fields == ("count", "mu")
    assert mu["layers"] == {0: {"kernel": 1}, 1: {"kernel": 2}}  # int keys stay ints
    assert mu["extra"] == [4, 5] and out["step"] == 7


def test_subtree_selects_a_part_and_reports_the_rest_unused() -> None:
    plan = RestorePlan(subtree="encoder")
    out = plan.apply({"encoder.0.weight": 1, "encoder.0.bias": 2, "decoder.0.weight": 3}, "model")
    assert out == {"0.weight": 1, "0.bias": 2}
    assert plan.unused == ["decoder.0.weight"]


def test_subtree_applies_after_rename_and_a_missing_subtree_names_what_is_stored() -> None:
    plan = RestorePlan(rename={"_orig_mod.": ""}, subtree="enc.")
    assert plan.apply({"_orig_mod.enc.w": 1, "_orig_mod.dec.w": 2}, "model") == {"w": 1}
    with pytest.raises(IncompatibleComponent, match=r"no entry under 'encoder' \(stored key paths begin with: "
                                                    r"_orig_mod"):
        RestorePlan(subtree="encoder").apply({"_orig_mod.enc.w": 1}, "model")


def test_flatten_and_unflatten_use_dotted_key_paths() -> None:
    tree = {"encoder": {"layers": {0: {"kernel": 1}}}, "step": 2}
    assert flatten(tree) == {"encoder.layers.0.kernel": 1, "step": 2}
    assert unflatten(flatten(tree)) == tree


def test_hints_name_the_option_that_fixes_the_mismatch_and_only_then() -> None:
    assert "rename={'module.': ''}" in suggest(["w", "b"], ["module.w", "module.b"], [])
    assert "rename={'': 'module.'}" in suggest(["module.w", "module.b"], ["w", "b"], [])
    assert "subtree='encoder'" in suggest(["0.w"], ["encoder.0.w", "head.w"], [])
    assert suggest(["a.w", "b.w"], ["x.w"], []) == ""  # no single prefix finds every missing entry
    assert "cast='widening'" in suggest([], [], [("bfloat16", "float32")])
    assert "cast=True" in suggest([], [], [("float32", "bfloat16")])


def test_numpy_tree_components_are_renamed_and_selected_on_load(tmp_path: Any) -> None:
    path = Checkpoint(weights={"module": {"w": np.arange(3.0)}, "aux": {"v": np.ones(1)}}).save(tmp_path / "c")
    live = {"w": np.zeros(3)}
    result = Checkpoint(weights=live).load(path, subtree="module")
    assert live["w"].tolist() == [0.0, 1.0, 2.0]
    assert result.unused == {"weights": ["aux.v"]} and result.conversions == []


def test_read_component_renames_and_selects(tmp_path: Any) -> None:
    path = Checkpoint(model={"module.enc.w": np.ones(2), "module.dec.w": np.zeros(2)}).save(tmp_path / "c")
    assert list(read_component(path, "model", rename={"module.": ""})) == ["enc.w", "dec.w"]
    assert list(read_component(path, "model", rename={"module.": ""}, subtree="enc")) == ["w"]
    with pytest.raises(IncompatibleComponent, match=r"components\.model"):
        read_component(path, "model", subtree="encoder")
