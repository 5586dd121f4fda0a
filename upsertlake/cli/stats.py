"""`upsertlake stats`: file sizes, small files and rows per partition, bytes per commit over time;
`--plot out.png` draws them (matplotlib, the `plot` extra, imported only then)."""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

import upsertlake
from upsertlake.cli.insight import backlog_line, partition_rows
from upsertlake.cli.output import CliError, format_records, human_bytes, parse_options, print_json, store_options
from upsertlake.config import options as opt
from upsertlake.layout.file_system_view import FileSystemView
from upsertlake.services.cluster import small_file_limit
from upsertlake.services.compaction_plan import compaction_backlog
from upsertlake.table.table import Table
from upsertlake.timeline.active import Timeline


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("stats", parents=[common], help="file sizes, small files, rows per partition, bytes per commit")
    p.add_argument("path", help="the table")
    p.add_argument("--plot", metavar="OUT.png", help="draw the statistics into a PNG (needs matplotlib)")
    p.add_argument(
        "--option", action="append", metavar="KEY=VALUE",
        help="e.g. hoodie.clustering.plan.strategy.small.file.limit=... (as for `cluster`; repeatable)",
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=stats)


def table_stats(table: Table) -> dict[str, Any]:
    """The statistics of the latest file slices and of every completed commit; small files are
    those `cluster` would merge (one threshold: services.cluster.small_file_limit)."""
    timeline = Timeline.load(table.storage)
    view = FileSystemView(timeline)
    limit = small_file_limit(table.options)
    sizes = [bf.size for bf in view.latest_base_files()]
    counts, edges = _histogram(sizes)
    partitions = []
    rows = partition_rows(table, view)
    backlog = compaction_backlog(timeline) if table.table_config.is_merge_on_read else None
    for p in view.partitions():
        latest = view.latest_base_files([p])
        partitions.append(
            {
                "partition": p,
                "files": len(latest),
                "small_files": sum(bf.size < limit for bf in latest),
                "rows": rows.get(p, 0),
                "bytes": sum(bf.size for bf in latest),
                **(backlog.partitions.get(p, {}) if backlog else {}),
            }
        )
    commits = [
        {"instant": i.time, "bytes": timeline.commit_metadata(i).total_bytes_written}
        for i in timeline.completed_writes()
    ]
    mor = {"compaction_backlog": backlog.to_dict()} if backlog else {}
    return {
        **mor,
        "small_file_limit": limit,
        "file_sizes": {
            "count": len(sizes),
            "min": min(sizes, default=0),
            "median": int(np.median(sizes)) if sizes else 0,
            "max": max(sizes, default=0),
            "total": sum(sizes),
            "histogram": {"bin_edges": [int(e) for e in edges], "counts": [int(c) for c in counts]},
        },
        "partitions": partitions,
        "commits": commits,
    }


def _histogram(sizes: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Up to 10 bins over the sizes present; equal sizes get one bar a tenth of their size wide
    (numpy's default range would be one byte, too thin to see)."""
    if not sizes:
        return np.zeros(0), np.zeros(0)
    lo, hi = min(sizes), max(sizes)
    if lo == hi:
        pad = max(1.0, hi * 0.05)
        return np.histogram(sizes, bins=1, range=(lo - pad, hi + pad))
    return np.histogram(sizes, bins=min(10, len(set(sizes))))


def _unit(largest: float) -> tuple[float, str]:
    """The binary unit that shows `largest` bytes as a number of at least 1."""
    for scale, name in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if largest >= scale:
            return scale, name
    return 1, "bytes"


def stats(args: argparse.Namespace) -> int:
    table = upsertlake.open_table(args.path, parse_options(args.option), store_options(args))
    info = table_stats(table)
    if args.plot:
        plot(info, args.plot)
    if args.json:
        print_json(info)
        return 0
    s = info["file_sizes"]
    print(
        f"file sizes: {s['count']} files, min {human_bytes(s['min'])}, median {human_bytes(s['median'])}, "
        f"max {human_bytes(s['max'])}, total {human_bytes(s['total'])}"
    )
    hist = s["histogram"]
    for lo, hi, n in zip(hist["bin_edges"], hist["bin_edges"][1:], hist["counts"]):
        print(f"  {lo:>12} .. {hi:<12} bytes: {n} files")
    print(
        f"\nper partition (small = below {human_bytes(info['small_file_limit'])}, "
        f"{opt.CLUSTERING_SMALL_FILE_LIMIT.key}: what `upsertlake cluster` merges):"
    )
    logs = ["file_groups_with_logs", "log_files", "log_bytes"] if "compaction_backlog" in info else []
    if info["partitions"]:
        print(format_records(info["partitions"], ["partition", "files", "small_files", "rows", "bytes", *logs]))
    if logs:
        print(f"\n{backlog_line(info['compaction_backlog'])}")
    print("\nbytes written per commit:")
    if info["commits"]:
        print(format_records(info["commits"], ["instant", "bytes"]))
    if args.plot:
        print(f"\nplot written to {args.plot}")
    return 0


def plot(info: dict[str, Any], out: str) -> None:
    """Four panels: file-size histogram, small files and rows per partition, bytes per commit."""
    try:
        import matplotlib
    except ImportError as exc:
        raise CliError(
            "--plot needs matplotlib: pip install matplotlib (or '.[plot]' from upsertlake's folder)"
        ) from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    parts = info["partitions"]
    names = [p["partition"] or "(none)" for p in parts]
    fig, ax = plt.subplots(2, 2, figsize=(11, 8))
    hist = info["file_sizes"]["histogram"]
    limit = info["small_file_limit"]
    # The axis spans the files, not the small file limit: 0.4 MiB files on a 0-100 MiB axis
    # draw nothing visible. The limit is a line when it falls inside the files' range.
    scale, unit = _unit(max(hist["bin_edges"], default=0))
    edges = [e / scale for e in hist["bin_edges"]]
    title = "file sizes"
    if hist["counts"]:
        ax[0, 0].stairs(hist["counts"], edges, fill=True)
        ax[0, 0].set_xlim(edges[0], edges[-1])
        if edges[0] <= limit / scale <= edges[-1]:
            ax[0, 0].axvline(limit / scale, color="red", linestyle="--", label="small file limit")
            ax[0, 0].legend()
        else:
            below = "all below" if limit / scale > edges[-1] else "all above"
            title = f"file sizes ({below} the small file limit, {human_bytes(limit)})"
    ax[0, 0].set(title=title, xlabel=unit, ylabel="files")
    ax[0, 1].bar(names, [p["small_files"] for p in parts])
    ax[0, 1].set(title="small files per partition", ylabel="files")
    ax[1, 0].bar(names, [p["rows"] for p in parts])
    ax[1, 0].set(title="rows per partition", ylabel="rows")
    commits = info["commits"]
    ax[1, 1].plot(range(len(commits)), [c["bytes"] / 2**20 for c in commits], marker="o")
    ax[1, 1].set(title="bytes written per commit", xlabel="commit (oldest first)", ylabel="MiB")
    for a in (ax[0, 1], ax[1, 0]):
        a.tick_params(axis="x", labelrotation=45)
    fig.tight_layout()
    try:
        fig.savefig(out, format="png")
    except OSError as exc:
        raise CliError(f"cannot write the plot to {out}: {exc}") from exc
    finally:
        plt.close(fig)
