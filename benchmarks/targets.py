"""The performance targets of DESIGN.md, as ratios of results measured in the same run.

>>> from common import Result
>>> results = [Result("baseline", "raw write", [1.0], 1 << 30), Result("opencheckpoint", "save", [1.0], 1 << 30)]
>>> [(row.target, row.status) for row in evaluate(results, {})][:1]
[('save >= 0.9 x raw write', 'PASS')]
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from common import MIB, Result

PEAK_ALLOWANCE_MIB = 64


@dataclass
class Row:
    """One target: the measured ratio (or value), the bound, PASS/MISS (or n/a when not measured)."""

    target: str
    measured: float | None
    bound: float
    higher_is_better: bool = True
    detail: str = ""

    @property
    def status(self) -> str:
        if self.measured is None:
            return "n/a"
        ok = self.measured >= self.bound if self.higher_is_better else self.measured <= self.bound
        return "PASS" if ok else "MISS"

    def as_json(self) -> dict[str, Any]:
        return {"target": self.target, "measured": self.measured, "bound": self.bound,
                "higher_is_better": self.higher_is_better, "status": self.status, "detail": self.detail}


#: Groups of the main state (the busy-neighbour and realistic sections reuse names: their rows are their own).
MAIN_GROUPS = ("baseline", "opencheckpoint", "prototype", "open/inspect", "peer", "tiny arrays")


def _by_name(results: Sequence[Result]) -> dict[str, Result]:
    return {r.name if r.group != "tiny arrays" else f"tiny {r.name}": r for r in results if r.group in MAIN_GROUPS}


def _speed_ratio(found: dict[str, Result], ours: str, theirs: str) -> tuple[float | None, str]:
    a, b = found.get(ours), found.get(theirs)
    if a is None or b is None:
        return None, "not measured"
    return b.seconds / a.seconds, f"{a.name} {a.seconds * 1e3:.1f} ms vs {b.name} {b.seconds * 1e3:.1f} ms"


def _async_result(results: Sequence[Result], operation: str, label: str,
                  group: str = "async save") -> Result | None:
    return next((r for r in results if r.group == group and r.name == f"{operation} ({label})"), None)


def evaluate(results: Sequence[Result], peaks: dict[str, dict[str, Any]]) -> list[Row]:
    """Every target of DESIGN.md "Performance targets" with its measured ratio."""
    found = _by_name(results)
    rows: list[Row] = []

    def speed(target: str, ours: str, theirs: str, bound: float) -> None:
        measured, detail = _speed_ratio(found, ours, theirs)
        rows.append(Row(target, measured, bound, detail=detail))

    speed("save >= 0.9 x raw write", "save", "raw write", 0.9)
    speed("archive save >= 0.9 x directory save", "save archive", "save", 0.9)
    speed("durable archive save >= 0.9 x durable directory save", "save archive durable", "save durable", 0.9)
    speed("save >= 2 x torch.save", "save", "torch.save", 2.0)
    speed("save >= 2 x safetensors save", "save", "safetensors save", 2.0)
    speed("durable save >= 0.9 x raw write+fsync", "save durable", "raw write+fsync", 0.9)
    restore = "restore torch verified" if "restore torch verified" in found else "restore numpy verified"
    speed(f"{restore} >= 0.6 x memcpy", restore, "memcpy", 0.6)
    if "restore torch unverified" in found:
        speed("restore torch unverified >= safetensors + load_state_dict", "restore torch unverified",
              "safetensors + load_state_dict", 1.0)
    speed("restore numpy unverified >= safetensors + copy into numpy", "restore numpy unverified",
          "safetensors + copy into numpy", 1.0)
    for kind in ("lazy open+tree", "inspect"):
        full, small = found.get(f"{kind} (full)"), found.get(f"{kind} (1/64)")
        if full and small:
            rows.append(Row(f"{kind} independent of bytes (time full / time 1/64 <= 1.5)",
                            full.seconds / small.seconds, 1.5, higher_is_better=False,
                            detail=f"{full.seconds * 1e3:.2f} ms vs {small.seconds * 1e3:.2f} ms"))
    speed("tiny arrays save >= 3 x safetensors", "tiny OpenCheckpoint save", "tiny safetensors save", 3.0)
    speed("tiny arrays load >= 2 x safetensors", "tiny OpenCheckpoint load", "tiny safetensors load", 2.0)
    for label in ("numpy", "torch"):
        blocked = _async_result(results, "save_async blocked", label)
        for baseline in ("memcpy", "copy into fresh memory"):
            copied = _async_result(results, baseline, label)
            if blocked is not None and copied is not None:
                rows.append(Row(f"save_async blocks <= 1.5 x {baseline} ({label}; time ratio)",
                                blocked.seconds / copied.seconds, 1.5,
                                higher_is_better=False,
                                detail=f"{blocked.seconds * 1e3:.1f} ms vs {copied.seconds * 1e3:.1f} ms"))
    remote = "async save to object stores"
    for label in ("numpy", "torch"):
        for store, baseline in itertools.product(("memory://", "s3 (moto)"), ("memcpy", "copy into fresh memory")):
            blocked = _async_result(results, f"save_async blocked, {store}", label, remote)
            copied = _async_result(results, baseline, label, remote)
            if blocked is not None and copied is not None:
                rows.append(Row(f"save_async to {store} blocks <= 1.5 x {baseline} ({label}; time ratio)",
                                blocked.seconds / copied.seconds, 1.5, higher_is_better=False,
                                detail=f"{blocked.seconds * 1e3:.1f} ms vs {copied.seconds * 1e3:.1f} ms"))
    for busy in sorted({r.group for r in results if r.group.startswith("busy neighbour")}):
        here = {r.name: r for r in results if r.group == busy}
        copy_threads = next((name for name in here if name.startswith("copy_ (torch threads")), None)
        for ours, theirs, bound in (("restore torch unverified", "single-threaded copy from the file map", 0.9),
                                    ("restore torch unverified", copy_threads, 1.0),
                                    ("restore torch verified", "single-threaded verify + copy from the file map",
                                     0.9)):
            a, b = here.get(ours), here.get(theirs or "")
            if a is not None and b is not None:
                rows.append(Row(f"{busy}: {ours} >= {bound:g} x {theirs}", b.seconds / a.seconds, bound,
                                detail=f"{a.seconds * 1e3:.1f} ms vs {b.seconds * 1e3:.1f} ms"))
    for operation, report in peaks.items():
        overhead = report["overhead"] / MIB
        rows.append(Row(f"peak memory of {operation} <= state + {PEAK_ALLOWANCE_MIB} MiB (overhead MiB)",
                        overhead, PEAK_ALLOWANCE_MIB, higher_is_better=False,
                        detail=f"state {report['state_bytes'] / MIB:.0f} MiB, peak {report['peak'] / MIB:.0f} MiB, "
                               f"base {report['base'] / MIB:.0f} MiB"))
    return rows
