"""The output layer of a model whose next-token logits do not come from its input embeddings.

The loaded model is the base model (:mod:`.backbone`), which keeps no language-model head. For a model whose
``tie_word_embeddings`` is true the head is the input embedding matrix, so nothing is lost. A model loaded with a
separate output matrix is not: Qwen2.5-Coder-0.5B-Instruct's GGUF file, for one, stores ``output.weight`` apart from
``token_embd.weight`` (the two are quantised differently: Q8_0 and Q5_0 in the Q4_K_M file), and ``transformers``
loads it untied. Action scoring (``--lm-head scores``) needs that matrix: it is read here from the model's own files,
the GGUF tensor ``output.weight`` (dequantised to float32 by ``gguf``, as ``transformers`` does for the other tensors)
or a folder's ``lm_head.weight`` (safetensors), kept beside the dequantised weights as
``CACHE/<model sha256>/output.safetensors`` (with the GGUF file's sha256 in its metadata; a kept file made from
another model, or not a finite float32 matrix of the embeddings' shape, is read again from the model:
:mod:`.model_cache`) and attached to the model as a non-persistent buffer, which moves with the model to its
device and is never part of
a saved state.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .backbone import LanguageModel, ModelIdentity
from .model_cache import Note, damaged_note, first_line, model_folder_lock, remove_entry, unheard, unwritable_note

__all__ = ["OUTPUT_BUFFER", "attach_output_layer"]

OUTPUT_BUFFER = "lpg_output_weight"
"""The buffer's name on the base model."""
_SOURCE = "source_sha256"
"""The kept file's metadata: the sha256 of the GGUF file it was read from."""


def _from_gguf(path: Path) -> Any:
    import numpy as np
    import torch
    from gguf import GGUFReader
    from gguf.quants import dequantize

    for tensor in GGUFReader(str(path)).tensors:
        if tensor.name == "output.weight":
            return torch.from_numpy(np.ascontiguousarray(dequantize(tensor.data, tensor.tensor_type),
                                                         dtype=np.float32))
    return None


def _from_folder(folder: Path) -> Any:
    from safetensors import safe_open

    for file in sorted(folder.glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as f:
            for key in f.keys():  # noqa: SIM118 (safe_open is not a mapping)
                if key == "lm_head.weight" or key.endswith(".lm_head.weight"):
                    return f.get_tensor(key).float()
    return None


def _kept(path: Path, source_sha256: str, shape: tuple[int, int]) -> tuple[Any, str | None]:
    """(the kept output matrix, None), or (None, what is wrong with the file)."""
    import torch
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            source = (f.metadata() or {}).get(_SOURCE)
            weight = f.get_tensor("weight") if "weight" in f.keys() else None  # noqa: SIM118 (not a mapping)
    except Exception as exc:  # safetensors raises its own errors for a short or foreign file
        return None, f"unreadable: {first_line(exc)}"
    if source != source_sha256:
        return None, "no source recorded (an older copy)" if source is None else "made from another model"
    if weight is None:
        return None, "no weight tensor"
    if weight.dtype != torch.float32 or tuple(weight.shape) != shape:
        return None, f"{weight.dtype} {tuple(weight.shape)}, not torch.float32 {shape}"
    if not bool(torch.isfinite(weight).all()):
        return None, "NaN or infinite values"
    return weight, None


def _keep(path: Path, identity: ModelIdentity, weight: Any, note: Note) -> None:
    """``weight`` into ``path`` (by the process that holds the model folder's lock; a failed write is a note)."""
    from safetensors.torch import save_file

    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    with model_folder_lock(path.parent) as writer:
        if not writer.held:
            writer.cannot(note, path.parent)
            return
        try:
            save_file({"weight": weight}, str(tmp), metadata={_SOURCE: identity.sha256})
            os.replace(tmp, path)
        except Exception as exc:  # a full disk, a read-only cache, a short safetensors write
            remove_entry(tmp)
            note(unwritable_note(path.parent, exc))


def _load(identity: ModelIdentity, cache_dir: Path | None, shape: tuple[int, int], note: Note) -> Any:
    if identity.kind == "folder":
        return _from_folder(Path(identity.path))
    kept = None if cache_dir is None else cache_dir / identity.sha256 / "output.safetensors"
    if kept is not None and os.path.lexists(kept):
        weight, problem = _kept(kept, identity.sha256, shape)
        if problem is None:
            return weight
        note(damaged_note("output layer", kept, problem, f"read again from {identity.path}"))
        remove_entry(kept)
    weight = _from_gguf(Path(identity.path))
    if weight is not None and kept is not None:
        _keep(kept, identity, weight, note)
    return weight


def attach_output_layer(lm: LanguageModel, cache_dir: Path | None, note: Note = unheard) -> bool:
    """Give an untied model its output matrix (see the module doc); True when the model has an output layer now
    (tied, already attached, or found in its files), False when its files hold none."""
    model = lm.model
    if getattr(model.config, "tie_word_embeddings", False) or getattr(model, OUTPUT_BUFFER, None) is not None:
        return True
    vocab, hidden = model.get_input_embeddings().weight.shape
    weight = _load(lm.identity, cache_dir, (int(vocab), int(hidden)), note)
    if weight is None or tuple(weight.shape) != (vocab, hidden):
        return False
    model.register_buffer(OUTPUT_BUFFER, weight.to(model.get_input_embeddings().weight.device), persistent=False)
    return True
