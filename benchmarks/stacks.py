"""Where the time goes, from py-spy's collapsed stacks (`py-spy record --format raw`): the samples
of the timed call (the stacks under one function, e.g. `upsert`, plus those of worker threads,
which only the timed part starts), threads waiting on a lock or queue left out, split by upsertlake
function (inclusive, counted once per stack) and by the leaf frame (self time).

    python benchmarks/stacks.py /tmp/spy/compact.txt --under compact --top 15
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

WAITING = ("threading.py", "queue.py")  # a thread blocked on another's work
FRAME = re.compile(r"^(?P<func>.+?) \((?P<file>[^()]*?)(?::\d+)?\)$")


def frames(stack: str) -> list[tuple[str, str]]:
    """(function, file) per frame of one collapsed stack, outermost first (line numbers dropped)."""
    out = []
    for f in stack.split(";"):
        m = FRAME.match(f.strip())
        out.append((m["func"], m["file"]) if m else (f.strip(), ""))
    return out


def summary(path: Path, under: str) -> tuple[int, Counter[str], Counter[str]]:
    """(samples under `under`, inclusive samples per upsertlake function, self samples per leaf)."""
    total, inclusive, leaf = 0, Counter(), Counter()
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        fs = frames(stack)
        if fs[-1][1].endswith(WAITING):
            continue
        start = next((i for i, (func, _) in enumerate(fs) if func.split(".")[-1] == under), None)
        if start is None and fs[0][0] != "Thread._bootstrap":
            continue
        n = int(count)
        total += n
        seen = set()
        for func, file in fs[start or 0:]:
            if "upsertlake/" in file:
                name = f"{func} ({file.split('upsertlake/', 1)[1]})"
                if name not in seen:
                    seen.add(name)
                    inclusive[name] += n
        func, file = fs[-1]
        leaf[f"{func} ({file.rsplit('/', 1)[-1]})"] += n
    return total, inclusive, leaf


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("stacks", type=Path, nargs="+")
    ap.add_argument("--under", required=True, help="the timed function (last part of its name)")
    ap.add_argument("--top", type=int, default=15)
    args = ap.parse_args()
    for path in args.stacks:
        total, inclusive, leaf = summary(path, args.under)
        print(f"== {path.name}: {total} samples under {args.under}")
        if not total:
            continue
        print("  inclusive (upsertlake):")
        for name, n in inclusive.most_common(args.top):
            print(f"    {100 * n / total:5.1f}%  {name}")
        print("  self (leaf frames):")
        for name, n in leaf.most_common(args.top):
            print(f"    {100 * n / total:5.1f}%  {name}")


if __name__ == "__main__":
    main()
