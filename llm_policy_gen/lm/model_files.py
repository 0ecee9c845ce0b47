"""Model files by name, and a model's width read without loading its weights.

**Names.** ``--lm-model models:NAME`` (``models:smollm2``, ``models:qwen2.5-coder-0.5b``) names a model that
``tools/fetch_model.py NAME`` fetches, in its folder (``$LLM_POLICY_GEN_MODELS``, default
``$XDG_CACHE_HOME/llm-policy-gen/models``, ``~/.cache`` without the variable): a suite file names its models this
way, so that it holds no path of one machine. The run's ``config.json`` keeps the name as given; the model it loaded
is recorded with its resolved path and sha256 (``lm_model``), as for a path. A name that is not fetched is refused in
one line naming the fetch command. The table below is ``tools/fetch_model.py``'s (a test checks they agree: that
script is standard library only, so that it runs before the package is installed, and cannot import it).

**Width.** :func:`model_width` reads a GGUF file's ``<architecture>.embedding_length`` from its header (the
key-value section only, arrays skipped: milliseconds, where loading Qwen2.5-Coder-0.5B dequantises 469 MB), or a
model folder's ``config.json`` ``hidden_size``: the random control's width at a model's width needs no model loaded.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Any, BinaryIO

from ..errors import UserError

__all__ = ["MODEL_PREFIX", "MODEL_FILES", "models_dir", "is_model_name", "check_model_name", "resolve_model",
           "model_width", "header_facts"]

MODEL_PREFIX = "models:"
MODEL_FILES = {
    "smollm2": "SmolLM2-135M-Instruct.Q4_1.gguf",
    "qwen2.5-coder-0.5b": "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    "qwen2.5-coder-1.5b": "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
}
"""``tools/fetch_model.py``'s names and the files it writes."""


def models_dir() -> Path:
    """``tools/fetch_model.py``'s folder."""
    explicit = os.environ.get("LLM_POLICY_GEN_MODELS")
    if explicit:
        return Path(explicit)
    return Path(os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")) / "llm-policy-gen" / "models"


def is_model_name(value: str | None) -> bool:
    """Whether ``value`` is written ``models:NAME``."""
    return bool(value) and str(value).startswith(MODEL_PREFIX)


def check_model_name(value: str) -> str:
    """``value`` if it is a known ``models:NAME``, else ``ValueError`` naming the accepted ones."""
    if value[len(MODEL_PREFIX):] not in MODEL_FILES:
        raise ValueError(f"unknown model name {value!r}; accepted: "
                         f"{', '.join(MODEL_PREFIX + n for n in MODEL_FILES)}, or a path")
    return value


def resolve_model(value: str, written: str | None = None) -> str:
    """The file a ``models:NAME`` names (a path is returned as it is); a name whose file is not there is a
    :class:`UserError` naming the fetch command (``written``: the name as the user wrote it, by default
    ``--lm-model models:NAME``)."""
    if not is_model_name(value):
        return value
    name = check_model_name(value)[len(MODEL_PREFIX):]
    path = models_dir() / MODEL_FILES[name]
    if not path.is_file():
        raise UserError(f"{written or f'--lm-model {value}'}: the model is not fetched ({path} is missing); fetch "
                        f"it with: python tools/fetch_model.py {name}")
    return str(path)


_SCALARS = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
"""GGUF value types of fixed size: their byte counts (8 is a string, 9 an array)."""


def _u64(f: BinaryIO) -> int:
    return int(struct.unpack("<Q", f.read(8))[0])


def _skip(f: BinaryIO, kind: int) -> None:
    if kind in _SCALARS:
        f.seek(_SCALARS[kind], os.SEEK_CUR)
    elif kind == 8:
        f.seek(_u64(f), os.SEEK_CUR)
    elif kind == 9:
        inner, count = struct.unpack("<I", f.read(4))[0], _u64(f)
        if inner in _SCALARS:
            f.seek(_SCALARS[inner] * count, os.SEEK_CUR)
        else:
            for _ in range(count):
                _skip(f, inner)
    else:
        raise ValueError(f"unknown GGUF value type {kind}")


def _gguf_width(path: Path) -> int | None:
    """``<architecture>.embedding_length`` from the header of a GGUF file (version 2 or later), or None."""
    values: dict[str, object] = {}
    with path.open("rb") as f:
        if f.read(4) != b"GGUF" or struct.unpack("<I", f.read(4))[0] < 2:
            return None
        _u64(f)  # tensor count
        for _ in range(_u64(f)):
            key = f.read(_u64(f)).decode("utf-8", "replace")
            kind = struct.unpack("<I", f.read(4))[0]
            if key == "general.architecture" and kind == 8:
                values[key] = f.read(_u64(f)).decode("utf-8", "replace")
            elif key.endswith(".embedding_length") and kind in (4, 10):
                values[key] = struct.unpack("<I" if kind == 4 else "<Q", f.read(4 if kind == 4 else 8))[0]
            else:
                _skip(f, kind)
    width = values.get(f"{values.get('general.architecture')}.embedding_length")
    return int(width) if isinstance(width, int) else None


def model_width(path: str | Path) -> int | None:
    """A model's hidden size without loading it: a GGUF file's header, a folder's ``config.json``; None when neither
    says (the caller loads the model)."""
    p = Path(path)
    try:
        if p.is_dir():
            width = json.loads((p / "config.json").read_text(encoding="utf-8")).get("hidden_size")
            return int(width) if isinstance(width, int) else None
        return _gguf_width(p)
    except (OSError, ValueError, struct.error):
        return None


def header_facts(path: str) -> tuple[dict[str, Any], int] | None:
    """(the model's identity and width, as ``config.json`` records a model, ``loaded_from`` ``header``; its width)
    for the model at ``path`` without loading it; None where its file does not say its width."""
    from .backbone import model_identity

    identity = model_identity(path)
    width = model_width(identity.path)
    return None if width is None else ({**identity.to_dict(), "hidden_size": width, "loaded_from": "header"}, width)
