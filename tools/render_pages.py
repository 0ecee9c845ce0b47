#!/usr/bin/env python3
"""Regenerate every published figure from the committed suite records (issue 61 item 3).

    python tools/render_pages.py [--no-figures]

Rewrites the README's results block, docs/results.md's suite blocks, docs/tables/*.csv and *.tex and
docs/img/SUITE_normalised.png from llm_policy_gen/suites/data/*/records.jsonl
(:func:`llm_policy_gen.suites.pages.render_pages`, which ``llm-policy-gen bench SUITE --render`` calls too).
``tests/test_published_figures.py`` fails when a page differs from what this writes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from llm_policy_gen.errors import UserError  # noqa: E402
from llm_policy_gen.suites.pages import render_pages  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--no-figures", action="store_true", help="leave the PNG figures as they are")
    ap.add_argument("--root", type=Path, default=ROOT, help="the checkout whose pages and records to use")
    args = ap.parse_args(argv)
    root = args.root.resolve()
    try:
        written = render_pages(root, figures=not args.no_figures)
    except (UserError, OSError) as exc:
        print(f"render_pages: {exc}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path.relative_to(root)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
