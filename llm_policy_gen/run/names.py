"""Short names of what a run was given: a backend spec's or a model's path shown by its stem.

``llamacpp:/root/.cache/llm-policy-gen/models/SmolLM2-135M-Instruct.Q4_1.gguf`` is
``llamacpp:SmolLM2-135M-Instruct.Q4_1`` in a run directory's default name and on the console, as in a comparison's
tables (:mod:`llm_policy_gen.sweep.methods`).
"""

from __future__ import annotations

from pathlib import Path, PurePath

from .files import RunDir

__all__ = ["path_stem", "short_spec"]

_FILE_SUFFIXES = (".gguf", ".jsonl", ".json", ".bin", ".safetensors", ".pt", ".onnx")


def path_stem(path: str) -> str:
    """A path's last part without a model or record file's suffix (``/m/SmolLM2.Q4_1.gguf`` -> ``SmolLM2.Q4_1``;
    a folder keeps its whole name, ``/m/Qwen2-0.5B``; a run's ``transcripts.jsonl`` shows its run's folder)."""
    p = PurePath(str(path).rstrip("/\\"))
    if p.parent.name and p.name == RunDir(Path(p.parent)).transcripts.name:  # a run's transcripts: its run's folder
        return p.parent.name
    return p.stem if p.suffix.lower() in _FILE_SUFFIXES else p.name or str(path)


def short_spec(spec: str) -> str:
    """A backend spec with its path shown by :func:`path_stem` (``replay:/x/run`` -> ``replay:run``); a spec
    without a path as it is."""
    kind, sep, rest = spec.partition(":")
    if not sep or not any(c in rest for c in "/\\"):
        return spec
    return f"{kind}:{path_stem(rest)}"
