"""Tree paths are (parent, key) nodes rendered on demand and clipped; named tuples share one class."""

from __future__ import annotations

import msgpack

from opencheckpoint.tree.decode import exact_decode, fast_decode
from opencheckpoint.tree.nodes import NamedTupleValue
from opencheckpoint.tree.treepath import PATH_DISPLAY_CHARS, PATH_HEAD_CHARS, PATH_TAIL_CHARS, ROOT


def test_a_short_path_renders_whole() -> None:
    path = ROOT.child("model").child("layers.0 weight").child(3)
    assert str(path) == "$.model['layers.0 weight'][3]" and path.length == len(str(path))


def test_a_deep_path_of_long_keys_is_clipped_keeping_its_start_and_end() -> None:
    path = ROOT
    for level in range(125):
        path = path.child(chr(97 + level % 26) * 1000)
    leaf = path.child(79_999)
    text = str(leaf)
    assert leaf.length > 125_000
    assert len(text) < PATH_DISPLAY_CHARS + 40
    assert text.startswith("$." + "a" * (PATH_HEAD_CHARS - 2)) and text.endswith("u" * 100 + "[79999]")
    assert f"...(+{leaf.length - PATH_HEAD_CHARS - PATH_TAIL_CHARS} chars)..." in text


def test_array_refs_keep_a_path_node_not_a_string() -> None:
    """Every array of a deep document shares its ancestors' nodes: no array holds its ancestors' keys."""
    document = msgpack.packb({"k" * 1000: {"j" * 1000: [[msgpack.ExtType(6, b""), "bool", [0], 0, 0, 0]] * 3}})
    for decode in (fast_decode, exact_decode):
        refs = decode(document).arrays
        assert [ref.where.key for ref in refs] == [0, 1, 2]
        assert refs[0].where.parent is refs[2].where.parent
        assert refs[2].path == f"$.{'k' * 1000}.{'j' * 1000}[2]"[:PATH_HEAD_CHARS] + refs[2].path[PATH_HEAD_CHARS:]
        assert refs[2].path.endswith("j" * 300 + "[2]")


def test_named_tuples_share_one_class_and_fields_shadow_tuple_methods() -> None:
    first = NamedTupleValue("optax.ScaleByAdamState", {"count": 7, "mu": None})
    second = NamedTupleValue("other", {"zzz": 1})
    assert type(first) is NamedTupleValue and type(second) is NamedTupleValue
    assert first.count == 7 and first.mu is None and second.zzz == 1
    assert first._fields == ("count", "mu") and first._asdict() == {"count": 7, "mu": None}
    assert first == (7, None) and first.type_name == "optax.ScaleByAdamState"


def test_paths_of_two_decoders_compare_equal_by_their_keys() -> None:
    document = msgpack.packb({"a": {"b": [msgpack.ExtType(6, b""), "bool", [0], 0, 0, 0]}})
    assert fast_decode(document).arrays == exact_decode(document).arrays
    assert ROOT.child("a").child(0) != ROOT.child("a").child("0")
    assert ROOT.child("a").child(0) == "$.a[0]"
