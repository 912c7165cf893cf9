"""``progress=``: a callable gets monotonically increasing ``(done, total)`` ending at ``total`` from ``save``,
``save_async``, ``load``, ``read_component`` and ``validate``; ``True`` stays silent off a terminal."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from opencheckpoint import Checkpoint, read_component, validate
from opencheckpoint.progress import MIN_BYTES, min_bytes, reporting


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    def __call__(self, done: int, total: int) -> None:
        self.calls.append((done, total))

    def check(self, total: int | None = None) -> None:
        """Monotonic, one total throughout, the last call at the total (and the total as expected)."""
        assert len(self.calls) >= 2, self.calls
        totals = {t for _, t in self.calls}
        assert len(totals) == 1, totals
        (seen,) = totals
        if total is not None:
            assert seen == total
        dones = [d for d, _ in self.calls]
        assert dones == sorted(set(dones)) and dones[0] == 0 and dones[-1] == seen


def state() -> dict[str, np.ndarray]:
    # Several arrays above the writer's coalescing size, so the writer reports more than once.
    return {f"layer{i}": np.full(64 << 10, i, dtype=np.float32) for i in range(6)}


def array_bytes() -> int:
    return sum(a.nbytes for a in state().values())


def test_save_reports_the_planned_bytes(tmp_path: Path) -> None:
    recorder = Recorder()
    Checkpoint(weights=state(), config={"lr": 1}).save(tmp_path / "c", progress=recorder)
    recorder.check(array_bytes())
    assert len(recorder.calls) > 3  # updates while the bytes are written, not only start and end
    assert read_component(tmp_path / "c", "weights")["layer5"][0] == 5


def test_save_async_reports_from_its_thread(tmp_path: Path) -> None:
    recorder = Recorder()
    Checkpoint(weights=state()).save_async(tmp_path / "c", progress=recorder, format="archive").wait()
    recorder.check(array_bytes())


def test_load_and_read_component_report_the_manifest_sizes(tmp_path: Path) -> None:
    path = Checkpoint(a=state(), b=state(), c={"x": 1}).save(tmp_path / "c")
    recorder = Recorder()
    Checkpoint(a=state(), b=state(), c={"x": 0}).load(path, progress=recorder)
    recorder.check()
    assert len(recorder.calls) == 4  # start, then one update per component read
    single = Recorder()
    read_component(path, "a", progress=single)
    single.check()
    assert single.calls[-1][1] < recorder.calls[-1][1]


def test_validate_reports_every_listed_file(tmp_path: Path) -> None:
    path = Checkpoint(a=state()).save(tmp_path / "c")
    recorder = Recorder()
    report = validate(path, progress=recorder)
    assert report.ok
    recorder.check(report.checked_bytes)


def test_progress_true_is_silent_off_a_terminal_and_below_the_threshold(
        tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENCHECKPOINT_PROGRESS_MIN_BYTES", "0")
    path = Checkpoint(a=state()).save(tmp_path / "c", progress=True)
    validate(path, progress=True)
    captured = capfd.readouterr()
    assert captured.out == "" and captured.err == ""


def test_threshold_and_its_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENCHECKPOINT_PROGRESS_MIN_BYTES", raising=False)
    assert min_bytes() == MIN_BYTES == 256 << 20
    monkeypatch.setenv("OPENCHECKPOINT_PROGRESS_MIN_BYTES", "1024")
    assert min_bytes() == 1024


def test_nested_calls_report_to_the_outer_reporter() -> None:
    recorder = Recorder()
    with reporting(recorder, 100), reporting(None, 5) as inner:
        assert inner is not None  # the outer reporter keeps counting
        inner.advance(60)
    recorder.check(100)


def test_a_bad_progress_argument_is_refused_before_any_work(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="progress must be"):
        Checkpoint(a=[1]).save(tmp_path / "c", progress="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="progress must be"):
        Checkpoint(a=[1]).save_async(tmp_path / "c", progress=3)  # type: ignore[arg-type]
    assert not (tmp_path / "c").exists()


def test_export_reports_the_components_it_reads(tmp_path: Path) -> None:
    pytest.importorskip("safetensors")
    from opencheckpoint import export

    path = Checkpoint(a=state(), b=state()).save(tmp_path / "c")
    recorder = Recorder()
    export(path, tmp_path / "out.safetensors", progress=recorder)
    recorder.check()
    assert len(recorder.calls) == 3  # start, then one update per component read
