"""The C-codec fast path of ``decode_tree`` agrees with the exact parser on every document.

The fast path (``fast_decode``) may only accept what the exact parser
accepts, with an identical result; on any doubt it steps aside and the exact
parser decides. Checked on writer output over the whole node vocabulary
(hypothesis), on mutations of it (byte flips, truncations, insertions), and
on valid but non-canonical encodings the C codec would accept silently.
"""

from __future__ import annotations

import math
import struct
from typing import Any

import msgpack
import numpy as np
import pytest
from budget import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opencheckpoint.format.errors import CheckpointError
from opencheckpoint.tree.decode import _Doubt, decode_tree, exact_decode, fast_decode
from opencheckpoint.tree.encode import TreePlan
from opencheckpoint.tree.nodes import ArrayRef, DtypeValue, NamedTupleValue, PRNGKeyValue


def canon(value: Any) -> Any:
    """A comparable rendering that keeps every distinction (types, key order, float bits)."""
    kind = type(value)
    if kind is dict:
        return ("dict", [(type(k).__name__, k, canon(v)) for k, v in value.items()])
    if kind in (list, tuple):
        return (kind.__name__, [canon(v) for v in value])
    if kind is float:
        return ("float", struct.pack(">d", value))
    if kind is complex:
        return ("complex", struct.pack(">dd", value.real, value.imag))
    if isinstance(value, np.generic):
        return ("scalar", value.dtype.str, value.tobytes())
    if isinstance(value, NamedTupleValue):
        return ("namedtuple", value.type_name, canon(value._asdict()))
    if isinstance(value, PRNGKeyValue):
        return ("prng", value.impl, value.data)
    if isinstance(value, (ArrayRef, DtypeValue)):
        return value
    return (kind.__name__, value)


def outcome(decode: Any, data: bytes) -> Any:
    try:
        tree = decode(data)
    except CheckpointError as exc:
        return ("error", type(exc).__name__, exc.rule, str(exc))
    return ("ok", canon(tree.root), tree.arrays, tree.has_placeholders)


def document(value: Any) -> bytes:
    return TreePlan(value).pack()


names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=6)
leaves = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True), names,
    st.binary(max_size=8), st.complex_numbers(allow_nan=True),
    st.sampled_from([np.float32(1.5), np.int8(-3), np.bool_(True), np.uint64(2**64 - 1), np.float16(-0.0)]),
    st.builds(lambda n, d: (np.arange(n) % 2).astype(d), st.integers(0, 5),
              st.sampled_from(["float32", "int64", "bool", "uint8", "complex64"])),
    st.builds(lambda s: np.zeros(s, np.float64), st.lists(st.integers(0, 3), max_size=3).map(tuple)),
    st.sampled_from([DtypeValue("bfloat16"), np.dtype("int16"),
                     PRNGKeyValue("threefry2x32", np.array([1, 2], np.uint32)),
                     PRNGKeyValue("org.example/custom", np.zeros((2, 3), np.uint32))]),
)
trees = st.recursive(
    leaves,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=3).map(tuple),
        st.dictionaries(st.one_of(names, st.integers(-(2**63), 2**64 - 1)), children, max_size=4),
        st.dictionaries(st.from_regex(r"[a-z]{1,4}", fullmatch=True), children, min_size=1, max_size=3).map(
            lambda d: NamedTupleValue("pkg.Point", d)),
    ),
    max_leaves=20,
)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trees)
def test_writer_output_takes_the_fast_path_with_the_exact_result(value: Any) -> None:
    data = document(value)
    assert outcome(fast_decode, data) == outcome(exact_decode, data)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trees, st.data())
def test_mutated_documents_get_the_exact_verdict(value: Any, draw: st.DataObject) -> None:
    data = bytearray(document(value))
    action = draw.draw(st.sampled_from(["flip", "truncate", "insert", "append"]))
    if action == "flip":
        index = draw.draw(st.integers(0, len(data) - 1))
        data[index] ^= draw.draw(st.integers(1, 255))
    elif action == "truncate":
        del data[draw.draw(st.integers(0, len(data) - 1)):]
    elif action == "insert":
        data.insert(draw.draw(st.integers(0, len(data))), draw.draw(st.integers(0, 255)))
    else:
        data += bytes(draw.draw(st.binary(min_size=1, max_size=3)))
    assert outcome(decode_tree, bytes(data)) == outcome(exact_decode, bytes(data))


def _array_node(shape: list[Any], marker: bytes = b"\xc7\x00\x06") -> bytes:
    body = msgpack.packb(["float32", shape, 0, 4 * math.prod(1 if d is True else d for d in shape), 0])
    return b"\x96" + marker + body[1:]  # a 6-element array: the marker, then the five fields


NON_CANONICAL = {
    "uint8 for a fixint": b"\xcc\x01",
    "int16 for a fixint": b"\xd1\x00\x05",
    "str8 for a short str": b"\xd9\x01a",
    "map16 for a small map": b"\xde\x00\x01\xa1a\x01",
    "array16 for a small array": b"\xdc\x00\x01\x01",
    "float32": b"\xca\x3f\xc0\x00\x00",
    "float32 NaN with a payload": b"\xca\x7f\x80\x00\x01",
    "duplicate map key": b"\x82\xa1a\x01\xa1a\x02",
    "ext16 tag marker": _array_node([2], marker=b"\xc8\x00\x00\x06"),
    "fixext1 tag marker": b"\x92\xd4\x01\x00\x01",
    "bool in a shape": _array_node([True]),
    "bool map key": b"\x81\xc3\x01",
    "tag marker as a map value": b"\x81\xa1a\xc7\x00\x01",
    "tag marker not first": b"\x92\x01\xc7\x00\x01",
    "reserved tag": b"\x91\xc7\x00\x20",
    "negative ext type": b"\x91\xc7\x00\xff",
    "timestamp": b"\xd6\xff\x00\x00\x00\x00",
    "trailing byte": b"\x01\xc0",
    "empty document": b"",
    "invalid utf-8": b"\xa2\xff\xfe",
    "big int that fits 64 bits": b"\x92\xc7\x00\x03\xc4\x01\x05",
    "array node with 4 fields": b"\x95\xc7\x00\x06\xa7float32\x91\x01\x00\x04",
    "unknown dtype": b"\x96\xc7\x00\x06\xa4nope\x91\x01\x00\x04\x00",
    "crc over 32 bits": b"\x96\xc7\x00\x06\xa7float32\x91\x01\x00\x04\xcf\x00\x00\x00\x01\x00\x00\x00\x00",
}


@pytest.mark.parametrize("data", list(NON_CANONICAL.values()), ids=list(NON_CANONICAL))
def test_non_canonical_or_invalid_documents_leave_the_fast_path(data: bytes) -> None:
    with pytest.raises(_Doubt):
        fast_decode(data)
    assert outcome(decode_tree, data) == outcome(exact_decode, data)


def test_depth_beyond_the_limit_gets_the_exact_error() -> None:
    data = b"\x91" * 129 + b"\x01"
    verdict = outcome(decode_tree, data)
    assert verdict == outcome(exact_decode, data)
    assert verdict[:3] == ("error", "LimitExceeded", "R-LIM-10")


def test_many_arrays_take_the_fast_path() -> None:
    value = {f"layer{i}.weight": np.full(4, i, np.float32) for i in range(2000)}
    data = document(value)
    fast = fast_decode(data)
    assert outcome(lambda d: fast, data) == outcome(exact_decode, data)
    assert [ref.path for ref in fast.arrays[:2]] == ["$['layer0.weight']", "$['layer1.weight']"]
