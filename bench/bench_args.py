"""What the bench scripts check of their arguments alike, so that a bad one is one line and exit 2 before any file
is written, as the product's commands do."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

SYSTEM_FOLDERS = (Path("/proc"), Path("/sys"), Path("/dev"))
"""Folders of the kernel's own file systems: nothing a script writes belongs there (``--out /proc/self`` would
fail at its first write, or wait on a lock file it can never make)."""


class BadFile(Exception):
    """A file a bench script reads is not what it writes (corrupt JSON, another shape): :func:`run_main` prints its
    message in one line and exits 2."""


def _unwritable(prog: str, flag: str, given: str, out: Path) -> str | None:
    """Why ``out`` (``flag``'s value ``given``) cannot be written to, as the line to print; None when it can."""
    if not given.strip():
        return f"{prog}: {flag} is empty; give a folder"
    blocked = next((p for p in (out, *out.parents) if p.exists() and not p.is_dir()), None)
    if blocked is not None:
        return f"{prog}: {flag} {out}: {blocked} is a file, not a folder"
    real = out.resolve()
    system = next((s for s in SYSTEM_FOLDERS if real == s or s in real.parents), None)
    if system is not None:
        return f"{prog}: {flag} {out}: {real} is in {system}, the kernel's own folder, not one to write results to"
    there = next(p for p in (out, *out.parents) if p.exists())
    if not os.access(there, os.W_OK | os.X_OK):
        return f"{prog}: {flag} {out}: the folder {there} cannot be written to"
    return None


def out_dir(prog: str, text: str | Path, flag: str = "--out") -> Path | None:
    """``--out`` (or ``flag``) as a folder to write to (made later, by the run); None after printing in one line why
    it cannot be one (empty, a file or a file on its path, a system folder such as ``/proc/self``, a folder that
    cannot be written to)."""
    out = Path(text).expanduser()
    why = _unwritable(prog, flag, str(text), out)
    if why is not None:
        print(why, file=sys.stderr)
        return None
    return out


def out_file(prog: str, text: str, flag: str = "--out") -> Path | None:
    """``--out`` (or ``flag``) as a file to write (a JSON file); None after printing in one line why it cannot be one
    (empty, a folder, or a folder of it that :func:`out_dir` refuses)."""
    out = Path(text).expanduser()
    if text.strip() and out.is_dir():
        print(f"{prog}: {flag} {out} is a folder; give a file", file=sys.stderr)
        return None
    why = _unwritable(prog, flag, text, out.parent) if text.strip() else f"{prog}: {flag} is empty; give a file"
    if why is not None:
        print(why, file=sys.stderr)
        return None
    return out


def read_json(path: Path, default: Any) -> Any:
    """The JSON at ``path``, ``default`` (a list or a dict: the shape expected) when there is no file.

    Raises:
        BadFile: the file cannot be read, is not JSON, or holds another shape (a list's items must be objects).
    """
    if not path.is_file():
        return default
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else getattr(exc, "msg", type(exc).__name__)
        raise BadFile(f"{path} cannot be read as JSON ({why}); repair it, or move it away to start afresh") from None
    shape = type(default)
    if not isinstance(data, shape) or (shape is list and not all(isinstance(r, dict) for r in data)):
        what = "a list of objects" if shape is list else "an object"
        raise BadFile(f"{path} does not hold {what}, as this script writes it; repair it, or move it away")
    return data


def run_main(prog: str, main: Callable[[], int | None]) -> int:
    """``main()``'s exit code; a :class:`BadFile` is one line on stderr and exit 2, never a traceback."""
    try:
        return int(main() or 0)
    except BadFile as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2


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
