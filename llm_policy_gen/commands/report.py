"""``llm-policy-gen report``: one self-contained HTML page for a run directory or a comparison directory
(:mod:`llm_policy_gen.report` makes it)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..report import REPORT_NAME, write_report

__all__ = ["add_parser"]


def add_parser(subparsers: Any) -> None:
    """Register ``report`` on the CLI's subparsers."""
    p = subparsers.add_parser(
        "report", help="one self-contained HTML page for a run or a comparison directory",
        description="Write one HTML file (figures, tables, every model call, the configuration) that works offline.")
    p.add_argument("target", help="a run directory (from `train`) or a comparison directory (from `compare`)")
    p.add_argument("--out", help=f"the HTML file to write (default: TARGET/{REPORT_NAME})")
    p.add_argument("--run-reports", action="store_true",
                   help=f"for a comparison, also write each run's own {REPORT_NAME} and link it")
    p.set_defaults(func=_cmd_report)


def _cmd_report(args: argparse.Namespace) -> int:
    written = write_report(Path(args.target), Path(args.out) if args.out else None, args.run_reports)
    for w in written[:-1]:
        print(f"wrote {w}")
    page = written[-1]
    print(f"wrote {page} ({page.stat().st_size / 1024:,.0f} kB)")
    return 0
