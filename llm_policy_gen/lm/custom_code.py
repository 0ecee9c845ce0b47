"""A model folder that would run its own Python is refused before ``transformers`` reads it.

A Hugging Face folder may name classes of its own in ``auto_map`` (``config.json``, ``tokenizer_config.json``, a
processor's ``*_config.json``): ``transformers`` then imports the folder's ``.py`` files, after asking "Do you wish to
run the custom code? [y/N]" on stdin when ``trust_remote_code`` is not given. This package passes
``trust_remote_code=False`` to every ``from_pretrained`` and, before that, looks through the folder's configuration
files for such a reference, so that a folder (or a run directory naming one) is refused in one line that names the
file and the key, and no prompt ever appears.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import UserError

__all__ = ["CODE_KEYS", "custom_code_reference", "refuse_custom_code"]

CODE_KEYS = ("auto_map", "custom_pipelines")
"""The keys by which a folder's configuration names code of its own (auto classes, pipelines)."""


def _config_files(folder: Path) -> list[Path]:
    """The folder's configuration files that ``transformers`` reads for its auto classes: ``config.json`` and every
    ``*config.json`` (tokenizer, processor, preprocessor, feature extractor, generation)."""
    try:
        return sorted(p for p in folder.iterdir() if p.name.endswith("config.json") and p.is_file())
    except OSError:
        return []  # an unreadable folder is refused by the loader itself, in its own line


def _has_key(data: Any) -> str | None:
    """The first of :data:`CODE_KEYS` anywhere in a JSON value (walked without recursion)."""
    todo = [data]
    while todo:
        item = todo.pop()
        if isinstance(item, dict):
            found = next((k for k in CODE_KEYS if k in item), None)
            if found is not None:
                return found
            todo.extend(item.values())
        elif isinstance(item, list):
            todo.extend(item)
    return None


def custom_code_reference(folder: Path) -> tuple[Path, str] | None:
    """(file, key) of the first configuration file in ``folder`` that names code of its own, or None."""
    for path in _config_files(folder):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):
            continue  # not JSON transformers could read either: its loader refuses it in its own line
        key = _has_key(data)
        if key is not None:
            return path, key
    return None


def refuse_custom_code(folder: Path, what: str) -> None:
    """A :class:`~llm_policy_gen.errors.UserError` when ``folder`` names code of its own (``what``: how the user
    named the model, e.g. ``--lm-model PATH``)."""
    found = custom_code_reference(folder)
    if found is not None:
        path, key = found
        raise UserError(f"{what}: {path} has {key!r}, code of the model's own that transformers would run; a model "
                        "that needs its own code is refused (it is loaded with trust_remote_code=False): give a "
                        "model folder or .gguf file of an architecture transformers knows")
