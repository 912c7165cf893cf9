"""The throughput plot ``make bench`` writes: every operation of every peer relative to the machine's own limits.

Each bar is one measurement of the run divided by the limit for that kind of
operation, measured on the same bytes in the same run: saves by raw write,
durable saves by raw write + fsync, restores and loads by memcpy. 1.0 is the
machine; a bar past it beat the naive baseline (e.g. a zero-copy map).

>>> _kind("torch.save durable save"), _kind("torch.save restore"), _kind("limit: memcpy")
('durable save', 'restore', None)
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from common import Result

#: operation kind -> (limit in a realistic group, limit in the main section)
LIMITS = {"save": ("limit: raw write", "raw write"), "durable save": ("limit: raw write+fsync", "raw write+fsync"),
          "restore": ("limit: memcpy", "memcpy")}
MAIN_GROUPS = ("opencheckpoint", "peer")


def _kind(name: str) -> str | None:
    if name.startswith("limit:"):
        return None
    if any(word in name for word in ("restore", "load", "read")):
        return "restore"
    if "durable" in name:
        return "durable save"
    if "save" in name:
        return "save"
    return None


def ratios(results: Sequence[Result]) -> dict[str, list[tuple[str, str, float]]]:
    """Panel title -> (operation kind, label, throughput / limit) for every measured operation."""
    by_group: dict[str, dict[str, Result]] = {}
    for result in results:
        by_group.setdefault(result.group, {})[result.name] = result
    main = {name: r for group in ("baseline", *MAIN_GROUPS) for name, r in by_group.get(group, {}).items()}
    panels: dict[str, list[tuple[str, str, float]]] = {}
    for group, found in by_group.items():
        realistic = any(name.startswith("limit:") for name in found)
        if not realistic and group not in MAIN_GROUPS:
            continue
        title = group if realistic else "256 float32 arrays (ours and peers)"
        pool = found if realistic else main
        for name, result in found.items():
            kind = _kind(name)
            if kind is None or result.nbytes is None:
                continue
            limit = pool.get(LIMITS[kind][0 if realistic else 1])
            if limit is None:
                continue
            # Same bytes in a realistic group; per byte otherwise (peers write their own formats).
            ratio = (limit.seconds / result.seconds) * (result.nbytes / (limit.nbytes or result.nbytes))
            panels.setdefault(title, []).append((kind, name, ratio))
    return panels


def draw(results: Sequence[Result], path: Path, caption: str) -> Path | None:
    """Write the plot to ``path`` (PNG); None where matplotlib is missing or nothing was measured."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Rectangle
    except ImportError:
        return None
    panels = ratios(results)
    if not panels:
        return None
    colours = {"save": "#4C72B0", "durable save": "#DD8452", "restore": "#55A868"}
    heights = [max(2.0, 0.28 * len(rows) + 1.0) for rows in panels.values()]
    figure, axes = plt.subplots(len(panels), 1, figsize=(9, sum(heights)), squeeze=False,
                                gridspec_kw={"height_ratios": heights})
    for axis, (title, rows) in zip(axes[:, 0], panels.items(), strict=True):
        rows = sorted(rows, key=lambda row: (list(colours).index(row[0]), row[1]))
        labels = [name for _, name, _ in rows]
        values = [ratio for _, _, ratio in rows]
        bars = axis.barh(range(len(rows)), values, color=[colours[kind] for kind, _, _ in rows])
        axis.set_yticks(range(len(rows)), labels, fontsize=8)
        axis.invert_yaxis()
        axis.axvline(1.0, color="black", linewidth=0.8)
        axis.set_title(title, fontsize=10, loc="left")
        right = max(1.2, min(3.0, max(values) * 1.15))
        axis.set_xlim(0, right)
        for bar, value in zip(bars, values, strict=True):
            axis.text(min(value, right * 0.9), bar.get_y() + bar.get_height() / 2, f" {value:.2f}", va="center",
                      fontsize=7)
    handles: list[Any] = [Rectangle((0, 0), 1, 1, color=c) for c in colours.values()]
    figure.legend(handles, ["save / raw write", "durable save / raw write + fsync", "restore / memcpy"],
                  loc="lower center", ncol=3, fontsize=8)
    axes[-1, 0].set_xlabel("throughput / the machine's limit for the same bytes, same run (1.0 = the limit)")
    figure.suptitle(textwrap.fill(caption, 140), fontsize=7)
    figure.tight_layout(rect=(0, 0.03, 1, 0.97))
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
