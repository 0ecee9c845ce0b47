"""Argument types shared by the commands and by a comparison's method entries (:mod:`llm_policy_gen.sweep.methods`):
each turns one option's text into a value or a one-line error; and the check of a file a command is asked to write."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ..errors import JSONBounds, UserError
from ..storage.safe_json import loads

__all__ = ["int_list", "json_object", "name_list", "check_out_file"]


def int_list(text: str) -> list[int]:
    try:
        return [int(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def json_object(text: str) -> dict[str, Any]:
    try:
        value = loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r} ({exc.msg})") from None
    except JSONBounds as exc:
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text[:60]!r}... ({exc})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r}")
    return value


def name_list(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def check_out_file(path: Path, flag: str) -> Path:
    """``path``, a file the user asked a command to write (``--out``, ``--gif``): a :class:`UserError` when its folder
    does not exist. Nothing is created for it: a mistyped folder (``/nonexistent/x.png``) is named, not made."""
    parent = Path(path).parent
    if not parent.is_dir():
        why = "is not a folder" if parent.exists() else "does not exist"
        raise UserError(f"bad {flag} {str(path)!r}: the folder {str(parent)!r} {why}; create it first or give "
                        "another path")
    return Path(path)
