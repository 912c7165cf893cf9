"""Verified restores into an ``nn.Module`` with the checksum pass on several threads (issue 13).

Every array is checked before any parameter changes, whatever torch's intra-op thread count; a corrupt
array found by a helper thread leaves the module as it was; bfloat16, non-contiguous and tied parameters
come back bit for bit.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from crc_passes import count_parallel_passes  # noqa: E402

from opencheckpoint import Checkpoint, IntegrityError, open_checkpoint  # noqa: E402


@pytest.fixture
def parallel_passes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every checksum pass of more than 4 KiB runs on the pool in 4 KiB pieces; records each pass's pieces."""
    return count_parallel_passes(monkeypatch)


@pytest.fixture(params=[1, 8], ids=["threads1", "threads8"])
def torch_threads(request: pytest.FixtureRequest) -> Iterator[int]:
    previous = torch.get_num_threads()
    torch.set_num_threads(request.param)
    try:
        yield request.param
    finally:
        torch.set_num_threads(previous)


class Odd(nn.Module):
    """bfloat16, a non-contiguous (transposed) parameter, a weight tied between two layers, a buffer."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        self.low = nn.Parameter(torch.randn(64, 33, generator=generator).to(torch.bfloat16))
        self.wide = nn.Parameter(torch.randn(40, 70, generator=generator).t())  # strides (1, 70)
        self.encoder = nn.Linear(48, 48)
        self.decoder = nn.Linear(48, 48)
        self.decoder.weight = self.encoder.weight  # tied
        with torch.no_grad():
            self.encoder.weight.copy_(torch.randn(48, 48, generator=generator))
            self.encoder.bias.copy_(torch.randn(48, generator=generator))
            self.decoder.bias.copy_(torch.randn(48, generator=generator))
        self.register_buffer("steps", torch.arange(300, dtype=torch.int64) * seed)


def _snapshot(module: nn.Module) -> dict[str, Any]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a.keys() == b.keys() and all(a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]) for k in a)


def test_restore_is_bit_exact_whatever_the_thread_count(tmp_path: Path, parallel_passes: list[int],
                                                        torch_threads: int) -> None:
    saved = Odd(1)
    path = Checkpoint(model=saved).save(tmp_path / "c")
    live = Odd(2)
    assert live.wide.stride() == (1, 70)
    Checkpoint(model=live).load(path)
    assert _same(_snapshot(live), _snapshot(saved))
    assert live.decoder.weight is live.encoder.weight  # still tied
    assert live.wide.stride() == (1, 70)  # filled in place, layout kept
    assert live.low.dtype == torch.bfloat16
    assert torch.get_num_threads() == torch_threads  # the caller's setting is back
    assert parallel_passes and parallel_passes[0] > 2  # the checksums ran in pieces on the pool


def _corrupt_last_array(path: Path) -> str:
    with open_checkpoint(path) as ckpt:
        ref = ckpt.decoded_tree("model")[0].arrays[-1]
    with open(path / "components" / "model" / "data.bin", "r+b") as handle:
        handle.seek(ref.offset + ref.nbytes // 2)
        byte = handle.read(1)
        handle.seek(-1, os.SEEK_CUR)
        handle.write(bytes([byte[0] ^ 0x40]))
    return ref.path


def test_a_corrupt_array_found_by_the_parallel_pass_changes_nothing(tmp_path: Path, parallel_passes: list[int],
                                                                    torch_threads: int) -> None:
    path = Checkpoint(model=Odd(1)).save(tmp_path / "c")
    field = _corrupt_last_array(path)  # the last array: every other one would pass and could be copied
    live = Odd(2)
    before = _snapshot(live)
    with pytest.raises(IntegrityError) as caught:
        Checkpoint(model=live).load(path)
    assert caught.value.field == field and caught.value.rule == "R-ARR-14"
    assert _same(_snapshot(live), before)
    assert parallel_passes
    assert torch.get_num_threads() == torch_threads


def test_unverified_restore_skips_the_checksum_pass(tmp_path: Path, parallel_passes: list[int]) -> None:
    path = Checkpoint(model=Odd(1)).save(tmp_path / "c")
    _corrupt_last_array(path)
    live = Odd(2)
    Checkpoint(model=live).load(path, verify=False)  # the explicit opt-out: no pass, the bytes as they are
    assert not parallel_passes
    assert torch.equal(live.low, Odd(1).low)
