"""``llm-policy-gen drift PATH...``: the keeper's adoptions that lowered the held-out mean, over any run directories.

Each PATH is a run directory or a folder searched for them (a bench folder, a comparison folder, ``logs/``). Every
run is read through the run-directory reader and counted by :mod:`llm_policy_gen.suites.drift`: one line per run
with any adoption that drifted down, then the totals (runs, adoptions, measurable ones, drifted down, runs with any,
runs with more than one, runs with adoptions none of which is measurable); ``--json`` prints one object instead.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ..errors import UserError

__all__ = ["add_parser"]


def add_parser(subparsers: Any) -> None:
    """Register ``drift`` on the CLI's subparsers."""
    what = "count the keeper's adoptions that lowered the held-out mean, over run directories"
    p = subparsers.add_parser("drift", help=what, description=f"{what[0].upper()}{what[1:]}: the adoptions whose "
                              "paired held-out difference (new - replaced table, on the same held-out seeds, from the "
                              "adoption's event) is below -Z standard errors.")
    p.add_argument("paths", nargs="+", metavar="PATH", help="run directories, or folders to search for them")
    p.add_argument("--z", type=float, default=2.0, help="standard errors of the paired difference (default 2)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.set_defaults(func=_cmd_drift)


def _cmd_drift(args: argparse.Namespace) -> int:
    from ..suites.drift import find_runs, run_drift, totals

    if not args.z > 0:
        raise UserError(f"bad --z {args.z:g}: give a number of standard errors > 0")
    runs = find_runs(Path(p) for p in args.paths)
    if not runs:
        raise UserError(f"no run directory (a folder with an events file) at or under {', '.join(args.paths)}")
    results = [run_drift(r, args.z) for r in runs]
    summed = totals(results, args.z)
    if args.json:
        print(json.dumps({"totals": summed, "runs": [r.to_json() for r in results if r.drops]}, indent=1))
        return 0
    for r in results:
        if r.drops:
            drops = ", ".join(f"it {d.iteration}: {d.diff_mean:+.3g} ± {d.diff_se:.3g}" for d in r.drops)
            print(f"{r.run_dir}: {len(r.drops)} of {r.adoptions} adoptions drifted down ({drops})")
    print(", ".join(f"{k.replace('_', ' ')}: {v}" for k, v in summed.items()))
    return 0
