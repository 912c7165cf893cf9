"""CUDA tensors through the torch adapter (run by benchmarks/gpu.py on a GPU machine; skipped without CUDA)."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from opencheckpoint import Checkpoint, read_component  # noqa: E402

pytestmark = [pytest.mark.torch,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="torch.cuda.is_available() is False")]


def _net(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.LayerNorm(32), torch.nn.Linear(32, 4))
    return net.to("cuda")


def test_cuda_module_and_optimizer_round_trip_on_the_gpu(tmp_path: Path) -> None:
    source = _net(0)
    optimizer = torch.optim.AdamW(source.parameters())
    source(torch.ones(2, 16, device="cuda")).sum().backward()
    optimizer.step()
    path = Checkpoint(model=source, optim=optimizer).save(tmp_path / "c")
    target = _net(1)
    target_optimizer = torch.optim.AdamW(target.parameters())
    Checkpoint(model=target, optim=target_optimizer).load(path)
    for a, b in zip(source.parameters(), target.parameters(), strict=True):
        assert b.device.type == "cuda" and torch.equal(a, b)
    moments = [s["exp_avg"] for s in target_optimizer.state.values()]
    assert moments and all(m.device.type == "cuda" for m in moments)
    assert all(torch.equal(a["exp_avg"], b["exp_avg"]) for a, b in
               zip(optimizer.state.values(), target_optimizer.state.values(), strict=True))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32", "float8_e4m3fn"])
def test_cuda_tensors_keep_their_bits_and_read_back_onto_the_gpu(tmp_path: Path, dtype: str) -> None:
    value = torch.randn(64, 33, device="cuda").to(getattr(torch, dtype))
    path = Checkpoint(state={"w": value}).save(tmp_path / "c")
    back = read_component(path, "state", framework="torch", map_location="cuda")["w"]
    assert back.device.type == "cuda" and back.dtype == value.dtype
    assert torch.equal(back.view(torch.uint8), value.view(torch.uint8))


def test_cuda_rng_state_round_trips(tmp_path: Path) -> None:
    generator = torch.Generator(device="cuda").manual_seed(3)
    path = Checkpoint(rng=generator).save(tmp_path / "c")
    expected = torch.rand(4, device="cuda", generator=generator)
    generator.manual_seed(99)
    Checkpoint(rng=generator).load(path)
    assert torch.equal(torch.rand(4, device="cuda", generator=generator), expected)
