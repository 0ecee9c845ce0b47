"""Prompt templates: the Markdown files under ``prompts/``, read once and filled with ``string.Template``."""

from __future__ import annotations

import os
import sys
from functools import lru_cache
from pathlib import Path
from string import Template
from typing import Any

__all__ = ["prompts_dir", "template", "fill"]


def prompts_dir() -> Path:
    """The prompt templates: ``LLM_POLICY_GEN_PROMPTS``, else ``prompts/`` of the source tree (editable install),
    else ``<prefix>/share/llm-policy-gen/prompts`` (regular install)."""
    env = os.environ.get("LLM_POLICY_GEN_PROMPTS")
    if env:
        return Path(env)
    source = Path(__file__).resolve().parent.parent / "prompts"
    if (source / "user.md").is_file():
        return source
    return Path(sys.prefix) / "share" / "llm-policy-gen" / "prompts"


@lru_cache(maxsize=128)
def _read(path: str, mtime_ns: int) -> str:
    return Path(path).read_text(encoding="utf-8").strip()


def template(name: str, folder: Path | None = None) -> str:
    """The text of template ``name`` (re-read when the file changes)."""
    p = (folder or prompts_dir()) / name
    return _read(str(p), p.stat().st_mtime_ns)


def fill(name: str, folder: Path | None = None, /, **fields: Any) -> str:
    """Template ``name`` with ``fields`` substituted (unknown placeholders are left as they are)."""
    return Template(template(name, folder)).safe_substitute(fields)
