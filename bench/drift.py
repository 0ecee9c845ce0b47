"""Adoptions that lowered the held-out mean: the keeper's drift, counted from ``events.jsonl`` alone.

    python bench/drift.py RUN_DIR_OR_FOLDER [...] [--z 2.0] [--json]

Every adoption event carries the new best table's held-out returns (``heldout_returns``) and those of the table it
replaced on the same seeds (``heldout_returns_before``), so no policy file and no replay is needed (the suite deletes
big tables' per-iteration files). An adoption **drifts down** when the paired mean difference new - old is below
``-z`` standard errors of that difference (``bench/noise.py``'s rule, z = 2 by default). Each folder given is searched
for run directories (folders with an ``events.jsonl``).

Prints one line per run with any drift, then the totals: runs, adoptions, adoptions that drifted down, runs with
any and runs with more than one (issue 20's keeper goal: no run with more than one, at most one run in twenty with
any). Runs made before the events carried these fields are counted as "not measurable".
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class RunDrift:
    run_dir: str
    adoptions: int = 0
    measurable: int = 0
    drops: list[dict[str, Any]] = field(default_factory=list)


def paired(new: list[float], old: list[float]) -> tuple[float, float]:
    """Mean and standard error of the paired differences new - old."""
    diffs = [a - b for a, b in zip(new, old, strict=True)]
    n = len(diffs)
    mean = sum(diffs) / n
    var = sum((d - mean) ** 2 for d in diffs) / (n - 1) if n > 1 else 0.0
    return mean, math.sqrt(var / n)


def run_drift(run_dir: Path, z: float) -> RunDrift:
    out = RunDrift(str(run_dir))
    for line_no, line in enumerate((run_dir / "events.jsonl").read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue  # a torn last line of a killed run
        if not event.get("accepted"):
            continue
        out.adoptions += 1
        new, old = event.get("heldout_returns"), event.get("heldout_returns_before")
        if not isinstance(new, list) or not isinstance(old, list) or len(new) != len(old) or len(new) < 2:
            continue
        out.measurable += 1
        mean, se = paired([float(x) for x in new], [float(x) for x in old])
        if mean < -z * se:
            out.drops.append({"iteration": event.get("iteration"), "line": line_no, "diff_mean": round(mean, 4),
                              "diff_se": round(se, 4)})
    return out


def find_runs(paths: list[Path]) -> list[Path]:
    runs: list[Path] = []
    for p in paths:
        if (p / "events.jsonl").is_file():
            runs.append(p)
        elif p.is_dir():
            runs.extend(sorted(e.parent for e in p.rglob("events.jsonl")))
    return runs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="+", type=Path)
    ap.add_argument("--z", type=float, default=2.0, help="standard errors of the paired difference (default 2)")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    args = ap.parse_args(argv)
    runs = find_runs(args.paths)
    if not runs:
        print(f"drift: no run directory (a folder with events.jsonl) under {', '.join(map(str, args.paths))}",
              file=sys.stderr)
        return 2
    results = [run_drift(r, args.z) for r in runs]
    totals = {
        "runs": len(results),
        "adoptions": sum(r.adoptions for r in results),
        "measurable_adoptions": sum(r.measurable for r in results),
        "drifted_down": sum(len(r.drops) for r in results),
        "runs_with_any": sum(bool(r.drops) for r in results),
        "runs_with_more_than_one": sum(len(r.drops) > 1 for r in results),
        "runs_not_measurable": sum(r.adoptions > 0 and r.measurable == 0 for r in results),
        "z": args.z,
    }
    if args.json:
        print(json.dumps({"totals": totals, "runs": [asdict(r) for r in results if r.drops]}, indent=1))
        return 0
    for r in results:
        if r.drops:
            drops = ", ".join(f"it {d['iteration']}: {d['diff_mean']:+.3g} ± {d['diff_se']:.3g}" for d in r.drops)
            print(f"{r.run_dir}: {len(r.drops)} of {r.adoptions} adoptions drifted down ({drops})")
    print(", ".join(f"{k.replace('_', ' ')}: {v}" for k, v in totals.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
