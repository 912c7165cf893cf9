"""Rendering: rich tables on the terminal, a JSON file in bench-results/."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from common import Result
from targets import Row


def results_table(results: Sequence[Result], reference: dict[str, Result]) -> Table:
    """Every measurement; throughput operations also as a multiple of memcpy and raw write."""
    table = Table(title="measurements (best of the samples)")
    for column in ("group", "operation", "ms", "GiB/s", "x memcpy", "x raw write", "note"):
        table.add_column(column, justify="right" if column in ("ms", "GiB/s", "x memcpy", "x raw write") else "left")
    memcpy, raw = reference.get("memcpy"), reference.get("raw write")
    for result in results:
        speed = result.gib_s
        table.add_row(
            result.group, result.name, f"{result.seconds * 1e3:.1f}",
            "" if speed is None else f"{speed:.2f}",
            "" if speed is None or memcpy is None else f"{memcpy.seconds / result.seconds:.2f}",
            "" if speed is None or raw is None else f"{raw.seconds / result.seconds:.2f}",
            result.note)
    return table


def targets_table(rows: Sequence[Row]) -> Table:
    table = Table(title="targets (DESIGN.md), ratios from this run")
    for column in ("target", "measured", "bound", "status", "detail"):
        table.add_column(column)
    for row in rows:
        colour = {"PASS": "green", "MISS": "red"}.get(row.status, "yellow")
        table.add_row(row.target, "" if row.measured is None else f"{row.measured:.2f}",
                      f"{'>=' if row.higher_is_better else '<='} {row.bound:g}",
                      f"[{colour}]{row.status}[/{colour}]", row.detail)
    return table


def peaks_table(peaks: dict[str, dict[str, Any]]) -> Table:
    table = Table(title="peak memory (fresh process per operation, peak RSS = VmHWM)")
    for column in ("operation", "state MiB", "base MiB", "peak MiB", "overhead MiB"):
        table.add_column(column, justify="right")
    for operation, report in peaks.items():
        mib = 1 << 20
        table.add_row(operation, f"{report['state_bytes'] / mib:.0f}", f"{report['base'] / mib:.0f}",
                      f"{report['peak'] / mib:.0f}", f"{report['overhead'] / mib:.0f}")
    return table


def show(console: Console, results: Sequence[Result], skipped: Sequence[tuple[str, str, str]],
         peaks: dict[str, dict[str, Any]], rows: Sequence[Row]) -> None:
    reference = {r.name: r for r in results}
    console.print(results_table(results, reference))
    if skipped:
        for group, name, reason in skipped:
            console.print(f"[yellow]skipped[/yellow] {group}: {name} — {reason}")
    console.print(peaks_table(peaks))
    console.print(targets_table(rows))


def write_json(path: Path, meta: dict[str, Any], results: Sequence[Result], skipped: Sequence[tuple[str, str, str]],
               peaks: dict[str, dict[str, Any]], rows: Sequence[Row]) -> None:
    document = {
        "meta": meta,
        "results": [r.as_json() for r in results],
        "skipped": [{"group": g, "name": n, "reason": why} for g, n, why in skipped],
        "peak_memory": peaks,
        "targets": [row.as_json() for row in rows],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2) + "\n")
    path.with_suffix(".md").write_text(markdown(document))


def _load(value: Any) -> str:
    return "?" if not value else f"{value[0]:.1f}"


def markdown(document: dict[str, Any]) -> str:
    """The JSON result document as Markdown tables (what docs/benchmarks.md quotes)."""
    meta = document["meta"]
    results = document["results"]
    by_name = {r["name"]: r for r in results}
    memcpy, raw = by_name.get("memcpy"), by_name.get("raw write")
    lines = [f"Command: `{meta['command']}`  ", f"Date: {meta['date']}; machine: {meta['machine']}; "
             f"scratch on {meta['filesystem']}; {meta['count']} float32 tensors, "
             f"{meta['size_bytes'] / (1 << 30):g} GiB; best of {meta['repeat']} samples; torch threads "
             f"{meta.get('torch_threads', 'default')}; load average before/after "
             f"{_load(meta.get('load_average'))} / {_load(meta.get('load_average_after'))}.", "",
             "| group | operation | ms | GiB/s | × memcpy | × raw write | note |", "|---|---|---:|---:|---:|---:|---|"]
    for r in results:
        speed = r["gib_s"]
        ratio_m = "" if speed is None or memcpy is None else f"{memcpy['seconds'] / r['seconds']:.2f}"
        ratio_w = "" if speed is None or raw is None else f"{raw['seconds'] / r['seconds']:.2f}"
        lines.append(f"| {r['group']} | {r['name']} | {r['seconds'] * 1e3:.1f} | "
                     f"{'' if speed is None else f'{speed:.2f}'} | {ratio_m} | {ratio_w} | {r.get('note', '')} |")
    for skip in document["skipped"]:
        lines.append(f"\nSkipped: {skip['group']} / {skip['name']}: {skip['reason']}")
    if document["peak_memory"]:
        lines += ["", "| peak memory | state MiB | base MiB | peak MiB | overhead MiB |", "|---|---:|---:|---:|---:|"]
        for operation, p in document["peak_memory"].items():
            lines.append(f"| {operation} | {p['state_bytes'] / (1 << 20):.0f} | {p['base'] / (1 << 20):.0f} | "
                         f"{p['peak'] / (1 << 20):.0f} | {p['overhead'] / (1 << 20):.0f} |")
    lines += ["", "| target | measured | bound | status | detail |", "|---|---:|---|---|---|"]
    for t in document["targets"]:
        measured = "" if t["measured"] is None else f"{t['measured']:.2f}"
        bound = f"{'≥' if t['higher_is_better'] else '≤'} {t['bound']:g}"
        lines.append(f"| {t['target']} | {measured} | {bound} | **{t['status']}** | {t['detail']} |")
    return "\n".join(lines) + "\n"
