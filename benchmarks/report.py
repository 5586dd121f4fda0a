"""Turn the harness's results-*.json files into one Markdown page and PNG charts: medians of the
repeated runs with their min–max spread, and ratios to the fastest peer beside absolute times."""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _ok(entry: dict[str, Any]) -> list[dict[str, Any]]:
    runs = entry["runs"]
    return runs if runs and all(r["status"] == "ok" for r in runs) else []


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _status(entry: dict[str, Any]) -> str:
    bad = [r for r in entry["runs"] if r["status"] != "ok"]
    if bad and bad[0]["status"] == "timeout":
        return "; ".join(bad[0]["errors"])[:120]
    return f"{bad[0]['status']}: {'; '.join(bad[0]['errors'])[:120]}" if bad else f"verified ×{len(entry['runs'])}"


def _size(workload: str, rows: int, batch: int, days: int | None = None) -> str:
    if workload == "delete":
        return f"{rows:,} − {max(rows // 100, 1):,} keys"
    return f"{rows:,} + {batch:,}" + (f" ({days} days)" if workload == "late" and days else "")


def peer_table(entries: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| workload | rows + batch | peer | median s | min–max s | × upsertlake (in-process, else Spark) | × fastest "
        "| peak RSS MB | MB written | status |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    groups: dict[tuple[str, int, int], list[dict[str, Any]]] = {}
    for e in entries:
        groups.setdefault((e["workload"], e["rows"], e["batch"]), []).append(e)
    for (workload, rows, batch), group in groups.items():
        medians = {e["peer"]: _median([r["seconds"] for r in _ok(e)]) for e in group if _ok(e)}
        fastest = min(medians.values(), default=float("nan"))
        ours = medians.get("upsertlake", medians.get("upsertlake-spark", float("nan")))
        for e in group:
            runs = _ok(e)
            secs = [r["seconds"] for r in runs]
            cells = ["–"] * 6
            if runs:
                cells = [f"{_median(secs):.3f}", f"{min(secs):.3f}–{max(secs):.3f}", f"{_median(secs) / ours:.2f}",
                         f"{_median(secs) / fastest:.2f}", f"{_median([r['peak_rss_mb'] for r in runs]):.0f}",
                         f"{_median([r['bytes_written'] for r in runs]) / 1e6:.1f}"]
            lines.append(
                f"| {workload} | {_size(workload, rows, batch, e.get('days'))} | {e['peer']} | "
                + " | ".join(cells)
                + f" | {_status(e)} |"
            )
    return lines


def stage_table(entries: list[dict[str, Any]]) -> list[str]:
    rows = [e for e in entries if e["peer"].startswith("upsertlake") and _ok(e) and _ok(e)[0].get("stages")]
    if not rows:
        return []
    stages = list(dict.fromkeys(s for e in rows for s in _ok(e)[0]["stages"]))
    lines = ["| workload | rows + batch | peer | " + " | ".join(stages) + " |", "|---|---|---|" + "---:|" * len(stages)]
    for e in rows:
        med = [_median([r["stages"].get(s, 0.0) for r in _ok(e)]) for s in stages]
        lines.append(
            f"| {e['workload']} | {e['rows']:,} + {e['batch']:,} | {e['peer']} | "
            + " | ".join(f"{m:.3f}" for m in med)
            + " |"
        )
    return lines


def result_bytes_table(entries: list[dict[str, Any]]) -> list[str]:
    """Bytes of Spark task results returned to the driver (from the event log), where measured."""
    rows = [e for e in entries if _ok(e) and "result_bytes" in _ok(e)[0]]
    if not rows:
        return []
    lines = ["Bytes of task results returned to the driver (Spark event log, median):", "",
             "| workload | peer | result bytes |", "|---|---|---:|"]
    lines += [f"| {e['workload']} | {e['peer']} | {_median([r['result_bytes'] for r in _ok(e)]):,.0f} |" for e in rows]
    return [*lines, ""]


def driver_table(runs: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| table rows | batch rows | upsert s | bytes returned to the driver | Python peak RSS MB (write) | status |",
        "|---:|---:|---:|---:|---:|---|",
    ]
    for r in runs:
        if r["status"] != "ok":
            lines.append(
                f"| {r['rows']:,} | {r['batch']:,} | – | – | – | {r['status']}: {'; '.join(r['errors'])[:120]} |"
            )
        else:
            lines.append(
                f"| {r['rows']:,} | {r['batch']:,} | {r['seconds']:.2f} | {r['result_bytes']:,} | "
                f"{r['peak_rss_mb']:.0f} | verified |"
            )
    return lines


def index_table(entries: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| keys | index | tag s (median, min–max) | files opened / considered | keys read | false-positive rate | "
        "upsert s |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for e in entries:
        runs = _ok(e)
        if not runs:
            lines.append(f"| {e['workload']} | {e['peer']} | – | – | – | – | {_status(e)} |")
            continue
        tags = [r["stages"]["tag"] for r in runs]
        st = runs[0]["index"]
        checked = st.get("bloom_checks", 0) - st.get("keys_matched", 0)
        fp = (st["candidate_keys"] - st["keys_matched"]) / checked if "candidate_keys" in st and checked > 0 else None
        opened = f"{st.get('files_opened', '–')} / {st.get('files_considered', '–')}"
        keys_read = st.get("keys_read", st.get("keys_loaded", "–"))
        lines.append(
            f"| {e['workload']} | {e['peer'].split(':')[1]} | {_median(tags):.3f} ({min(tags):.3f}–{max(tags):.3f}) "
            f"| {opened} | "
            f"{keys_read} | {_fp_cell(st, fp)} | {_median([r['seconds'] for r in runs]):.3f} |"
        )
    return lines


def _fp_cell(st: dict[str, int], fp: float | None) -> str:
    if fp is not None:
        return f"{fp:.4%}"
    if "bloom_checks" in st:  # every key the filters saw was stored: key ranges pruned all new keys
        return f"n/a (0 of {st['bloom_checks']:,} checked keys were absent)"
    return "–"


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, ax: Any, path: Path, title: str, ylabel: str) -> None:
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    _pyplot().close(fig)


def _grouped_bars(
    entries: list[dict[str, Any]], path: Path, title: str, ylabel: str,
    series: Callable[[dict[str, Any]], str], value: Callable[[dict[str, Any]], float], log: bool = False,
) -> None:
    """One group of bars per workload, one bar per series: median with min–max error bars."""
    workloads = list(dict.fromkeys(e["workload"] for e in entries))
    names = list(dict.fromkeys(series(e) for e in entries))
    fig, ax = _pyplot().subplots(figsize=(max(6, 2 + 0.55 * len(workloads) * len(names)), 4))
    width = 0.8 / max(len(names), 1)
    for j, name in enumerate(names):
        xs, ys, lo, hi = [], [], [], []
        for i, w in enumerate(workloads):
            e = next((e for e in entries if series(e) == name and e["workload"] == w), None)
            values = [value(r) for r in _ok(e)] if e else []
            if values:
                m = _median(values)
                xs.append(i + j * width)
                ys.append(m)
                lo.append(m - min(values))
                hi.append(max(values) - m)
        ax.bar(xs, ys, width, yerr=[lo, hi], label=name, capsize=2)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(workloads))], workloads)
    if log:
        ax.set_yscale("log")
    _save(fig, ax, path, title, ylabel)


def _scaling_chart(entries: list[dict[str, Any]], path: Path) -> None:
    fig, ax = _pyplot().subplots(figsize=(6, 4))
    for key in dict.fromkeys((e["peer"], e["workload"]) for e in entries):
        pts = sorted(
            (e["rows"], _median([r["seconds"] for r in _ok(e)]))
            for e in entries
            if (e["peer"], e["workload"]) == key and _ok(e)
        )
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"{key[0]} {key[1]}")
    ax.set_xlabel("table rows (batch 100,000)")
    _save(fig, ax, path, "Upsert time against table size", "upsert seconds (median)")


def write_report(out: Path) -> Path:
    """Rewrite out/README.md and the charts from every results-*.json in `out`: one file per thing
    measured (`results-<series>-<size>.json`, a newer run replacing the older one; history is in
    git), each section with the command that made it."""
    lines = [
        "# Benchmark results",
        "",
        "Generated by `benchmarks/harness.py`; every run verified (row count and the winning "
        "version of sampled updated, inserted, untouched and deleted keys). Times are the write alone "
        "(table built untimed); medians of the repeated runs, min–max spread, ratios to upsertlake and to the "
        "fastest peer "
        "of the same run. Peak RSS is the process's peak during the write (reset after the build; the Python driver "
        "for Spark peers). `pyarrow-limit` is pyarrow alone decoding the files upsertlake's upsert replaces and "
        "encoding the files it writes, with the same writer settings and as many threads as upsertlake's write pool "
        "(runs before 2026-11-23 17:30 encoded one file at a time): the physical limit of a copy-on-write upsert. "
        "`delta-rs` merges on the key alone, `delta-rs+part` adds the batch's partitions to the predicate. The machine "
        "is shared with other jobs, so figures vary from run to run: compare peers within one run.",
        "",
    ]
    others = [f for f in sorted(out.glob("*.md")) if f.name != "README.md"]
    if others:  # what the other benchmarks measured, each file with the command that made it
        lines += ["The other benchmarks' current results, one file each:", ""]
        lines += [f"- [{f.name}]({f.name}): {f.read_text().splitlines()[0].lstrip('# ')}" for f in others]
        lines.append("")
    for f in sorted(out.glob("results-*.json")):
        doc = json.loads(f.read_text())
        tag = f.stem.removeprefix("results-")
        how = doc.get("session") or f"fresh process per run, cap {doc['timeout']:.0f}s"
        lines += [
            f"## {tag} (size {doc['size']}, repeat {doc['repeat']}, {how}, {doc['cpus']} CPUs, {doc['started']})",
            "",
        ]
        if doc.get("command"):
            lines += [f"Command: `{doc['command']}`", ""]
        else:  # runs before the command line was recorded: their settings are in the heading
            lines += [
                f"Made by `{doc.get('tool', 'benchmarks/harness.py')}` (its command line was not recorded then; "
                "the settings are in the heading above).",
                "",
            ]
        if doc.get("tree"):
            lines += [f"upsertlake at commit {doc['tree']}.", ""]
        if doc.get("note"):
            lines += [doc["note"], ""]
        for peer, why in doc.get("skipped", {}).items():
            lines.append(f"- skipped **{peer}**: {why}")
        lines.append("")
        for section, title in (("peers", "Peers"), ("scaling", "Scaling")):
            if doc.get(section):
                chart = f"{tag}-{section}.png"
                if section == "peers":
                    _grouped_bars(doc[section], out / chart, f"Upsert, {doc['size']}", "seconds (median, min–max)",
                                  lambda e: e["peer"], lambda r: r["seconds"], log=True)
                else:
                    _scaling_chart(doc[section], out / chart)
                lines += [
                    f"### {title}",
                    "",
                    *peer_table(doc[section]),
                    "",
                    f"![{title}]({chart})",
                    "",
                    "upsertlake per-stage seconds (median):",
                    "",
                    *stage_table(doc[section]),
                    "",
                    *result_bytes_table(doc[section]),
                ]
        if doc.get("driver"):
            lines += ["### Driver", "", *driver_table(doc["driver"]), ""]
        if doc.get("index"):
            _grouped_bars(doc["index"], out / f"{tag}-index.png", "Index lookup", "tag stage seconds (median, min–max)",
                          lambda e: e["peer"].split(":")[1], lambda r: r["stages"]["tag"])
            lines += ["### Index series", "", *index_table(doc["index"]), "", f"![Index series]({tag}-index.png)", "",
                      "False-positive rate: bloom candidates that were not stored keys, over the keys the bloom "
                      "filters rejected or passed that were not stored keys.", ""]
    target = out / "README.md"
    target.write_text("\n".join(lines) + "\n")
    return target
