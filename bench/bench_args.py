"""What the bench scripts check of their arguments alike, so that a bad one is one line and exit 2 before any file
is written, as the product's commands do."""

from __future__ import annotations

import sys
from pathlib import Path


def out_dir(prog: str, text: str | Path, flag: str = "--out") -> Path | None:
    """``--out`` (or ``flag``) as a folder to write to (made later, by the run); None after printing in one line why
    it cannot be one (a file, or a file on its path, is there)."""
    out = Path(text).expanduser()
    blocked = next((p for p in (out, *out.parents) if p.exists() and not p.is_dir()), None)
    if blocked is not None:
        print(f"{prog}: {flag} {out}: {blocked} is a file, not a folder", file=sys.stderr)
        return None
    return out


def seeds(prog: str, text: str, flag: str = "--seeds") -> list[int] | None:
    """The seeds of ``--seeds`` (or ``flag``), parsed as the package parses them (``0-4``, ``0,2,7``); None after
    printing in one line what is wrong."""
    from llm_policy_gen.errors import UserError
    from llm_policy_gen.sweep.plan import parse_seeds

    try:
        return parse_seeds(text)
    except UserError as exc:
        print(f"{prog}: {str(exc).replace('--seeds', flag, 1)}", file=sys.stderr)
        return None


def workers_ok(prog: str, workers: int) -> bool:
    """Whether ``--workers`` is at least 1; False after printing in one line that it is not."""
    if workers < 1:
        print(f"{prog}: --workers must be at least 1, not {workers}", file=sys.stderr)
    return workers >= 1
