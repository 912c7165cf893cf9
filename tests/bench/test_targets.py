"""The benchmark's PASS/MISS verdicts follow DESIGN.md's targets (benchmarks/targets.py)."""

from __future__ import annotations

from common import GIB, MIB, Result  # benchmarks/ is on pytest's pythonpath (pyproject.toml)
from targets import evaluate


def _rows(results: list[Result], peaks: dict | None = None) -> dict[str, tuple[float | None, str]]:
    return {row.target: (row.measured, row.status) for row in evaluate(results, peaks or {})}


def test_save_ratio_is_raw_write_time_over_save_time() -> None:
    rows = _rows([Result("baseline", "raw write", [1.0], GIB), Result("opencheckpoint", "save", [1.25, 2.0], GIB)])
    assert rows["save >= 0.9 x raw write"] == (0.8, "MISS")
    rows = _rows([Result("baseline", "raw write", [1.0], GIB), Result("opencheckpoint", "save", [1.05], GIB)])
    assert rows["save >= 0.9 x raw write"][1] == "PASS"


def test_unmeasured_target_is_not_applicable() -> None:
    assert _rows([])["durable save >= 0.9 x raw write+fsync"] == (None, "n/a")


def test_torch_restore_preferred_over_numpy_when_measured() -> None:
    results = [Result("baseline", "memcpy", [1.0], GIB),
               Result("opencheckpoint", "restore numpy verified", [10.0], GIB),
               Result("opencheckpoint", "restore torch verified", [1.5], GIB)]
    rows = _rows(results)
    assert rows["restore torch verified >= 0.6 x memcpy"][1] == "PASS"
    assert not any(name.startswith("restore numpy verified") for name in rows)


def test_tiny_arrays_need_three_times_safetensors_save_and_twice_its_load() -> None:
    results = [Result("tiny arrays", "OpenCheckpoint save", [0.1]), Result("tiny arrays", "safetensors save", [0.29]),
               Result("tiny arrays", "OpenCheckpoint load", [0.1]), Result("tiny arrays", "safetensors load", [0.21])]
    rows = _rows(results)
    assert rows["tiny arrays save >= 3 x safetensors"][1] == "MISS"
    assert rows["tiny arrays load >= 2 x safetensors"][1] == "PASS"


def test_archive_save_is_compared_with_the_directory_save_of_the_same_run() -> None:
    rows = _rows([Result("opencheckpoint", "save", [1.0], GIB), Result("opencheckpoint", "save archive", [1.25], GIB)])
    assert rows["archive save >= 0.9 x directory save"] == (0.8, "MISS")


def test_busy_neighbour_restore_is_compared_with_single_threaded_and_threaded_copies() -> None:
    group = "busy neighbour x1"
    results = [Result(group, "copy_ (torch threads 2)", [4.0], GIB),
               Result(group, "single-threaded copy from the file map", [1.0], GIB),
               Result(group, "restore torch unverified", [1.05], GIB)]
    rows = _rows([*results, Result("opencheckpoint", "restore torch unverified", [2.0], GIB),
                  Result("peer", "safetensors + load_state_dict", [1.0], GIB)])
    assert rows[f"{group}: restore torch unverified >= 0.9 x single-threaded copy from the file map"][1] == "PASS"
    # the main section's row keeps its own measurement (the busy neighbour's has the same name)
    assert rows["restore torch unverified >= safetensors + load_state_dict"] == (0.5, "MISS")
    assert rows[f"{group}: restore torch unverified >= 1 x copy_ (torch threads 2)"][1] == "PASS"


def test_busy_neighbour_verified_restore_is_compared_with_a_single_threaded_verify_and_copy() -> None:
    group = "busy neighbour x2"
    rows = _rows([Result(group, "single-threaded verify + copy from the file map", [1.0], GIB),
                  Result(group, "restore torch verified", [1.25], GIB)])
    assert rows[f"{group}: restore torch verified >= 0.9 x single-threaded verify + copy from the file map"] == (
        0.8, "MISS")


def test_peak_memory_overhead_bound_is_64_mib() -> None:
    peaks = {"load": {"overhead": 65 * MIB, "state_bytes": GIB, "peak": 2 * GIB, "base": 50 * MIB},
             "save": {"overhead": 3 * MIB, "state_bytes": GIB, "peak": GIB, "base": 50 * MIB}}
    rows = _rows([], peaks)
    assert rows["peak memory of load <= state + 64 MiB (overhead MiB)"] == (65.0, "MISS")
    assert rows["peak memory of save <= state + 64 MiB (overhead MiB)"] == (3.0, "PASS")


def test_async_save_blocked_time_is_compared_with_memcpy_and_the_copy_into_fresh_memory() -> None:
    results = [Result("baseline", "memcpy", [1.0], GIB), Result("async save", "memcpy (numpy)", [0.1], GIB),
               Result("async save", "copy into fresh memory (numpy)", [0.2], GIB),
               Result("async save", "save_async blocked (numpy)", [0.25, 0.4], GIB),
               Result("async save", "copy into fresh memory (torch)", [0.2], GIB),
               Result("async save", "save_async blocked (torch)", [0.4], GIB)]
    rows = _rows(results)
    assert rows["save_async blocks <= 1.5 x copy into fresh memory (numpy; time ratio)"] == (1.25, "PASS")
    assert rows["save_async blocks <= 1.5 x copy into fresh memory (torch; time ratio)"] == (2.0, "MISS")
    assert rows["save_async blocks <= 1.5 x memcpy (numpy; time ratio)"] == (2.5, "MISS")
