"""``llm-policy-gen plot``: redraw the curves of one or several runs, or draw a run's best table.

::

    llm-policy-gen plot RUN_DIR... --out FILE [--kind testing|training|both] [--window N] [--x-axis iterations|episodes]
    llm-policy-gen plot RUN_DIR_OR_POLICY_JSON --policy --out FILE

Curves come from :func:`~.curves.plot_runs` (one run: raw and smoothed curves; several: the median and interquartile
band per backend). ``--kind both`` writes ``FILE`` with ``-training`` and ``-testing`` added before the extension.
``--policy`` draws the table (:func:`~.table.plot_policy`).

The drawing modules (and matplotlib) are imported when the command runs, so that the command line starts fast.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import SpecError, UserError
from ..run.files import load_run_policy

__all__ = ["add_parser"]


def add_parser(subparsers: Any) -> None:
    """Register ``plot`` on the CLI's subparsers."""
    p = subparsers.add_parser(
        "plot", help="redraw the curves of runs, or draw a run's best table (--policy)",
        description="Redraw training/testing curves of one or several runs, or (--policy) draw a run's table.")
    p.add_argument("runs", nargs="+", help="run directories (or, with --policy, one run directory or policy JSON)")
    p.add_argument("--out", required=True, help="image file to write (.png, .pdf, .svg)")
    p.add_argument("--kind", choices=["testing", "training", "both"], default="testing",
                   help="curves to draw (default testing; both writes two files named after --out: curves.png "
                   "gives curves-training.png and curves-testing.png)")
    p.add_argument("--window", type=int, default=5, help="smoothing window in iterations (default 5)")
    p.add_argument("--x-axis", default="iterations",
                   help="x-axis of the curves: iterations (default) or episodes (environment episodes)")
    p.add_argument("--policy", action="store_true", help="draw the best table instead of curves")
    p.add_argument("--env", dest="env_id", help="with --policy: the environment id of a run whose environment is "
                   "module:EnvId (its module is imported only when named here)")
    p.set_defaults(func=_cmd_plot)


def _cmd_plot(args: argparse.Namespace) -> int:
    from ..plotting.curves import plot_runs
    from ..plotting.figure import check_image_path
    from ..plotting.table_figure import plot_policy

    out = check_image_path(Path(args.out))
    if args.window < 1:
        raise UserError(f"bad --window {args.window}: accepted an integer >= 1")
    if args.policy:
        if len(args.runs) != 1:
            raise UserError(f"--policy draws one table: give one run directory or policy file, got {len(args.runs)}")
        policy, spec = load_run_policy(args.runs[0], args.env_id)
        if spec is not None:  # what `evaluate` refuses as made for other settings is not drawn either
            policy.check_against(spec)
        written: Sequence[Path] = [plot_policy(policy, out, spec)]
    else:
        runs = [Path(r) for r in args.runs]
        for r in runs:
            if not r.is_dir():
                raise UserError(f"{r} is not a run directory")
        kinds = ["training", "testing"] if args.kind == "both" else [args.kind]
        written = []
        for kind in kinds:
            target = out if len(kinds) == 1 else out.with_name(f"{out.stem}-{kind}{out.suffix}")
            try:
                written.append(plot_runs(runs, target, kind, args.window, args.x_axis))
            except (KeyError, SpecError) as exc:
                raise UserError(f"cannot draw the {kind} curves: {exc}") from None
    for w in written:
        print(f"wrote {w}")
    return 0
