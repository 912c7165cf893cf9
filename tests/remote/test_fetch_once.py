"""What reads of a remote checkpoint fetch: ``validate`` streams each file once in bounded ranges, and a
load or ``read_component`` fetches each byte of ``data.bin`` once, verify-first restores included
(counted on ``memory://``'s ``cat_file``, the call every ranged GET goes through)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from remote_fetches import FetchCounter

from opencheckpoint import Checkpoint, IntegrityError, open_checkpoint, read_component, validate
from opencheckpoint.adapters import Adapter
from opencheckpoint.remote import FsPath
from opencheckpoint.remote import ranges as remote_ranges

pytest.importorskip("fsspec")

MiB = 1 << 20


@pytest.fixture
def count_fetches(monkeypatch: pytest.MonkeyPatch) -> Callable[[Any], FetchCounter]:
    """``count_fetches(fs)``: a :class:`FetchCounter` recording what ``fs.cat_file`` fetches from now on."""
    return lambda fs: FetchCounter(fs, monkeypatch)


def _data_fetches(counter: FetchCounter) -> list[tuple[str, int | None, int | None, int]]:
    return [call for call in counter.calls if call[0].endswith("data.bin")]


def _size(memfs: Any, saved: FsPath, component: str) -> int:
    return int(memfs.info(saved.key(f"components/{component}/data.bin"))["size"])


def test_validate_streams_each_data_file_once_in_ranges_of_at_most_16_mib(
    mem_url: str, memfs: Any, count_fetches: Callable[[Any], FetchCounter]
) -> None:
    state = {"big": np.arange(17 * MiB // 8, dtype=np.float64), "small": np.arange(5, dtype=np.int16)}
    saved = Checkpoint(a=state, b={"x": np.ones(1000)}).save(f"{mem_url}/ckpt")
    counter = count_fetches(memfs)
    report = validate(saved)
    assert report.ok and report.checked_arrays == 3
    fetches = _data_fetches(counter)
    sizes = {c: _size(memfs, saved, c) for c in ("a", "b")}
    for component, size in sizes.items():
        mine = [call for call in fetches if f"/{component}/" in call[0]]
        assert sum(n for *_, n in mine) == size  # every byte once: not a whole-file GET per check
        assert all(start is not None and n <= 16 * MiB for _, start, _, n in mine)  # bounded ranges
    assert len([c for c in fetches if "/a/" in c[0]]) == 2  # 17 MiB and a bit: two ranges
    assert report.checked_bytes >= sum(sizes.values())


@pytest.mark.parametrize("damage", ["array", "padding", "bool"])
def test_validate_of_a_damaged_remote_checkpoint_reads_bounded_ranges_and_reports_what_a_local_one_does(
    mem_url: str, memfs: Any, tmp_path: Any, damage: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(remote_ranges, "RANGE_BYTES", 4096)  # many ranges: extents cross their ends
    state = {"w": np.arange(3000, dtype=np.float32), "flags": np.array([True, False, True]), "tail": np.ones(3)}
    local = Checkpoint(m=state).save(tmp_path / "ckpt")
    remote = Checkpoint(m=state).save(f"{mem_url}/ckpt")
    data = bytearray((local / "components/m/data.bin").read_bytes())
    with open_checkpoint(local) as reader:
        tree = reader.tree("m")
        w, flags = tree["w"].ref, tree["flags"].ref
    gap = next(i for i in range(len(data)) if not any(r.offset <= i < r.offset + r.nbytes for r in (
        w, flags, tree["tail"].ref)))  # the first padding byte
    position = {"array": w.offset + 5000, "padding": gap, "bool": flags.offset + 1}[damage]
    data[position] = 2 if damage == "bool" else data[position] ^ 0x10
    (local / "components/m/data.bin").write_bytes(bytes(data))
    memfs.pipe_file(remote.key("components/m/data.bin"), bytes(data))
    counter = FetchCounter(memfs, monkeypatch)
    found = [(e.error, e.rule, e.file, e.field, e.message) for e in validate(remote).errors]
    assert all(start is not None and n <= 4096 for _, start, _, n in _data_fetches(counter))
    assert found == [(e.error, e.rule, e.file, e.field, e.message) for e in validate(local).errors]
    expected = {"array": "R-ARR-14", "padding": "R-ARR-12", "bool": "R-ARR-14"}[damage]
    assert found[0][1] == expected and found[0][2] == "components/m/data.bin" and found[-1][1] == "R-CHK-7"


def test_a_load_into_live_arrays_fetches_each_byte_of_data_bin_once_and_stays_verify_first(
    mem_url: str, memfs: Any, count_fetches: Callable[[Any], FetchCounter], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(remote_ranges, "RANGE_BYTES", 64 << 10)
    state = {"w": np.arange(100_000, dtype=np.float32), "b": np.arange(7.0)}
    saved = Checkpoint(model=state).save(f"{mem_url}/ckpt")
    key = saved.key("components/model/data.bin")
    good = memfs.cat_file(key)
    with open_checkpoint(saved) as reader:
        w = reader.tree("model")["w"].ref
    bad = bytearray(good)
    bad[w.offset + w.nbytes - 1] ^= 0x01  # the last byte of "w": found in phase 1, before anything is filled
    memfs.pipe_file(key, bytes(bad))
    live = {"w": np.zeros(100_000, np.float32), "b": np.zeros(7)}
    with pytest.raises(IntegrityError) as caught:
        Checkpoint(model=live).load(saved)
    assert caught.value.rule == "R-ARR-14" and caught.value.file == "components/model/data.bin"
    assert not live["w"].any() and not live["b"].any()
    memfs.pipe_file(key, good)
    counter = count_fetches(memfs)
    result = Checkpoint(model=live).load(saved)
    assert result.loaded == {"model"} and live["w"][-1] == 99_999 and live["b"][6] == 6.0
    # Phase 1 checks the bytes, phase 2 fills the live arrays from the kept copy: one fetch per byte.
    assert sum(n for *_, n in _data_fetches(counter)) == len(good)


def test_read_component_fetches_each_byte_once_when_reads_cross_a_window(
    mem_url: str, memfs: Any, count_fetches: Callable[[Any], FetchCounter], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(remote_ranges, "RANGE_BYTES", 3 * MiB)
    state = {f"w{i}": np.full(5 * MiB // 16, i, dtype=np.float64) for i in range(4)}  # 2.5 MiB each
    saved = Checkpoint(model=state).save(f"{mem_url}/ckpt")
    counter = count_fetches(memfs)
    stored = read_component(saved, "model")
    assert all(stored[f"w{i}"][-1] == i for i in range(4))
    fetches = _data_fetches(counter)
    assert sum(n for *_, n in fetches) == _size(memfs, saved, "model")  # the 1 MiB reads crossing a window end
    assert all(n <= 3 * MiB for *_, n in fetches)


class _OnePhase(Adapter):
    """An adapter that defines only the one-phase ``load``: phase 1 verifies its bytes, phase 2 reads them."""

    def save(self, value: Any, writer: Any) -> None:
        writer.write_tree(value)

    def load(self, value: Any, reader: Any, *, strict: str) -> Any:
        stored = reader.tree()
        value.update(stored)
        return value


def test_a_one_phase_adapters_load_reads_the_bytes_its_check_fetched(
    mem_url: str, memfs: Any, count_fetches: Callable[[Any], FetchCounter], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(remote_ranges, "RANGE_BYTES", 64 << 10)
    saved = Checkpoint().register("m", {"w": np.arange(50_000.0)}, _OnePhase()).save(f"{mem_url}/ckpt")
    live: dict[str, Any] = {}
    counter = count_fetches(memfs)
    assert Checkpoint().register("m", live, _OnePhase()).load(saved).loaded == {"m"}
    assert live["w"][-1] == 49_999.0
    assert sum(n for *_, n in _data_fetches(counter)) == _size(memfs, saved, "m")
