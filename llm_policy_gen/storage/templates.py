"""Prompt templates: the Markdown files of ``prompting/prompts/`` (package data), read once and filled with
``string.Template``.

A leaf of the bottom floor (``tests/data/floors.toml``): the answer formats, the language-model policy, the prompt
builder and the modes all fill templates, so the reader of the files sits below all of them.
"""

from __future__ import annotations

import os
from functools import lru_cache
from importlib import resources
from pathlib import Path
from string import Template
from typing import Any

__all__ = ["prompts_dir", "prompts_source", "check_prompts_dir", "template", "fill", "PROMPTS_VARIABLE"]

PROMPTS_VARIABLE = "LLM_POLICY_GEN_PROMPTS"
"""The variable that replaces the package's prompt templates with a folder of one's own."""


def prompts_dir() -> Path:
    """The prompt templates: ``LLM_POLICY_GEN_PROMPTS``, else the package's own ``prompting/prompts/`` (package
    data, found with :mod:`importlib.resources`, so that an editable and a regular install read the same files)."""
    env = os.environ.get(PROMPTS_VARIABLE)
    if env:
        return Path(env)
    return Path(str(resources.files("llm_policy_gen") / "prompting" / "prompts"))


def prompts_source() -> dict[str, str]:
    """Where the prompt templates come from, for config.json: ``{"source": "LLM_POLICY_GEN_PROMPTS", "dir": ...}``
    (and where that variable was set: the shell or a ``.env`` file), or ``{"source": "package", "dir": ...}``."""
    if os.environ.get(PROMPTS_VARIABLE):
        from .secrets import variable_source

        return {"source": PROMPTS_VARIABLE, "dir": str(prompts_dir().resolve()),
                "set_in": variable_source(PROMPTS_VARIABLE)}
    return {"source": "package", "dir": str(prompts_dir())}


def check_prompts_dir() -> None:
    """Refuse a ``LLM_POLICY_GEN_PROMPTS`` that is not a folder holding the templates every run reads (one line
    naming the variable, before any run directory is made)."""
    from ..errors import UserError

    value = os.environ.get(PROMPTS_VARIABLE)
    if not value:
        return
    folder = Path(value)
    missing = [n for n in _REQUIRED if not (folder / n).is_file()]
    if missing:
        what = "is not a folder" if not folder.is_dir() else f"has no {missing[0]}"
        raise UserError(f"{PROMPTS_VARIABLE}={value} {what}: it must name a folder of prompt templates (a copy of "
                        f"the package's prompts/ folder); unset it to use the package's prompts")


_REQUIRED = ("system.md", "user.md", "repair.md")
"""The templates every run that asks a model reads."""


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
